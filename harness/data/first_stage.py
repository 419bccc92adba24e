"""The first-stage reference rankings of a split's candidates: BM25 and a uniformly random order.

One implementation for ``harness data stats`` and the study's reference line
(``harness.training.baselines``); both rank the candidates a trained ranker is evaluated on.

- BM25: the candidates ranked by ``Candidate.score`` (the embedded set: BM25 of the context; TREC
  files: the run's score) under the pessimistic tie rule of ``harness.metrics.measures`` (a
  positive tied with a negative ranks below it); its MAP is ``metrics.evaluate``'s.
- random: the exact expectation of AP under a uniformly random order of each query's N
  candidates, R of them relevant (no seed, no sampling noise)::

      E[AP] = (H_N + (R - 1) (N - H_N) / (N - 1)) / N,   H_N = 1 + 1/2 + ... + 1/N

  since a relevant document lands at rank i with probability 1/N and then has, in expectation,
  (i - 1)(R - 1)/(N - 1) relevant documents above it. One positive among 10: H_10 / 10 = 0.2929.
  R = 0 gives 0 (as trec_eval's AP); N = 1 gives 1.
- where the positive ranks under BM25: per query, the rank (1 = top) of its best-ranked positive
  under the same tie rule; its distribution, mean and the share of queries where it ranks last.

>>> from harness.records import Candidate, Query
>>> q = Query(qid="q", context=("hi",), candidates=(Candidate("p", "a", 1, 1.0),
...           Candidate("n1", "b", 0, 2.0), Candidate("n2", "c", 0, 1.0)))
>>> positive_ranks([q])  # n1 scores higher; the tie with n2 goes against the positive
[3]
>>> round(expected_random_ap(3, 1), 4)  # (1 + 1/2 + 1/3) / 3
0.6111
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import DataError
from harness.records import Query, qrels_of


def has_scores(queries: Sequence[Query]) -> bool:
    """Whether every candidate of ``queries`` carries a first-stage score."""
    return all(c.score is not None for q in queries for c in q.candidates)


def bm25_scores(queries: Sequence[Query]) -> list[np.ndarray]:
    """The first-stage score of every candidate, per query."""
    out = []
    for q in queries:
        if any(c.score is None for c in q.candidates):
            raise DataError(f"query {q.qid} has candidates without a first-stage score (the "
                            f"source has none, as MSDialog/MANtIS TSV files)")
        out.append(np.array([float(c.score) for c in q.candidates]))  # type: ignore[arg-type]
    return out


def _map(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> float:
    from harness.metrics.measures import evaluate

    run = {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
           for q, sc in zip(queries, scores, strict=True)}
    return evaluate(qrels_of(queries), run, ["map"]).means["map"]


def bm25_map(queries: Sequence[Query]) -> float:
    """MAP of the first-stage ranking (pessimistic ties); ``queries`` must not be empty."""
    return _map(queries, bm25_scores(queries))


def expected_random_ap(n: int, relevant: int) -> float:
    """E[AP] of a uniformly random order of ``n`` candidates, ``relevant`` of them relevant."""
    if not 0 <= relevant <= n:
        raise ValueError(f"relevant must be in [0, {n}], got {relevant}")
    if relevant == 0:
        return 0.0
    if n == 1:
        return 1.0
    h = float(np.sum(1.0 / np.arange(1, n + 1)))
    return (h + (relevant - 1) * (n - h) / (n - 1)) / n


def random_map(queries: Sequence[Query]) -> float:
    """The expected MAP of a uniformly random order (module docstring); 0 for no queries."""
    if not queries:
        return 0.0
    return float(np.mean([expected_random_ap(len(q.candidates), len(q.positives)) for q in queries]))


def positive_ranks(queries: Sequence[Query]) -> list[int]:
    """Per query with a positive, the first-stage rank (1 = top) of its best-ranked positive."""
    from harness.metrics.measures import rank_order

    out = []
    for q, scores in zip(queries, bm25_scores(queries), strict=True):
        labels = [int(c.label) for c in q.candidates]
        order = rank_order([c.doc_id for c in q.candidates], scores.tolist(), labels)
        rank = next((r for r, i in enumerate(order, start=1) if labels[i] > 0), None)
        if rank is not None:
            out.append(rank)
    return out


def reference_maps(queries: Sequence[Query]) -> dict[str, float]:
    """MAP of a random order (its expectation: no seed) and, where every candidate has a
    first-stage score, of the first-stage ranking, on ``queries``."""
    out = {"random": random_map(queries)}
    if queries and has_scores(queries):
        out["bm25"] = bm25_map(queries)
    return out


@dataclass(frozen=True, kw_only=True)
class FirstStage:
    """The first-stage statistics of one split (``bm25_map`` and the ranks: None without scores).

    ``rank_counts[i]``: queries whose positive ranks i + 1; ``last``: queries where it ranks last
    among its own candidates."""

    random_map: float
    bm25_map: float | None
    rank_counts: tuple[int, ...] | None
    last: int | None

    @property
    def ranked(self) -> int:
        return sum(self.rank_counts or ())

    @property
    def mean_rank(self) -> float | None:
        if not self.rank_counts or not self.ranked:
            return None
        return sum((i + 1) * n for i, n in enumerate(self.rank_counts)) / self.ranked

    def share(self, rank: int) -> float | None:
        """The share of the ranked queries whose positive ranks ``rank`` (1-based)."""
        if not self.rank_counts or not self.ranked:
            return None
        return (self.rank_counts[rank - 1] if rank <= len(self.rank_counts) else 0) / self.ranked

    @property
    def last_share(self) -> float | None:
        return None if self.last is None or not self.ranked else self.last / self.ranked


def first_stage(queries: Sequence[Query]) -> FirstStage:
    """BM25 MAP, random MAP and the positive's BM25 rank distribution of ``queries``."""
    if not queries or not has_scores(queries):
        return FirstStage(random_map=random_map(queries), bm25_map=None, rank_counts=None, last=None)
    ranks = positive_ranks(queries)
    counts = Counter(ranks)
    with_positive = [q for q in queries if q.positives]
    last = sum(rank == len(q.candidates) for q, rank in zip(with_positive, ranks, strict=True))
    return FirstStage(random_map=random_map(queries), bm25_map=bm25_map(queries),
                      rank_counts=tuple(counts.get(r, 0) for r in range(1, max(ranks, default=0) + 1)),
                      last=last)
