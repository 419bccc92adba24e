"""Intervals that match their test: the Wilcoxon test's Hodges-Lehmann interval and the sign-flip
test's inverted interval, checked against brute-force inversion of the tests themselves and for
agreement with their verdicts on seeded data sets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from harness.stats.paired import hodges_lehmann, paired_test, sign_flip_p, wilcoxon_interval


def _scipy_inversion(d: np.ndarray, *confidences: float) -> list[tuple[float, float]]:
    """Run scipy.stats.wilcoxon at one shift inside every gap between distinct Walsh averages; per
    confidence (0.95 by default) the hull of the shifts it does not reject (and check that they are
    contiguous). One run of scipy per shift serves every confidence."""
    walsh = np.unique([(a + b) / 2 for a, b in itertools.combinations_with_replacement(d, 2)])
    inner = np.concatenate([[walsh[0] - 1], (walsh[:-1] + walsh[1:]) / 2, [walsh[-1] + 1]])
    p = np.array([stats.wilcoxon(d - m).pvalue for m in inner])
    hulls = []
    for confidence in confidences or (0.95,):
        keep = np.flatnonzero(p >= 1 - confidence)
        assert (np.diff(keep) == 1).all()
        hulls.append((-math.inf if keep[0] == 0 else float(walsh[keep[0] - 1]),
                      math.inf if keep[-1] == len(walsh) else float(walsh[keep[-1]])))
    return hulls


@pytest.mark.slow
@pytest.mark.parametrize(("n", "decimals"), [(8, None), (20, None), (40, None), (51, None),
                                             pytest.param(60, None, marks=pytest.mark.heavy),
                                             (20, 1), (60, 1)])
def test_wilcoxon_interval_is_scipys_inversion(n: int, decimals: int | None) -> None:
    """Exact distribution (n <= 50, no ties), normal approximation (n > 50, or ties), by scipy."""
    g = np.random.default_rng(n + (decimals or 0))
    for _ in range(2):
        d = g.normal(0.3, 1.0, n)
        d = np.round(d, decimals) if decimals else d
        confidences = (0.95, 0.9)
        for conf, hull in zip(confidences, _scipy_inversion(d, *confidences), strict=True):
            assert wilcoxon_interval(d, conf) == pytest.approx(hull, abs=1e-12)


@pytest.mark.slow
def test_wilcoxon_interval_small_tied_sample() -> None:
    """n <= 13 with ties: scipy's sign-flip distribution of average ranks (one scipy inversion: each
    of its permutation tests takes a while)."""
    d = np.array([0.2, 0.4, 0.3, -0.2, 0.9, 1.2, 0.6, 0.4, 1.1])
    assert wilcoxon_interval(d) == pytest.approx(_scipy_inversion(d)[0], abs=1e-12)


def test_hodges_lehmann_estimate() -> None:
    d = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4]
    walsh = [(a + b) / 2 for a, b in itertools.combinations_with_replacement(d, 2)]
    assert hodges_lehmann(d) == pytest.approx(float(np.median(walsh)))
    r = paired_test("wilcoxon", np.array(d), np.zeros(6), rng=np.random.default_rng(0))
    assert r.estimate == pytest.approx(hodges_lehmann(d)) and r.interval == "hodges-lehmann"
    assert r.ci_low <= r.estimate <= r.ci_high


@pytest.mark.slow
def test_wilcoxon_interval_agrees_with_its_verdict_without_zeros() -> None:
    """300 seeded continuous data sets (0 never a Walsh average): full agreement."""
    g = np.random.default_rng(7)
    for _ in range(300):
        n = int(g.integers(6, 80))
        r = paired_test("wilcoxon", g.normal(0.25, 1.0, n), np.zeros(n), rng=np.random.default_rng(0))
        assert (r.ci_low > 0 or r.ci_high < 0) == (r.p_value < 0.05)
        assert r.direction == ("better" if r.estimate > 0 else "worse")


def test_wilcoxon_with_zero_differences_is_the_documented_edge_case() -> None:
    """Ranker-like values in tenths (about 29% zero differences): every disagreement has 0 as a
    Walsh average, and all go one way (scipy's test drops the zeros and rejects, its neighbouring
    shifts do not); docs/statistics.md quotes the rate."""
    g = np.random.default_rng(1)
    rejects_inside = 0
    for _ in range(300):
        n = int(g.integers(14, 80))
        y = np.round(g.uniform(0, 1, n), 1)
        x = np.clip(np.round(y + g.normal(0.05, 0.15, n), 1), 0, 1)
        r = paired_test("wilcoxon", x, y, rng=np.random.default_rng(0))
        excludes = r.ci_low > 0 or r.ci_high < 0
        if excludes != (r.p_value < 0.05):
            assert not excludes and (x == y).any()
            rejects_inside += 1
    assert rejects_inside == 81


@pytest.mark.parametrize("resamples", [2_000, 1 << 12])
def test_randomisation_interval_agrees_with_its_verdict(resamples: int) -> None:
    """Seeded data sets with ties and zeros; 1 << 12 enumerates every sign vector up to 12 pairs."""
    g = np.random.default_rng(resamples)
    for k in range(300):
        n = int(g.integers(6, 12 if resamples == 1 << 12 else 80))
        y = np.round(g.uniform(0, 1, n), 1)
        x = np.clip(np.round(y + g.normal(0.08, 0.15, n), 1), 0, 1)
        r = paired_test("randomisation", x, y, rng=np.random.default_rng(k), resamples=resamples)
        assert (r.ci_low > 0 or r.ci_high < 0) == (r.p_value < 0.05)
        assert r.ci_low <= r.mean_diff <= r.ci_high


def test_randomisation_interval_inverts_the_test() -> None:
    """Shifts inside the interval are not rejected by the test of d - mu0 (same seed, same draws),
    shifts outside are; checked on a grid away from the ends."""
    g = np.random.default_rng(3)
    d = g.normal(0.1, 0.3, 40)
    r = paired_test("randomisation", d, np.zeros(40), rng=np.random.default_rng(5), resamples=3000)
    width = r.ci_high - r.ci_low
    for mu in np.linspace(r.ci_low - width, r.ci_high + width, 61):
        if min(abs(mu - r.ci_low), abs(mu - r.ci_high)) < 1e-6:
            continue
        p = sign_flip_p(d - mu, rng=np.random.default_rng(5), resamples=3000)
        assert (p >= 0.05) == (r.ci_low <= mu <= r.ci_high), mu
