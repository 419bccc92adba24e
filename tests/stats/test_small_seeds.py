"""The crossed test at small seed counts, by seeded simulation of null studies that look like a
ranker's: per-query values bounded in [0, 1] with ties, a training-run effect per seed, and a
configuration-by-query interaction. The figures are quoted in docs/statistics.md."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.stats.corrections import adjust
from harness.stats.crossed import crossed_batch

QUERIES = 50
STUDIES = 2000


def _studies(n: int, seeds: int, training_sd: float, *, effect: float = 0.0, interaction: float = 0.03,
             seed: int = 0, candidates: int = 1) -> np.ndarray:
    """Differences candidate - baseline, shape (candidates, n, seeds, queries). Each run's per-query
    value is a query's difficulty (Beta(2, 3)) plus the run's training effect (normal, SD
    ``training_sd``, shared by the run's queries) plus noise (SD 0.1), clipped to [0, 1] and rounded
    to tenths (ties); each candidate has its own mean-zero per-query interaction with the baseline
    and shares the baseline's runs."""
    g = np.random.default_rng(seed)
    difficulty = g.beta(2.0, 3.0, (n, 1, QUERIES))

    def runs(shift: np.ndarray | float) -> np.ndarray:
        x = difficulty + shift + g.normal(0, training_sd, (n, seeds, 1)) + g.normal(0, 0.1, (n, seeds, QUERIES))
        return np.round(np.clip(x, 0.0, 1.0) * 10) / 10

    base = runs(0.0)
    return np.stack([runs(effect + g.normal(0, interaction, (n, 1, QUERIES))) - base
                     for _ in range(candidates)])


def _band(n: int, p: float = 0.05, level: float = 0.999) -> tuple[float, float]:
    lo, hi = stats.binom.interval(level, n, p)
    return lo / n, hi / n


@pytest.mark.parametrize("seeds", [2, 3, 5])
@pytest.mark.parametrize("training_sd", [0.01, 0.02, 0.03])
def test_size_at_small_seed_counts(seeds: int, training_sd: float) -> None:
    """At 2, 3 and 5 seeds and a per-seed training SD of 0.01 to 0.03 (a run's MAP then varies by
    about 0.015 to 0.03 between seeds), the false-positive rate at 0.05 over 2,000 null studies stays
    within the binomial band around 5% or below it, never above; and the tail that a correction over
    8 comparisons uses (0.05 / 8) is not inflated either."""
    d = _studies(STUDIES, seeds, training_sd, seed=seeds * 100 + int(training_sd * 1000))[0]
    p = crossed_batch(d).p_value
    rate, tail = float(np.mean(p < 0.05)), float(np.mean(p < 0.05 / 8))
    hi = _band(STUDIES)[1]
    print(f"{seeds} seeds, training SD {training_sd}: size {rate:.3f} at 0.05, {tail:.4f} at 0.00625")
    assert rate <= hi, rate
    # conservative at worst by about half, never useless (2.3% at 2 seeds and a training SD of 0.01,
    # where the seed means of values rounded to tenths tie often: crossed.py, "Seeds that tie")
    assert rate >= 0.02, rate
    assert tail <= _band(STUDIES, 0.05 / 8)[1], tail


@pytest.mark.parametrize("seeds", [3])
def test_size_at_three_seeds_is_nominal_with_a_realistic_training_effect(seeds: int) -> None:
    """The issue's bar: at 3 seeds, with a training SD of 0.02, within the binomial band of 5% on
    both sides over 4,000 null studies."""
    d = _studies(2 * STUDIES, seeds, 0.02, seed=7)[0]
    rate = float(np.mean(crossed_batch(d).p_value < 0.05))
    lo, hi = _band(2 * STUDIES)
    assert lo <= rate <= hi, rate


def test_family_wise_error_at_three_seeds_with_holm() -> None:
    """8 null candidates sharing the baseline's runs, 3 seeds: Holm over the crossed tests keeps the
    family-wise error at or below 5%."""
    n = 600
    d = _studies(n, 3, 0.02, seed=11, candidates=8)
    p = np.stack([crossed_batch(d[c]).p_value for c in range(8)], axis=1)  # studies x candidates
    any_marker = float(np.mean([(adjust("holm", row) < 0.05).any() for row in p]))
    print(f"8 null candidates at 3 seeds: at least one Holm marker in {any_marker:.3f} of studies")
    assert any_marker <= _band(n)[1], any_marker


def test_power_at_three_and_five_seeds() -> None:
    """A true gain of 0.06 in every query's value before clipping (training SD 0.02): the power the
    docs quote beside the size, growing with seeds. With two training runs' effects in every
    difference, 3 seeds rarely settle a gain this size."""
    power = {s: float(np.mean(crossed_batch(_studies(1000, s, 0.02, effect=0.06, seed=s)[0]).p_value < 0.05))
             for s in (2, 3, 5, 10)}
    print(f"power at +0.06: {power}")
    assert power[2] < power[3] < power[5] < power[10]
    assert power[5] > 0.6 and power[10] > 0.95


def _mean_squares(d: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per study of ``d`` (studies x seeds x queries): the grand mean and the two-way ANOVA's mean
    squares of seeds, queries and residual, computed here independently of harness.stats."""
    _, s, q = d.shape
    grand = d.mean(axis=(1, 2))
    m_s, m_q = d.mean(axis=2), d.mean(axis=1)
    ms_s = q * ((m_s - grand[:, None]) ** 2).sum(axis=1) / (s - 1)
    ms_q = s * ((m_q - grand[:, None]) ** 2).sum(axis=1) / (q - 1)
    ms_e = ((d - m_s[:, :, None] - m_q[:, None, :] + grand[:, None, None]) ** 2).sum(axis=(1, 2)) / ((s - 1) * (q - 1))
    return grand, ms_s, ms_q, ms_e


def _satterthwaite_p(d: np.ndarray) -> np.ndarray:
    """The crossed test as it was: components clamped at 0, Satterthwaite df for the combination of
    mean squares left (a reference for what the generalized p-value replaced)."""
    _, s, q = d.shape
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    keep_s, keep_q = ms_s > ms_e, ms_q > ms_e
    coef = 1 - keep_s.astype(int) - keep_q.astype(int)
    terms = [(np.where(keep_s, ms_s, 0.0), s - 1), (np.where(keep_q, ms_q, 0.0), q - 1),
             (coef * ms_e, (s - 1) * (q - 1))]
    var = sum(t for t, _ in terms)
    df = var ** 2 / sum(t ** 2 / k for t, k in terms)
    return 2 * stats.t.sf(np.abs(grand) / np.sqrt(var / (s * q)), df)


def test_the_satterthwaite_test_was_liberal() -> None:
    """Why the p-value changed: on the same null studies (training SD 0.03) the clamped Satterthwaite
    test is above the binomial band at 2 seeds, and at 3 seeds in the tail a correction over 8 uses;
    the generalized p-value is not."""
    two = _studies(STUDIES, 2, 0.03, seed=21)[0]
    three = _studies(STUDIES, 3, 0.03, seed=22)[0]
    old2, new2 = float(np.mean(_satterthwaite_p(two) < 0.05)), float(np.mean(crossed_batch(two).p_value < 0.05))
    old3 = float(np.mean(_satterthwaite_p(three) < 0.05 / 8))
    new3 = float(np.mean(crossed_batch(three).p_value < 0.05 / 8))
    print(f"2 seeds at 0.05: Satterthwaite {old2:.3f}, generalized {new2:.3f}; "
          f"3 seeds at 0.05/8: Satterthwaite {old3:.4f}, generalized {new3:.4f}")
    assert old2 > _band(STUDIES)[1] >= new2
    assert old3 > _band(STUDIES, 0.05 / 8)[1] >= new3
