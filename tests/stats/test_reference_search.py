"""Issue 39's search for a more powerful small-sample reference of the crossed test that keeps its
size. The figures are the tables of docs/statistics.md ("Searching for a more powerful reference").

Two parts:
- the large-query limit, computed by quadrature (no Monte Carlo): with many queries the query and
  residual mean squares are known, and the null distribution of the crossed statistic depends on one
  nuisance, the share f of S Q Var(dbar) that the seed mean square carries. The generalized p-value's
  size is at most nominal at every share and reaches it as f -> 1, where only the across-seeds t-test
  with S - 1 df is exact; a linear programme gives the envelope, the most any test of that size at
  every share can detect at the ranker-like design below;
- seeded simulations of ranker-like null and effect studies (tests/stats/test_small_seeds.py's
  generator, training SD 0.02, 50 queries) through every candidate reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, special, stats

from harness.stats.crossed import chi2_nodes, crossed_batch
from tests.stats.test_small_seeds import QUERIES, _mean_squares, _satterthwaite_p, _studies

STUDIES = 2000
EFFECT_STUDIES = 1000
EFFECT = 0.06
LEVELS = (0.05, 0.05 / 8)  # the per-comparison level and Holm's first step over 8
GAP = {2: 0.09, 5: 0.06}  # the most the envelope leads the default by (docs/statistics.md)


def _band(n: int, p: float) -> int:
    """The upper 99% binomial bound of the count of n studies at a true rate p: a count above it says
    the size exceeds p."""
    return int(stats.binom.ppf(0.99, n, p))


# --- the large-query limit: dbar sqrt(S Q) ~ N(delta, A + B), MS_seed = A chi2(S-1) / (S-1), with
# B = S s2_query and C = s2_resid known and A = C + Q s2_seed >= C; the seed share is f = A / (A + B).

def _limit_p(t: np.ndarray, m: np.ndarray, k: int, b: float) -> np.ndarray:
    """The generalized p-value in the limit: 2 E[Phi(-|t| / sqrt(m k / X + b))], X ~ chi2(k)."""
    u, w = chi2_nodes(k)
    return 2.0 * special.ndtr(-np.abs(t)[..., None] / np.sqrt(m[..., None] / u + b)) @ w


def _limit_critical(level: float, m: np.ndarray, k: int, b: float) -> np.ndarray:
    """|t| at which the limit p-value equals ``level``, for every seed mean square in ``m``."""
    lo, hi = np.full(m.shape, 1e-4), np.full(m.shape, 1e4)
    for _ in range(34):  # bisection in log |t|, to about 1e-9 relative
        mid = np.sqrt(lo * hi)
        above = _limit_p(mid, m, k, b) > level
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    return np.sqrt(lo * hi)


def _limit_size(level: float, a: float, k: int, b: float) -> float:
    """The generalized p-value's rate of p < level at seed mean square expectation ``a``: quadrature
    over the seed chi-square of the normal tail beyond the critical value."""
    u, w = chi2_nodes(k)
    c = _limit_critical(level, a * u, k, b)
    return float(2.0 * special.ndtr(-c / np.sqrt(a + b)) @ w)


@pytest.mark.parametrize("seeds", [2, 3, 5, 10])
def test_the_generalized_p_value_is_at_most_nominal_at_every_seed_share(seeds: int) -> None:
    """In the large-query limit (B + C = 1, C = 0.8: the residual carries most of the rest), the
    generalized p-value's size is at most nominal at every seed share, at 0.05 and at 0.05 / 8, and
    tends to nominal as the seeds carry all the variance (f -> 1), where the test is the across-seeds
    t-test: no valid reference is uniformly more powerful, and one that adapts to the observed share
    must keep its size near f = 1 too."""
    b, c = 0.2, 0.8
    for level in LEVELS:
        ratios = []
        for f in (c / (c + b), 0.9, 0.95, 0.99, 1 - 1e-6):
            a = f * b / (1 - f)
            ratios.append(_limit_size(level, a, seeds - 1, b) / level)
        print(f"{seeds} seeds, level {level:.5f}: size / level {np.round(ratios, 3)}")
        assert max(ratios) <= 1.002, ratios
        assert ratios[-1] >= 0.995 and ratios == sorted(ratios), ratios


def _limit_power(level: float, a: float, k: int, b: float, delta: float) -> float:
    """The generalized p-value's power in the limit against dbar sqrt(S Q) ~ N(delta, a + b)."""
    u, w = chi2_nodes(k)
    c, s = _limit_critical(level, a * u, k, b), np.sqrt(a + b)
    return float((special.ndtr((delta - c) / s) + special.ndtr((-delta - c) / s)) @ w)


def _envelope(level: float, a0: float, k: int, b: float, c: float, delta: float) -> float:
    """The most power at (a0, delta) of any test phi(|dbar|, MS_seed) whose size is at most ``level``
    at every seed mean square expectation a >= c (the limit model): a linear programme over tests
    constant on a grid of cells of |dbar| sqrt(S Q) and MS_seed (Neyman-Pearson against a composite
    null, discretised). Tests constant on cells are tests, so the value is attained by one; the size
    constraint is imposed on a dense grid of a."""
    t_edges = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 200) * np.sqrt(a0 + b), [np.inf]])
    m_edges = np.concatenate([[0.0], np.geomspace(1e-5, 1e5, 200) * a0, [np.inf]])
    nulls = c + np.concatenate([[0.0], np.geomspace(1e-4, 1e5, 100)]) * a0

    def cells(a: float, d: float) -> np.ndarray:
        s = np.sqrt(a + b)
        pt = np.diff(special.ndtr((t_edges - d) / s) - special.ndtr((-t_edges - d) / s))
        return np.outer(pt, np.diff(stats.chi2.cdf(m_edges * k / a, k))).ravel()

    res = optimize.linprog(-cells(a0, delta), A_ub=np.stack([cells(a, 0.0) for a in nulls]),
                           b_ub=np.full(nulls.size, level), bounds=(0, 1), method="highs")
    assert res.status == 0, res.message
    return -float(res.fun)


# --- the simulations: candidate references, each p-values of an (N, seeds, queries) stack.

def _kept_seed_term_p(d: np.ndarray) -> np.ndarray:
    """Satterthwaite's df with the seed term always counted (S - 1 df), its mean square never
    dropped when it falls below the residual one (floored at it): the small-sample correction that
    removes the df jump of the clamped version."""
    _, s, q = d.shape
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    a, b, c = np.maximum(ms_s, ms_e), np.maximum(ms_q, ms_e), -ms_e
    var = a + b + c
    df = var ** 2 / (a ** 2 / (s - 1) + b ** 2 / (q - 1) + c ** 2 / ((s - 1) * (q - 1)))
    return 2 * stats.t.sf(np.abs(grand) / np.sqrt(var / (s * q)), df)


def _seed_df_p(d: np.ndarray) -> np.ndarray:
    """Student's t with S - 1 df on the whole variance estimate (floored at the residual's share):
    the only df that depends on S alone and keeps the size where the seeds carry all the variance."""
    _, s, q = d.shape
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    var = np.maximum(ms_s + ms_q - ms_e, ms_e)
    return 2 * stats.t.sf(np.abs(grand) / np.sqrt(var / (s * q)), s - 1)


P_GRID, M_GRID = np.geomspace(1e-8, 1.0, 97), np.geomspace(1e-4, 1e6, 121)


def _critical_grid(k: int) -> np.ndarray:
    """log |t| at which the limit p-value (b = 1) is p, over P_GRID x M_GRID (the seed mean square
    in units of b)."""
    return np.log(_limit_critical(P_GRID[:, None], np.broadcast_to(M_GRID, (P_GRID.size, M_GRID.size)), k, 1.0))


def _interpolate(grid: np.ndarray, p: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Bilinear interpolation of ``grid`` in (log p, log m), clipped to the grid."""
    i = np.interp(np.log(np.clip(p, P_GRID[0], 1.0)), np.log(P_GRID), np.arange(P_GRID.size))
    j = np.interp(np.log(np.clip(m, M_GRID[0], M_GRID[-1])), np.log(M_GRID), np.arange(M_GRID.size))
    i0, j0 = np.minimum(i.astype(int), P_GRID.size - 2), np.minimum(j.astype(int), M_GRID.size - 2)
    di, dj = i - i0, j - j0
    return np.exp((1 - di) * (1 - dj) * grid[i0, j0] + di * (1 - dj) * grid[i0 + 1, j0]
                  + (1 - di) * dj * grid[i0, j0 + 1] + di * dj * grid[i0 + 1, j0 + 1])


def _calibrated_p(d: np.ndarray) -> np.ndarray:
    """The generalized p-value calibrated by a parametric bootstrap at the estimated components:
    p_cal = P*(p* <= p_obs), p* the p-value of a study drawn at A = max(MS_seed, MS_resid) (the seed
    component clamped at 0) and the observed B. Computed in the large-query limit (the query and
    residual mean squares taken as known: 49 and 49 (S - 1) df here) by quadrature, not resampling:
    p* <= p_obs exactly where |dbar*| exceeds the critical value at MS_seed*. Where B is not positive
    the pivot is the across-seeds t-test, exact, and the calibration leaves it unchanged."""
    _, s, q = d.shape
    k = s - 1
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    u, w = chi2_nodes(k)
    b = ms_q - ms_e
    pos = b > 0
    unit = np.where(pos, b, 1.0)
    t = np.abs(grand) * np.sqrt(s * q / unit)
    p_obs = _limit_p(t, ms_s / unit, k, 1.0)
    a = np.maximum(ms_s, ms_e) / unit
    c = _interpolate(_critical_grid(k), p_obs[:, None], a[:, None] * u[None, :])
    p_cal = 2.0 * special.ndtr(-c / np.sqrt(a + 1.0)[:, None]) @ w
    with np.errstate(divide="ignore", invalid="ignore"):  # MS_seed = 0: seed means equal (rounding)
        p_t = 2 * stats.t.sf(np.abs(grand) * np.sqrt(s * q / ms_s), k)
    return np.where(pos, np.minimum(p_cal, 1.0), p_t)


REFERENCES = {"generalized": lambda d: crossed_batch(d).p_value, "satterthwaite": _satterthwaite_p,
              "satterthwaite-kept": _kept_seed_term_p, "calibrated": _calibrated_p, "seed-df": _seed_df_p}


@pytest.mark.heavy  # the whole search, about 30 s: `make test-all`
def test_sizes_and_power_of_the_candidate_references() -> None:
    """Null studies at 2, 3, 5 and 10 seeds and a gain of 0.06 (training SD 0.02): the default's size
    is not above 5% or 0.05 / 8 (its count within the upper 99% binomial bound) at every seed count.
    The candidates that detect more at 5 seeds at 0.05 / 8 exceed their size: the clamped
    Satterthwaite test (Kenward-Roger's df on this balanced design) at 2, 3 and 5 seeds, the
    calibrated generalized p-value at 3 and 5; of those that keep their size, the kept seed term
    detects less at 2 and 3 seeds and Student's t with S - 1 df at 5. So none replaces the default."""
    size, power = {}, {}
    for seeds in (2, 3, 5, 10):
        null = _studies(STUDIES, seeds, 0.02, seed=3900 + seeds)[0]
        gain = _studies(EFFECT_STUDIES, seeds, 0.02, effect=EFFECT, seed=3950 + seeds)[0]
        for name, fn in REFERENCES.items():
            p, pe = fn(null), fn(gain)
            size[(name, seeds)] = tuple(int(np.sum(p < lv)) for lv in LEVELS)
            power[(name, seeds)] = tuple(float(np.mean(pe < lv)) for lv in LEVELS)
            print(f"{name:18s} {seeds:2d} seeds: size {size[(name, seeds)][0] / STUDIES:.4f} / "
                  f"{size[(name, seeds)][1] / STUDIES:.4f}, power {power[(name, seeds)][0]:.3f} / "
                  f"{power[(name, seeds)][1]:.3f}")
    bound = tuple(_band(STUDIES, lv) for lv in LEVELS)
    over = {(name, seeds) for (name, seeds), counts in size.items()
            if any(k > hi for k, hi in zip(counts, bound, strict=True))}
    print("above the bound:", sorted(over))
    assert not {key for key in over if key[0] == "generalized"}
    assert {("satterthwaite", 2), ("satterthwaite", 3), ("satterthwaite", 5), ("calibrated", 3),
            ("calibrated", 5)} <= over
    # The default's power at 5 seeds against the candidates': those that keep their size detect
    # less, those that detect more owe it to their excess size.
    gpv = power[("generalized", 5)]
    for name in ("satterthwaite", "calibrated"):
        assert power[(name, 5)][1] > gpv[1]
    assert power[("seed-df", 5)][0] < gpv[0] and power[("seed-df", 5)][1] < gpv[1]
    for seeds in (2, 3):
        assert power[("satterthwaite-kept", seeds)][1] < power[("generalized", seeds)][1] / 2


@pytest.mark.slow
@pytest.mark.parametrize("seeds", [pytest.param(2, marks=pytest.mark.heavy), 5])
def test_no_test_that_keeps_its_size_detects_much_more(seeds: int) -> None:
    """At the ranker-like design's own components (the mean mean squares of its null studies) and
    its gain, in the large-query limit: the generalized p-value's power is close to the envelope, the
    most that any test keeping its size at every seed share detects there, at 0.05 and at 0.05 / 8.
    The room left for a better reference is those few points."""
    null = _studies(STUDIES, seeds, 0.02, seed=3900 + seeds)[0]
    gain = _studies(EFFECT_STUDIES, seeds, 0.02, effect=EFFECT, seed=3950 + seeds)[0]
    _, ms_s, ms_q, ms_e = _mean_squares(null)
    a, c = float(ms_s.mean()), float(ms_e.mean())
    b = float(ms_q.mean()) - c
    delta = float(gain.mean()) * np.sqrt(seeds * QUERIES)
    for level in LEVELS:
        envelope = _envelope(level, a, seeds - 1, b, c, delta)
        gpv = _limit_power(level, a, seeds - 1, b, delta)
        print(f"{seeds} seeds, share {a / (a + b):.3f}, level {level:.5f}: generalized p-value "
              f"{gpv:.3f}, envelope {envelope:.3f}")
        assert gpv <= envelope + 1e-3  # the envelope bounds every test that keeps its size
        assert envelope - gpv < GAP[seeds], (envelope, gpv)
