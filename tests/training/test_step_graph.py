"""The plain ranker's compiled entries are each ONE graph with no host read: the training step's
forward and loss (``Trainer._plain_loss``, what ``CompiledModel.step`` compiles), scoring
(``CrossEncoder.score``) and the cascade ranker's ``logits_at`` and ``exit_scores``
(``torch.compile(fullgraph=True)`` raises at a graph break; tests/training/graphs.py). A graph
break splits a compiled step into several graphs with eager code between them: on CUDA every
piece is launched (and graph-captured) apart, and every compile costs several traces. The
captured graph computes what eager computes, in float32, with the same dropout masks (the fast
CPU dropout draws its bits inside the graph, from the same generator)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.model.scoring import to_device
from harness.training import _compile
from harness.training.loop import Trainer
from tests.conftest import tiny_config
from tests.training.graphs import assert_no_host_read

FLAT = {"train.steps": 4, "train.eval_every": 4, "train.batch_size": 4, "train.bf16": False,
        "train.compile": "true"}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _trainer(prepared, monkeypatch, **flat) -> Trainer:
    monkeypatch.setattr(_compile, "BACKEND", "eager")
    return Trainer(tiny_config(**{**FLAT, **flat}), prepared)


def _uploaded(trainer: Trainer, step: int = 0):
    inputs = trainer.step_inputs(step, trainer.data.train)
    return (to_device(inputs.batch, trainer.device), trainer._upload(inputs.weights),
            trainer._upload(inputs.targets))


@pytest.mark.slow  # graph capture of the tiny model, forward and backward: seconds
@pytest.mark.parametrize("flat", [{}, {"train.loss": "pairwise", "weighting.heuristic": "recip"},
                                  {"train.loss": "pointwise_mse"}, {"train.bf16": True}],
                         ids=["pointwise", "pairwise-weighted", "squared-error", "bf16"])
def test_the_plain_step_compiles_to_one_graph_equal_to_eager(prepared, monkeypatch, flat):
    trainer = _trainer(prepared, monkeypatch, **flat)
    trainer.autocast = bool(flat.get("train.bf16"))  # bf16 autocast as on CUDA, whatever this CPU has
    trainer.model.train()  # dropout on: the fast CPU dropout's draws are inside the graph
    args = _uploaded(trainer)
    assert (args[1] is not None) == ("weighting.heuristic" in flat)
    assert args[0]["input_ids"].shape[1] % _compile.WIDTH_MULTIPLE == 0 or args[0]["input_ids"].shape[1] == 32
    torch.manual_seed(0)
    want = trainer._plain_loss(*args)
    if flat.get("train.loss") == "pointwise_mse":  # the trainer's loss is eq. 1 on the labels
        torch.manual_seed(0)
        torch.testing.assert_close(want, F.mse_loss(trainer.model(args[0]).float(), args[2][:, 1]))
    want.backward()
    grads = [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]
    trainer.model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    got = assert_no_host_read(trainer._plain_loss, *args)
    assert got.shape == () and torch.isfinite(got)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4 if trainer.autocast else 1e-6)
    got.backward()
    if not trainer.autocast:
        for g, p in zip(grads, (p for p in trainer.model.parameters() if p.grad is not None), strict=True):
            torch.testing.assert_close(p.grad, g, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_scoring_compiles_to_one_graph_equal_to_eager(prepared, monkeypatch):
    trainer = _trainer(prepared, monkeypatch)
    trainer.model.eval()
    batch = _uploaded(trainer)[0]
    score = trainer.model.score.eager  # the method CompiledModel wraps
    with torch.inference_mode():
        want = score(batch)
        got = assert_no_host_read(score, batch)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_the_cascade_entries_compile_to_one_graph(prepared, monkeypatch):
    trainer = _trainer(prepared, monkeypatch, **{"cascade.enabled": True})
    model = trainer.model
    batch = _uploaded(trainer)[0]
    model.train()
    torch.manual_seed(0)
    want = model.logits_at.eager(batch, 0)
    torch.manual_seed(0)
    got = assert_no_host_read(model.logits_at.eager, batch, 0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    torch._dynamo.reset()
    model.eval()
    with torch.inference_mode():
        got = assert_no_host_read(model.exit_scores.eager, batch)
        torch.testing.assert_close(got, model.exit_scores.eager(batch), rtol=0, atol=1e-6)
    assert got.shape == (len(model.exits), batch["input_ids"].shape[0])


@pytest.mark.slow
def test_a_compiled_trainer_meets_no_graph_break(prepared, monkeypatch):
    """The trainer's own wiring (``CompiledModel``: precompiling every width, steps, scoring):
    dynamo counts no graph break, and each width is one compile."""
    from torch._dynamo.utils import counters

    counters.clear()
    trainer = _trainer(prepared, monkeypatch)
    widths = trainer.precompile()
    for s in range(2):
        loss = trainer.train_step(trainer.step_inputs(s, trainer.data.train), trainer.data.splits.train,
                                  trainer.data.train)
        assert torch.isfinite(loss)
    trainer._evaluate_dev()
    assert dict(counters["graph_break"]) == {}
    assert trainer.compiled.effective and trainer.compiled.compiles >= widths >= 1
