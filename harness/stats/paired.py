"""Paired significance tests on stored values: candidate vs baseline, one pair per unit (a query, or a
seed). Pure math: numpy and scipy only.

Every test reports, besides its statistic and two-sided p-value, the same description of the paired
differences d_i = candidate_i - baseline_i (i = 1..n):

- mean difference  dbar = sum(d_i) / n
- effect size  d_z = dbar / s_d   (Cohen's d for paired samples; s_d: sample SD, ddof = 1)
- the test's own point estimate and a confidence interval that inverts the test (the shifts mu0 for
  which the test of d_i - mu0 does not reject at level 1 - c), so the interval excludes 0 exactly
  when p < 1 - c (Wilcoxon: up to the zero and tie cases below):
  - ``t``: dbar and dbar +- t_{(1+c)/2, n-1} * s_d / sqrt(n);
  - ``wilcoxon``: the Hodges-Lehmann estimate, the median of the n (n + 1) / 2 Walsh averages
    (d_i + d_j) / 2, i <= j, and the interval [W_(k), W_(N+1-k')] between Walsh order statistics
    (``wilcoxon_interval``);
  - ``randomisation``: dbar and the shifts whose sign-flip p-value, over the same sign vectors as
    the test's, is at least 1 - c (``sign_flip_interval``);
- direction  better (estimate > 0), worse (estimate < 0) or equal, for a higher-is-better metric
  (``oriented``; a table turns it round for a cost). The estimate is dbar except under
  ``wilcoxon``, whose estimate shares the sign of its interval (so a significant result's marker
  points the way its interval does).

Procedures (registered in PROCEDURES, looked up by name):
- ``t``: paired Student's t-test, t = dbar / (s_d / sqrt n), df = n - 1 (scipy.stats.ttest_rel);
  the test of Penha & Hauff (2020, 2021).
- ``wilcoxon``: Wilcoxon signed-rank test (scipy.stats.wilcoxon with its defaults: zero
  differences dropped, average ranks for ties; the exact distribution for n <= 50 without zeros or
  ties, the sign-flip distribution of the statistic for n <= 13 with them, else the normal
  approximation with the tie-corrected variance and no continuity correction).
- ``randomisation``: paired sign-flip randomisation test of the mean difference. Under H0 each
  d_i is equally likely to have either sign; p = P(|sum s_i d_i| >= |sum d_i|). Exact enumeration of
  all 2^n sign vectors when 2^n <= resamples, else ``resamples`` random sign vectors drawn from the
  given Generator, p = (hits + 1) / (resamples + 1). Deterministic for a given Generator seed.

Identical samples (every d_i = 0) give p = 1 under every procedure. A constant non-zero shift
(every d_i equal: s_d = 0) leaves the t statistic undefined (+-inf); the t-test then reports the
exact sign-flip p-value of n equal differences, 2^(1 - n) (``tie_p``: the randomisation test's on the
same d), and its interval is the point dbar where that p is below 1 - confidence, else the whole
line. Not p = 0: a metric that moves in steps (P@1 is k/Q) makes two seeds' differences tie often
even when nothing differs, and with 2 seeds such a tie is no evidence at all (p = 0.5).

The Wilcoxon interval. For a shift mu0 that is not a Walsh average, d - mu0 has no zero and its
absolute values tie only where the d_i themselves are equal, and the signed-rank statistic of
d - mu0 is the number of Walsh averages above mu0 (average ranks of equal d_i sum to the same
total). The test at such shifts is one fixed procedure of that count (scipy's choice for d without
zeros: exact, sign-flip or normal, with the tie correction of the groups of equal d_i), so the
shifts it does not reject lie between two Walsh order statistics: the interval of Hodges & Lehmann
(1963) and Bauer (1972), the one R's wilcox.test reports. Where 0 is not a Walsh average, the test on
d is one of those tests and the interval excludes 0 exactly when it rejects. Where 0 is a Walsh
average (a zero difference, or two differences that cancel), scipy's test on d drops the zeros and
corrects for the ties at 0, a procedure no nearby shift uses, and the two can disagree near the
level (docs/statistics.md measures how often on ranker-like data).

The randomisation interval. With the test's sign vectors s_b (the same draws), S_b = s_b . d and
m_b = sum s_b, the test of d - mu0 counts b as a hit when |S_b - m_b mu0| >= |sum d - n mu0| - tol
(tol: the test's rounding tolerance of d). Every hit set is a closed interval [L_b, R_b] around
dbar (|m_b| < n; all signs equal: always a hit), so the p-value falls monotonically away from dbar
and the non-rejected shifts are [L_(k), R_(B+1-k)], k the fewest hits whose p-value reaches 1 - c.
At mu0 = 0 this is the test's own hit count, so the interval excludes 0 exactly when p < 1 - c.

>>> r = paired_test("t", [1.9, 0.8, 1.1], [0.7, -1.6, -0.2], rng=np.random.default_rng(0))
>>> r.direction, round(r.mean_diff, 4)
('better', 1.6333)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from harness.errors import DataError
from harness.registry import Registry
from harness.stats import distributions as dist

BETTER = "better"
WORSE = "worse"
EQUAL = "equal"


def oriented(point: float, lower: bool = False) -> str:
    """BETTER, WORSE or EQUAL (0 or NaN) for a change of ``point`` in a metric that is higher (or,
    ``lower``, lower) when the ranker is better."""
    if point == 0 or math.isnan(point):
        return EQUAL
    return BETTER if (point > 0) != lower else WORSE
# Scipy's ``method="auto"`` for wilcoxon: the exact null distribution up to this many pairs
# (without zeros or ties), the sign-flip (permutation) distribution up to PERMUTATION_MAX_N.
EXACT_MAX_N = 50
PERMUTATION_MAX_N = 13
T_INTERVAL = "t"
# Bounds on the work of one test (docs/statistics.md, "Paired tests"): the Wilcoxon procedure holds
# n (n + 1) / 2 Walsh averages (5,000 pairs: 12.5 million, ~100 MB a copy), the randomisation
# test up to ``resamples`` sums (1,000,000 resolve p to 1e-6, below any corrected level in use).
MAX_WILCOXON_PAIRS = 5_000
MAX_RESAMPLES = 1_000_000
_INTERVAL_NAMES = {"wilcoxon": "hodges-lehmann", "randomisation": "sign-flip inversion"}


@dataclass(frozen=True, kw_only=True)
class PairedResult:
    """One paired comparison (module docstring: definitions).

    ``estimate`` is the test's point estimate (the mean difference, or the Hodges-Lehmann estimate
    under wilcoxon) and [ci_low, ci_high] its interval; ``interval`` names how it was made (``t``,
    ``hodges-lehmann``, ``sign-flip inversion``, ``crossed pivot``). ``effect_basis`` names the
    standard deviation that ``d_z`` divides by (which units were paired: set by the caller that
    knows, harness.stats.significance)."""

    procedure: str
    n: int
    statistic: float
    p_value: float
    mean_diff: float
    ci_low: float
    ci_high: float
    confidence: float
    d_z: float
    estimate: float | None = None
    interval: str = T_INTERVAL
    effect_basis: str = "the SD of the paired differences"

    @property
    def point(self) -> float:
        """The test's point estimate: ``estimate``, else the mean difference."""
        return self.mean_diff if self.estimate is None else self.estimate

    @property
    def direction(self) -> str:
        return oriented(self.point)


@dataclass(frozen=True)
class Outcome:
    """What a procedure returns: its statistic and p-value, and, where it inverts itself, its point
    estimate and interval (None: the t interval around the mean)."""

    statistic: float
    p_value: float
    estimate: float | None = None
    interval: tuple[float, float] | None = None
    interval_name: str = T_INTERVAL


# A procedure maps the paired differences to an Outcome.
Procedure = Callable[..., Outcome]
PROCEDURES: Registry[Procedure] = Registry("evaluation.test")


@PROCEDURES.register("t")
def _t(d: np.ndarray, *, rng: np.random.Generator, resamples: int, confidence: float) -> Outcome:
    from scipy import stats  # the rest of scipy.stats only where it runs (harness.stats.distributions)

    res = stats.ttest_rel(d, np.zeros_like(d))
    return Outcome(float(res.statistic), float(res.pvalue))


@PROCEDURES.register("wilcoxon")
def _wilcoxon(d: np.ndarray, *, rng: np.random.Generator, resamples: int,
              confidence: float) -> Outcome:
    from scipy import stats  # the rest of scipy.stats only where it runs (harness.stats.distributions)

    if len(d) > MAX_WILCOXON_PAIRS:  # refused before n^2 / 2 Walsh averages are allocated
        raise DataError(f"the Wilcoxon test's estimate and interval take the n (n + 1) / 2 Walsh averages "
                        f"of n pairs: at most {MAX_WILCOXON_PAIRS} pairs, got {len(d)}; use the t or the "
                        "randomisation test (--test)")
    res = stats.wilcoxon(d)
    low, high = wilcoxon_interval(d, confidence)
    return Outcome(float(res.statistic), float(res.pvalue), estimate=hodges_lehmann(d),
                   interval=(low, high), interval_name=_INTERVAL_NAMES["wilcoxon"])


@PROCEDURES.register("randomisation")
def _randomisation(d: np.ndarray, *, rng: np.random.Generator, resamples: int,
                   confidence: float) -> Outcome:
    flips = sign_flips(d, rng=rng, resamples=resamples)
    return Outcome(float(d.mean()), flips.p_value(), interval=flips.interval(confidence),
                   interval_name=_INTERVAL_NAMES["randomisation"])


def walsh_averages(d: Sequence[float] | np.ndarray) -> np.ndarray:
    """The n (n + 1) / 2 Walsh averages (d_i + d_j) / 2, i <= j, unsorted (n^2 / 2 doubles)."""
    x = np.sort(np.asarray(d, dtype=np.float64))
    return np.concatenate([(x[i] + x[i:]) / 2.0 for i in range(len(x))])


def hodges_lehmann(d: Sequence[float] | np.ndarray) -> float:
    """The Hodges-Lehmann estimate of the shift: the median of the Walsh averages."""
    return float(np.median(walsh_averages(d)))


def _signed_rank_p(d: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Two-sided p-values of scipy's Wilcoxon test at shifts mu0 that are not Walsh averages, as a
    function of the statistic r = the count of Walsh averages above mu0 (module docstring)."""
    n = len(d)
    _, ties = np.unique(d, return_counts=True)
    tied = bool((ties > 1).any())
    r = counts.astype(np.float64)
    if n <= EXACT_MAX_N and not tied:
        # The exact null distribution: the number of subsets of {1..n} with rank sum r, over 2^n.
        ways = np.zeros(n * (n + 1) // 2 + 1)
        ways[0] = 1.0
        for k in range(1, n + 1):
            ways[k:] = ways[k:] + ways[:-k].copy()
        cdf = np.cumsum(ways) / 2.0 ** n
        sf = np.cumsum(ways[::-1])[::-1] / 2.0 ** n
        idx = counts.astype(np.int64)
        return np.clip(2.0 * np.minimum(sf[idx], cdf[idx]), 0.0, 1.0)
    mean = n * (n + 1) / 4.0
    se = math.sqrt((n * (n + 1) * (2 * n + 1) - float((ties ** 3 - ties).sum()) / 2.0) / 24.0)
    z = (r - mean) / se
    return np.minimum(1.0, 2.0 * np.minimum(dist.norm.cdf(z), dist.norm.sf(z)))


def _permutation_p(x: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """scipy's Wilcoxon p-value for n <= PERMUTATION_MAX_N with ties, at each shift (none a Walsh
    average): the signed-rank statistic against its distribution over all 2^n sign vectors, with
    scipy.stats.permutation_test's two-sided rule and relative tolerance."""
    from scipy import stats  # the rest of scipy.stats only where it runs (harness.stats.distributions)

    n = len(x)
    codes = np.arange(2 ** n, dtype=np.int64)[:, None]
    subsets = ((codes >> np.arange(n, dtype=np.int64)) & 1).astype(np.float64)
    out = np.empty(len(shifts))
    for i, m in enumerate(shifts):
        y = x - m
        ranks = stats.rankdata(np.abs(y))
        observed = float(ranks[y > 0].sum())
        null = subsets @ ranks
        gamma = abs(np.finfo(np.float64).eps * 100 * observed)
        less = np.count_nonzero(null <= observed + gamma) / 2.0 ** n
        greater = np.count_nonzero(null >= observed - gamma) / 2.0 ** n
        out[i] = min(1.0, max(0.0, 2.0 * min(less, greater)))
    return out


def wilcoxon_interval(d: Sequence[float] | np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """The shifts mu0 the Wilcoxon test of d - mu0 does not reject at level 1 - ``confidence``, as
    the closed interval between Walsh order statistics (module docstring); -inf/inf where the test
    cannot reject at that level on one side."""
    x = np.asarray(d, dtype=np.float64)
    n = len(x)
    alpha = 1.0 - confidence
    w = np.sort(walsh_averages(x))
    big = len(w)
    if n <= PERMUTATION_MAX_N and len(np.unique(x)) < n:
        # scipy's sign-flip distribution of the tied ranks: evaluated at one shift inside every gap
        # between distinct Walsh averages (at most 92 of them).
        edges = np.unique(w)
        inner = np.concatenate([[edges[0] - 1.0], (edges[:-1] + edges[1:]) / 2.0, [edges[-1] + 1.0]])
        hit = np.flatnonzero(_permutation_p(x, inner) >= alpha)
        low = -math.inf if hit[0] == 0 else float(edges[hit[0] - 1])
        high = math.inf if hit[-1] == len(edges) else float(edges[hit[-1]])
        return low, high
    # In the gap (W_(j), W_(j+1)) the statistic is N - j; keep the gaps whose p-value reaches alpha.
    j = np.arange(big + 1)
    if big > 200_000:  # evaluate near the normal approximation's boundary only
        mean_j = big / 2.0
        half = float(dist.norm.ppf(1 - alpha / 2)) * math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        j = np.unique(np.clip(np.concatenate([np.arange(-3, 4) + math.floor(mean_j - half),
                                              np.arange(-3, 4) + math.ceil(mean_j + half),
                                              [math.floor(mean_j)]]), 0, big))
    keep = j[_signed_rank_p(x, big - j) >= alpha]
    j_lo, j_hi = int(keep.min()), int(keep.max())
    low = -math.inf if j_lo == 0 else float(w[j_lo - 1])
    high = math.inf if j_hi == big else float(w[j_hi])
    return low, high


@dataclass(frozen=True)
class SignFlips:
    """The sign vectors of one sign-flip test, as S_b = s_b . d and m_b = sum s_b."""

    d: np.ndarray
    sums: np.ndarray
    signs: np.ndarray
    exact: bool

    @property
    def tol(self) -> float:
        # Sums over permuted signs can differ from the observed one in the last bits only.
        return 1e-9 * max(float(np.abs(self.d).sum()), 1e-300)

    def _p(self, hits: np.ndarray | int) -> np.ndarray | float:
        b = len(self.sums)
        return hits / b if self.exact else (hits + 1) / (b + 1)

    def p_value(self) -> float:
        observed = abs(float(self.d.sum()))
        hits = int(np.count_nonzero(np.abs(self.sums) >= observed - self.tol))
        return float(self._p(hits))

    def interval(self, confidence: float) -> tuple[float, float]:
        """The shifts whose sign-flip p-value is at least 1 - ``confidence`` (module docstring)."""
        n, total, tol = len(self.d), float(self.d.sum()), self.tol
        s, m = self.sums, self.signs
        inner = np.abs(m) < n
        with np.errstate(divide="ignore", invalid="ignore"):
            lo = np.minimum((total - s - tol) / (n - m), (total + s - tol) / (n + m))
            hi = np.maximum((total + s + tol) / (n + m), (total - s + tol) / (n - m))
        lo = np.sort(np.where(inner, lo, -math.inf))
        hi = np.sort(np.where(inner, hi, math.inf))[::-1]
        # The fewest hits k whose p-value reaches alpha, by the test's own arithmetic.
        alpha = 1.0 - confidence
        ok = np.flatnonzero(self._p(np.arange(len(s) + 1)) >= alpha)
        k = int(ok[0])
        if k == 0:
            return -math.inf, math.inf
        return float(lo[k - 1]), float(hi[k - 1])


def sign_flips(d: np.ndarray, *, rng: np.random.Generator, resamples: int,
               exact: bool | None = None) -> SignFlips:
    """The sign vectors of the sign-flip test of ``d`` (module docstring): all 2^n when
    ``exact`` (None: when 2^n <= resamples), else ``resamples`` drawn from ``rng``."""
    n = len(d)
    if exact is None:
        exact = n < 63 and 2 ** n <= resamples
    if exact:
        if n > 24:
            raise DataError(f"exact enumeration of 2^{n} sign vectors is too large; use resamples")
        codes = np.arange(2 ** n, dtype=np.int64)[:, None]
        signs = ((codes >> np.arange(n, dtype=np.int64)) & 1) * 2.0 - 1.0
        return SignFlips(d=d, sums=signs @ d, signs=signs.sum(axis=1), exact=True)
    sums, counts = [], []
    chunk, done = max(1, min(resamples, 2 ** 22 // max(n, 1))), 0
    while done < resamples:
        size = min(chunk, resamples - done)
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2.0 - 1.0
        sums.append(signs @ d)
        counts.append(signs.sum(axis=1))
        done += size
    return SignFlips(d=d, sums=np.concatenate(sums), signs=np.concatenate(counts), exact=False)


def sign_flip_p(d: np.ndarray, *, rng: np.random.Generator, resamples: int,
                exact: bool | None = None) -> float:
    """Two-sided p-value of the paired sign-flip randomisation test (module docstring).

    ``exact`` None: enumerate when 2^n <= resamples; True/False force either way."""
    return sign_flips(d, rng=rng, resamples=resamples, exact=exact).p_value()


def tie_p(n: int) -> float:
    """The p-value of n equal non-zero differences (a spread of 0) under sign flips: only the two
    sign vectors that keep every sign alike reach |sum d|, so p = 2 / 2^n. What a t-test, whose
    statistic is undefined there, reports instead of 0 (module docstring).

    >>> tie_p(2), tie_p(5)
    (0.5, 0.0625)
    """
    return min(1.0, 2.0 ** (1 - n))


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
    if not 1 <= resamples <= MAX_RESAMPLES:
        raise DataError(f"resamples must be in [1, {MAX_RESAMPLES}], got {resamples}")
    d = x - y
    mean = float(d.mean())
    # Differences equal up to rounding (a constant shift) leave the t statistic undefined in floats.
    constant = float(np.ptp(d)) <= 1e-12 * float(np.abs(d).max())
    sd = 0.0 if constant else float(d.std(ddof=1))
    half = float(dist.t.ppf((1.0 + confidence) / 2.0, n - 1)) * sd / math.sqrt(n)
    if not d.any():
        out = Outcome(0.0, 1.0, estimate=0.0 if procedure == "wilcoxon" else None, interval=(0.0, 0.0),
                      interval_name=_INTERVAL_NAMES.get(procedure, T_INTERVAL))
    elif constant and procedure == "t":
        p = tie_p(n)
        out = Outcome(math.copysign(math.inf, mean), p,
                      interval=(mean, mean) if p < 1.0 - confidence else (-math.inf, math.inf),
                      interval_name=T_INTERVAL)
    else:
        out = fn(d, rng=rng, resamples=resamples, confidence=confidence)
    low, high = out.interval if out.interval is not None else (mean - half, mean + half)
    if sd > 0:
        d_z = mean / sd
    else:
        d_z = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return PairedResult(procedure=procedure, n=n, statistic=out.statistic, p_value=min(1.0, out.p_value),
                        mean_diff=mean, ci_low=low, ci_high=high, confidence=confidence, d_z=d_z,
                        estimate=out.estimate, interval=out.interval_name)

