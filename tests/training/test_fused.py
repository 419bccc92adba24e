"""A configuration's seeds trained together (harness.training.fused.SeedGroup) equal its seeds
trained one by one with Trainer: interleaved exactly, fused (one stacked model) within 1e-4 in fp32
on CPU (issue 32's criterion: every test score, the best step, the dev curve)."""

from __future__ import annotations

import math

import pytest
import torch

from harness.errors import ConfigError
from harness.model.checkpoint import read_checkpoint
from harness.training.fused import SeedGroup
from harness.training.loop import CHECKPOINT_FILE, EvalRecord, FinalRecord, StepRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

SEEDS = (1, 2, 3)
FLAT = {"train.steps": 8, "train.eval_every": 4, "train.batch_size": 8, "train.bf16": False}
TOL = 1e-4


def _cfgs(**flat):
    return [tiny_config(**{**FLAT, **flat, "train.seed": s}) for s in SEEDS]


@pytest.fixture(scope="module")
def prepared():
    return prepare_data(toy_splits(n_train=48, n_dev=8, n_test=8), tiny_config().model)


@pytest.fixture(scope="module")
def separate(prepared):
    """Each seed trained alone, the reference."""
    return [list(Trainer(cfg, prepared, log_every=2).run()) for cfg in _cfgs()]


def _collect(group: SeedGroup) -> tuple[list[list], list[type]]:
    out: list[list] = [[] for _ in group.members]
    order = []
    for i, rec in group.run():
        out[i].append(rec)
        order.append(type(rec))
    return out, order


def _centred(run):
    """Each query's scores minus their mean (a shift common to a query's candidates ranks nothing)."""
    return {q: {d: s - sum(scores.values()) / len(scores) for d, s in scores.items()} for q, scores in run.items()}


def _assert_close(recs, sep, tol, *, centred=False):
    """The records of one seed against its separate run's: same kinds and steps, values within tol
    (with ``centred``, the scores of a query up to a common shift)."""
    assert [type(r) for r in recs] == [type(r) for r in sep]
    for a, b in zip(recs, sep, strict=True):
        if isinstance(a, StepRecord):
            assert (a.step, a.available) == (b.step, b.available)
            assert a.loss == pytest.approx(b.loss, abs=tol) and a.lr == pytest.approx(b.lr, rel=1e-12)
        elif isinstance(a, EvalRecord):
            assert (a.step, a.is_best, a.best_step) == (b.step, b.is_best, b.best_step)
            assert a.metrics == pytest.approx(b.metrics, abs=tol)
        else:
            assert a.best_step == b.best_step and a.dev == pytest.approx(b.dev, abs=tol)
            assert a.metrics == pytest.approx(b.metrics, abs=tol)
            for split in ("dev", "test"):
                ours, theirs = a.runs[split], b.runs[split]
                if centred:
                    ours, theirs = _centred(ours), _centred(theirs)
                assert ours.keys() == theirs.keys()
                for qid, scores in theirs.items():
                    assert ours[qid] == pytest.approx(scores, abs=tol), (split, qid)
            assert a.resolved == b.resolved


@pytest.mark.slow
def test_interleaved_group_is_the_separate_runs(prepared, separate):
    group = SeedGroup(_cfgs()[:2], prepared, fused=False, log_every=2)
    assert not group.fused
    out, order = _collect(group)
    assert order[-2:] == [FinalRecord] * 2
    assert FinalRecord not in order[:-2]
    for recs, sep in zip(out, separate[:2], strict=True):
        _assert_close(recs, sep, 0.0)


@pytest.mark.slow
def test_fused_group_equals_the_separate_runs(prepared, separate):
    group = SeedGroup(_cfgs(), prepared, fused=True, log_every=2)
    assert group.fused
    out, order = _collect(group)
    assert order[-len(SEEDS):] == [FinalRecord] * len(SEEDS)
    for recs, sep in zip(out, separate, strict=True):
        _assert_close(recs, sep, TOL)
    # Not vacuous: the seeds' runs differ from each other by far more than the tolerance.
    tests = [sep[-1].runs["test"] for sep in separate]
    qid, doc = next(iter(tests[0].items()))
    assert len({round(t[qid][next(iter(doc))], 3) for t in tests}) == len(SEEDS)


@pytest.mark.slow
def test_fused_checkpoints_are_each_seeds_own_and_resume(prepared, separate, tmp_path):
    """A member's checkpoint, written mid-run by the fused group, is its seed's ordinary trainer.pt:
    an ordinary Trainer resumes it, and so does a new fused group, both to the separate run's end."""
    group = SeedGroup(_cfgs(), prepared, fused=True, log_every=2)
    evals = 0
    for i, rec in group.run():
        if isinstance(rec, EvalRecord) and rec.step == 4:
            group.members[i].save(tmp_path / str(i))
            evals += 1
            if evals == len(SEEDS):
                break
    alone = Trainer(tiny_config(**{**FLAT, "train.seed": SEEDS[1]}), prepared, log_every=2)
    state = read_checkpoint(tmp_path / "1" / CHECKPOINT_FILE)
    assert state.keys() == alone.state_dict().keys()
    for j, p in enumerate(alone.optimizer.param_groups[0]["params"][:3]):
        assert state["optimizer"]["state"][j]["exp_avg"].shape == p.shape
    alone.restore(tmp_path / "1")
    assert alone.step == 4
    _assert_close(list(alone.run()), [r for r in separate[1] if r.__class__ is FinalRecord
                                      or r.step > 4], TOL)

    again = SeedGroup(_cfgs(), prepared, fused=True, log_every=2)
    for i, m in enumerate(again.members):
        m.restore(tmp_path / str(i))
    out, _ = _collect(again)
    for recs, sep in zip(out, separate, strict=True):
        _assert_close(recs, [r for r in sep if isinstance(r, FinalRecord) or r.step > 4], TOL)


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["pairwise", "pointwise_mse"])
def test_pairwise_and_squared_error_losses_fuse_too(prepared, loss):
    """Under the pairwise loss the classifier's bias gets no gradient (it cancels in pos - neg)
    but rounding noise, which AdamW scales to steps of about lr: in the fused and the separate run
    alike, the bias drifts by different noise. Scores then agree up to a shift common to all
    candidates (losses, rankings and metrics exactly so), and are compared that way. Squared
    error trains the bias: compared as they are."""
    flat = {"train.loss": loss, "train.steps": 6, "train.eval_every": 6}
    cfgs = [tiny_config(**{**FLAT, **flat, "train.seed": s}) for s in SEEDS[:2]]
    out, _ = _collect(SeedGroup(cfgs, prepared, fused=True, log_every=2))
    for cfg, recs in zip(cfgs, out, strict=True):
        _assert_close(recs, list(Trainer(cfg, prepared, log_every=2).run()), TOL, centred=loss == "pairwise")


def test_models_the_engine_does_not_fuse_interleave(prepared):
    cfgs = _cfgs(**{"cascade.enabled": True, "cascade.exits": [2, 4], "cascade.alpha": [0.4],
                    "train.steps": 2})[:2]
    with pytest.raises(ConfigError, match="^fused seeds .*cascade") as info:
        SeedGroup(cfgs, prepared, fused=True)
    assert "\n" not in str(info.value)
    assert not SeedGroup(cfgs, prepared).fused  # auto: interleaved


def test_auto_policy(prepared):
    """Fused by default on CUDA only (CPU: benchmarks/results/fused.md shows no settled gain)."""
    assert not SeedGroup(_cfgs(**{"train.steps": 2})[:2], prepared).fused
    assert not SeedGroup(_cfgs(**{"train.steps": 2})[:1], prepared).fused


def test_group_of_other_configurations_is_refused(prepared):
    with pytest.raises(ConfigError, match="only in train.seed"):
        SeedGroup([tiny_config(), tiny_config(**{"train.seed": 2, "train.lr": 1e-4})], prepared)
    with pytest.raises(ConfigError, match="must differ"):
        SeedGroup([tiny_config(), tiny_config()], prepared)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_is_the_default_on_cuda_and_trains_every_seed(prepared):
    """On CUDA dropout comes from the device's generator (not the separate runs' masks), so the
    records are checked for what they must hold, not against separate runs."""
    cfgs = _cfgs(**{"train.device": "cuda"})
    group = SeedGroup(cfgs, prepared, log_every=2)
    assert group.fused
    out, order = _collect(group)
    assert order[-len(SEEDS):] == [FinalRecord] * len(SEEDS)
    for recs in out:
        assert all(math.isfinite(r.loss) for r in recs if isinstance(r, StepRecord))
        final = recs[-1]
        assert final.runs["test"].keys() == {q.qid for q in prepared.splits.test}
    assert len({round(next(iter(next(iter(r[-1].runs["test"].values())).values())), 4) for r in out}) == len(SEEDS)
