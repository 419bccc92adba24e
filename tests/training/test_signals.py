"""Every training-signal knob is a knob of the one trainer: equivalences with plain training
(bit-identical on CPU for the same seed) and end-to-end curriculum / smoothed / weighted trials."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.training._teacher_id import teacher_key
from harness.training.loop import EvalRecord, FinalRecord, Trainer
from harness.training.teacher import difficulty_scores, teacher_fingerprint
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

STEPS = {"train.steps": 20, "train.eval_every": 20}


@pytest.fixture(scope="module")
def splits():
    return toy_splits()


CURRICULA = [{"curriculum.scoring": name, "curriculum.pacing": "root_n"}
             for name in ("turns", "uwords", "sigma_bm25")]


@pytest.fixture(scope="module")
def prepared(splits):
    scores = difficulty_scores([tiny_config(**flat) for flat in CURRICULA], splits)
    return prepare_data(splits, tiny_config().model, scores)


def _final_params(cfg, prepared):
    t = Trainer(cfg, prepared)
    recs = list(t.run())
    return [p.detach().clone() for p in t.model.parameters()], recs[-1]


def _assert_same(a, b):
    for p, q in zip(a[0], b[0], strict=True):
        assert torch.equal(p, q)
    assert a[1].per_query == b[1].per_query


@pytest.fixture(scope="module")
def plain(prepared):
    return _final_params(tiny_config(**STEPS), prepared)


@pytest.mark.slow
def test_pacing_baseline_equals_no_curriculum(prepared, plain):
    cfg = tiny_config(**STEPS, **{"curriculum.scoring": "turns", "curriculum.pacing": "baseline"})
    _assert_same(plain, _final_params(cfg, prepared))


@pytest.mark.slow
def test_m_zero_weighting_equals_unweighted_loss(prepared, plain):
    cfg = tiny_config(**STEPS, **{"weighting.heuristic": "recip", "weighting.m": 0})
    _assert_same(plain, _final_params(cfg, prepared))


@pytest.mark.slow
def test_epsilon_zero_equals_hard_labels(prepared, plain):
    for method in ("LS", "WSLS", "T-WSLS"):
        cfg = tiny_config(**STEPS, **{"smoothing.method": method, "smoothing.epsilon": 0.0})
        _assert_same(plain, _final_params(cfg, prepared))


@pytest.mark.slow
def test_knobs_change_training(prepared, plain):
    for flat in ({"weighting.heuristic": "kde", "weighting.m": 1.0},
                 {"smoothing.method": "LS", "smoothing.epsilon": 0.2},
                 {"curriculum.scoring": "uwords", "curriculum.pacing": "root_n", "curriculum.n": 2}):
        params, _ = _final_params(tiny_config(**STEPS, **flat), prepared)
        assert any(not torch.equal(p, q) for p, q in zip(params, plain[0], strict=True)), flat


@pytest.mark.slow
def test_curriculum_trial_end_to_end(prepared):
    cfg = tiny_config(**{"curriculum.scoring": "sigma_bm25", "curriculum.pacing": "root_n",
                         "curriculum.n": 2, "curriculum.delta": 0.33, "curriculum.T": 0.9,
                         "train.steps": 60})
    t = Trainer(cfg, prepared)
    pools = [r.available for r in t.run() if hasattr(r, "available")]
    assert pools[0] < len(t.instances) and pools[-1] == len(t.instances)
    assert pools == sorted(pools)
    assert t.resolved()["curriculum.T_steps"] == 54
    final = t._test()
    assert final.metrics["map"] > 0.6


@pytest.mark.slow
def test_smoothed_and_weighted_trials_end_to_end(prepared):
    for flat in ({"smoothing.method": "T-WSLS", "smoothing.epsilon": 0.2, "train.steps": 60},
                 {"weighting.heuristic": "norm", "weighting.m": 0.5, "train.steps": 60},
                 {"weighting.heuristic": "recip", "weighting.m": "inf", "train.loss": "pairwise",
                  "train.steps": 60}):
        t = Trainer(tiny_config(**flat), prepared)
        recs = list(t.run())
        assert isinstance(recs[-1], FinalRecord) and recs[-1].metrics["map"] > 0.6, flat
        assert any(isinstance(r, EvalRecord) for r in recs)


def test_wsls_gives_random_negatives_one_hot_targets(prepared):
    """Under train.sampler: random the negatives get the weak label 0 (one-hot), as the authors'
    random sampler scores them, though the toy candidates carry BM25 scores; positives keep LS.
    Under the other samplers a scored negative gets eps * s of relevant mass."""
    flat = {"smoothing.method": "WSLS", "smoothing.epsilon": 0.4}
    for sampler in ("random", "dataset"):
        t = Trainer(tiny_config(**flat, **{"train.sampler": sampler}), prepared)
        idx = np.arange(len(t.instances))
        targets, labels = t.signals.targets(idx, 0), t.instances.label
        assert np.allclose(targets[labels == 1], [0.2, 0.8])
        negatives = targets[labels == 0]
        if sampler == "random":
            assert np.array_equal(negatives, np.tile([1.0, 0.0], (len(negatives), 1)))
        else:
            assert (negatives[:, 1] > 0).all() and negatives[:, 1].max() == pytest.approx(0.4 * 0.99)


@pytest.mark.slow
def test_teacher_trained_once_and_reused(splits, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    cfg = tiny_config(**{"curriculum.scoring": "bert_pred", "curriculum.pacing": "root_n",
                         "curriculum.teacher_steps": 20})
    logs: list[str] = []
    loss_cfg = tiny_config(**{"curriculum.scoring": "bert_loss", "curriculum.pacing": "root_n",
                              "curriculum.teacher_steps": 20})
    first = difficulty_scores([cfg, loss_cfg], splits, progress=logs.append)
    assert any("training the teacher" in m for m in logs)
    cached = tmp_path / "teachers" / f"{teacher_fingerprint(cfg, splits)}.json"
    assert cached.is_file()
    logs.clear()
    second = difficulty_scores([cfg, loss_cfg], splits, progress=logs.append)
    assert not any("training the teacher" in m for m in logs)
    assert any("loaded from cache" in m for m in logs)
    key = teacher_key(cfg)
    assert key == teacher_key(loss_cfg)  # one teacher for both scorings
    assert sorted(first) == [f"bert_loss/pair/k1/seed1/teacher-{key}", f"bert_pred/pair/k1/seed1/teacher-{key}"]
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])
        assert first[key].shape == (len(splits.train),)
    # A curriculum trial with the teacher's scores runs end to end.
    data = prepare_data(splits, cfg.model, second)
    rec = list(Trainer(cfg, data).run())[-1]
    assert isinstance(rec, FinalRecord)


@pytest.mark.slow
def test_each_configuration_sorts_by_its_own_teacher(splits, tmp_path, monkeypatch):
    """A study prepared every configuration's bert_pred scores with the first configuration's
    teacher: one with curriculum.teacher_seed 2000 and 10 teacher steps sorted by the teacher of
    seed 1000 and 20 steps, unlike the same configuration under `harness train`. Each now gets its
    own, the scores it gets alone."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    a = tiny_config(**{"curriculum.scoring": "bert_pred", "curriculum.pacing": "root_n",
                       "curriculum.teacher_steps": 20})
    b = tiny_config(**{"curriculum.scoring": "bert_pred", "curriculum.pacing": "root_n",
                       "curriculum.teacher_seed": 2000, "curriculum.teacher_steps": 10})
    logs: list[str] = []
    together = difficulty_scores([a, b], splits, progress=logs.append)
    assert sum("training the teacher" in m for m in logs) == 2
    assert len(together) == 2 and teacher_key(a) != teacher_key(b)
    for cfg in (a, b):
        alone = difficulty_scores([cfg], splits)  # from the cache: the teacher of cfg's settings
        (key,) = alone
        np.testing.assert_array_equal(together[key], alone[key])
    keys = sorted(together)
    assert not np.array_equal(together[keys[0]], together[keys[1]])
