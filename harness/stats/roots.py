"""A root of a scalar function in a bracket: Brent's method, step for step as
``scipy.optimize.brentq`` takes it, without importing ``scipy.optimize``.

Importing ``scipy.optimize`` (every optimiser, and scipy.linalg and scipy.sparse behind them)
costs each ``harness table`` and ``harness report`` process more than the roots it finds there:
the crossed test's interval and effective df, the power analysis's MDE, max-t's critical value and
the sequential bounds. The same iterates in the same floating-point operations give the same
root bit for bit (tests/stats/test_roots.py compares them on the harness's own functions and
others), with scipy's defaults and errors.

The method (Brent 1973; scipy's C implementation by Charles Harris): keep the root bracketed
between the current estimate and a "block" point; try inverse quadratic interpolation (or the
secant where the bracket just flipped), and fall back to bisection when the step is not short
enough; stop when half the bracket is below (xtol + rtol |x|) / 2.

    >>> abs(brentq(lambda x: x * x - 2.0, 0.0, 2.0) - 2 ** 0.5) < XTOL
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["brentq"]

XTOL = 2e-12  # scipy.optimize.brentq's defaults
RTOL = 4 * 2.220446049250313e-16
MAXITER = 100


def brentq(f: Callable[[float], float], a: float, b: float, *, xtol: float = XTOL, rtol: float = RTOL,
           maxiter: int = MAXITER) -> float:
    """The root of ``f`` in [a, b], f(a) and f(b) of opposite signs; within xtol + rtol |root|."""
    if xtol <= 0:
        raise ValueError(f"xtol too small ({xtol:g} <= 0)")
    if rtol < RTOL:
        raise ValueError(f"rtol too small ({rtol:g} < {RTOL:g})")

    def value(x: float) -> float:
        fx = float(f(x))
        if math.isnan(fx):
            raise ValueError(f"The function value at x={x} is NaN; solver cannot continue.")
        return fx

    xpre, xcur = float(a), float(b)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = value(xpre), value(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # good short step
                spre, scur = scur, stry
            else:  # bisect
                spre = scur = sbis
        else:  # bisect
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = value(xcur)
    raise RuntimeError(f"Failed to converge after {maxiter} iterations.")
