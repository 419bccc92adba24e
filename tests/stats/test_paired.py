"""Paired tests equal scipy's; the randomisation test equals exact enumeration and is reproducible
across processes; corrections equal hand and scipy values."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from harness.errors import ConfigError, DataError
from harness.stats.corrections import CORRECTIONS, adjust, describe
from harness.stats.paired import PROCEDURES, paired_test, sign_flip_p

# R's `sleep` data: extra hours of sleep under two drugs, the same 10 patients.
SLEEP_1 = [0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0]
SLEEP_2 = [1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4]


def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def test_textbook_paired_t_test() -> None:
    r = paired_test("t", SLEEP_1, SLEEP_2, rng=rng())
    assert round(r.statistic, 4) == -4.0621
    assert r.n - 1 == 9
    assert round(r.p_value, 6) == 0.002833
    assert r.mean_diff == pytest.approx(-1.58)
    assert (round(r.ci_low, 4), round(r.ci_high, 4)) == (-2.4599, -0.7001)  # R: -2.4598858 -0.7001142
    assert r.direction == "worse"
    assert r.d_z == pytest.approx(-1.58 / np.std(np.subtract(SLEEP_1, SLEEP_2), ddof=1))


@pytest.mark.parametrize("n", [5, 30, 200])
def test_t_and_wilcoxon_equal_scipy(n: int) -> None:
    g = np.random.default_rng(n)
    y = g.uniform(0, 1, n)
    x = np.clip(y + g.normal(0.03, 0.1, n), 0, 1)
    t = paired_test("t", x, y, rng=rng(), confidence=0.9)
    ref = stats.ttest_rel(x, y)
    assert (t.statistic, t.p_value) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)
    ci = ref.confidence_interval(0.9)
    assert (t.ci_low, t.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-12)
    w = paired_test("wilcoxon", x, y, rng=rng())
    ref_w = stats.wilcoxon(x, y)
    assert (w.statistic, w.p_value) == pytest.approx((ref_w.statistic, ref_w.pvalue), rel=1e-12)


def _enumerated_p(d: np.ndarray) -> float:
    """Independent reference: all 2^n sign assignments, two-sided on |mean|."""
    observed = abs(d.mean())
    flips = [abs(np.mean(np.array(s) * d)) for s in itertools.product((1, -1), repeat=len(d))]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


@pytest.mark.parametrize("seed", range(4))
def test_randomisation_exact_equals_enumeration_and_scipy(seed: int) -> None:
    g = np.random.default_rng(seed)
    x, y = g.uniform(0, 1, 9), g.uniform(0, 1, 9)
    r = paired_test("randomisation", x, y, rng=rng(), resamples=10_000)  # 2^9 <= 10^4: exact
    assert r.p_value == pytest.approx(_enumerated_p(x - y), abs=1e-12)
    ref = stats.permutation_test((x, y), lambda a, b: np.mean(a - b), permutation_type="samples",
                                 n_resamples=np.inf)
    assert r.p_value == pytest.approx(ref.pvalue, abs=1e-12)


def test_randomisation_sampled_approaches_exact() -> None:
    g = np.random.default_rng(3)
    d = g.normal(0.2, 1.0, 12)
    exact = _enumerated_p(d)
    sampled = sign_flip_p(d, rng=np.random.default_rng(0), resamples=20_000, exact=False)
    assert sampled == pytest.approx(exact, abs=0.01)
    assert sign_flip_p(d, rng=rng(), resamples=4096, exact=True) == pytest.approx(exact, abs=1e-12)


def test_randomisation_tied_magnitudes() -> None:
    """Equal |d_i| give exactly tied permutation sums; they must count as hits."""
    d = np.array([0.1, 0.1, 0.1, -0.1, 0.2, 0.3])
    assert sign_flip_p(d, rng=rng(), resamples=10_000) == pytest.approx(_enumerated_p(d), abs=1e-12)


_CHILD = """
import json, numpy as np
from harness.stats.paired import paired_test
g = np.random.default_rng(123)
y = g.uniform(size=60); x = np.clip(y + g.normal(0.02, 0.1, 60), 0, 1)
r = paired_test("randomisation", x, y, rng=np.random.default_rng(42), resamples=5000)
print(json.dumps(r.p_value))
"""


@pytest.mark.slow
def test_randomisation_same_p_in_two_processes() -> None:
    ps = [json.loads(subprocess.run([sys.executable, "-c", _CHILD], check=True, capture_output=True,
                                    text=True).stdout) for _ in range(2)]
    assert ps[0] == ps[1]
    g = np.random.default_rng(123)
    y = g.uniform(size=60)
    x = np.clip(y + g.normal(0.02, 0.1, 60), 0, 1)
    here = paired_test("randomisation", x, y, rng=np.random.default_rng(42), resamples=5000)
    assert here.p_value == ps[0]
    assert 0 < here.p_value < 1 and (here.p_value * 5001) == pytest.approx(round(here.p_value * 5001))


def test_degenerate_and_bad_input() -> None:
    same = [0.2, 0.4, 0.6]
    for name in PROCEDURES:
        r = paired_test(name, same, same, rng=rng())
        assert (r.p_value, r.mean_diff, r.d_z, r.direction) == (1.0, 0.0, 0.0, "equal")
    shifted = paired_test("t", [1.5, 2.5, 3.5], [1.0, 2.0, 3.0], rng=rng())
    # three equal differences: t undefined, the sign-flip p of 3 equal numbers (tests/stats/test_ties.py)
    assert shifted.p_value == 0.25 and shifted.direction == "better"
    with pytest.raises(DataError, match="at least 2 pairs"):
        paired_test("t", [1.0], [0.0], rng=rng())
    with pytest.raises(DataError, match="NaN"):
        paired_test("t", [1.0, float("nan")], [0.0, 1.0], rng=rng())
    with pytest.raises(DataError, match="shape"):
        paired_test("t", [1.0, 2.0], [0.0], rng=rng())
    # the work of one test is bounded before anything the size of its input squared is allocated
    with pytest.raises(DataError, match="at most 5000 pairs, got 5001"):
        paired_test("wilcoxon", np.arange(5001.0), np.zeros(5001), rng=rng())
    with pytest.raises(DataError, match=r"resamples must be in \[1, 1000000\]"):
        paired_test("randomisation", [1.0, 2.0], [0.0, 1.5], rng=rng(), resamples=10**8)
    with pytest.raises(ConfigError, match="valid: randomisation, t, wilcoxon"):
        paired_test("z", [1.0, 2.0], [0.0, 1.0], rng=rng())


def test_corrections_hand_values_and_scipy() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    assert adjust("none", p).tolist() == p
    assert adjust("bonferroni", p) == pytest.approx([0.04, 0.16, 0.12, 0.02])
    # Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert adjust("holm", p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted 0.005*4/1, 0.01*4/2, 0.03*4/3, 0.04*4/4 -> 0.02, 0.02, 0.04, 0.04
    assert adjust("bh", p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    g = np.random.default_rng(0).random(50) ** 3
    assert adjust("bh", g) == pytest.approx(stats.false_discovery_control(g), abs=1e-12)
    assert adjust("bonferroni", [0.6, 0.7]).tolist() == [1.0, 1.0]
    assert len(adjust("holm", [])) == 0
    assert describe("bh").startswith("Benjamini-Hochberg")
    assert CORRECTIONS.names() == ["bh", "bonferroni", "holm", "maxt", "none"]
    with pytest.raises(ConfigError, match="valid: bh, bonferroni, holm, maxt, none"):
        adjust("sidak", p)
    with pytest.raises(DataError, match=r"\[0, 1\]"):
        adjust("holm", [1.5])
