"""The iteration-informed loss weight of curriculum by loss weighting.

MacAvaney et al. (SIGIR 2020), eq. 3: with difficulty (easiness) D(t) in [0, 1] of training sample
t and the 0-based iteration i (here: the optimizer step),

    W(t, i) = D(t) + (i / m) (1 - D(t))   for i < m
    W(t, i) = 1                            for i >= m

so easy samples start near full weight, hard ones near 0, and every weight reaches 1 at the end of
the curriculum m (in optimizer steps). m = 0: W = 1 always (unweighted training); m = inf: W = D
forever. The anti-curriculum (Section 4.5) uses 1 - D in place of D. Eq. 4: loss = W(t, i) L(t).

The paper's i counts training iterations of 32 batches (Section 4.1), so W is constant within an
iteration. With ``iteration`` = L optimizer steps, step s belongs to iteration floor(s / L), and the
ramp is evaluated at that iteration's first step, i = L floor(s / L); W is 1 from step m on. With
m = k L this is exactly the paper's W at iteration floor(s / L) with end of curriculum k iterations.
``iteration`` = 1 ramps per step.

    >>> curriculum_weight(np.array([0.5, 1.0]), 50, m=100).tolist()
    [0.75, 1.0]
    >>> curriculum_weight(0.2, 0, m=100, anti=True).item(), curriculum_weight(0.2, 100, m=100).item()
    (0.8, 1.0)
    >>> curriculum_weight(np.array([0.5, 0.5]), np.array([31, 32]), m=64, iteration=32).tolist()
    [0.5, 0.75]
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from harness.errors import ConfigError


def curriculum_weight(difficulty: ArrayLike, step: ArrayLike, *, m: float,
                      anti: bool = False, iteration: int = 1) -> np.ndarray:
    """W(t, i) for arrays (broadcast) of difficulties D(t) and steps; see the module docstring."""
    d = np.asarray(difficulty, dtype=float)
    i = np.asarray(step, dtype=float)
    if math.isnan(m) or m < 0:
        raise ConfigError(f"weighting.m must be >= 0 steps or inf, got {m!r}")
    if iteration < 1:
        raise ConfigError(f"weighting.iteration must be a step count >= 1, got {iteration!r}")
    if d.size and not ((d >= 0.0) & (d <= 1.0)).all():
        raise ValueError("difficulty must lie in [0, 1]")
    if i.size and not (i >= 0).all():
        raise ValueError("step must be >= 0")
    if anti:
        d = 1.0 - d
    start = np.floor(i / iteration) * iteration  # first step of the current iteration
    progress = np.zeros_like(i) if math.isinf(m) else start / m if m > 0 else np.ones_like(i)
    # step >= m -> exactly 1.0 (not D + 1 * (1 - D), which may round below 1)
    return np.where(i >= m, 1.0, np.minimum(1.0, d + progress * (1.0 - d)))
