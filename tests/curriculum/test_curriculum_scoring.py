"""Scoring functions (Penha & Hauff 2020, Table 2): hand-computed values, one finite value per query
for every registered function, sort directions and the errors for missing resources."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from harness.curriculum.sampler import order_by_score
from harness.curriculum.scoring import (
    DESCENDING,
    SCORING,
    ScoringContext,
    TeacherScores,
    score_queries,
    scoring_function,
    semantic_match,
    sorts_descending,
)
from harness.errors import ConfigError, DataError
from harness.records import Candidate, Query, Splits

Q1 = Query("q1", ("how do i reset", "it says error five"),
           (Candidate("a", "restart it", 1, 3.0), Candidate("b", "buy a new one today", 0, 1.0),
            Candidate("c", "no", 0, 2.0)))
Q2 = Query("q2", ("hello",), (Candidate("d", "hi there", 1, 5.0), Candidate("e", "bye", 0, 5.0)))


def fake_embed() -> Callable[[str], np.ndarray]:
    """Deterministic word vectors without a model: one fixed random vector per distinct word."""
    rng = np.random.default_rng(11)
    table: dict[str, np.ndarray] = {}

    def embed(text: str) -> np.ndarray:
        rows = []
        for w in text.split():
            if w not in table:
                table[w] = rng.normal(size=8)
            rows.append(table[w])
        return np.array(rows).reshape(len(rows), 8)

    return embed


def teacher_for(queries: list[Query], seed: int = 3) -> TeacherScores:
    rng = np.random.default_rng(seed)
    prob = {q.qid: {c.doc_id: float(rng.random()) for c in q.candidates} for q in queries}
    loss = {q.qid: {c.doc_id: float(rng.random() * 2) for c in q.candidates} for q in queries}
    return TeacherScores(prob=prob, loss=loss)


def full_ctx(queries: list[Query], seed: int = 0) -> ScoringContext:
    return ScoringContext(rng=np.random.default_rng(seed), embed=fake_embed(),
                          teacher=teacher_for(queries))


def test_registered_names_are_the_papers() -> None:
    assert set(SCORING.names()) == {"random", "turns", "uwords", "rwords", "sigma_sm", "sigma_bm25",
                                    "bert_pred", "bert_loss"}


@pytest.mark.parametrize("name", SCORING.names())
def test_one_finite_value_per_query(name: str, toy: Splits) -> None:
    queries = list(toy.train[:40]) + [Q1, Q2]
    values = score_queries(queries, name, full_ctx(queries))
    assert values.shape == (len(queries),) and np.isfinite(values).all()
    assert np.array_equal(values, score_queries(queries, name, full_ctx(queries)))  # seeded


@pytest.mark.parametrize("name", SCORING.names())
def test_every_function_has_a_sort_direction(name: str) -> None:
    assert DESCENDING[name] == (name == "bert_pred")
    assert sorts_descending(name) is DESCENDING[name]
    assert sorts_descending(name, override=not DESCENDING[name]) is not DESCENDING[name]


def test_sorts_descending_of_an_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ConfigError, match="valid: bert_loss, bert_pred"):
        sorts_descending("bm25_ap")


def test_text_statistics_hand_computed() -> None:
    ctx = ScoringContext(rng=np.random.default_rng(0))
    assert SCORING.get("turns")([Q1, Q2], ctx).tolist() == [2.0, 1.0]
    assert SCORING.get("uwords")([Q1, Q2], ctx).tolist() == [(4 + 4) / 2, 1.0]
    assert SCORING.get("rwords")([Q1, Q2], ctx).tolist() == [(2 + 5 + 1) / 3, (2 + 1) / 2]


def test_sigma_bm25_is_the_population_sd_of_the_sampler_scores() -> None:
    values = SCORING.get("sigma_bm25")([Q1, Q2], ScoringContext(rng=np.random.default_rng(0)))
    assert values[0] == pytest.approx(math.sqrt(((3 - 2) ** 2 + (1 - 2) ** 2 + 0) / 3))
    assert values[1] == 0.0  # homogeneous list: easiest


def test_sigma_bm25_without_scores_names_the_query() -> None:
    q = Query("qx", ("u",), (Candidate("p", "r", 1), Candidate("n", "s", 0, 1.0)))
    with pytest.raises(DataError, match="qx"):
        SCORING.get("sigma_bm25")([q], ScoringContext(rng=np.random.default_rng(0)))


def test_semantic_match_is_the_average_pairwise_cosine() -> None:
    u = np.array([[1.0, 0.0], [0.0, 1.0]])
    r = np.array([[1.0, 1.0]])
    assert semantic_match(u, r) == pytest.approx(math.sqrt(0.5))
    assert semantic_match(u, np.zeros((0, 2))) == 0.0
    assert semantic_match(np.zeros((1, 2)), r) == 0.0


def test_sigma_sm_hand_computed_on_the_last_k_context_words_and_first_k_response_words() -> None:
    vec = {"a": [1.0, 0.0], "b": [0.0, 1.0], "c": [1.0, 1.0]}
    seen: list[str] = []

    def embed(text: str) -> np.ndarray:
        seen.append(text)
        return np.array([vec[w] for w in text.split()]).reshape(-1, 2)

    q = Query("q", ("a b", "c"), (Candidate("x", "a", 1), Candidate("y", "c b a", 0)))
    ctx = ScoringContext(rng=np.random.default_rng(0), embed=embed, sm_words=2)
    (value,) = SCORING.get("sigma_sm")([q], ctx)
    # U = the last 2 words "b c" (the authors' code keeps the end of the context); r = its first 2.
    # SM(U, "a") = (cos(b, a) + cos(c, a)) / 2 = (0 + r) / 2; SM(U, "c b") = (r + 1 + 1 + r) / 4, r = 1/sqrt2
    r = 1 / math.sqrt(2)
    assert value == pytest.approx(np.std([r / 2, (2 * r + 2) / 4]))
    assert seen == ["b c", "a", "c b"]


def test_bert_pred_margin_sorts_confident_contexts_first() -> None:
    teacher = TeacherScores(prob={"q1": {"a": 0.9, "b": 0.1, "c": 0.3}, "q2": {"d": 0.4, "e": 0.6}},
                            loss={"q1": {"a": 0.1, "b": 0.2, "c": 0.6}, "q2": {"d": 1.0, "e": 2.0}})
    ctx = ScoringContext(rng=np.random.default_rng(0), teacher=teacher)
    pred = SCORING.get("bert_pred")([Q1, Q2], ctx)
    assert pred.tolist() == pytest.approx([0.9 - 0.2, 0.4 - 0.6])
    assert order_by_score(pred, descending=sorts_descending("bert_pred")).tolist() == [0, 1]
    loss = SCORING.get("bert_loss")([Q1, Q2], ctx)
    assert loss.tolist() == pytest.approx([0.3, 1.5])
    assert order_by_score(loss, descending=sorts_descending("bert_loss")).tolist() == [0, 1]


@pytest.mark.parametrize("name,resource", [("sigma_sm", "embed"), ("bert_pred", "teacher"),
                                           ("bert_loss", "teacher")])
def test_missing_resource_is_named(name: str, resource: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}.*{resource}"):
        SCORING.get(name)([Q1], ScoringContext(rng=np.random.default_rng(0)))


def test_teacher_without_a_candidate_names_it() -> None:
    teacher = TeacherScores(prob={"q1": {"a": 0.9}}, loss={"q1": {"a": 0.1}})
    with pytest.raises(DataError, match="'b'.*q1"):
        SCORING.get("bert_pred")([Q1], ScoringContext(rng=np.random.default_rng(0), teacher=teacher))
    with pytest.raises(DataError, match="q2"):
        SCORING.get("bert_loss")([Q2], ScoringContext(rng=np.random.default_rng(0), teacher=teacher))


def test_random_is_a_seeded_permutation() -> None:
    qs = [Q1] * 50
    a = SCORING.get("random")(qs, ScoringContext(rng=np.random.default_rng(1)))
    b = SCORING.get("random")(qs, ScoringContext(rng=np.random.default_rng(1)))
    c = SCORING.get("random")(qs, ScoringContext(rng=np.random.default_rng(2)))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert sorted(order_by_score(a, descending=False).tolist()) == list(range(50))


def test_a_duplicate_scoring_name_is_refused_and_the_table_kept() -> None:
    with pytest.raises(ValueError, match="already registered"):
        scoring_function("bert_pred", descending=False)(lambda queries, ctx: np.zeros(len(queries)))
    assert DESCENDING["bert_pred"] is True
