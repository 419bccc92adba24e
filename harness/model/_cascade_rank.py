"""Cascade ranking of one query's candidates from its exits' scores (Soldaini & Moschitti 2020,
Sec. 4.3.2). Pure numpy: used by live cascade inference (``CascadeRanker.cascade``) and by the
offline alpha sweep alike, so both take the same decisions.

Selection. Exit i scores the k_{i-1} candidates still in the cascade and drops the
d_i = plan.drops(i, k_{i-1}) lowest-scored. Ties are broken by candidate position (the earlier
candidate ranks higher), never by label, so the decision is deterministic and label-blind.

Final ranking. Survivors of the last exit by its score, then the candidates dropped at the
second-to-last exit by that exit's score, ..., then those dropped at the first exit by the first
exit's score. ``cascade_rank`` returns a score vector that realises this order: tier t (candidates
whose last exit was t) gets ``offset_t + dense_rank`` of its own exit scores, offsets stacking the
tiers, so ties within a tier stay ties and the metrics' tie rule applies to them as to any run.
With alpha = 0 everything is one tier: the order (and ties) of the final exit's scores exactly.

>>> from harness.model.cascade_cost import CascadePlan
>>> plan = CascadePlan.build(num_layers=2, exits=(1, 2), alpha=(0.5,))
>>> out = cascade_rank(np.array([[0.9, 0.1, 0.5, 0.2], [0.0, 9.0, 1.0, 9.0]]), plan)
>>> out.scores.tolist(), out.exit_reached.tolist()
([3.0, 1.0, 4.0, 2.0], [1, 0, 1, 0])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.errors import DataError
from harness.model.cascade_cost import CascadePlan


def keep_top(scores: np.ndarray, keep: int) -> np.ndarray:
    """Positions of the ``keep`` highest ``scores`` (ties: earlier position first), ascending.

    >>> keep_top(np.array([0.2, 0.5, 0.2, 0.9]), 3).tolist()
    [0, 1, 3]
    """
    scores = np.asarray(scores, dtype=np.float64)
    if not np.all(np.isfinite(scores)):
        raise DataError("cascade: an exit produced a non-finite score for a candidate it must rank")
    order = np.lexsort((np.arange(len(scores)), -scores))
    return np.sort(order[:keep])


@dataclass(frozen=True)
class CascadeOutcome:
    """One query through the cascade: ``scores`` (n,) realise the final ranking; ``exit_reached``
    (n,) is the 0-based index of the last exit that scored each candidate; ``entering`` the
    candidates scored by each exit."""

    scores: np.ndarray
    exit_reached: np.ndarray
    entering: tuple[int, ...]


def cascade_rank(exit_scores: np.ndarray, plan: CascadePlan) -> CascadeOutcome:
    """Run the drop rule over an (E, n) matrix of exit scores (row i = exit i; entries of
    candidates that never reach exit i are ignored, e.g. NaN from live inference)."""
    matrix = np.asarray(exit_scores, dtype=np.float64)
    n_exits = len(plan.exits)
    if matrix.ndim != 2 or matrix.shape[0] != n_exits:
        raise DataError(f"cascade: expected exit scores of shape ({n_exits}, candidates) for "
                        f"cascade.exits={list(plan.exits)}, got {matrix.shape}")
    n = matrix.shape[1]
    if n == 0:
        return CascadeOutcome(np.zeros(0), np.zeros(0, dtype=np.int64), tuple(0 for _ in plan.exits))
    active = np.arange(n)
    reached = np.zeros(n, dtype=np.int64)
    entering = []
    for i in range(n_exits):
        reached[active] = i
        entering.append(len(active))
        d = plan.drops(i, len(active))
        if d:
            active = active[keep_top(matrix[i, active], len(active) - d)]
        elif not np.all(np.isfinite(matrix[i, active])):
            raise DataError("cascade: an exit produced a non-finite score for a candidate it must rank")
    scores = np.zeros(n, dtype=np.float64)
    offset = 0.0
    for i in range(n_exits):
        members = np.flatnonzero(reached == i)
        if len(members) == 0:
            continue
        _, dense = np.unique(matrix[i, members], return_inverse=True)
        scores[members] = offset + dense + 1.0
        offset += float(dense.max()) + 1.0
    return CascadeOutcome(scores, reached, tuple(entering))
