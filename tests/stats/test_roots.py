"""The bracketed root solves of harness.stats.roots against SciPy's brentq at a tight tolerance, on
monotone functions that favour Newton and the secant, and on ones that defeat them (flat, then
steep; steps that leave the bracket), which the bracket must still bring to the root."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from scipy import optimize

from harness.stats.roots import newton, secant

# name: (f, f', lo, hi): f monotone on [lo, hi], changing sign there
CASES: dict[str, tuple[Callable[[float], float], Callable[[float], float], float, float]] = {
    "square": (lambda x: x * x - 2.0, lambda x: 2.0 * x, 0.0, 2.0),
    "exp": (lambda x: math.exp(x) - 5.0, math.exp, -10.0, 10.0),
    "falling": (lambda x: 1.0 / (1.0 + x) - 0.3, lambda x: -1.0 / (1.0 + x) ** 2, 0.0, 100.0),
    "flat then steep": (lambda x: x ** 9 - 0.5, lambda x: 9.0 * x ** 8, 0.0, 3.0),
    "leaves the bracket": (lambda x: math.atan(x - 3.0), lambda x: 1.0 / (1.0 + (x - 3.0) ** 2), -100.0, 1000.0),
    "tail": (lambda x: 0.5 * math.erfc(x / math.sqrt(2.0)) - 1e-6,
             lambda x: -math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi), 0.0, 50.0),
}


def _rising(f: Callable[[float], float], lo: float, hi: float) -> bool:
    return f(hi) > f(lo)


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("start", ["none", "lo", "hi", "inside"])
def test_newton_and_secant_find_brents_root(name: str, start: str) -> None:
    f, fprime, lo, hi = CASES[name]
    expected = optimize.brentq(f, lo, hi, xtol=1e-300, rtol=8.9e-16)
    first = {"none": None, "lo": lo, "hi": hi, "inside": lo + 0.3 * (hi - lo)}[start]
    rising = _rising(f, lo, hi)
    got_newton = newton(lambda x: (f(x), fprime(x)), lo, hi, rising=rising, start=first)
    got_secant = secant(f, lo, hi, rising=rising, start=first)
    assert got_newton == pytest.approx(expected, rel=1e-13, abs=1e-300)
    assert got_secant == pytest.approx(expected, rel=1e-13, abs=1e-300)


def test_few_evaluations_near_a_simple_root() -> None:
    """Newton from near the root converges quadratically: a handful of evaluations."""
    calls = []

    def f(x: float) -> tuple[float, float]:
        calls.append(x)
        return x * x - 2.0, 2.0 * x

    assert newton(f, 0.0, 2.0, rising=True, start=1.5) == pytest.approx(math.sqrt(2.0), rel=1e-15)
    assert len(calls) <= 6


def test_a_stalling_function_still_reaches_its_root() -> None:
    """A slope far too small everywhere (the steps leave the bracket): bisection carries it."""
    got = newton(lambda x: (x - 0.25, 1e-9), 0.0, 1.0, rising=True, start=0.9)
    assert got == pytest.approx(0.25, abs=1e-14)


def test_an_empty_bracket_is_refused() -> None:
    with pytest.raises(ValueError, match="empty bracket"):
        secant(lambda x: x, 1.0, 1.0, rising=True)
