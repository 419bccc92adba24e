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
  generator, training SD 0.02, 50 queries) through every candidate reference;
- Kenward-Roger's closed form on the balanced crossed design, checked against its general matrix
  formulas at REML estimates checked against statsmodels' MixedLM.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf
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


# --- Kenward-Roger on the balanced crossed design, in closed form from the mean squares.
#
# The data's covariance V = s2_seed G_seed + s2_query G_query + s2_resid I has four eigenspaces: the
# grand mean (eigenvalue E_seed + E_query - E_resid), the seed contrasts (E_seed = s2_resid +
# Q s2_seed, S - 1 of them), the query contrasts (E_query = s2_resid + S s2_query, Q - 1) and the
# rest (E_resid = s2_resid). The fixed part is the mean alone, and 1 is an eigenvector of V and of
# every G_i, so the GLS estimate is dbar whatever the components, Q_ij = P_i Phi P_j, R_ij = 0 (V is
# linear in them) and Kenward-Roger's adjusted covariance Phi_A equals Phi = (E_seed + E_query -
# E_resid) / (S Q). With one contrast (l = 1) A1 = A2 = A, g = -1, c1, c2, c3 = -1/7, 2/7, 4/7, B =
# 7A/2, so E* = 1 / (1 - A), rho = (1 - A/2) / (1 - 2A), the df m = 4 + 3 / (rho - 1) = 2 / A and
# the scale lambda = m / (E* (m - 2)) = 1. A = Var(Phi-hat) / Phi^2 with W the inverse of REML's
# expected information, which the eigenspaces make diagonal in the E's: Var(E_i-hat) = 2 E_i^2 /
# df_i. So the test is Student's t of dbar / sqrt(Phi) with
#
#     m = (E_seed + E_query - E_resid)^2 / (E_seed^2 / df_seed + E_query^2 / df_query + E_resid^2 / df_resid)
#
# at the REML estimates: the mean squares where the components are interior (then m is
# Satterthwaite's), and where a component is on its boundary the REML fit pools its mean square with
# the residual one (the E's are the tree-ordered isotonic regression of the mean squares, weights
# their df). Kenward and Roger's W counts every component, a zero one included (the expected
# information at the estimate): a seed component at 0 then still brings E_seed^2 / (S - 1) into the
# denominator. Implementations that treat a boundary component as fixed drop its term instead, and
# that is the clamped Satterthwaite test with a pooled residual.

def _reml_expectations(ms_s: np.ndarray, ms_q: np.ndarray, ms_e: np.ndarray, s: int, q: int
                       ) -> tuple[np.ndarray, ...]:
    """E_seed, E_query, E_resid at the REML estimates (components >= 0) and whether the seed and the
    query mean squares were pooled with the residual one: the REML likelihood of a balanced design is
    sum_i df_i (log E_i + MS_i / E_i) over E_seed, E_query >= E_resid, maximised by pooling the
    smaller child first, then the other if it lies below the pooled value."""
    dfs, dfq, dfe = s - 1, q - 1, (s - 1) * (q - 1)
    seed_first = ms_s <= ms_q
    lo, d_lo = np.where(seed_first, ms_s, ms_q), np.where(seed_first, dfs, dfq)
    hi, d_hi = np.where(seed_first, ms_q, ms_s), np.where(seed_first, dfq, dfs)
    pool1 = lo < ms_e
    e1 = np.where(pool1, (d_lo * lo + dfe * ms_e) / (d_lo + dfe), ms_e)
    w1 = np.where(pool1, d_lo + dfe, dfe)
    pool2 = pool1 & (hi < e1)
    e2 = np.where(pool2, (d_hi * hi + w1 * e1) / (d_hi + w1), e1)
    e_lo, e_hi = np.where(pool1, e2, lo), np.where(pool2, e2, hi)
    return (np.where(seed_first, e_lo, e_hi), np.where(seed_first, e_hi, e_lo), e2,
            np.where(seed_first, pool1, pool2), np.where(seed_first, pool2, pool1))


def _kenward_roger(d: np.ndarray, *, drop_boundary: bool = False) -> tuple[np.ndarray, ...]:
    """Kenward-Roger's (Phi, df, p) per study of ``d`` (studies x seeds x queries), closed form above;
    ``drop_boundary`` treats a component estimated at 0 as fixed (its term leaves W)."""
    _, s, q = d.shape
    grand, ms_s, ms_q, ms_e = _mean_squares(d)
    e_s, e_q, e_e, pooled_s, pooled_q = _reml_expectations(ms_s, ms_q, ms_e, s, q)
    dfs, dfq, dfe = s - 1, q - 1, (s - 1) * (q - 1)
    var = e_s + e_q - e_e
    if drop_boundary:
        keep_s, keep_q = ~pooled_s, ~pooled_q
        coef = 1 - keep_s.astype(int) - keep_q.astype(int)
        df_pooled = dfe + np.where(pooled_s, dfs, 0) + np.where(pooled_q, dfq, 0)
        denom = (np.where(keep_s, e_s ** 2 / dfs, 0.0) + np.where(keep_q, e_q ** 2 / dfq, 0.0)
                 + (coef * e_e) ** 2 / df_pooled)
    else:
        denom = e_s ** 2 / dfs + e_q ** 2 / dfq + e_e ** 2 / dfe
    df = var ** 2 / denom
    phi = var / (s * q)
    return phi, df, 2 * stats.t.sf(np.abs(grand) / np.sqrt(phi), df)


def _kenward_roger_p(d: np.ndarray) -> np.ndarray:
    return _kenward_roger(d)[2]


def _kenward_roger_dropped_p(d: np.ndarray) -> np.ndarray:
    return _kenward_roger(d, drop_boundary=True)[2]


# --- Calibrating at an upper confidence bound of the seed mean square's expectation A (equivalently
# of the seed share f = A / (A + B), B taken as known): p_cal = G_{A_u}(p), G_A the generalized
# p-value's null distribution function at A (its size at level p), A_u = max(MS_seed (S - 1) /
# chi2_{S-1}(beta), MS_resid) the upper 1 - beta bound. G_A(p) <= p and it grows with A, so the test
# is exact at the least favourable A the data allow. BETA per S is the largest of 0.5, 0.2, 0.1,
# 0.05, 0.02, 0.01, 0.005, 0.002, 0.001 whose size in the large-query limit is at most nominal at
# every share at 0.05, 0.05 / 8 and 0.05 / 30 (test_the_upper_bound_calibration_keeps_its_size):
# the relative conservatism of the generalized p-value grows at smaller levels, so a bound that
# keeps 0.05 (beta 0.05 at 2 seeds) is twice liberal at 0.05 / 8.
BETA = {2: 0.001, 3: 0.002, 5: 0.005, 10: 0.02}
A_GRID = np.geomspace(1e-3, 1e6, 90)


def _size_levels(grid: np.ndarray, k: int, levels: tuple[float, ...]) -> np.ndarray:
    """G_A^-1(level) over A_GRID (b = 1, the limit): the level at which the generalized p-value's
    size at A is ``level``; one row per level."""
    u, w = chi2_nodes(k)
    out = []
    for level in levels:
        lo, hi = np.full(A_GRID.shape, level), np.ones(A_GRID.shape)
        for _ in range(30):  # bisection in log p
            mid = np.sqrt(lo * hi)
            c = _interpolate(grid, np.broadcast_to(mid[:, None], (A_GRID.size, u.size)), A_GRID[:, None] * u)
            over = 2 * special.ndtr(-c / np.sqrt(A_GRID + 1)[:, None]) @ w > level
            lo, hi = np.where(over, lo, mid), np.where(over, mid, hi)
        out.append(np.sqrt(lo * hi))
    return np.array(out)


def _upper_bound_size(grid: np.ndarray, levels: np.ndarray, k: int, beta: float, floor: float,
                      a: float) -> float:
    """The calibrated test's size in the limit at seed expectation ``a`` (b = 1) at one level, whose
    G_A^-1 over A_GRID is ``levels``: it rejects where p <= G_{A_u}^-1(level)."""
    u, w = chi2_nodes(k)
    m = a * u
    a_u = np.maximum(m * k / stats.chi2.ppf(beta, k), floor)
    level = np.exp(np.interp(np.log(a_u), np.log(A_GRID), np.log(levels)))
    return float(2 * special.ndtr(-_interpolate(grid, level, m) / np.sqrt(a + 1)) @ w)


def _upper_bound_p(d: np.ndarray, grid: np.ndarray | None = None) -> np.ndarray:
    """The generalized p-value (finite Q) calibrated at the upper 1 - BETA[S] bound of A, G computed
    in the large-query limit by quadrature; where B is not positive the pivot is the across-seeds
    t-test, exact, and left unchanged."""
    s = d.shape[1]
    k = s - 1
    grid = _critical_grid(k) if grid is None else grid
    _, ms_s, ms_q, ms_e = _mean_squares(d)
    u, w = chi2_nodes(k)
    p = crossed_batch(d).p_value
    b = ms_q - ms_e
    pos = b > 0
    unit = np.where(pos, b, 1.0)
    a = np.maximum(ms_s * k / stats.chi2.ppf(BETA[s], k), ms_e) / unit
    c = _interpolate(grid, p[:, None], a[:, None] * u[None, :])
    return np.where(pos, np.minimum(2.0 * special.ndtr(-c / np.sqrt(a + 1.0)[:, None]) @ w, 1.0), p)


REFERENCES = {"generalized": lambda d: crossed_batch(d).p_value, "satterthwaite": _satterthwaite_p,
              "kenward-roger": _kenward_roger_p, "kenward-roger-dropped": _kenward_roger_dropped_p,
              "satterthwaite-kept": _kept_seed_term_p, "calibrated": _calibrated_p,
              "upper-bound": _upper_bound_p, "seed-df": _seed_df_p}


@pytest.mark.heavy  # the whole search, about a minute: `make test-all`
def test_sizes_and_power_of_the_candidate_references() -> None:
    """Null studies at 2, 3, 5 and 10 seeds and a gain of 0.06 (training SD 0.02): the default's size
    is not above 5% or 0.05 / 8 (its count within the upper 99% binomial bound) at every seed count.
    The candidates that detect more at 5 seeds at 0.05 / 8 exceed their size: the clamped
    Satterthwaite test and Kenward-Roger with boundary components dropped (its near twin) at 2, 3 and
    5 seeds, the calibrated generalized p-value at 3 and 5. Of those that keep their size,
    Kenward-Roger (every component in W) and the kept seed term detect less at 2 and 3 seeds and at
    most 2 points more at 5 and 10, Student's t with S - 1 df less at 5, and the calibration at an upper
    bound of the seed share at most a point more anywhere. So none replaces the default."""
    size, power = {}, {}
    for seeds in (2, 3, 5, 10):
        null = _studies(STUDIES, seeds, 0.02, seed=3900 + seeds)[0]
        gain = _studies(EFFECT_STUDIES, seeds, 0.02, effect=EFFECT, seed=3950 + seeds)[0]
        grid = _critical_grid(seeds - 1)
        for name, fn in REFERENCES.items():
            p, pe = (fn(null), fn(gain)) if name != "upper-bound" else (fn(null, grid), fn(gain, grid))
            size[(name, seeds)] = tuple(int(np.sum(p < lv)) for lv in LEVELS)
            power[(name, seeds)] = tuple(float(np.mean(pe < lv)) for lv in LEVELS)
            print(f"{name:21s} {seeds:2d} seeds: size {size[(name, seeds)][0] / STUDIES:.4f} / "
                  f"{size[(name, seeds)][1] / STUDIES:.4f}, power {power[(name, seeds)][0]:.3f} / "
                  f"{power[(name, seeds)][1]:.3f}")
    bound = tuple(_band(STUDIES, lv) for lv in LEVELS)
    over = {(name, seeds) for (name, seeds), counts in size.items()
            if any(k > hi for k, hi in zip(counts, bound, strict=True))}
    print("above the bound:", sorted(over))
    assert not {key for key in over if key[0] in ("generalized", "kenward-roger", "upper-bound")}
    assert {("satterthwaite", 2), ("satterthwaite", 3), ("satterthwaite", 5), ("calibrated", 3),
            ("calibrated", 5), ("kenward-roger-dropped", 2), ("kenward-roger-dropped", 3),
            ("kenward-roger-dropped", 5)} <= over
    # The default's power at 5 seeds against the candidates': those that keep their size detect
    # less or at most a little more, those that detect more owe it to their excess size.
    gpv = power[("generalized", 5)]
    for name in ("satterthwaite", "calibrated", "kenward-roger-dropped"):
        assert power[(name, 5)][1] > gpv[1]
    assert power[("seed-df", 5)][0] < gpv[0] and power[("seed-df", 5)][1] < gpv[1]
    for seeds in (2, 3):
        assert power[("satterthwaite-kept", seeds)][1] < power[("generalized", seeds)][1] / 2
        assert power[("kenward-roger", seeds)][1] < power[("generalized", seeds)][1] / 2
    assert power[("kenward-roger", 2)][0] < power[("generalized", 2)][0] / 2
    for seeds in (2, 3, 5, 10):
        for lv in range(len(LEVELS)):
            assert power[("kenward-roger", seeds)][lv] - power[("generalized", seeds)][lv] < 0.03
            assert abs(power[("upper-bound", seeds)][lv] - power[("generalized", seeds)][lv]) <= 0.01


@pytest.mark.heavy  # about 5 s of quadrature per seed count: `make test-all`
@pytest.mark.parametrize("seeds", [2, 3, 5, 10])
def test_the_upper_bound_calibration_keeps_its_size(seeds: int) -> None:
    """In the large-query limit (residual 4 B, as in the test above): at BETA[seeds] the calibration at
    the upper bound keeps its size at every share at 0.05, 0.05 / 8 and 0.05 / 30 (to the grids'
    interpolation, 0.2%), while five times beta (0.5 at 10 seeds) exceeds it at 0.05 / 30 by more
    than 4%."""
    levels_ = (0.05, 0.05 / 8, 0.05 / 30)
    k, floor = seeds - 1, 4.0
    grid = _critical_grid(k)
    g_inv = _size_levels(grid, k, levels_)
    shares = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 0.9999)

    def worst(beta: float, i: int) -> float:
        return max(_upper_bound_size(grid, g_inv[i], k, beta, floor, f / (1 - f)) for f in shares) / levels_[i]

    kept = [worst(BETA[seeds], i) for i in range(3)]
    looser = worst(BETA[seeds] * 5 if seeds < 10 else 0.5, 2)
    print(f"{seeds} seeds, beta {BETA[seeds]}: worst size / level {np.round(kept, 3)}; 5 x beta at 0.05/30: "
          f"{looser:.3f}")
    assert max(kept) <= 1.002, kept
    assert looser > 1.04, looser
    if seeds == 2:  # the bound that keeps 0.05 does not keep the levels a correction uses
        at_05 = [worst(0.05, i) for i in range(3)]
        print(f"2 seeds, beta 0.05: worst size / level {np.round(at_05, 3)}")
        assert at_05[0] < 1.005 and at_05[1] > 1.5 and at_05[2] > 2.0, at_05


# --- Kenward-Roger from its matrices (Kenward & Roger 1997, the general formulas), at REML estimates
# checked against statsmodels' MixedLM with crossed variance components.

def _kr_from_matrices(y: np.ndarray, seeds: int, queries: int, sig: tuple[float, float, float],
                      drop_boundary: bool = False) -> dict[str, float]:
    """Phi, Phi_A, lambda, m and the F statistic of H0: mean = 0, from the n x n covariance."""
    n = seeds * queries
    seed, query = np.repeat(np.arange(seeds), queries), np.tile(np.arange(queries), seeds)
    g_all = [(seed[:, None] == seed[None, :]).astype(float), (query[:, None] == query[None, :]).astype(float),
             np.eye(n)]
    v = sum(s_i * g for s_i, g in zip(sig, g_all, strict=True))
    keep = [i for i in range(3) if not (drop_boundary and i < 2 and sig[i] == 0)]
    g_k = [g_all[i] for i in keep]
    vi = np.linalg.inv(v)
    x = np.ones((n, 1))
    phi = np.linalg.inv(x.T @ vi @ x)
    beta = phi @ x.T @ vi @ y[:, None]
    proj = vi - vi @ x @ phi @ x.T @ vi
    w = np.linalg.inv(np.array([[0.5 * np.trace(proj @ a @ proj @ b) for b in g_k] for a in g_k]))
    p_i = [-x.T @ vi @ a @ vi @ x for a in g_k]
    q_ij = [[x.T @ vi @ a @ vi @ b @ vi @ x for b in g_k] for a in g_k]
    r = range(len(g_k))
    lam_adj = phi @ sum(w[i, j] * (q_ij[i][j] - p_i[i] @ phi @ p_i[j]) for i in r for j in r) @ phi
    phi_a = phi + 2 * lam_adj
    ell, theta = 1, np.linalg.inv(phi)
    tr = [np.trace(theta @ phi @ p_i[i] @ phi) for i in r]
    a1 = sum(w[i, j] * tr[i] * tr[j] for i in r for j in r)
    a2 = sum(w[i, j] * np.trace(theta @ phi @ p_i[i] @ phi @ theta @ phi @ p_i[j] @ phi) for i in r for j in r)
    big_b = (a1 + 6 * a2) / (2 * ell)
    g = ((ell + 1) * a1 - (ell + 4) * a2) / ((ell + 2) * a2)
    den = 3 * ell + 2 * (1 - g)
    c1, c2, c3 = g / den, (ell - g) / den, (ell + 2 - g) / den
    e_star = 1 / (1 - a2 / ell)
    v_star = 2 / ell * (1 + c1 * big_b) / ((1 - c2 * big_b) ** 2 * (1 - c3 * big_b))
    rho = v_star / (2 * e_star ** 2)
    m = 4 + (ell + 2) / (ell * rho - 1)
    scale = m / (e_star * (m - 2))
    return {"phi": phi.item(), "phi_a": phi_a.item(), "lambda": float(scale), "m": float(m),
            "F": float(scale * (beta.T @ np.linalg.inv(phi_a) @ beta).item() / ell)}


def _reml_loglik(y: np.ndarray, seeds: int, queries: int, sig: tuple[float, float, float]) -> float:
    """The REML log-likelihood (up to a constant) from the n x n covariance."""
    n = seeds * queries
    seed, query = np.repeat(np.arange(seeds), queries), np.tile(np.arange(queries), seeds)
    v = (sig[0] * (seed[:, None] == seed[None, :]) + sig[1] * (query[:, None] == query[None, :])
         + sig[2] * np.eye(n))
    vi = np.linalg.inv(v)
    x = np.ones((n, 1))
    xvx = x.T @ vi @ x
    proj = vi - vi @ x @ np.linalg.inv(xvx) @ x.T @ vi
    return -0.5 * (np.linalg.slogdet(v)[1] + np.log(xvx.item()) + float(y @ proj @ y))


@pytest.mark.parametrize("case", ["interior", "seed on the boundary", "query on the boundary"])
def test_kenward_roger_closed_form_matches_its_matrices(case: str) -> None:
    """The closed form above (E's from the mean squares, m = 2 / A, lambda = 1, Phi_A = Phi) equals
    Kenward and Roger's general formulas computed from the covariance matrices at the same REML
    estimates, with W over every component and with boundary components dropped; the REML estimates
    equal statsmodels' MixedLM fit in the interior and, on a boundary, reach a REML likelihood at
    least as high as its fit's."""
    g = np.random.default_rng({"interior": 5, "seed on the boundary": 1, "query on the boundary": 9}[case])
    # Four seeds: with three, dropping the query component leaves 2 df, where Kenward and Roger's
    # general formulas are 0 / 0 (A = 1, E* infinite) and their rounding decides lambda.
    seeds, queries = 4, 6
    seed_sd, query_sd = {"interior": (0.05, 0.08), "seed on the boundary": (0.0, 0.08),
                         "query on the boundary": (0.05, 0.0)}[case]
    while True:
        d = (g.normal(0.05, 0.1, (seeds, queries)) + g.normal(0, seed_sd, (seeds, 1))
             + g.normal(0, query_sd, (1, queries)))
        _, ms_s, ms_q, ms_e = (float(v[0]) for v in _mean_squares(d[None]))
        if {"interior": ms_s > ms_e and ms_q > ms_e, "seed on the boundary": ms_s < ms_e < ms_q,
                "query on the boundary": ms_q < ms_e < ms_s}[case]:
            break
    e_s, e_q, e_e, _, _ = (float(v[0]) for v in _reml_expectations(*(np.array([v]) for v in (ms_s, ms_q, ms_e)),
                                                                     seeds, queries))
    sig = ((e_s - e_e) / queries, (e_q - e_e) / seeds, e_e)
    frame = pd.DataFrame({"y": d.ravel(), "seed": np.repeat(np.arange(seeds), queries),
                          "query": np.tile(np.arange(queries), seeds), "one": 1})
    model = smf.mixedlm("y ~ 1", frame, groups="one", re_formula="0",
                        vc_formula={"seed": "0 + C(seed)", "query": "0 + C(query)"})
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its convergence chatter on a boundary
        fit = model.fit(reml=True, method=["lbfgs"])
    vc = dict(zip(model.exog_vc.names, fit.vcomp, strict=True))
    fitted = (float(vc["seed"]), float(vc["query"]), float(fit.scale))
    y = d.ravel()
    if case == "interior":
        np.testing.assert_allclose(sig, fitted, rtol=1e-3, atol=1e-7)
    else:
        assert min(sig[:2]) == 0.0
        assert _reml_loglik(y, seeds, queries, sig) >= _reml_loglik(y, seeds, queries, fitted) - 1e-9
    for drop in (False, True):
        phi, df, p = (float(v[0]) for v in _kenward_roger(d[None], drop_boundary=drop))
        kr = _kr_from_matrices(y, seeds, queries, sig, drop)
        assert kr["lambda"] == pytest.approx(1.0, abs=1e-9)
        assert kr["phi_a"] == pytest.approx(kr["phi"], rel=1e-9)
        assert phi == pytest.approx(kr["phi"], rel=1e-9)
        assert df == pytest.approx(kr["m"], rel=1e-8)
        assert p == pytest.approx(float(stats.f.sf(kr["F"], 1, kr["m"])), rel=1e-8)
    # Every component in W: a boundary seed component keeps its S - 1 df term (fewer df than the
    # clamped Satterthwaite test's Q - 1); dropped, the df is the query mean square's alone.
    df_all = float(_kenward_roger(d[None])[1][0])
    df_dropped = float(_kenward_roger(d[None], drop_boundary=True)[1][0])
    if case == "seed on the boundary":
        assert df_dropped == pytest.approx(queries - 1) and df_all < queries - 1
    elif case == "query on the boundary":
        assert df_dropped == pytest.approx(seeds - 1) and df_all < seeds - 1
    else:
        assert df_all == pytest.approx(df_dropped)


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
