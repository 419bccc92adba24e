"""Soft targets for pointwise training: label smoothing (LS), weakly supervised LS (WSLS) and their
two-stage variants (T-LS, T-WSLS). Pure numpy.

Penha & Hauff, "Weakly Supervised Label Smoothing" (ECIR 2021), Sections 2-3. Two classes
(k = 0 non-relevant, k = 1 relevant, K = 2), ground truth y, smoothing epsilon:

- LS:   q'(k|x) = (1 - eps) delta_{k,y} + eps / K                   -> [1 - eps/2, eps/2] for y = 0
- WSLS: q'(k|x) = (1 - eps) delta_{k,y} + eps NS(k|x), NS the negative sampler's min-max-scaled
        score s in [0.01, 0.99] read as a weak relevance distribution NS(1|x) = s,
        NS(0|x) = 1 - s                                              -> [1 - eps*s, eps*s] for y = 0
        A relevant x falls back to LS ("since we have strong labeled data"). s plays the role of
        u(1) = 1/K = 0.5 in LS (the paper's Figure 1 compares the two): a negative the sampler
        scored high gets more relevant mass. A random negative (no score) has s = 0: one-hot;
        so has every negative of ``train.sampler: random`` (the trainer passes zeros,
        harness.training._signals), as the authors' current random sampler scores them (their
        code of the paper's time drew random weak labels; the paper runs no WSLS with NS_random).
        The paper prints q'(k|x) = (1 - eps) delta + eps BM25(x) under "k = 0"; the weak mass
        goes to the relevant class here, as the authors' WeaklySupervisedLabelSmoothingCrossEntropy
        computes it.
- T-LS / T-WSLS (Xu et al. 2020): the above before ``switch_step``, hard labels from then on.

Rows are [q'(0|x), q'(1|x)] and sum to 1 exactly (the label's mass is 1 minus the other's). The
label itself never changes: for LS the label's mass 1 - eps/2 exceeds 1/2 for every eps < 1; for
WSLS 1 - eps*s > 1/2 whenever eps * 0.99 < 1/2, in particular for every eps < 0.5 (the paper's
range is eps <= 0.4). eps = 0 gives the hard labels exactly.

    >>> soft_targets(np.array([1, 0, 0]), np.array([0.0, 0.5, 0.0]), method="WSLS", epsilon=0.2,
    ...              step=0, switch_step=100).tolist()
    [[0.1, 0.9], [0.9, 0.1], [1.0, 0.0]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from harness.errors import ConfigError
from harness.losses.smoothing import smoothing_method
from harness.records import Query

K = 2
WEAK_LOW, WEAK_HIGH = 0.01, 0.99  # range of the min-max-scaled sampler scores


def weak_scores(query: Query) -> np.ndarray:
    """WSLS weak supervision per candidate: the negatives' sampler scores min-max scaled over the
    query's scored negatives into [0.01, 0.99] (all equal -> 0.01); 0 for a negative without a score
    (random sampler) and for positives (which use LS).

    >>> from harness.records import Candidate
    >>> q = Query(qid="q", context=("u",), candidates=(Candidate("p", "r", 1),
    ...     Candidate("a", "r", 0, 2.0), Candidate("b", "r", 0, 4.0), Candidate("c", "r", 0)))
    >>> weak_scores(q).tolist()
    [0.0, 0.01, 0.99, 0.0]
    """
    return scale_weak_scores(
        [None if c.label > 0 else c.score for c in query.candidates])


def scale_weak_scores(scores: Sequence[float | None]) -> np.ndarray:
    """Min-max scale the non-None scores into [0.01, 0.99]; None -> 0; all equal -> 0.01."""
    out = np.zeros(len(scores))
    present = [(i, float(s)) for i, s in enumerate(scores) if s is not None]
    if not present:
        return out
    idx = [i for i, _ in present]
    vals = np.array([v for _, v in present])
    lo, hi = vals.min(), vals.max()
    scaled = np.full(vals.shape, WEAK_LOW) if hi == lo else \
        WEAK_LOW + (WEAK_HIGH - WEAK_LOW) * (vals - lo) / (hi - lo)
    out[idx] = np.clip(scaled, WEAK_LOW, WEAK_HIGH)
    return out


def soft_targets(labels: ArrayLike, weak_scores: ArrayLike | None, *, method: str, epsilon: float,
                 step: int, switch_step: float) -> np.ndarray:
    """Targets (B, 2) = [q'(0|x), q'(1|x)] for binary ``labels`` (label > 0 is relevant).

    ``method``: none, LS, T-LS, WSLS or T-WSLS (or an alias, see harness.losses.smoothing); ``weak_scores`` (B,): scaled sampler scores in
    [0, 1] (see the function ``weak_scores``), needed by the WS variants and ignored by the others;
    ``step``: the optimizer step; ``switch_step``: where T- variants turn to hard labels.
    """
    kind = smoothing_method(method)
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"smoothing.epsilon must be in [0, 1), got {epsilon!r}", key="smoothing.epsilon")
    if math.isnan(switch_step):
        raise ConfigError(f"smoothing.switch must be a step count, got {switch_step!r}", key="smoothing.switch")
    relevant = np.asarray(labels) > 0
    if relevant.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {relevant.shape}")
    hard = not kind.smooths or (kind.two_stage and step >= switch_step)
    eps = 0.0 if hard else epsilon
    other = np.full(relevant.shape, eps / K)  # mass on the class that is not the label
    if kind.needs_weak_scores and not hard:
        if weak_scores is None:
            raise ValueError(f"smoothing.method {method} needs the weak (sampler) scores")
        weak = np.asarray(weak_scores, dtype=float)
        if weak.shape != relevant.shape or not ((weak >= 0.0) & (weak <= 1.0)).all():
            raise ValueError("weak_scores must be one value in [0, 1] per label")
        other = np.where(relevant, other, eps * weak)
    own = 1.0 - other
    return np.stack([np.where(relevant, other, own), np.where(relevant, own, other)], axis=1)
