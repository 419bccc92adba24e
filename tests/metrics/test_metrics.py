"""Per-query metrics: hand-computed values on a fixture with ties, the pessimistic tie rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import ConfigError, DataError
from harness.metrics.measures import (
    IR_MEASURES_NAMES,
    MEASURES,
    evaluate,
    evaluate_arrays,
    rank_order,
    tie_broken_scores,
)
from harness.tracking.conventions import METRICS

L2, L3, L4 = math.log2(2), math.log2(3), math.log2(4)

QRELS = {
    "tie": {"a": 1, "b": 0, "c": 0, "d": 0},          # a ties with non-relevant b
    "two": {"x": 1, "y": 1, "z": 0},                    # x ties with non-relevant z
    "missing_rel": {"r1": 1, "n1": 0, "n2": 0},         # relevant doc not in the run
    "absent": {"p": 1, "q": 0},                         # query not in the run at all
    "all_tied": {"b": 1, "a": 0, "c": 0},               # all tied: doc_id ascending among non-rel
    "deep": {f"d{i:02d}": int(i == 12) for i in range(1, 15)},  # relevant at rank 12
    "graded": {"g2": 2, "g1": 1, "n": 0},               # graded labels, all tied
    "no_rel": {"m": 0, "o": 0},                         # nothing relevant: 0 as in trec_eval
}
RUN = {
    "tie": {"a": 0.5, "b": 0.5, "c": 0.9, "d": 0.1},
    "two": {"x": 1.0, "z": 1.0, "y": 0.2},
    "missing_rel": {"n1": 0.3, "n2": 0.2},
    "all_tied": {"b": 1.0, "a": 1.0, "c": 1.0},
    "deep": {f"d{i:02d}": 100.0 - i for i in range(1, 15)},
    "graded": {"g2": 1.0, "g1": 1.0, "n": 1.0},
    "no_rel": {"m": 0.9, "o": 0.1},
    "unjudged_query": {"u": 1.0},                      # ignored: no judgements
}
# Hand-computed under the pessimistic rule.
EXPECTED = {
    "tie":         {"map": 1 / 3, "mrr": 1 / 3, "mrr_10": 1 / 3, "p_1": 0.0, "ndcg_10": 1 / L4, "rprec": 0.0},
    "two":         {"map": (1 / 2 + 2 / 3) / 2, "mrr": 0.5, "mrr_10": 0.5, "p_1": 0.0,
                    "ndcg_10": (1 / L3 + 1 / L4) / (1 / L2 + 1 / L3), "rprec": 0.5},
    "missing_rel": dict.fromkeys(METRICS, 0.0),
    "absent": dict.fromkeys(METRICS, 0.0),
    "no_rel": dict.fromkeys(METRICS, 0.0),
    "all_tied":    {"map": 1 / 3, "mrr": 1 / 3, "mrr_10": 1 / 3, "p_1": 0.0, "ndcg_10": 1 / L4, "rprec": 0.0},
    "deep":        {"map": 1 / 12, "mrr": 1 / 12, "mrr_10": 0.0, "p_1": 0.0, "ndcg_10": 0.0, "rprec": 0.0},
    "graded":      {"map": (1 / 2 + 2 / 3) / 2, "mrr": 0.5, "mrr_10": 0.5, "p_1": 0.0,
                    "ndcg_10": (1 / L3 + 2 / L4) / (2 / 1 + 1 / L3), "rprec": 0.5},
}


def test_hand_computed_values_with_pessimistic_ties() -> None:
    m = evaluate(QRELS, RUN)
    assert list(m.per_query) == list(METRICS)
    for metric in METRICS:
        assert set(m.per_query[metric]) == set(QRELS)  # every qrels query, none of the run's extras
        for qid, expected in EXPECTED.items():
            assert m.per_query[metric][qid] == pytest.approx(expected[metric], abs=1e-12), (metric, qid)
        assert m.means[metric] == pytest.approx(np.mean([EXPECTED[q][metric] for q in QRELS]))


def test_rank_order_and_rank_scores() -> None:
    assert rank_order(["b", "a", "c"], [1.0, 1.0, 1.0], [1, 0, 0]) == [1, 2, 0]
    assert tie_broken_scores(["a", "b", "c", "d"], [0.5, 0.5, 0.9, 0.1], [1, 0, 0, 0]) == \
        {"c": 4.0, "b": 3.0, "a": 2.0, "d": 1.0}


def test_result_independent_of_input_order() -> None:
    reordered = {q: dict(reversed(list(docs.items()))) for q, docs in reversed(list(RUN.items()))}
    assert evaluate(QRELS, reordered).per_query == evaluate(QRELS, RUN).per_query


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=2, max_size=8),
       st.integers(0, 2 ** 31 - 1))
def test_a_model_never_gains_from_ties(docs: list[tuple[int, int]], seed: int) -> None:
    """Any way of breaking the ties scores at least as well as the pessimistic rule."""
    qrels = {"q": {f"d{i}": label for i, (_, label) in enumerate(docs)}}
    run = {"q": {f"d{i}": float(score) for i, (score, _) in enumerate(docs)}}
    jitter = np.random.default_rng(seed).uniform(0, 1e-3, len(docs))
    broken = {"q": {f"d{i}": float(score) + j for i, ((score, _), j) in enumerate(zip(docs, jitter))}}
    pessimistic, other = evaluate(qrels, run), evaluate(qrels, broken)
    for metric in METRICS:
        assert pessimistic.means[metric] <= other.means[metric] + 1e-12


def test_arrays_match_dicts_and_rows_layout() -> None:
    qids, docs, labels, scores = [], [], [], []
    for q, judged in QRELS.items():
        for d, label in judged.items():
            if d in RUN.get(q, {}):
                qids.append(q), docs.append(d), labels.append(label), scores.append(RUN[q][d])
    from_arrays = evaluate_arrays(qids, docs, labels, scores)
    qrels = {q: {d: l for qq, d, l in zip(qids, docs, labels) if qq == q} for q in dict.fromkeys(qids)}
    assert from_arrays.per_query == evaluate(qrels, RUN).per_query
    rows = from_arrays.rows()
    assert len(rows) == len(METRICS) * len(from_arrays.qids)
    assert rows[0][1] == "map" and isinstance(rows[0][2], float)


def test_metric_subset_and_names() -> None:
    m = evaluate(QRELS, RUN, ["p_1", "map"])
    assert list(m.per_query) == ["p_1", "map"]
    assert tuple(MEASURES) == METRICS
    assert IR_MEASURES_NAMES["AP"] == "map" and IR_MEASURES_NAMES["nDCG@10"] == "ndcg_10"


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="unknown metric 'bleu'; valid: map, mrr"):
        evaluate(QRELS, RUN, ["bleu"])
    with pytest.raises(DataError, match="NaN"):
        evaluate({"q": {"a": 1}}, {"q": {"a": float("nan")}})
    with pytest.raises(DataError, match="appears twice"):
        evaluate_arrays(["q", "q"], ["a", "a"], [1, 0], [0.1, 0.2])
    with pytest.raises(DataError, match="differ in length"):
        evaluate_arrays(["q"], ["a", "b"], [1], [0.1])
    with pytest.raises(DataError, match="empty"):
        evaluate({}, RUN)
