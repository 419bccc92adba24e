"""The trainer does what the papers' comparisons need: curriculum scores on the trained pair and
drawn per seed, MacAvaney's W constant within an iteration, and the best-dev checkpoint chosen by
the study's objective metric."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.curriculum.weights import curriculum_weight
from harness.records import Query
from harness.training._instances import trained_candidates, trial_instances
from harness.training._signals import TrainingSignals
from harness.training.loop import FinalRecord, Trainer
from harness.training.teacher import difficulty_scores
from harness.training.tokenized import prepare_data, score_key
from tests.conftest import tiny_config, toy_splits


@pytest.fixture(scope="module")
def splits():
    return toy_splits(n_train=40, n_dev=12, n_test=12)


def _random(seed: int, candidates: str = "pair"):
    return tiny_config(**{"curriculum.scoring": "random", "curriculum.pacing": "root_n",
                          "curriculum.candidates": candidates, "train.seed": seed})


def test_random_order_is_drawn_per_seed_and_fixed_for_a_seed(splits) -> None:
    first = difficulty_scores([_random(1), _random(2)], splits)
    again = difficulty_scores([_random(1)], splits)
    one, two = first["random/pair/k1/seed1"], first["random/pair/k1/seed2"]
    assert not np.allclose(one, two)
    np.testing.assert_array_equal(one, again["random/pair/k1/seed1"])
    # With every candidate scored the order is still drawn per seed.
    assert score_key(_random(3, "all")) == "random/all/seed3"
    assert score_key(_random(4, "all")) != score_key(_random(3, "all"))
    # Different seeds give different training orders.
    assert np.argsort(one).tolist() != np.argsort(two).tolist()


def test_scores_on_the_trained_pair_equal_the_hand_computed_value(splits) -> None:
    cfg = tiny_config(**{"curriculum.scoring": "sigma_bm25", "curriculum.pacing": "root_n",
                         "train.seed": 5})
    pair = difficulty_scores([cfg], splits)[score_key(cfg)]
    every = difficulty_scores([dataclasses.replace(
        cfg, curriculum=dataclasses.replace(cfg.curriculum, candidates="all"))], splits)
    # Which negative a seed trains does not depend on the curriculum: a plain trainer shows it.
    trainer_inst = Trainer(tiny_config(**{"train.seed": 5}), prepare_data(splits, cfg.model)).instances
    for qi, q in enumerate(splits.train[:10]):
        rows = np.flatnonzero(trainer_inst.query == qi)
        (neg,) = [int(c) for c in trainer_inst.cand[rows, 0] if q.candidates[c].label == 0]
        s_pos, s_neg = q.candidates[0].score, q.candidates[neg].score
        # The population SD of two values is half their distance.
        assert pair[qi] == pytest.approx(abs(s_pos - s_neg) / 2)
        assert every["sigma_bm25/all"][qi] == pytest.approx(np.std([c.score for c in q.candidates]))


def test_the_trained_pair_is_the_trainers_instances(splits) -> None:
    cfg = tiny_config(**{"train.seed": 7, "train.negatives_per_positive": 2})
    used = trained_candidates(trial_instances(splits.train, cfg.train), len(splits.train))
    inst = Trainer(cfg, prepare_data(splits, cfg.model)).instances
    for qi in range(len(splits.train)):
        assert used[qi] == sorted(set(inst.cand[inst.query == qi].ravel().tolist()))
        assert len(used[qi]) == 3  # the positive and 2 negatives


def test_weight_is_constant_within_an_iteration_and_one_from_m_on() -> None:
    d = np.array([0.1, 0.6])
    steps = np.arange(0, 130)
    w = curriculum_weight(d[:, None], steps[None, :], m=96, iteration=32)
    for it in range(3):  # iterations 0, 1, 2: W(t, i) = D + (i / 3)(1 - D)
        block = w[:, 32 * it:32 * (it + 1)]
        assert (block == block[:, :1]).all()
        np.testing.assert_allclose(block[:, 0], d + (it / 3) * (1 - d))
    assert (w[:, 96:] == 1.0).all()
    # Per-step ramp when an iteration is one step (the knob's lower bound).
    assert curriculum_weight(0.5, 48, m=96, iteration=1).item() == 0.75
    assert curriculum_weight(0.5, 48, m=96, iteration=32).item() == pytest.approx(0.5 + (32 / 96) * 0.5)


def test_signals_hold_the_weight_within_an_iteration(splits) -> None:
    cfg = tiny_config(**{"weighting.heuristic": "recip", "weighting.m": 40, "weighting.iteration": 8,
                         "train.steps": 80})
    data = prepare_data(splits, cfg.model)
    inst = trial_instances(splits.train, cfg.train)
    sig = TrainingSignals(cfg, data, inst, 80)
    idx = np.arange(len(inst))
    assert np.array_equal(sig.weights(idx, 8), sig.weights(idx, 15))
    assert not np.array_equal(sig.weights(idx, 15), sig.weights(idx, 16))
    assert (sig.weights(idx, 40) == 1.0).all() and (sig.weights(idx, 39) < 1.0).any()


def _two_relevant(q: Query) -> Query:
    """A second relevant candidate per dev query, so MAP and MRR differ."""
    cands = list(q.candidates)
    cands[-1] = dataclasses.replace(cands[-1], label=1)
    return dataclasses.replace(q, candidates=tuple(cands))


@pytest.mark.slow
def test_the_best_dev_checkpoint_is_chosen_by_the_selection_metric() -> None:
    base = toy_splits()
    splits = dataclasses.replace(base, dev=tuple(_two_relevant(q) for q in base.dev))
    data = prepare_data(splits, tiny_config().model)
    finals: dict[str, FinalRecord] = {}
    for metric in ("map", "mrr"):
        cfg = tiny_config(**{"train.steps": 40, "train.eval_every": 4, "train.seed": 4,
                             "train.select_metric": metric})
        trainer = Trainer(cfg, data)
        final = list(trainer.run())[-1]
        assert isinstance(final, FinalRecord)
        values = [m[metric] for _, m in trainer.curve]
        best = trainer.curve[int(np.argmax(values))][0]  # the first step reaching the maximum
        assert final.best_step == best
        assert final.dev[metric] == max(values)
        finals[metric] = final
    # On this run MAP and MRR peak at different steps: each metric keeps its own checkpoint.
    assert (finals["map"].best_step, finals["mrr"].best_step) == (36, 32)
    assert finals["map"].metrics != finals["mrr"].metrics
    assert finals["map"].dev["map"] > finals["mrr"].dev["map"]


def test_a_teacher_it_cannot_cache_is_used_and_said(splits, tmp_path) -> None:
    """BERT_pred's teacher, trained, then a cache folder under a file: the scores are used and the
    log says the teacher could not be cached (it was an OSError traceback after the training)."""
    from harness.training.teacher import teacher_scores

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    cfg = tiny_config(**{"curriculum.scoring": "bert_pred", "curriculum.pacing": "root_n",
                         "curriculum.teacher_steps": 4, "data.cache_dir": str(blocker / "cache")})
    lines: list[str] = []
    scores = teacher_scores(cfg, splits, progress=lines.append)
    assert set(scores.prob) == {q.qid for q in splits.train}
    assert any("the teacher could not be cached at" in ln and "the next run trains it again" in ln
               for ln in lines), lines
