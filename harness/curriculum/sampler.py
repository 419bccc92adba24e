"""The pacing-aware batch sampler: uniform draws from the easiest available(step) instances.

Penha & Hauff (ECIR 2020), Section 3: "The neural ranking model samples uniformly from the initial
f_pace(s) * |D_train| instances sorted by f_score, while the rest of the dataset is not available."
With ``baseline`` pacing f = 1, so this sampler *is* the no-curriculum training (uniform over every
instance); the trainer always uses it, which keeps baseline and curriculum runs on one code path.

Batches are stateless per step: step k draws with ``np.random.default_rng([seed, k])``, so a run
resumed at step k sees exactly the batches of an uninterrupted one, with no sampler state to save.

    >>> order = order_by_score(np.array([0.9, 0.1, 0.5, 0.1]), descending=False)
    >>> order.tolist()                      # easy (low) first; the tie keeps index order
    [1, 3, 2, 0]
    >>> s = PacedSampler(order=order, pacing="step", delta=0.5, T=100, n=1, batch_size=2, seed=3)
    >>> sorted(s.batch(0).tolist())         # step 0: only the easiest half is available
    [1, 3]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.curriculum.pacing import PACING, PacingFn, available
from harness.errors import ConfigError


def order_by_score(values: np.ndarray, *, descending: bool) -> np.ndarray:
    """Indices of ``values`` sorted easy first: ascending (or descending) by value, ties broken by
    the original index (a stable sort in both directions), so the order is fully deterministic.

    >>> order_by_score(np.array([2.0, 3.0, 2.0, 1.0]), descending=True).tolist()
    [1, 0, 2, 3]
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 1:
        raise ValueError(f"values must be one-dimensional, got shape {values.shape}")
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise ValueError(f"curriculum scores must be finite; instance {bad} has {values[bad]!r}")
    key = -values if descending else values
    return np.argsort(key, kind="stable")


@dataclass(frozen=True, kw_only=True, eq=False)
class PacedSampler:
    """Draws batch(step) uniformly without replacement from ``order[:available(step)]``.

    ``order``: instance indices sorted by difficulty, easiest first (see ``order_by_score``).
    ``pacing``, ``delta``, ``T`` (steps), ``n``: the pacing function and its parameters.
    When fewer than ``batch_size`` instances exist, a batch holds all of them (in random order).
    """

    order: np.ndarray
    pacing: str
    delta: float
    T: float
    n: float
    batch_size: int
    seed: int
    _fn: PacingFn = field(init=False, repr=False)

    def __post_init__(self) -> None:
        order = np.asarray(self.order)
        if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer):
            raise ValueError(f"order must be a 1-d integer array, got {order.dtype} {order.shape}")
        if order.size == 0:
            raise ValueError("order is empty: no training instances to sample from")
        if self.batch_size < 1:
            raise ConfigError(f"train.batch_size must be >= 1, got {self.batch_size!r}", key="train.batch_size")
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "_fn", PACING.get(self.pacing))
        self._fn(0, delta=self.delta, T=self.T, n=self.n)  # validates delta, T, n up front

    @property
    def n_instances(self) -> int:
        return int(self.order.size)

    def fraction(self, step: int) -> float:
        """f_pace(step): the fraction of the sorted set available at this step."""
        return self._fn(step, delta=self.delta, T=self.T, n=self.n)

    def available(self, step: int) -> int:
        """How many of the easiest instances this step may sample from."""
        return available(step, self.n_instances, self.batch_size, self._fn,
                         delta=self.delta, T=self.T, n=self.n)

    def batch(self, step: int) -> np.ndarray:
        """The instance indices of the batch at optimizer step ``step`` (0-based)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        k = self.available(step)
        rng = np.random.default_rng([self.seed, step])
        size = min(self.batch_size, k)
        picks = rng.choice(k, size=size, replace=False)
        return self.order[picks]
