"""The training loop: learns, is deterministic per seed, and resumes exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.errors import ConfigError
from harness.model.checkpoint import read_checkpoint
from harness.training.loop import EvalRecord, FinalRecord, StepRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits


def _run(trainer: Trainer) -> FinalRecord:
    last = None
    for rec in trainer.run():
        last = rec
    assert isinstance(last, FinalRecord)
    return last


@pytest.fixture(scope="module")
def prepared():
    splits = toy_splits()
    return prepare_data(splits, tiny_config().model)


@pytest.mark.slow
def test_tiny_model_learns_toy_task(prepared):
    cfg = tiny_config(**{"train.steps": 60})
    trainer = Trainer(cfg, prepared)
    evals = []
    for rec in trainer.run():
        if isinstance(rec, EvalRecord):
            evals.append(rec.metrics["map"])
        last = rec
    # 5 candidates, one relevant: a random order has expected MAP (1+1/2+...+1/5)/5 = 0.457.
    assert max(evals) > 0.85
    assert last.metrics["map"] > 0.85
    assert last.best_step in (20, 40, 60)


@pytest.mark.slow
def test_same_seed_same_metrics_other_seed_differs(prepared):
    a = _run(Trainer(tiny_config(), prepared))
    b = _run(Trainer(tiny_config(), prepared))
    assert a.per_query == b.per_query
    assert a.dev == b.dev
    c = Trainer(tiny_config(**{"train.seed": 2}), prepared)
    first = next(p for p in c.model.parameters())
    d = Trainer(tiny_config(), prepared)
    assert not torch.equal(first, next(p for p in d.model.parameters()))


@pytest.mark.slow
def test_resume_equals_uninterrupted(prepared, tmp_path):
    cfg = tiny_config(**{"train.steps": 40, "train.eval_every": 10})
    full = Trainer(cfg, prepared)
    full_rec = _run(full)

    first = Trainer(cfg, prepared)
    for rec in first.run():
        if isinstance(rec, EvalRecord) and rec.step == 20:
            first.save(tmp_path)
            break
    resumed = Trainer(cfg, prepared)
    resumed.restore(tmp_path)
    assert resumed.step == 20
    res_rec = _run(resumed)
    assert res_rec.per_query == full_rec.per_query
    assert res_rec.best_step == full_rec.best_step
    for (n, p), (_, q) in zip(full.model.named_parameters(), resumed.model.named_parameters(), strict=True):
        assert torch.equal(p, q), n


@pytest.mark.slow
def test_checkpoint_holds_best_weights_once_and_resumes_exactly(prepared, tmp_path):
    """At an improving evaluation the best-dev weights are the current weights: the checkpoint
    stores them once (best_is_model); between evaluations it stores both. Either resumes exactly."""
    cfg = tiny_config(**{"train.steps": 30, "train.eval_every": 10})
    full_rec = _run(Trainer(cfg, prepared))
    first = Trainer(cfg, prepared, log_every=1)
    best = {}
    for rec in first.run():
        if isinstance(rec, EvalRecord) and rec.step == 10:
            assert rec.is_best  # the first evaluation always improves on -inf
            first.save(tmp_path / "eval")
            best["eval"] = {k: v.clone() for k, v in first.best_state.items()}
        if isinstance(rec, StepRecord) and rec.step == 15:
            first.save(tmp_path / "mid")
            best["mid"] = {k: v.clone() for k, v in first.best_state.items()}
            break
    at_eval = read_checkpoint(tmp_path / "eval" / "trainer.pt")
    mid = read_checkpoint(tmp_path / "mid" / "trainer.pt")
    assert at_eval["best_is_model"] and at_eval["best_state"] is None
    assert not mid["best_is_model"] and mid["best_state"] is not None
    assert (tmp_path / "eval" / "trainer.pt").stat().st_size < (tmp_path / "mid" / "trainer.pt").stat().st_size
    for name in ("eval", "mid"):
        resumed = Trainer(cfg, prepared)
        resumed.restore(tmp_path / name)
        assert resumed.best_step == 10
        assert best[name].keys() == resumed.best_state.keys()
        assert all(torch.equal(best[name][k], resumed.best_state[k]) for k in best[name]), name
        res_rec = _run(resumed)
        assert res_rec.per_query == full_rec.per_query, name
        assert res_rec.best_step == full_rec.best_step, name


def test_checkpoint_of_other_config_is_refused(prepared, tmp_path):
    t = Trainer(tiny_config(), prepared)
    t.save(tmp_path)
    other = Trainer(tiny_config(**{"train.seed": 5}), prepared)
    with pytest.raises(ValueError, match="another configuration or seed"):
        other.restore(tmp_path)


def test_negatives_per_positive_larger_than_pool(prepared):
    with pytest.raises(ConfigError, match=r"train.negatives_per_positive=5 needs 5 negatives .* pool of 4"):
        Trainer(tiny_config(**{"train.negatives_per_positive": 5}), prepared)


def test_balanced_instances(prepared):
    t = Trainer(tiny_config(**{"train.negatives_per_positive": 2}), prepared)
    labels = t.instances.label
    assert labels.sum() * 2 == (labels == 0).sum()
    pw = Trainer(tiny_config(**{"train.loss": "pairwise"}), prepared)
    assert pw.instances.pairwise and len(pw.instances) == len(prepared.splits.train)


@pytest.mark.slow
@pytest.mark.parametrize(("loss", "steps"), [("pairwise", 60), ("pointwise_mse", 120)])
def test_pairwise_and_squared_error_training_learn(prepared, loss, steps):
    """(Squared error's gradient near a 0/1 target is small: it needs more steps on the toy task.)"""
    rec = _run(Trainer(tiny_config(**{"train.loss": loss, "train.steps": steps}), prepared))
    assert rec.metrics["map"] > 0.8


@pytest.mark.slow
def test_scores_do_not_depend_on_batch_mates(prepared):
    from harness.model.scoring import score_candidates

    t = Trainer(tiny_config(), prepared)
    queries = prepared.splits.dev
    one = score_candidates(t.model, t.collator, queries, prepared.dev, batch_size=1, device=t.device,
                        autocast=False)
    many = score_candidates(t.model, t.collator, queries, prepared.dev, batch_size=64, device=t.device,
                         autocast=False)
    for a, b in zip(one, many, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
