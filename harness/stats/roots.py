"""A root of a scalar function in a bracket: ``scipy.optimize.brentq``, imported on first use.

``scipy.optimize`` (every optimiser, and scipy.linalg and scipy.sparse behind them) loads only in
a process that finds a root (the crossed test's interval and effective df, the power analysis's
MDE, max-t's critical value, the sequential bounds), not in every process that imports the
statistics modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["brentq"]


def brentq(f: Callable[[float], float], a: float, b: float, **options: Any) -> float:
    """The root of ``f`` in [a, b] (f(a) and f(b) of opposite signs) by ``scipy.optimize.brentq``
    with ``options`` (its xtol, rtol, maxiter)."""
    from scipy.optimize import brentq as scipy_brentq

    return float(scipy_brentq(f, a, b, **options))
