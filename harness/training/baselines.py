"""Reference orderings of the same test queries a trained ranker is evaluated on: the negative
sampler's BM25 scores and a seeded random order."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.data.records import Query
from harness.errors import DataError


def bm25_scores(queries: Sequence[Query]) -> list[np.ndarray]:
    out = []
    for q in queries:
        if any(c.score is None for c in q.candidates):
            raise DataError(f"query {q.qid} has candidates without a BM25 score (data.sampler=random?)")
        out.append(np.array([float(c.score) for c in q.candidates]))  # type: ignore[arg-type]
    return out


def random_scores(queries: Sequence[Query], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng([seed, 99])
    return [rng.random(len(q.candidates)) for q in queries]


def reference_maps(queries: Sequence[Query], seed: int) -> dict[str, float]:
    """Test MAP of a random order and, where every candidate has a BM25 score, of BM25."""
    from harness.training.evaluate import metrics_of

    out = {"random": metrics_of(queries, random_scores(queries, seed)).means["map"]}
    if all(c.score is not None for q in queries for c in q.candidates):
        out["bm25"] = metrics_of(queries, bm25_scores(queries)).means["map"]
    return out
