"""Difficulty heuristics from the negative sampler's ranking (curriculum by loss weighting).

MacAvaney et al., "Training Curricula for Open Domain Answer Re-Ranking" (SIGIR 2020), Section 3.3.
A heuristic maps the initial ranking of one query (the sampler's score of each candidate,
``Candidate.score``) to a value h(d) in [0, 1], high where the unsupervised ranker puts d high:

- recip: h = 1 / rank(d) (eq. 5); among equal scores the greater doc id ranks first (OpenNIR's
         ``sorted(key=(score, doc_id), reverse=True)``), then position.
- norm:  h = (score - min) / (max - min), per-query min-max normalisation (eq. 8).
- kde:   h = CDF at score(d) of a Gaussian KDE of the query's scores, Scott's bandwidth (eq. 10);
         equal to ``scipy.stats.gaussian_kde(scores).integrate_box_1d(-inf, score)``.

Difficulty D ("easiness": weights start at D and rise to 1, see weights.py):

- pointwise (eqs. 6, 8, 10): D = h(d) for a relevant d, 1 - h(d) for a non-relevant d;
- pairwise (eqs. 7, 9, 11): D = (h(d+) - h(d-) + 1) / 2, with several negatives the hardest one
  (the minimum over negatives, as OpenNIR's pairwise trainer).

Fallbacks (so D stays in [0, 1] on every query): a candidate without a score is missing from the
ranking and ranks below every scored one (recip: rank = #scored + 1; norm and kde: evaluated at the
minimum score, so kde keeps a non-zero value, as the paper notes). Where the scores carry no order
(all equal, one scored candidate, or none scored), norm and kde give h = 0.5 to every candidate
(the KDE's limit as its bandwidth goes to 0); recip still ranks by doc id, except with no scores
at all, where it too gives 0.5.

    >>> import numpy as np
    >>> recip(np.array([3.0, 1.0, 3.0, np.nan]), ["b", "c", "a", "d"]).tolist()
    [1.0, 0.3333333333333333, 0.5, 0.25]
    >>> pointwise_difficulty(np.array([0.25, 0.25]), np.array([True, False])).tolist()
    [0.25, 0.75]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.special import ndtr

from harness.records import Query
from harness.registry import Registry

NO_ORDER = 0.5  # h where the ranking carries no information


class HeuristicFn(Protocol):
    def __call__(self, scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray: ...


HEURISTICS: Registry[HeuristicFn] = Registry("weighting.heuristic")


def _scored(scores: np.ndarray) -> np.ndarray:
    return ~np.isnan(scores)


@HEURISTICS.register("recip")
def recip(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """h = 1 / rank, rank 1 = highest score; ties by descending doc id; unscored: rank #scored + 1."""
    scores = np.asarray(scores, dtype=float)
    scored = np.flatnonzero(_scored(scores))
    if scored.size == 0:
        return np.full(scores.shape, NO_ORDER)
    # Descending (score, doc id); reverse=True keeps the input order of full ties (sort is stable).
    order = sorted(scored.tolist(), key=lambda i: (scores[i], str(doc_ids[i])), reverse=True)
    rank = np.full(scores.shape, scored.size + 1, dtype=float)
    rank[order] = np.arange(1, scored.size + 1)
    return 1.0 / rank


def _filled(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(scored values, scores with missing ones set to the minimum), or None without an order."""
    scores = np.asarray(scores, dtype=float)
    scored = scores[_scored(scores)]
    if scored.size < 2 or scored.min() == scored.max():
        return None
    return scored, np.where(_scored(scores), scores, scored.min())


@HEURISTICS.register("norm")
def norm(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """h = (score - min) / (max - min) over the query's scored candidates (unscored: 0)."""
    filled = _filled(scores)
    if filled is None:
        return np.full(np.shape(scores), NO_ORDER)
    scored, x = filled
    lo, span = scored.min(), scored.max() - scored.min()
    if not span < math.inf:
        return np.full(x.shape, NO_ORDER)
    return np.clip((x - lo) / span, 0.0, 1.0)


def kde_cdf(points: np.ndarray, data: np.ndarray) -> np.ndarray:
    """CDF at ``points`` of the Gaussian KDE of ``data`` with Scott's bandwidth:
    mean_i Phi((x - x_i) / h), h = SD(data, ddof=1) * n^(-1/5) (scipy.stats.gaussian_kde).
    NaN where no bandwidth exists (data without spread).

    >>> round(float(kde_cdf(np.array([0.0]), np.array([-1.0, 1.0]))[0]), 6)
    0.5
    """
    data = np.asarray(data, dtype=float)
    n = data.size
    bandwidth = float(np.sqrt(np.var(data, ddof=1) * n ** (-2.0 / 5.0)))
    if not 0.0 < bandwidth < math.inf:
        return np.full(np.shape(points), np.nan)
    z = (np.asarray(points, dtype=float)[:, None] - data[None, :]) / bandwidth
    return np.clip(np.sum(ndtr(z) / n, axis=1), 0.0, 1.0)


@HEURISTICS.register("kde")
def kde(scores: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """h = KDE CDF at the candidate's score (unscored: at the minimum score)."""
    filled = _filled(scores)
    if filled is None:
        return np.full(np.shape(scores), NO_ORDER)
    scored, x = filled
    values = kde_cdf(x, scored)
    # Scores too close for a bandwidth (variance underflows to 0): no usable order.
    return values if np.isfinite(values).all() else np.full(x.shape, NO_ORDER)


def pointwise_difficulty(values: np.ndarray, relevant: np.ndarray) -> np.ndarray:
    """D_point = h for relevant candidates, 1 - h for non-relevant ones (eqs. 6, 8, 10)."""
    values = np.asarray(values, dtype=float)
    return np.where(np.asarray(relevant, dtype=bool), values, 1.0 - values)


def pairwise_difficulty(pos_value: float | np.ndarray, neg_values: np.ndarray) -> np.ndarray:
    """D_pair = min over negatives of (h(d+) - h(d-) + 1) / 2 (eqs. 7, 9, 11), vectorised:
    ``pos_value`` (B,) or scalar, ``neg_values`` (B, k) or (k,). The minimum is the hardest
    negative (the one the ranker put highest).

    >>> pairwise_difficulty(1.0, np.array([0.5, 0.25])).item()
    0.75
    """
    pos = np.asarray(pos_value, dtype=float)
    neg = np.atleast_1d(np.asarray(neg_values, dtype=float))
    if neg.shape[-1] == 0:
        raise ValueError("pairwise difficulty needs at least one negative")
    return np.clip(((pos[..., None] - neg + 1.0) / 2.0).min(axis=-1), 0.0, 1.0)


def candidate_scores(query: Query) -> np.ndarray:
    """The negative sampler's score per candidate, NaN where ``Candidate.score`` is None."""
    return np.array([np.nan if c.score is None else float(c.score) for c in query.candidates],
                    dtype=float)


@dataclass(frozen=True, kw_only=True, eq=False)
class QueryDifficulty:
    """Heuristic values and difficulties of one query's candidates (by position in
    ``query.candidates``)."""

    qid: str
    values: np.ndarray
    relevant: np.ndarray

    @property
    def pointwise(self) -> np.ndarray:
        """D_point per candidate: the pointwise loss weight base."""
        return pointwise_difficulty(self.values, self.relevant)

    def pair(self, pos: int, negs: int | Sequence[int]) -> float:
        """D_pair of positive ``pos`` against negative(s) ``negs`` (the hardest if several)."""
        negs = [negs] if isinstance(negs, int | np.integer) else list(negs)
        if not self.relevant[pos] or any(self.relevant[j] for j in negs):
            raise ValueError(f"query {self.qid!r}: a pair needs a relevant candidate {pos} and "
                             f"non-relevant candidates {negs}")
        return float(pairwise_difficulty(self.values[pos], self.values[negs]))

    def hardest_pair(self, pos: int) -> float:
        """D_pair of positive ``pos`` against the query's hardest negative (0.5 without any)."""
        negs = np.flatnonzero(~self.relevant)
        return self.pair(pos, negs.tolist()) if negs.size else NO_ORDER


def query_difficulty(query: Query, heuristic: str) -> QueryDifficulty:
    """Apply the registered ``heuristic`` to one query's ranking (Candidate.score, doc_id)."""
    fn = HEURISTICS.get(heuristic)
    values = np.asarray(fn(candidate_scores(query), [c.doc_id for c in query.candidates]), float)
    relevant = np.array([c.label > 0 for c in query.candidates], dtype=bool)
    return QueryDifficulty(qid=query.qid, values=values, relevant=relevant)


def difficulties(queries: Sequence[Query], heuristic: str) -> dict[str, QueryDifficulty]:
    """``query_difficulty`` for every query, keyed by qid."""
    return {q.qid: query_difficulty(q, heuristic) for q in queries}
