"""Roots of scalar functions in a bracket.

``newton`` and ``secant`` solve f(x) = 0 for an f that is monotone on [lo, hi] and changes sign
there (``rising``: f(lo) < 0 < f(hi), else the reverse; the caller knows it, so the ends are not
evaluated): the functions of a table and of the power figures (the crossed test's
interval and equivalent df, the MDE). They keep the bracket [lo, hi] around the root: after each
evaluation the end whose value has the sign of f(x) moves to x. The next point is a Newton step
x - f(x) / f'(x) where the slope is known, else the secant through the last two points (the
second point a short probe from the first, towards the root); a step
that would leave the bracket, or one from a point where |f| is not below half its value two points
before, gives way to the bracket's midpoint. So |f| at least halves every other step or the
bracket halves, while near a simple root the steps converge quadratically (Newton) or
superlinearly (secant). They stop when a step
moves x by less than ``xtol + rtol |x|``, or the bracket is that narrow. ``start`` (in the
bracket, its ends included) is the first point; without it, the bracket's midpoint.

``brentq`` (``scipy.optimize.brentq``, imported on first use) stays for max-t's critical value and
the sequential bounds, where the functions are integrals without a cheap slope; ``scipy.optimize``
(every optimiser, and scipy.linalg and scipy.sparse behind them) then loads only in a process
that seeks those.

    >>> round(newton(lambda x: (x * x - 2.0, 2.0 * x), 0.0, 2.0, rising=True, start=1.0), 12)
    1.414213562373
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

__all__ = ["brentq", "newton", "secant"]

RTOL = 1e-14  # relative change of x at which a solve stops (a few units in the last place above)
PROBE = 1e-3  # the secant's first step, as a share of the bracket
MAXITER = 200  # evaluations: a bound, not a budget (the steps or the bracket shrink geometrically)


def newton(f: Callable[[float], tuple[float, float]], lo: float, hi: float, *, rising: bool,
           start: float | None = None, xtol: float = 0.0, rtol: float = RTOL, maxiter: int = MAXITER) -> float:
    """The root of ``f`` in [lo, hi] (module docstring); ``f(x)`` returns (value, slope)."""
    return _solve(f, lo, hi, rising=rising, start=start, xtol=xtol, rtol=rtol, maxiter=maxiter)


def secant(f: Callable[[float], float], lo: float, hi: float, *, rising: bool, start: float | None = None,
           xtol: float = 0.0, rtol: float = RTOL, maxiter: int = MAXITER) -> float:
    """The root of ``f`` in [lo, hi] (module docstring), by secant steps."""
    return _solve(lambda x: (f(x), math.nan), lo, hi, rising=rising, start=start, xtol=xtol, rtol=rtol,
                  maxiter=maxiter)


def _solve(f: Callable[[float], tuple[float, float]], lo: float, hi: float, *, rising: bool,
           start: float | None, xtol: float, rtol: float, maxiter: int) -> float:
    if not lo < hi:
        raise ValueError(f"an empty bracket [{lo}, {hi}]")
    x = start if start is not None and lo <= start <= hi else lo + (hi - lo) / 2.0
    previous: tuple[float, float] | None = None
    sizes = [math.inf, math.inf]  # |f| at the last two points
    for _ in range(maxiter):
        fx, slope = f(x)
        if fx == 0.0:
            return x
        if (fx > 0.0) == rising:
            hi = x
        else:
            lo = x
        tol = xtol + rtol * abs(x)
        if hi - lo <= tol:
            return x
        if not math.isnan(slope):
            step = fx / slope if slope != 0.0 else math.inf
        elif previous is not None and previous[1] != fx:
            step = fx * (x - previous[0]) / (fx - previous[1])
        elif previous is None:
            # The secant's second point: a short way towards the root, for a first slope.
            step = PROBE * (hi - lo) * (1.0 if (fx > 0.0) == rising else -1.0)
        else:
            step = math.inf
        if abs(step) <= tol:
            return min(max(x - step, lo), hi)
        previous = (x, fx)
        nxt = x - step
        if not lo < nxt < hi or abs(fx) > sizes[0] / 2.0:
            # Out of the bracket, or |f| has not halved in two steps: bisect.
            nxt = lo + (hi - lo) / 2.0
            if nxt in (lo, hi):  # the bracket is two adjacent doubles
                return x
        sizes = [sizes[1], abs(fx)]
        x = nxt
    return x


def brentq(f: Callable[[float], float], a: float, b: float, **options: Any) -> float:
    """The root of ``f`` in [a, b] (f(a) and f(b) of opposite signs) by ``scipy.optimize.brentq``
    with ``options`` (its xtol, rtol, maxiter)."""
    from scipy.optimize import brentq as scipy_brentq

    return float(scipy_brentq(f, a, b, **options))
