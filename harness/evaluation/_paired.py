"""Paired significance tests on stored values: candidate vs baseline, one pair per unit (a query, or a
seed). Pure math: numpy and scipy only.

Every test reports, besides its statistic and two-sided p-value, the same description of the paired
differences d_i = candidate_i - baseline_i (i = 1..n):

- mean difference  dbar = sum(d_i) / n
- confidence interval  dbar +- t_{(1+c)/2, n-1} * s_d / sqrt(n)   (s_d: sample SD, ddof = 1)
- effect size  d_z = dbar / s_d   (Cohen's d for paired samples)
- direction  better (dbar > 0), worse (dbar < 0) or equal; every harness metric is higher-is-better.

Procedures (registered in PROCEDURES, looked up by name):
- ``t``: paired Student's t-test, t = dbar / (s_d / sqrt n), df = n - 1 (scipy.stats.ttest_rel);
  the test of Penha & Hauff (2020, 2021).
- ``wilcoxon``: Wilcoxon signed-rank test (scipy.stats.wilcoxon; zero differences dropped, exact
  distribution for small n).
- ``randomisation``: paired sign-flip randomisation test of the mean difference. Under H0 each
  d_i is equally likely to have either sign; p = P(|sum s_i d_i| >= |sum d_i|). Exact enumeration of
  all 2^n sign vectors when 2^n <= resamples, else ``resamples`` random sign vectors drawn from the
  given Generator, p = (hits + 1) / (resamples + 1). Deterministic for a given Generator seed.

Identical samples (every d_i = 0) give p = 1 under every procedure; a constant non-zero shift gives
the t-test t = +-inf, p = 0 (s_d = 0).

>>> r = paired_test("t", [1.9, 0.8, 1.1], [0.7, -1.6, -0.2], rng=np.random.default_rng(0))
>>> r.direction, round(r.mean_diff, 4)
('better', 1.6333)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from harness.errors import DataError
from harness.registry import Registry

BETTER = "better"
WORSE = "worse"
EQUAL = "equal"


@dataclass(frozen=True, kw_only=True)
class PairedResult:
    """One paired comparison (module docstring: definitions)."""

    procedure: str
    n: int
    statistic: float
    p_value: float
    mean_diff: float
    ci_low: float
    ci_high: float
    confidence: float
    d_z: float

    @property
    def direction(self) -> str:
        if self.mean_diff > 0:
            return BETTER
        return WORSE if self.mean_diff < 0 else EQUAL


# A procedure maps the paired differences to (statistic, two-sided p-value).
Procedure = Callable[..., tuple[float, float]]
PROCEDURES: Registry[Procedure] = Registry("evaluation.test")


@PROCEDURES.register("t")
def _t(d: np.ndarray, *, rng: np.random.Generator, resamples: int) -> tuple[float, float]:
    res = stats.ttest_rel(d, np.zeros_like(d))
    return float(res.statistic), float(res.pvalue)


@PROCEDURES.register("wilcoxon")
def _wilcoxon(d: np.ndarray, *, rng: np.random.Generator, resamples: int) -> tuple[float, float]:
    res = stats.wilcoxon(d)
    return float(res.statistic), float(res.pvalue)


@PROCEDURES.register("randomisation")
def _randomisation(d: np.ndarray, *, rng: np.random.Generator,
                   resamples: int) -> tuple[float, float]:
    return float(d.mean()), sign_flip_p(d, rng=rng, resamples=resamples)


def sign_flip_p(d: np.ndarray, *, rng: np.random.Generator, resamples: int,
                exact: bool | None = None) -> float:
    """Two-sided p-value of the paired sign-flip randomisation test (module docstring).

    ``exact`` None: enumerate when 2^n <= resamples; True/False force either way."""
    n = len(d)
    observed = abs(float(d.sum()))
    # Sums over permuted signs can differ from the observed one in the last bits only.
    tol = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    if exact is None:
        exact = n < 63 and 2 ** n <= resamples
    if exact:
        if n > 24:
            raise DataError(f"exact enumeration of 2^{n} sign vectors is too large; use resamples")
        codes = np.arange(2 ** n, dtype=np.int64)[:, None]
        signs = ((codes >> np.arange(n, dtype=np.int64)) & 1) * 2.0 - 1.0
        hits = int(np.count_nonzero(np.abs(signs @ d) >= observed - tol))
        return float(hits / 2 ** n)
    hits, chunk = 0, max(1, min(resamples, 2 ** 22 // max(n, 1)))
    done = 0
    while done < resamples:
        size = min(chunk, resamples - done)
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2.0 - 1.0
        hits += int(np.count_nonzero(np.abs(signs @ d) >= observed - tol))
        done += size
    return (hits + 1) / (resamples + 1)


def paired_test(procedure: str, candidate: Sequence[float] | np.ndarray,
                baseline: Sequence[float] | np.ndarray, *, rng: np.random.Generator,
                resamples: int = 10_000, confidence: float = 0.95) -> PairedResult:
    """Run a registered ``procedure`` on paired values (same order: pair i = unit i)."""
    fn = PROCEDURES.get(procedure)
    x = np.asarray(candidate, dtype=np.float64)
    y = np.asarray(baseline, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise DataError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    n = len(x)
    if n < 2:
        raise DataError(f"a paired test needs at least 2 pairs, got {n}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise DataError("paired samples contain NaN or infinite values")
    if not 0.0 < confidence < 1.0:
        raise DataError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise DataError(f"resamples must be >= 1, got {resamples}")
    d = x - y
    mean = float(d.mean())
    # Differences equal up to rounding (a constant shift) leave the t statistic undefined in floats.
    constant = float(np.ptp(d)) <= 1e-12 * float(np.abs(d).max())
    sd = 0.0 if constant else float(d.std(ddof=1))
    if not d.any():
        statistic, p = 0.0, 1.0
    elif constant and procedure == "t":
        statistic, p = math.copysign(math.inf, mean), 0.0
    else:
        statistic, p = fn(d, rng=rng, resamples=resamples)
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1)) * sd / math.sqrt(n)
    if sd > 0:
        d_z = mean / sd
    else:
        d_z = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return PairedResult(procedure=procedure, n=n, statistic=statistic, p_value=min(1.0, p),
                        mean_diff=mean, ci_low=mean - half, ci_high=mean + half,
                        confidence=confidence, d_z=d_z)
