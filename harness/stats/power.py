"""Power analysis of a finished study (or a pilot): how many seeds a study needs.

For each comparison (configuration vs baseline, metric) the variance components of the paired
differences d[seed, query] come from the crossed seeds x queries ANOVA (harness.stats.crossed):
s2_seed, s2_query, s2_resid, negative estimates clamped at 0. A study with S seeds and Q queries then
has

    SE(S, Q) = sqrt(s2_seed / S + s2_query / Q + s2_resid / (S Q))

and the crossed test's minimum detectable effect (MDE: the smallest true mean difference it finds
with probability ``power`` at two-sided level ``alpha``) is MDE = lambda SE(S, Q), lambda the
noncentrality at which a noncentral t with df degrees of freedom leaves ``power`` beyond the
two-sided critical value c = t_{1 - alpha/2, df} (both tails: P(T' > c) + P(T' < -c), scipy.stats.nct);
for large df this tends to the familiar (t_{1 - alpha/2, df} + t_{power, df}) SE(S, Q). The row of
the study itself (its own S and Q) uses the df of the test the study ran (the crossed test's
equivalent df); the other rows use df Satterthwaite's for the mean squares expected at (S, Q): E[MS_seed] = s2_resid + Q s2_seed
(df S - 1), E[MS_query] = s2_resid + S s2_query (df Q - 1), E[MS_resid] = s2_resid (df (S-1)(Q-1)),
combined as (MS_seed + MS_query - MS_resid) / (S Q). More seeds shrink the seed and residual terms
only: as S grows, MDE falls towards the query floor (t_{1-alpha/2,Q-1} + t_{power,Q-1})
sqrt(s2_query / Q) (with the noncentral t as well), so an effect at or below the floor needs more
queries, not more seeds.

``seeds_needed`` is the smallest S in [2, MAX_SEEDS] whose power at ``effect`` reaches ``power``.

>>> comps = VarianceComponents(seed=1e-4, query=4e-3, resid=1e-2)
>>> row = mde(comps, 5, 100, alpha=0.05, power=0.8)
>>> round(row.se, 5), round(row.df, 2), round(row.mde, 4)
(0.00894, 14.63, 0.0269)
>>> seeds_needed(comps, 100, 0.02, alpha=0.05, power=0.8), round(query_floor(comps, 100), 4)
(21, 0.0179)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

from harness.errors import ConfigError, DataError
from harness.results.stored import StudyResults
from harness.stats.crossed import CrossedResult, VarianceComponents, crossed_test

DEFAULT_SEEDS = (3, 5, 10, 20)
MAX_SEEDS = 10_000
FORMATS = ("md", "json")


@dataclass(frozen=True, kw_only=True)
class PowerOptions:
    """What to project: levels, the seed grid, the query count (None: the study's), an effect."""

    metrics: tuple[str, ...] | None = None
    alpha: float = 0.05
    power: float = 0.8
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    queries: int | None = None
    effect: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0.0 < self.power < 1.0:
            raise ConfigError(f"power must be in (0, 1), got {self.power}")
        if not self.seeds or any(s < 2 for s in self.seeds):
            raise ConfigError(f"seeds must be seed counts >= 2, got {list(self.seeds)}")
        if self.queries is not None and self.queries < 2:
            raise ConfigError(f"queries must be >= 2, got {self.queries}")
        if self.effect is not None and not (math.isfinite(self.effect) and self.effect > 0):
            raise ConfigError(f"effect must be a positive mean difference, got {self.effect}")


@dataclass(frozen=True, kw_only=True)
class MdeRow:
    seeds: int
    queries: int
    se: float
    df: float
    mde: float


def _se_df(comps: VarianceComponents, seeds: np.ndarray, queries: int) -> tuple[np.ndarray, np.ndarray]:
    """SE and Satterthwaite df for every seed count in ``seeds`` (module docstring)."""
    s = seeds.astype(np.float64)
    n = s * queries
    # (c_i E[MS_i], df_i) of (MS_seed + MS_query - MS_resid) / (S Q) at the expected mean squares.
    terms = [((comps.resid + queries * comps.seed) / n, s - 1),
             ((comps.resid + s * comps.query) / n, np.full_like(s, queries - 1)),
             (-comps.resid / n, (s - 1) * (queries - 1))]
    var = sum(v for v, _ in terms)
    denom = sum(v * v / d for v, d in terms)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(denom > 0, var * var / np.where(denom > 0, denom, 1.0), np.nan)
    return np.sqrt(np.maximum(var, 0.0)), df


def power_at(noncentrality: np.ndarray | float, df: np.ndarray | float, alpha: float) -> np.ndarray:
    """The two-sided t-test's power at level ``alpha`` when its statistic is noncentral t with
    ``df`` and ``noncentrality`` (the true difference over its SE)."""
    df, lam = np.broadcast_arrays(np.asarray(df, dtype=np.float64), np.asarray(noncentrality, dtype=np.float64))
    c = stats.t.ppf(1 - alpha / 2, df)
    finite = np.where(np.isinf(df), 1.0, df)  # df = inf: the normal limit below
    with np.errstate(invalid="ignore"):
        # The far tail is negligible where scipy's nct returns NaN for it (large noncentrality, few df).
        far = np.nan_to_num(stats.nct.cdf(-c, finite, lam), nan=0.0)
        t_power = stats.nct.sf(c, finite, lam) + far
    z_power = stats.norm.sf(c - lam) + stats.norm.cdf(-c - lam)
    return np.where(np.isinf(df), z_power, t_power)


def noncentrality(df: float, alpha: float, power: float) -> float:
    """The noncentrality at which the two-sided t-test with ``df`` has ``power`` (module docstring)."""
    if math.isnan(df) or df <= 0:
        return math.nan
    start = float(stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df))
    if power <= alpha:
        return 0.0
    def gap(lam: float) -> float:
        return float(power_at(lam, df, alpha)) - power

    high = max(start, 1.0) + 1.0
    while gap(high) < 0:
        high *= 1.25
    return float(optimize.brentq(gap, 0.0, high, xtol=1e-12))


def mde(comps: VarianceComponents, seeds: int, queries: int, *, alpha: float = 0.05,
        power: float = 0.8, df: float | None = None) -> MdeRow:
    """The minimum detectable effect of a study with ``seeds`` x ``queries`` (module docstring);
    ``df``: the test's own degrees of freedom (the study's row), else Satterthwaite's."""
    se, sat = _se_df(comps, np.array([seeds]), queries)
    d = float(sat[0]) if df is None else float(df)
    m = 0.0 if se[0] <= 0 else noncentrality(d, alpha, power) * float(se[0])
    return MdeRow(seeds=seeds, queries=queries, se=float(se[0]), df=d, mde=m)


def query_floor(comps: VarianceComponents, queries: int, *, alpha: float = 0.05,
                power: float = 0.8) -> float:
    """The limit of MDE(S, Q) as S grows: the query term alone (module docstring)."""
    if comps.query <= 0:
        return 0.0
    return noncentrality(queries - 1, alpha, power) * math.sqrt(comps.query / queries)


def seeds_needed(comps: VarianceComponents, queries: int, effect: float, *, alpha: float = 0.05,
                 power: float = 0.8, max_seeds: int = MAX_SEEDS) -> int | None:
    """The smallest seed count in [2, max_seeds] whose power at ``effect`` reaches ``power``; None
    if none does."""
    grid = np.arange(2, max_seeds + 1)
    se, df = _se_df(comps, grid, queries)
    with np.errstate(invalid="ignore", divide="ignore"):
        achieved = np.where(se > 0, power_at(effect / np.where(se > 0, se, 1.0), df, alpha), 1.0)
    hits = np.flatnonzero(np.nan_to_num(achieved) >= power)
    return int(grid[hits[0]]) if len(hits) else None


@dataclass(frozen=True, kw_only=True)
class ComparisonPower:
    """One configuration vs the baseline on one metric: the observed crossed test, its variance
    components, the MDE per seed count and, with an effect, the seeds it needs."""

    config: str
    metric: str
    observed: CrossedResult
    rows: tuple[MdeRow, ...]
    floor: float
    needed: int | None = None

    @property
    def components(self) -> VarianceComponents:
        return self.observed.components


@dataclass(frozen=True, kw_only=True)
class PowerAnalysis:
    source: str
    baseline: str
    seeds: int
    queries: int
    options: PowerOptions
    comparisons: tuple[ComparisonPower, ...]
    dropped: int = 0  # queries some runs lack, left out (StudyResults.dropped)


def power_analysis(results: StudyResults, options: PowerOptions | None = None) -> PowerAnalysis:
    """Variance components and MDEs of every candidate vs the baseline (module docstring)."""
    options = options or PowerOptions()
    metrics = results.select(options.metrics)
    lacking = [m for m in metrics if not results.has_per_query(m)]
    if lacking:
        raise DataError(f"{results.source} has per-run values only for {', '.join(lacking)}; a power "
                        f"analysis needs per-query values (the query variance cannot be estimated "
                        f"without them)")
    if len(results.seeds) < 2:
        raise DataError(f"{results.source} has one seed ({results.seeds[0]}); a power analysis needs at "
                        f"least 2 to estimate the seed variance (run a pilot with 2 or more seeds)")
    if len(results.configs) < 2:
        raise DataError(f"{results.source} has only the baseline {results.baseline!r}; nothing to compare")
    s, q = len(results.seeds), len(results.qids or ())
    queries = options.queries or q
    grid = sorted({*options.seeds, s})  # the options' seed counts and this study's own
    comparisons = []
    for metric in metrics:
        for config in results.configs[1:]:
            paired = results.seeds_of(config)  # all seeds, or a seed schedule's first ones
            base = np.array([results.query_values(results.baseline, seed, metric) for seed in paired])
            cand = np.array([results.query_values(config, seed, metric) for seed in paired])
            try:
                observed = crossed_test(cand, base)
            except DataError as exc:
                raise DataError(f"power of {config!r} vs {results.baseline!r} on {metric}: {exc}") from None
            comps = observed.components
            # The study's own row: the df of the test it ran (the crossed test's equivalent df).
            rows = tuple(mde(comps, n, queries, alpha=options.alpha, power=options.power,
                             df=observed.df if (n == s and queries == q and observed.df > 0) else None)
                         for n in grid)
            needed = (seeds_needed(comps, queries, options.effect, alpha=options.alpha,
                                   power=options.power) if options.effect is not None else None)
            comparisons.append(ComparisonPower(
                config=config, metric=metric, observed=observed, rows=rows, needed=needed,
                floor=query_floor(comps, queries, alpha=options.alpha, power=options.power)))
    return PowerAnalysis(source=results.source, baseline=results.baseline, seeds=s, queries=q,
                         options=options, comparisons=tuple(comparisons), dropped=len(results.dropped))


def outcome_metrics(analysis: PowerAnalysis, config: str) -> dict[str, float]:
    """MLflow metrics of one configuration: <m>_var_seed, <m>_var_query, <m>_var_resid and
    <m>_mde_s<S> for every seed count of the grid."""
    out: dict[str, float] = {}
    for c in analysis.comparisons:
        if c.config != config:
            continue
        m = c.metric
        out.update({f"{m}_var_seed": c.components.seed, f"{m}_var_query": c.components.query,
                    f"{m}_var_resid": c.components.resid})
        out.update({f"{m}_mde_s{r.seeds}": r.mde for r in c.rows})
    return out
