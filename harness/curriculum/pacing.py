"""Pacing functions: the fraction of the difficulty-sorted training set a step may sample from.

Penha & Hauff, "Curriculum Learning Strategies for IR" (ECIR 2020), Section 3 and Table 3. A
pacing function f(s) starts at f(0) = delta, is non-decreasing, and reaches f(s) = 1 for s >= T;
the sampler draws uniformly from the first f(s) * |D_train| instances sorted easy-first.

Every function has the signature ``f(s, *, delta, T, n) -> float`` (``n`` is only read by
``root_n``) and is clamped so that f(s) = 1.0 *exactly* once s >= T: floating point must never keep
the hardest instance out of the last part of training. Values lie in [delta, 1] for every s.

Figure 2 of the paper (delta = 0.33, T = 1000)::

    >>> round(PACING.get("root_n")(125, delta=0.33, T=1000, n=10), 3)   # root_10: ~80% early
    0.812
    >>> round(PACING.get("geom_progression")(800, delta=0.33, T=1000, n=1), 3)  # ~80% late
    0.801
"""

from __future__ import annotations

import math
import re
from typing import Protocol

from harness.errors import ConfigError, shown
from harness.registry import Registry


class PacingFn(Protocol):
    def __call__(self, s: float, *, delta: float, T: float, n: float) -> float: ...


PACING: Registry[PacingFn] = Registry("curriculum.pacing")


def _check(s: float, delta: float, T: float) -> None:
    if not 0.0 < delta <= 1.0:
        raise ConfigError(f"curriculum.delta must be in (0, 1], got {delta!r}", key="curriculum.delta")
    if not T > 0:
        raise ConfigError(f"curriculum.T must be > 0 steps, got {T!r}", key="curriculum.T")
    if not s >= 0:
        raise ValueError(f"step must be >= 0, got {s!r}")


def _clamp(value: float, delta: float) -> float:
    # Clamping to [delta, 1] keeps f non-decreasing even where delta**n underflows.
    return min(1.0, max(delta, value))


@PACING.register("baseline")
def baseline(s: float, *, delta: float, T: float, n: float) -> float:
    """No curriculum: f(s) = 1, every instance is available from the first step."""
    _check(s, delta, T)
    return 1.0


@PACING.register("step")
def step(s: float, *, delta: float, T: float, n: float) -> float:
    """Three fixed groups (Table 3): delta for s <= 0.33T, 0.66 for s <= 0.66T, then 1.

    We follow the paper: the first group is ``delta``. The authors' code ignores delta and always
    starts at 0.33 (identical for the paper's delta = 0.33). The middle group is max(delta, 0.66)
    so the function stays non-decreasing for delta > 0.66.

    >>> [step(s, delta=0.2, T=100, n=1) for s in (0, 33, 34, 66, 67, 100)]
    [0.2, 0.2, 0.66, 0.66, 1.0, 1.0]
    """
    _check(s, delta, T)
    if s >= T:
        return 1.0
    if s <= T * 0.33:
        return delta
    if s <= T * 0.66:
        return max(delta, 0.66)
    return 1.0


def _check_n(n: float, source: str = "") -> None:
    """``curriculum.n`` of root_n: finite and >= 1 (``source``: the pacing name it came from)."""
    if not 1 <= n < math.inf:
        raise ConfigError(f"curriculum.n must be >= 1, finite, got {n!r}{source}", key="curriculum.n")


def _root(s: float, delta: float, T: float, n: float) -> float:
    _check_n(n)
    if s <= 0:
        return delta
    if s >= T:
        return 1.0
    dn = delta**n
    return _clamp((s * (1.0 - dn) / T + dn) ** (1.0 / n), delta)


@PACING.register("linear")
def linear(s: float, *, delta: float, T: float, n: float) -> float:
    """Platanios et al. (2019): f(s) = min(1, s (1 - delta) / T + delta) = root(s, n=1); ``n`` is
    ignored.

    >>> linear(500, delta=0.5, T=1000, n=7)
    0.75
    """
    _check(s, delta, T)
    return _root(s, delta, T, 1.0)


@PACING.register("root_n")
def root_n(s: float, *, delta: float, T: float, n: float) -> float:
    """f(s) = min(1, (s (1 - delta^n) / T + delta^n)^(1/n)) (Table 3, "root"); larger n adds the
    hard instances earlier (root_10: ~80% of the data by step 125 of T = 1000).

    >>> round(root_n(500, delta=0.33, T=1000, n=2), 4)
    0.7446
    """
    _check(s, delta, T)
    return _root(s, delta, T, n)


@PACING.register("geom_progression")
def geom_progression(s: float, *, delta: float, T: float, n: float) -> float:
    """f(s) = min(1, 2^(s (log2 1 - log2 delta) / T + log2 delta)) = delta^(1 - s/T): gives the
    easy instances more time (~80% available only near step 800 of T = 1000); ``n`` is ignored.

    >>> geom_progression(500, delta=0.25, T=1000, n=1)
    0.5
    """
    _check(s, delta, T)
    if s <= 0:
        return delta
    if s >= T:
        return 1.0
    return _clamp(2.0 ** (math.log2(delta) * (1.0 - s / T)), delta)


def available(s: float, n_instances: int, batch_size: int, fn: PacingFn | str, *,
              delta: float, T: float, n: float) -> int:
    """Number of sorted instances a step may sample from: floor(f(s) * N), never fewer than one
    batch (min(N, batch_size)) and exactly N once s >= T.

    >>> available(0, 1000, 16, "linear", delta=0.33, T=100, n=1)
    330
    >>> available(0, 1000, 16, "linear", delta=0.001, T=100, n=1), available(100, 7, 16, "step",
    ...     delta=0.33, T=100, n=1)
    (16, 7)
    """
    if n_instances < 0 or batch_size < 1:
        raise ValueError(f"need n_instances >= 0 and batch_size >= 1, got {n_instances}, {batch_size}")
    pace = PACING.get(fn) if isinstance(fn, str) else fn
    fraction = pace(s, delta=delta, T=T, n=n)
    count = n_instances if fraction >= 1.0 else min(n_instances, math.floor(fraction * n_instances))
    return max(count, min(n_instances, batch_size))


_ROOT_NAME = re.compile(r"root_(\d+(?:\.\d+)?)")


def parse_pacing_name(name: str) -> tuple[str, float | None]:
    """Split a CLI pacing name into (registered name, n or None): ``root_10`` is root_n with n=10.

    >>> parse_pacing_name("root_10"), parse_pacing_name("geom_progression")
    (('root_n', 10.0), ('geom_progression', None))
    """
    if name in PACING:
        return name, None
    match = _ROOT_NAME.fullmatch(name)
    if match and "root_n" in PACING:
        n = float(match.group(1))
        _check_n(n, f" (from {shown(name)})")
        return "root_n", n
    raise ConfigError(PACING.unknown_message(name) + " (root_N, e.g. root_10, sets n)", key="curriculum.pacing")
