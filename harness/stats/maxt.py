"""The single-step max-t adjustment for K comparisons with one shared baseline (Dunnett 1955's
many-to-one idea applied to the harness's paired tests). Pure math: numpy and scipy only.

Every candidate k is compared with the same baseline runs, so the K test statistics are correlated
(about 0.5 when the candidates and the baseline vary alike). Bonferroni and Holm ignore that and pay
for it in power; max-t uses it. With T = (T_1..T_K) the statistics under the global null and R their
correlation, the adjusted p-value of comparison k is

    p~_k = P(max_j |T_j| >= |t_k|)

and the simultaneous interval of every comparison uses the critical value c with
P(max_j |T_j| >= c) = 1 - confidence, so an interval excludes 0 exactly when p~_k < 1 - confidence.

The distribution of T (``max_abs_sf``): a central multivariate t with correlation R and df degrees
of freedom, or a multivariate normal (df infinite); its box probability is scipy's randomised
quasi-Monte Carlo (Genz & Bretz; ``scipy.stats.multivariate_t`` / ``multivariate_normal`` ``cdf``)
with ``MAXPTS_PER_DIM`` points per comparison and a generator seeded afresh at every call, so the same
statistics always give the same p-values and p~ is a continuous function of the threshold (the
critical value is its root). Its error is about 1e-5 (standard deviation over generator seeds, 8
comparisons, tests/stats/test_maxt.py); a single comparison gets the exact Student/normal tail.
A correlation matrix that is singular (more comparisons than units, or two identical comparisons) gets
a ridge of ``RIDGE`` on its diagonal, rescaled to unit diagonal: the Genz algorithm needs a positive
definite matrix, and the ridge moves p~ by about 1e-4 at most.

The correlation is estimated from the data (``unit_correlation``): under the paired t-tests over
queries (per seed, or seed-averaged) the statistic of comparison k is the mean of its
unit-level differences d_k = x_k - x_0 over its n_k units divided by its standard error; the
correlation of the means is the sample correlation of the unit-level differences (np.cov, ddof = 1,
over the units all comparisons share), scaled by the overlap min(n_j, n_k) / sqrt(n_j n_k) where a
seed schedule gave the comparisons different first seeds. The multivariate t takes the smallest
df of the family (n_k - 1): each statistic has its own denominator, so the multivariate t is the
usual approximation (exact for Dunnett's pooled one-way layout), conservative in the df.

Not for the crossed test, nor the t-test across seeds: their joint null would be estimated from
the seeds, and with few seeds max-t exceeded its family-wise error in seeded null studies with a
per-seed training effect (the crossed test: 6-8% at 2-5 seeds, its z scores' joint tails thinner
than a normal copula with the estimated correlation gives, even with the true correlation; across
3 seeds: 19%, the correlation of 8 comparisons from 3 units). harness.stats.corrections.MAXT_TESTS
names the tests it serves.

Configurations stopped early (counted with p = 1 by the p-value corrections) have no values, so
their statistics cannot enter R: they enter by a union bound, each adding its marginal tail,
p~_k = P(max_j |T_j| >= |t_k|) + phantoms * P(|T| >= |t_k|), which keeps the family-wise error
under any correlation; the critical value solves the same sum.

Reference: Dunnett, C. W. (1955), A multiple comparison procedure for comparing several treatments
with a control, J. American Statistical Association 50(272); Hothorn, Bretz & Westfall (2008),
Simultaneous inference in general parametric models, Biometrical Journal 50(3).

>>> r = np.array([[1.0, 0.5], [0.5, 1.0]])
>>> [round(float(p), 3) for p in max_abs_sf(np.array([1.96, 2.5]), r, math.inf)]
[0.091, 0.023]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from harness.errors import DataError
from harness.stats import distributions as dist
from harness.stats.roots import brentq

MAXPTS_PER_DIM = 4000
QMC_SEED = 0
RIDGE = 1e-6
# The largest family (K comparisons) max-t integrates over. Each box probability is a quasi-Monte
# Carlo integral of up to MAXPTS_PER_DIM * K points in K dimensions, taken at every comparison's
# statistic and at each step of the critical value's root: a family costs about K^3. Measured on a
# 2-core machine (one family, seed-averaged t-test, 3 and 50 queries; docs/statistics.md, "Max-t"):
# 1-3 s at K = 5-10, 3-7 s at 15, 6-24 s at 20, 10-50 s at 25, 19-60 s at 30, 70 s at 40, 165 s at
# 50; a table of 100 ran past 4 minutes, one of 1000 took gigabytes. ``significance.analyse``
# refuses a larger family before any test runs (``maxt_too_large``), ``max_abs_sf`` one it is given.
MAXT_MAX_FAMILY = 20


def marginal_sf(x: np.ndarray | float, df: float) -> np.ndarray:
    """P(|T| >= x) for one Student t with ``df`` (normal when infinite)."""
    x = np.abs(np.asarray(x, dtype=np.float64))
    return 2.0 * (dist.norm.sf(x) if math.isinf(df) else dist.t.sf(x, df))


def _positive_definite(corr: np.ndarray) -> np.ndarray:
    r = (np.asarray(corr, dtype=np.float64) + np.asarray(corr, dtype=np.float64).T) / 2.0
    np.fill_diagonal(r, 1.0)
    if np.linalg.eigvalsh(r)[0] < RIDGE:
        r = (r + RIDGE * np.eye(len(r))) / (1.0 + RIDGE)
    return r


def max_abs_sf(x: np.ndarray | Sequence[float], corr: np.ndarray, df: float, *,
               maxpts_per_dim: int = MAXPTS_PER_DIM) -> np.ndarray:
    """P(max_j |T_j| >= x) for each threshold x, T central multivariate t (correlation ``corr``,
    ``df``; normal when infinite); deterministic (module docstring)."""
    xs = np.abs(np.asarray(x, dtype=np.float64))
    r = np.atleast_2d(np.asarray(corr, dtype=np.float64))
    k = len(r)
    if k > MAXT_MAX_FAMILY:  # the caller's check (significance.analyse) names the way out
        raise DataError(f"max-t over {k} comparisons: at most {MAXT_MAX_FAMILY} (MAXT_MAX_FAMILY), its "
                        "integral growing with the cube of the family")
    from scipy import stats  # the rest of scipy.stats only where it runs (harness.stats.distributions)

    if k == 1:
        return marginal_sf(xs, df)
    r = _positive_definite(r)
    out = np.empty(xs.shape)
    for i, v in np.ndenumerate(xs):
        if v == 0:
            out[i] = 1.0
        elif math.isinf(v):
            out[i] = 0.0
        else:
            hi, lo = np.full(k, v), np.full(k, -v)
            rng = np.random.default_rng(QMC_SEED)
            if math.isinf(df):
                inside = stats.multivariate_normal.cdf(hi, cov=r, lower_limit=lo, maxpts=maxpts_per_dim * k,
                                                       abseps=1e-9, releps=0.0, rng=rng)
            else:
                inside = stats.multivariate_t.cdf(hi, shape=r, df=df, lower_limit=lo,
                                                  maxpts=maxpts_per_dim * k, random_state=rng)
            out[i] = min(1.0, max(0.0, 1.0 - float(inside)))
    return out


def adjusted(statistics: np.ndarray | Sequence[float], corr: np.ndarray, df: float, *,
             phantoms: int = 0, maxpts_per_dim: int = MAXPTS_PER_DIM) -> np.ndarray:
    """Single-step max-t adjusted p-values (module docstring), at least each marginal p, at most 1."""
    t = np.abs(np.asarray(statistics, dtype=np.float64))
    marginal = marginal_sf(t, df)
    p = max_abs_sf(t, corr, df, maxpts_per_dim=maxpts_per_dim) + phantoms * marginal
    return np.clip(p, marginal, 1.0)


def critical_value(corr: np.ndarray, df: float, alpha: float, *, phantoms: int = 0,
                   maxpts_per_dim: int = MAXPTS_PER_DIM) -> float:
    """c with P(max_j |T_j| >= c) (+ phantoms * P(|T| >= c)) = alpha: the simultaneous intervals'
    multiplier, the root of the same function ``adjusted`` evaluates."""
    if not 0.0 < alpha < 1.0:
        raise DataError(f"alpha must be in (0, 1), got {alpha}")
    k = len(np.atleast_2d(corr))  # a family past MAXT_MAX_FAMILY: max_abs_sf refuses it at the first end

    def gap(c: float) -> float:
        return float(max_abs_sf([c], corr, df, maxpts_per_dim=maxpts_per_dim)[0]
                     + phantoms * marginal_sf(c, df)) - alpha

    def quantile(a: float) -> float:
        return float(dist.norm.isf(a / 2.0) if math.isinf(df) else dist.t.isf(a / 2.0, df))

    lo, hi = quantile(alpha) * 0.99, quantile(alpha / (k + phantoms)) * 1.01  # marginal, Bonferroni
    if k == 1 and not phantoms:
        return quantile(alpha)
    return float(brentq(gap, lo, hi, xtol=1e-10, rtol=1e-12))


def unit_correlation(differences: Sequence[np.ndarray]) -> np.ndarray:
    """Correlation of the K mean differences, each over its units (module docstring): the units of
    comparison k are the first n_k of the units all comparisons are drawn from."""
    n = np.array([len(d) for d in differences])
    common = int(n.min())
    if common < 2:
        return np.eye(len(n))
    cov = np.atleast_2d(np.cov(np.stack([np.asarray(d, dtype=np.float64)[:common] for d in differences]),
                               ddof=1))
    cov = cov * np.minimum.outer(n, n) / np.outer(n, n)
    return _normalise(cov)


def _normalise(cov: np.ndarray) -> np.ndarray:
    """Covariance to correlation; a comparison without variance is uncorrelated with the rest."""
    sd = np.sqrt(np.maximum(np.diag(cov), 0.0))
    ok = sd > 0
    corr = np.eye(len(cov))
    corr[np.ix_(ok, ok)] = cov[np.ix_(ok, ok)] / np.outer(sd[ok], sd[ok])
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)
