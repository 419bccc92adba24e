"""The CUDA-only paths (bf16 autocast, SDPA with attention dropout and a padding mask, F.dropout,
fused AdamW on the GPU, packing on the device), checked against the CPU. Skipped without a GPU."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from harness.config import ModelConfig
from harness.model._cascade import CascadeRanker
from harness.model._ranker import CrossEncoder
from harness.model.collate import PairCollator
from harness.model.encoder import load_encoder, load_tokenizer
from harness.training.loop import EvalRecord, FinalRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _batch(n: int = 12) -> dict[str, torch.Tensor]:
    """Pairs of different lengths (so packing and the padding mask matter)."""
    collator = PairCollator(load_tokenizer(ModelConfig(name="tiny")), 64)
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(1000, 20000, size=int(rng.integers(3, 40))),
              rng.integers(1000, 20000, size=int(rng.integers(2, 20)))) for _ in range(n)]
    return collator.collate(pairs)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("kind", ["plain", "cascade"])
def test_gpu_scores_match_cpu_in_float32_and_bf16(kind):
    enc = load_encoder(ModelConfig(name="tiny"), seed=0)
    cpu = (CrossEncoder(enc) if kind == "plain" else CascadeRanker(enc)).eval()
    gpu = copy.deepcopy(cpu).cuda()
    batch = _batch()
    with torch.no_grad():
        ref = cpu.score(batch)
        dev = {k: v.cuda() for k, v in batch.items()}
        f32 = gpu.score(dev).cpu()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            b16 = gpu.score(dev).cpu()
    assert torch.isfinite(b16).all()
    assert _rel(f32, ref) < 1e-3  # TF32 may be on: near 3e-4 at most
    assert _rel(b16, ref) < 3e-2


def test_gpu_cascade_survivors_score_as_the_full_pass():
    model = CascadeRanker(load_encoder(ModelConfig(name="tiny"), seed=0), alpha=(0.5,)).eval().cuda()
    batch = {k: v.cuda() for k, v in _batch().items()}
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        full = model.exit_scores(batch).cpu().numpy()
        res = model.cascade(batch)
    seen = ~np.isnan(res.exit_scores)
    assert seen[0].all() and seen[-1].sum() == model.plan.entering(len(full[0]))[-1]
    np.testing.assert_allclose(res.exit_scores[seen], full[seen], atol=5e-2)


def test_gpu_training_with_dropout_gets_gradients_on_every_parameter():
    model = CrossEncoder(load_encoder(ModelConfig(name="tiny"), seed=0)).cuda().train()
    batch = {k: v.cuda() for k, v in _batch().items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model.train_logits(batch, np.random.default_rng(0)).float()
    torch.nn.functional.cross_entropy(logits, torch.arange(len(logits), device="cuda") % 2).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    missing = [n for n, g in grads.items() if g is None and "pooler" not in n]
    assert not missing
    assert all(torch.isfinite(g).all() for g in grads.values() if g is not None)


@pytest.mark.parametrize("cascade", [False, True])
def test_trainer_on_cuda_learns_the_toy_task(cascade):
    flat = {"train.device": "cuda", "train.bf16": True, "train.steps": 60}
    if cascade:
        flat["cascade.enabled"] = True
    cfg = tiny_config(**flat)
    trainer = Trainer(cfg, prepare_data(toy_splits(), cfg.model))
    assert trainer.autocast and next(trainer.model.parameters()).is_cuda
    evals, last = [], None
    for rec in trainer.run():
        if isinstance(rec, EvalRecord):
            evals.append(rec.metrics["map"])
        last = rec
    assert isinstance(last, FinalRecord)
    # 5 candidates, one relevant: a random order has expected MAP 0.457.
    assert max(evals) > 0.8
    assert last.metrics["map"] > 0.8


def test_trainer_on_cuda_resumes_from_a_checkpoint(tmp_path):
    cfg = tiny_config(**{"train.device": "cuda", "train.steps": 40})
    data = prepare_data(toy_splits(), cfg.model)
    first = Trainer(cfg, data)
    for rec in first.run():
        if isinstance(rec, EvalRecord) and rec.step == 20:
            first.save(tmp_path)
            break
    resumed = Trainer(cfg, data)
    resumed.restore(tmp_path)
    assert resumed.step == 20 and next(resumed.model.parameters()).is_cuda
    last = None
    for rec in resumed.run():
        last = rec
    assert isinstance(last, FinalRecord) and np.isfinite(last.metrics["map"])


@pytest.mark.parametrize(("flat", "compile_"), [({}, "false"), ({"train.loss": "pairwise"}, "false"),
                                                ({"cascade.enabled": True}, "false"), ({}, "true")])
def test_training_steps_never_synchronise_the_host(flat, compile_):
    """After two warm-up steps (lazy CUDA initialisation, optimizer state, compilation), a training
    step (host inputs built and pinned, uploaded, forward, backward, clipping, AdamW, schedule) makes
    no call that waits for the GPU: torch raises on any under sync debug mode "error"."""
    cfg = tiny_config(**{"train.device": "cuda", "train.bf16": True, "train.steps": 8,
                         "train.compile": compile_, **flat})
    data = prepare_data(toy_splits(), cfg.model)
    trainer = Trainer(cfg, data)
    trainer.model.train()
    tok, queries = data.train, data.splits.train
    for s in range(2):
        trainer.train_step(trainer.step_inputs(s, tok), queries, tok)
    torch.cuda.synchronize()
    total = torch.zeros((), dtype=torch.float64, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        for s in range(2, 6):
            total += trainer.train_step(trainer.step_inputs(s, tok), queries, tok).detach()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert trainer.step == 6 and np.isfinite(float(total))
    assert trainer.resolved()["train.compile_effective"] == (1.0 if compile_ == "true" else 0.0)


@pytest.mark.parametrize("compile_", ["false", "true"])
def test_fused_steps_never_synchronise_the_host(compile_):
    """The fused step (harness.training._fused_group): inputs built and pinned on the host, uploaded
    with non_blocking, the stacked forward, the members' losses, backward, the foreach clip, AdamW:
    no call that waits for the GPU after two warm-up steps."""
    from harness.training.fused import SeedGroup

    cfgs = [tiny_config(**{"train.device": "cuda", "train.bf16": True, "train.steps": 8,
                           "train.compile": compile_, "train.seed": s}) for s in (1, 2, 3)]
    group = SeedGroup(cfgs, prepare_data(toy_splits(), cfgs[0].model), fused=True)
    engine = group._engine
    engine._load_members()
    engine.model.train()
    engine.precompile()
    for s in range(2):
        engine.train_step(engine.step_inputs(s))
    torch.cuda.synchronize()
    total = torch.zeros(3, dtype=torch.float64, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        for s in range(2, 6):
            total += engine.train_step(engine.step_inputs(s)).detach()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert engine.step == 6 and np.isfinite(total.cpu().numpy()).all()
