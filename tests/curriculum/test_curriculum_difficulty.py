"""Difficulty heuristics (MacAvaney et al. 2020, Section 3.3): hand-computed values, the KDE CDF
against scipy, fallbacks, and [0, 1] bounds for every registered heuristic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import gaussian_kde

from harness.curriculum.heuristics import (
    HEURISTICS,
    candidate_scores,
    difficulties,
    kde_cdf,
    pairwise_difficulty,
    pointwise_difficulty,
    query_difficulty,
)
from harness.records import Candidate, Query, Splits

NAMES = HEURISTICS.names()


def h(name: str, scores: list[float | None], ids: list[str] | None = None) -> np.ndarray:
    arr = np.array([np.nan if s is None else s for s in scores], dtype=float)
    return HEURISTICS.get(name)(arr, ids or [f"d{i}" for i in range(len(scores))])


def test_registered_names_are_the_papers() -> None:
    assert set(NAMES) == {"recip", "norm", "kde"}


def test_recip_hand_computed_ties_by_doc_id_and_missing_ranks_last() -> None:
    """Equal scores: the greater doc id first, as OpenNIR's _rank_dict sorts (score, doc id) in
    reverse; full ties keep their input order."""
    values = h("recip", [2.0, 5.0, 2.0, None, 1.0], ["z", "m", "a", "q", "b"])
    # ranking: m (5.0), z (2.0, id z > a), a (2.0), b (1.0); q unscored: rank 5
    assert values.tolist() == [1 / 2, 1.0, 1 / 3, 1 / 5, 1 / 4]
    assert h("recip", [3.0, 3.0, 3.0], ["c", "a", "b"]).tolist() == [1.0, 1 / 3, 1 / 2]
    assert h("recip", [3.0, 3.0, 1.0], ["x", "x", "y"]).tolist() == [1.0, 1 / 2, 1 / 3]
    # OpenNIR's own sort on the same run
    scores, ids = [12.0, 7.5, 7.5, 3.0, 20.0], ["d3", "d1", "d2", "d9", "d0"]
    opennir = [d for d, _ in sorted(zip(ids, scores, strict=True), key=lambda x: (x[1], x[0]), reverse=True)]
    assert h("recip", scores, ids).tolist() == [1 / (opennir.index(d) + 1) for d in ids]


def test_norm_hand_computed() -> None:
    assert h("norm", [10.0, 15.0, 20.0, None]).tolist() == [0.0, 0.5, 1.0, 0.0]


def test_kde_cdf_equals_scipy_integrate_box_1d() -> None:
    rng = np.random.default_rng(4)
    for n in (2, 3, 10, 100):
        data = rng.gamma(2.0, 3.0, size=n)
        points = np.concatenate([data, [data.min() - 5, data.max() + 5, data.mean()]])
        kde = gaussian_kde(data)  # Scott's rule is scipy's default bandwidth
        expected = [kde.integrate_box_1d(-np.inf, x) for x in points]
        np.testing.assert_allclose(kde_cdf(points, data), expected, rtol=1e-12, atol=1e-15)
    scores = [9.0, 3.0, 4.0, 15.0, None]
    kde = gaussian_kde([9.0, 3.0, 4.0, 15.0])
    expected = [kde.integrate_box_1d(-np.inf, x) for x in (9.0, 3.0, 4.0, 15.0, 3.0)]
    np.testing.assert_allclose(h("kde", scores), expected, rtol=1e-12)
    assert h("kde", scores)[-1] > 0  # an unretrieved document keeps a non-zero value


@pytest.mark.parametrize("scores", [[4.0, 4.0, 4.0], [7.0], [None, None], [2.0, None], []])
def test_norm_and_kde_fall_back_to_one_half_without_an_order(scores: list[float | None]) -> None:
    for name in ("norm", "kde"):
        assert h(name, scores).tolist() == [0.5] * len(scores)


def test_recip_fallbacks() -> None:
    assert h("recip", [7.0]).tolist() == [1.0]
    assert h("recip", [None, None]).tolist() == [0.5, 0.5]
    assert h("recip", [2.0, None]).tolist() == [1.0, 0.5]


score_lists = st.lists(st.one_of(st.none(), st.floats(-1e6, 1e6), st.sampled_from([0.0, 1.0])),
                       min_size=0, max_size=12)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=80, deadline=None)
@given(scores=score_lists, data=st.data())
def test_values_and_difficulties_lie_in_0_1(name: str, scores: list[float | None],
                                            data: st.DataObject) -> None:
    values = h(name, scores)
    assert values.shape == (len(scores),)
    assert np.isfinite(values).all() and ((values >= 0) & (values <= 1)).all()
    relevant = np.array(data.draw(st.lists(st.booleans(), min_size=len(scores), max_size=len(scores))),
                        dtype=bool)
    d = pointwise_difficulty(values, relevant)
    assert ((d >= 0) & (d <= 1)).all()
    if relevant.any() and (~relevant).any():
        pair = pairwise_difficulty(values[relevant], np.tile(values[~relevant], (relevant.sum(), 1)))
        assert ((pair >= 0) & (pair <= 1)).all()


def test_pointwise_relevant_high_is_easy_nonrelevant_high_is_hard() -> None:
    # MacAvaney et al., Figure 1: (a) relevant + high score easy, (c) non-relevant + high score hard
    q = Query("q", ("vegetarian health",), (
        Candidate("a", "...", 1, 20.0), Candidate("b", "...", 1, 5.0),
        Candidate("c", "...", 0, 19.0), Candidate("d", "...", 0, 2.0)))
    for name in NAMES:
        d = query_difficulty(q, name).pointwise
        assert d[0] > d[1] and d[3] > d[2], name
    np.testing.assert_allclose(query_difficulty(q, "norm").pointwise,
                               [1.0, 3 / 18, 1 - 17 / 18, 1.0])


def test_pairwise_uses_the_hardest_negative() -> None:
    q = Query("q", ("u",), (Candidate("p", "r", 1, 3.0), Candidate("n1", "r", 0, 1.0),
                            Candidate("n2", "r", 0, 2.0), Candidate("n3", "r", 0, 5.0)))
    qd = query_difficulty(q, "norm")  # h = [0.5, 0, 0.25, 1]
    assert qd.pair(0, 1) == pytest.approx((0.5 - 0 + 1) / 2)
    assert qd.pair(0, [1, 2]) == pytest.approx((0.5 - 0.25 + 1) / 2)
    assert qd.hardest_pair(0) == pytest.approx((0.5 - 1 + 1) / 2)
    with pytest.raises(ValueError):
        qd.pair(1, 2)
    only_pos = query_difficulty(Query("x", ("u",), (Candidate("p", "r", 1, 1.0),)), "recip")
    assert only_pos.hardest_pair(0) == 0.5


def test_candidate_scores_and_per_query_table(toy: Splits) -> None:
    q = Query("q", ("u",), (Candidate("p", "r", 1), Candidate("n", "r", 0, 2.5)))
    assert np.isnan(candidate_scores(q)[0]) and candidate_scores(q)[1] == 2.5
    table = difficulties(toy.train[:10], "kde")
    assert list(table) == [x.qid for x in toy.train[:10]]
    for x in toy.train[:10]:
        assert table[x.qid].pointwise.shape == (len(x.candidates),)
