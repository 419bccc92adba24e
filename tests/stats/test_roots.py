"""harness.stats.roots.brentq finds scipy.optimize.brentq's root bit for bit (the same iterates),
with its errors: on smooth and awkward functions, and on the harness's own root searches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from harness.stats import distributions as dist
from harness.stats.roots import brentq

CASES = [
    (lambda x: x * x - 2.0, 0.0, 2.0, {}),
    (lambda x: math.cos(x) - x, 0.0, 1.0, {"xtol": 1e-14}),
    (lambda x: x ** 3 - 2 * x - 5, 2.0, 3.0, {"rtol": 1e-12}),
    (lambda x: math.exp(x) - 1e6, -5.0, 50.0, {"xtol": 1e-10}),
    (lambda x: math.atan(x - 0.3) ** 3, -100.0, 1e4, {"maxiter": 500}),  # flat near its root
    (lambda x: 1.0 if x > 0.7 else -1.0, 0.0, 1.0, {}),  # a step: bisection only
    (lambda x: x - 0.25, 0.0, 1.0, {}),  # linear: the secant's first step
    (lambda x: x, -0.0, 1.0, {}),  # the root at an end
    (lambda df: float(dist.t.ppf(0.975, df)) - 2.1, 1e-3, 1e9, {"rtol": 1e-10}),  # crossed's effective df
    (lambda c: float(2.0 * dist.norm.sf(c)) - 0.01, 0.0, 40.0, {"xtol": 1e-10}),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_same_root_as_scipy(case) -> None:
    f, a, b, options = CASES[case]
    want = optimize.brentq(f, a, b, **options)
    got = brentq(f, a, b, **options)
    assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


def test_random_cubics_bit_for_bit() -> None:
    g = np.random.default_rng(4)
    for _ in range(300):
        r, s, t = (float(v) for v in g.normal(size=3))

        def f(x: float, r: float = r, s: float = s, t: float = t) -> float:
            return (x - r) * ((x - s) ** 2 + t * t + 0.1)

        assert brentq(f, r - 3.0, r + 5.0, xtol=1e-13) == optimize.brentq(f, r - 3.0, r + 5.0, xtol=1e-13)


def test_the_same_errors() -> None:
    with pytest.raises(ValueError, match="different signs"):
        brentq(lambda x: x * x + 1.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        brentq(lambda x: math.nan if x > 0.5 else x - 0.75, 0.0, 1.0)
    with pytest.raises(ValueError, match="rtol too small"):
        brentq(lambda x: x, -1.0, 1.0, rtol=1e-17)
    for solve in (brentq, optimize.brentq):  # one iteration short of the root both find
        with pytest.raises(RuntimeError, match="Failed to converge after 2 iterations"):
            solve(lambda x: x - 1e-3, -1.0, 1e3, maxiter=2, xtol=1e-15)
        assert solve(lambda x: x - 1e-3, -1.0, 1e3, maxiter=3, xtol=1e-15) == 0.0009999999999998899
