"""The verdict across collections: a random-effects combination of one comparison's differences on
k collections (2 to 4 in practice), with the Hartung-Knapp-Sidik-Jonkman (HKSJ) variance and its t
reference. Pure numpy/scipy (docs/statistics.md, "Across collections").

Each collection i gives an estimate y_i of the mean difference (candidate minus baseline) and its
variance v_i (its test's squared standard error). The collections are independent (each has its own
queries and its own trained runs; nothing is paired across them), and the true differences may
differ between collections: y_i ~ N(mu + u_i, v_i), u_i ~ N(0, tau^2). With fixed-effect weights
w_i = 1 / v_i and Cochran's Q = sum w_i (y_i - y_fe)^2:

- tau^2 (``tau2_method``): ``pm`` (Paule-Mandel, the default: the tau^2 >= 0 at which the
  generalised Q, sum (y_i - mu(tau^2))^2 / (v_i + tau^2), equals its expectation k - 1) or ``dl``
  (DerSimonian-Laird: max(0, (Q - (k - 1)) / (sum w_i - sum w_i^2 / sum w_i)));
- random-effects weights w*_i = 1 / (v_i + tau^2), mu = sum w*_i y_i / sum w*_i;
- the HKSJ variance  var(mu) = sum w*_i (y_i - mu)^2 / ((k - 1) sum w*_i)  and
  t = mu / sqrt(var(mu)) on k - 1 degrees of freedom: the reference that keeps the size near its
  nominal level with few studies where the normal one (var = 1 / sum w*_i) does not (IntHout et
  al. 2014; the size at 2, 3 and 4 collections is measured in tests/stats/test_combined.py);
- I^2 = max(0, (Q - (k - 1)) / Q): the share of the spread between collections that the
  within-collection variances do not explain.

``weighting="equal"`` gives every collection the same weight (the limit of the random-effects
weights as tau^2 grows): mu is the plain mean of the y_i and the HKSJ variance becomes
sum (y_i - mu)^2 / (k (k - 1)), the one-sample t-test of the k differences. Its size does not depend
on how well each collection estimated its own variance, which few seeds estimate poorly
(docs/statistics.md gives both procedures' sizes at 3 and 5 seeds).

The HKSJ variance is the ``random effect wls`` row of statsmodels' ``combine_effects`` (its
``sd_eff_w_re_hksj``), which the tests compare it with.

>>> r = combine([0.02, -0.01, 0.03], [1e-4, 4e-4, 2e-4], tau2_method="dl")
>>> round(r.estimate, 5), round(r.se, 5), r.df, round(r.i2, 3)
(0.0177, 0.00976, 2, 0.263)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import DataError
from harness.stats import distributions as dist
from harness.stats.paired import oriented, tie_p

TAU2_METHODS = ("pm", "dl")
WEIGHTINGS = ("inverse-variance", "equal")
DEFAULT_TAU2 = "pm"
_PM_ITERATIONS = 100
_PM_TOLERANCE = 1e-12


@dataclass(frozen=True, kw_only=True)
class CombinedResult:
    """The combination of k collections' differences (module docstring). ``weights`` are the
    relative random-effects weights, in the collections' order."""

    k: int
    estimate: float
    se: float
    statistic: float
    df: int
    p_value: float
    ci_low: float
    ci_high: float
    confidence: float
    tau2: float
    i2: float
    q: float
    weights: tuple[float, ...]
    tau2_method: str = DEFAULT_TAU2
    weighting: str = WEIGHTINGS[0]

    @property
    def mean_diff(self) -> float:
        return self.estimate

    @property
    def direction(self) -> str:
        return oriented(self.estimate)


def tau2_dl(y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """DerSimonian-Laird tau^2 over the last axis (module docstring)."""
    w = 1.0 / v
    fe = (w * y).sum(axis=-1, keepdims=True) / w.sum(axis=-1, keepdims=True)
    q = (w * (y - fe) ** 2).sum(axis=-1)
    c = w.sum(axis=-1) - (w ** 2).sum(axis=-1) / w.sum(axis=-1)
    return np.asarray(np.maximum(0.0, (q - (y.shape[-1] - 1)) / c))


def tau2_pm(y: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Paule-Mandel tau^2 over the last axis: the root of Q(tau^2) = k - 1 (Q falls monotonically
    in tau^2), 0 where Q(0) <= k - 1; found by bisection on [0, upper], where upper is the variance
    of the y_i times k (Q(upper) < k - 1 there)."""
    k = y.shape[-1]

    def q_of(t2: np.ndarray) -> np.ndarray:
        w = 1.0 / (v + t2[..., None])
        mu = (w * y).sum(axis=-1, keepdims=True) / w.sum(axis=-1, keepdims=True)
        return np.asarray((w * (y - mu) ** 2).sum(axis=-1))

    lo = np.zeros(y.shape[:-1])
    hi = np.maximum(y.var(axis=-1) * k * 2.0, 1e-300) + v.max(axis=-1)
    for _ in range(_PM_ITERATIONS):
        mid = (lo + hi) / 2.0
        above = q_of(mid) > k - 1
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
        if np.all(hi - lo <= _PM_TOLERANCE * np.maximum(hi, 1e-300)):
            break
    return np.asarray(np.where(q_of(np.zeros_like(lo)) <= k - 1, 0.0, (lo + hi) / 2.0))


_TAU2 = {"pm": tau2_pm, "dl": tau2_dl}


@dataclass(frozen=True)
class CombinedBatch:
    """The combination over the last axis of stacked estimates, for simulation."""

    estimate: np.ndarray
    se: np.ndarray
    statistic: np.ndarray
    p_value: np.ndarray
    tau2: np.ndarray
    q: np.ndarray


def combine_batch(effects: np.ndarray, variances: np.ndarray, *, tau2_method: str = DEFAULT_TAU2,
                  weighting: str = WEIGHTINGS[0]) -> CombinedBatch:
    """``combine`` vectorised over leading axes: ``effects`` and ``variances`` of shape (..., k)."""
    y = np.asarray(effects, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    if y.shape != v.shape:
        raise DataError(f"effects and variances differ in shape: {y.shape} vs {v.shape}")
    k = y.shape[-1]
    if k < 2:
        raise DataError(f"a combination across collections needs at least 2 collections, got {k}")
    if tau2_method not in _TAU2:
        raise DataError(f"tau2 method must be one of {', '.join(TAU2_METHODS)}, got {tau2_method!r}")
    if weighting not in WEIGHTINGS:
        raise DataError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if not (np.isfinite(y).all() and np.isfinite(v).all()) or (v < 0).any():
        raise DataError("a combination across collections needs finite estimates and variances >= 0")
    spread = (v > 0).all(axis=-1)
    if weighting == WEIGHTINGS[0] and not spread.all():
        raise DataError("inverse-variance weights need every collection's variance > 0 (a difference "
                        "without spread has none; equal weights do not use them)")
    # Equal weights use the variances for the heterogeneity figures only: NaN where one is 0.
    v_safe = np.where(spread[..., None], v, 1.0)
    w_fe = 1.0 / v_safe
    fe = (w_fe * y).sum(axis=-1, keepdims=True) / w_fe.sum(axis=-1, keepdims=True)
    q = np.where(spread, (w_fe * (y - fe) ** 2).sum(axis=-1), np.nan)
    tau2 = np.where(spread, _TAU2[tau2_method](y, v_safe), np.nan)
    w = 1.0 / (v + tau2[..., None]) if weighting == WEIGHTINGS[0] else np.ones_like(v)
    mu = (w * y).sum(axis=-1) / w.sum(axis=-1)
    var = (w * (y - mu[..., None]) ** 2).sum(axis=-1) / ((k - 1) * w.sum(axis=-1))
    se = np.sqrt(var)
    # Equal estimates (to rounding, as paired_test's constant shift) leave no spread: t = +-inf, and
    # p is the sign-flip p of k equal differences, not 0 (paired.tie_p: the collections'
    # differences of a metric that moves in steps tie often).
    apart = se > 1e-12 * np.abs(mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(apart, mu / np.where(apart, se, 1.0), np.where(mu == 0, 0.0, np.sign(mu) * np.inf))
    p = np.where(apart, 2.0 * dist.t.sf(np.abs(t), k - 1), np.where(mu == 0, 1.0, tie_p(k)))
    return CombinedBatch(estimate=mu, se=se, statistic=t, p_value=p, tau2=tau2, q=q)


def combine(effects: Sequence[float], variances: Sequence[float], *, confidence: float = 0.95,
            tau2_method: str = DEFAULT_TAU2, weighting: str = WEIGHTINGS[0]) -> CombinedResult:
    """The HKSJ random-effects combination of k >= 2 collections' estimates (module docstring).
    Equal estimates leave the HKSJ variance 0 and t = +-inf: p is then that of k equal differences
    under sign flips, 2^(1 - k) (``paired.tie_p``; 1 where they are 0), and the interval the point
    where that p is below 1 - confidence, else the whole line."""
    if not 0.0 < confidence < 1.0:
        raise DataError(f"confidence must be in (0, 1), got {confidence}")
    y = np.asarray(effects, dtype=np.float64)
    v = np.asarray(variances, dtype=np.float64)
    if y.ndim != 1:
        raise DataError(f"combine takes one estimate per collection, got shape {y.shape}")
    b = combine_batch(y, v, tau2_method=tau2_method, weighting=weighting)
    k = len(y)
    half = float(dist.t.ppf(0.5 + confidence / 2.0, k - 1)) * float(b.se)
    if math.isinf(float(b.statistic)) and float(b.p_value) >= 1.0 - confidence:
        half = math.inf  # no spread to scale an interval by, and a p that rejects nothing
    q = float(b.q)
    w = 1.0 / (v + float(b.tau2)) if weighting == WEIGHTINGS[0] else np.ones_like(v)
    i2 = math.nan if math.isnan(q) else max(0.0, (q - (k - 1)) / q) if q > 0 else 0.0
    return CombinedResult(
        k=k, estimate=float(b.estimate), se=float(b.se), statistic=float(b.statistic), df=k - 1,
        p_value=float(b.p_value), ci_low=float(b.estimate) - half, ci_high=float(b.estimate) + half,
        confidence=confidence, tau2=float(b.tau2), i2=i2,
        q=q, weights=tuple(float(x) for x in w / w.sum()), tau2_method=tau2_method, weighting=weighting)


def standard_error(mean_diff: float, ci_low: float, ci_high: float, confidence: float, df: float) -> float:
    """The standard error behind a t interval mean +- t_{(1+c)/2, df} se (a test that reports its
    interval and df, not its SE); infinite df is the normal interval."""
    crit = dist.norm.ppf(0.5 + confidence / 2.0) if math.isinf(df) else dist.t.ppf(0.5 + confidence / 2.0, df)
    return float((ci_high - ci_low) / (2.0 * crit))
