"""Cascade ranking from exit scores: drop decisions, final order, alpha = 0 equivalence."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from harness.errors import DataError
from harness.metrics.measures import rank_order
from harness.model._cascade_rank import cascade_rank, keep_top
from harness.model.cascade_cost import CascadePlan


def test_hand_computed_three_exits() -> None:
    plan = CascadePlan.build(num_layers=3, exits=(1, 2, 3), alpha=(0.4, 0.5, 0.0))
    m = np.array([
        [5.0, 1.0, 4.0, 2.0, 3.0],   # exit 1 drops floor(0.4*5)=2: candidates 1 (1.0), 3 (2.0)
        [0.0, 9.0, 2.0, 9.0, 1.0],   # exit 2 drops floor(0.5*3)=1 of {0, 2, 4}: candidate 0
        [0.0, 0.0, -1.0, 0.0, 7.0],  # final: 4 above 2
    ])
    out = cascade_rank(m, plan)
    assert out.entering == (5, 3, 2)
    assert out.exit_reached.tolist() == [1, 0, 2, 0, 2]
    order = np.argsort(-out.scores, kind="stable").tolist()
    assert order == [4, 2, 0, 3, 1]  # survivors, then dropped at exit 2, then at exit 1 by its score


def test_keep_top_breaks_ties_by_position() -> None:
    assert keep_top(np.array([1.0, 1.0, 1.0, 0.0]), 2).tolist() == [0, 1]
    with pytest.raises(DataError, match="non-finite"):
        keep_top(np.array([1.0, np.nan]), 1)


def test_nan_of_dropped_candidates_is_ignored() -> None:
    plan = CascadePlan.build(num_layers=2, exits=(1, 2), alpha=(0.5,))
    out = cascade_rank(np.array([[3.0, 1.0], [2.0, np.nan]]), plan)
    assert out.scores.tolist() == [2.0, 1.0]
    with pytest.raises(DataError, match="shape"):
        cascade_rank(np.zeros((3, 2)), plan)


scores = st.integers(1, 40).flatmap(
    lambda n: arrays(np.float64, (3, n), elements=st.sampled_from([-1.0, 0.0, 0.5, 2.0, 3.25])))


@given(scores)
def test_alpha_zero_is_the_final_exit_ranking_ties_included(m: np.ndarray) -> None:
    plan = CascadePlan.build(num_layers=6, exits=(2, 4, 6), alpha=(0.0,))
    out = cascade_rank(m, plan)
    n = m.shape[1]
    ids, labels = [f"d{i}" for i in range(n)], [i % 2 for i in range(n)]
    assert rank_order(ids, out.scores.tolist(), labels) == rank_order(ids, m[-1].tolist(), labels)


@given(scores, st.floats(0.0, 0.95), st.sampled_from(["floor", "nearest"]))
def test_tiers_are_stacked_and_counts_match_the_plan(m: np.ndarray, alpha: float, rounding: str) -> None:
    plan = CascadePlan.build(num_layers=6, exits=(2, 4, 6), alpha=(alpha,), rounding=rounding)
    out = cascade_rank(m, plan)
    n = m.shape[1]
    assert out.entering == plan.entering(n)
    for i, k in enumerate(plan.entering(n)):
        assert int((out.exit_reached >= i).sum()) == k
    # every candidate that went further ranks above every candidate dropped earlier
    for a in range(n):
        for b in range(n):
            if out.exit_reached[a] > out.exit_reached[b]:
                assert out.scores[a] > out.scores[b]
            elif out.exit_reached[a] == out.exit_reached[b]:
                tier = out.exit_reached[a]
                assert np.sign(out.scores[a] - out.scores[b]) == np.sign(m[tier, a] - m[tier, b])
    # the dropped ones were the lowest-scored at their exit
    for i in range(2):
        went_on = out.exit_reached > i
        stopped = out.exit_reached == i
        if went_on.any() and stopped.any():
            assert m[i, went_on].min() >= m[i, stopped].max()
