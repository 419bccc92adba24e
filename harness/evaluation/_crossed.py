"""The crossed seeds x queries test: paired differences d[s, q] = candidate - baseline of seed s on
query q, with both the seeds and the queries random. Pure math: numpy and scipy only.

Why: two sources of noise decide whether a configuration beats the baseline, the sample of test
queries and the training run a seed produced. A t-test over seed-averaged queries treats the seeds
as fixed (a seed that trained a better model shifts every query alike and never enters the
variance); a t-test over per-seed means treats the queries as fixed. This is the "language-as-
fixed-effect fallacy" (Clark 1973), with seeds as subjects and queries as items; the remedy there is
the quasi-F ratio over a crossed random-effects design, and this is its one-sample form.

Model (two-way crossed random effects, one observation per cell):

    d[s, q] = mu + a_s + b_q + e_sq,   a_s ~ (0, s2_seed), b_q ~ (0, s2_query), e_sq ~ (0, s2_resid)

With S seeds, Q queries, dbar the grand mean, m_s and m_q the seed and query means, the ANOVA mean
squares and their expectations are

    MS_seed  = Q sum_s (m_s - dbar)^2 / (S - 1)              E = s2_resid + Q s2_seed
    MS_query = S sum_q (m_q - dbar)^2 / (Q - 1)              E = s2_resid + S s2_query
    MS_resid = sum_sq (d - m_s - m_q + dbar)^2 / ((S-1)(Q-1))   E = s2_resid

so the components are s2_seed = (MS_seed - MS_resid) / Q, s2_query = (MS_query - MS_resid) / S and
s2_resid = MS_resid, each clamped at 0 (an ANOVA estimate can be negative; which ones were clamped is
recorded). The variance of the mean difference is

    Var(dbar) = s2_seed / S + s2_query / Q + s2_resid / (S Q)
              = (MS_seed + MS_query - MS_resid) / (S Q)          (no component clamped)

A clamped seed component replaces MS_seed by MS_resid in that sum (giving MS_query / (S Q), the
seed-averaged t-test's variance), a clamped query component replaces MS_query (giving MS_seed / (S Q),
the across-seeds t-test's variance). Degrees of freedom by Satterthwaite (1946) for the linear
combination V = sum_i c_i MS_i actually used:

    df = V^2 / sum_i (c_i MS_i)^2 / df_i,   df_seed = S - 1, df_query = Q - 1, df_resid = (S-1)(Q-1)

Then t = dbar / SE with SE = sqrt(Var(dbar)), a two-sided p-value from t(df), the confidence
interval dbar +- t_{(1+c)/2, df} SE, and the effect size dbar / sqrt(s2_seed + s2_query + s2_resid):
the mean difference in units of the standard deviation of a single (seed, query) difference, the
crossed analogue of d_z. On a balanced design the ANOVA components equal the REML estimates of the
mixed model (when none is clamped), so this is the test lme4 or statsmodels' MixedLM with crossed
variance components gives, with Satterthwaite degrees of freedom.

Degenerate input: every d = 0 gives t = 0, p = 1; a constant non-zero shift gives SE = 0, t = +-inf,
p = 0 (as the paired t-test does).

References: Clark, H. H. (1973), The language-as-fixed-effect fallacy, J. Verbal Learning and Verbal
Behavior 12; Satterthwaite, F. E. (1946), Biometrics Bulletin 2(6); Baayen, Davidson & Bates (2008),
Mixed-effects modeling with crossed random effects for subjects and items, J. Memory and Language 59.

>>> d = [[0.1, 0.3, 0.2], [0.2, 0.5, 0.2]]
>>> r = crossed_test(d, [[0, 0, 0], [0, 0, 0]])
>>> r.seeds, r.queries, round(r.mean_diff, 4), round(r.ms_seed, 4), round(r.ms_query, 4), round(r.ms_resid, 4)
(2, 3, 0.25, 0.015, 0.035, 0.005)
>>> round(r.se ** 2, 6), round(r.df, 4)     # (0.015 + 0.035 - 0.005) / 6; Satterthwaite
(0.0075, 2.3824)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from harness.errors import DataError
from harness.evaluation._paired import PairedResult

SEED = "seed"
QUERY = "query"
RESIDUAL = "residual"
COMPONENTS = (SEED, QUERY, RESIDUAL)


@dataclass(frozen=True, kw_only=True)
class MeanSquares:
    """The two-way ANOVA of one S x Q matrix of differences (module docstring)."""

    seeds: int
    queries: int
    mean: float
    ms_seed: float
    ms_query: float
    ms_resid: float

    @property
    def df(self) -> tuple[int, int, int]:
        """Degrees of freedom of MS_seed, MS_query, MS_resid."""
        return self.seeds - 1, self.queries - 1, (self.seeds - 1) * (self.queries - 1)

    def components(self) -> VarianceComponents:
        """The clamped variance components (module docstring)."""
        raw = ((self.ms_seed - self.ms_resid) / self.queries,
               (self.ms_query - self.ms_resid) / self.seeds, self.ms_resid)
        return VarianceComponents(
            seed=max(0.0, raw[0]), query=max(0.0, raw[1]), resid=max(0.0, raw[2]),
            clamped=tuple(n for n, v in zip(COMPONENTS, raw, strict=True) if v < 0), raw=raw)


@dataclass(frozen=True, kw_only=True)
class VarianceComponents:
    """s2_seed, s2_query, s2_resid (clamped at 0); ``raw`` keeps the unclamped estimates and
    ``clamped`` names the components that were negative."""

    seed: float
    query: float
    resid: float
    clamped: tuple[str, ...] = ()
    raw: tuple[float, float, float] | None = None

    @property
    def total(self) -> float:
        return self.seed + self.query + self.resid

    def variance_of_mean(self, seeds: int, queries: int) -> float:
        """Var(dbar) = s2_seed / S + s2_query / Q + s2_resid / (S Q)."""
        return self.seed / seeds + self.query / queries + self.resid / (seeds * queries)


@dataclass(frozen=True, kw_only=True)
class CrossedResult(PairedResult):
    """A crossed test: ``n`` = S Q differences; the ANOVA, the components and the df besides."""

    seeds: int
    queries: int
    df: float
    se: float
    ms_seed: float
    ms_query: float
    ms_resid: float
    components: VarianceComponents

    @property
    def clamped(self) -> tuple[str, ...]:
        return self.components.clamped


def mean_squares(d: Sequence[Sequence[float]] | np.ndarray) -> MeanSquares:
    """The ANOVA mean squares of a seeds x queries matrix of differences (module docstring)."""
    x = np.asarray(d, dtype=np.float64)
    if x.ndim != 2:
        raise DataError(f"the crossed test needs a seeds x queries matrix, got shape {x.shape}")
    s, q = x.shape
    if s < 2:
        raise DataError(f"the crossed test needs at least 2 seeds, got {s}")
    if q < 2:
        raise DataError(f"the crossed test needs at least 2 queries, got {q}")
    if not np.isfinite(x).all():
        raise DataError("the differences contain NaN or infinite values")
    grand = float(x.mean())
    m_s = x.mean(axis=1, keepdims=True)
    m_q = x.mean(axis=0, keepdims=True)
    resid = x - m_s - m_q + grand
    return MeanSquares(seeds=s, queries=q, mean=grand,
                       ms_seed=q * float(((m_s - grand) ** 2).sum()) / (s - 1),
                       ms_query=s * float(((m_q - grand) ** 2).sum()) / (q - 1),
                       ms_resid=float((resid ** 2).sum()) / ((s - 1) * (q - 1)))


def satterthwaite(terms: Sequence[tuple[float, float]]) -> float:
    """df of sum_i c_i MS_i, given the terms (c_i MS_i, df_i): V^2 / sum_i (c_i MS_i)^2 / df_i.

    Terms that are zero drop out; an all-zero sum has no df (nan)."""
    total = sum(v for v, _ in terms)
    denom = sum(v * v / df for v, df in terms if v != 0)
    return total * total / denom if denom > 0 else math.nan


def variance_terms(ms: MeanSquares) -> list[tuple[float, float]]:
    """The terms (c_i MS_i, df_i) of Var(dbar) after clamping (module docstring)."""
    comps = ms.components()
    n = ms.seeds * ms.queries
    df_s, df_q, df_e = ms.df
    # A clamped component contributes nothing: its mean square is replaced by MS_resid, and the
    # MS_resid of the replacement cancels the -MS_resid of the combination.
    terms = [(ms.ms_seed / n, df_s)] if SEED not in comps.clamped else []
    terms += [(ms.ms_query / n, df_q)] if QUERY not in comps.clamped else []
    coef = 1 - (SEED not in comps.clamped) - (QUERY not in comps.clamped)  # 1, 0 or -1
    if coef:
        terms.append((coef * ms.ms_resid / n, df_e))
    return terms


def crossed_test(candidate: Sequence[Sequence[float]] | np.ndarray,
                 baseline: Sequence[Sequence[float]] | np.ndarray, *,
                 confidence: float = 0.95) -> CrossedResult:
    """The crossed test of candidate vs baseline, both S seeds x Q queries (same order)."""
    x = np.asarray(candidate, dtype=np.float64)
    y = np.asarray(baseline, dtype=np.float64)
    if x.shape != y.shape:
        raise DataError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    if not 0.0 < confidence < 1.0:
        raise DataError(f"confidence must be in (0, 1), got {confidence}")
    d = x - y
    ms = mean_squares(d)
    comps = ms.components()
    mean = ms.mean
    # Differences equal up to rounding (a constant shift) leave the statistic undefined in floats.
    constant = float(np.ptp(d)) <= 1e-12 * float(np.abs(d).max())
    if constant:
        se, df = 0.0, math.nan
        statistic, p = (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
        half = 0.0
    else:
        terms = variance_terms(ms)
        se = math.sqrt(sum(v for v, _ in terms))
        df = satterthwaite(terms)
        statistic = mean / se
        p = float(2 * stats.t.sf(abs(statistic), df))
        half = float(stats.t.ppf((1.0 + confidence) / 2.0, df)) * se
    sd = math.sqrt(comps.total) if not constant else 0.0
    if sd > 0:
        effect = mean / sd
    else:
        effect = 0.0 if mean == 0 else math.copysign(math.inf, mean)
    return CrossedResult(procedure="crossed", n=d.size, statistic=statistic, p_value=min(1.0, p),
                         mean_diff=mean, ci_low=mean - half, ci_high=mean + half,
                         confidence=confidence, d_z=effect, seeds=ms.seeds, queries=ms.queries,
                         df=df, se=se, ms_seed=ms.ms_seed, ms_query=ms.ms_query, ms_resid=ms.ms_resid,
                         components=comps)
