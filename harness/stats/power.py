"""Power analysis of a finished study (or a pilot): how many seeds a study needs, for the test the
table runs at the level the table runs it.

For each comparison (configuration vs baseline, metric) the variance components of the paired
differences d[seed, query] come from the crossed seeds x queries ANOVA (harness.stats.crossed):
s2_seed, s2_query, s2_resid, negative estimates clamped at 0. A study with S seeds and Q queries then
has the standard error of its mean difference

    SE(S, Q) = sqrt(s2_seed / S + s2_query / Q + s2_resid / (S Q))

The level. The table corrects over its family of m comparisons (Holm by default), and Holm's first
step tests the smallest p-value at alpha / m; a comparison the table marks has passed at least
that step's level or a later, looser one. The power figures are at ``level = alpha / m`` (m:
``PowerOptions.family_size``, by default the study's family of one metric: every candidate, the
stopped ones included), so a difference at the MDE is marked with at least the stated power by the
corrected table; ``family_size=1`` gives the per-comparison figures.

The test. The table's default is the crossed test with its generalized p-value, which rejects
exactly when |dbar| exceeds the half-width h of its interval at 1 - level; h depends on the mean
squares the study happens to observe, so power is a simulation: DRAWS draws of the three mean
squares at their expected values for (S, Q), E[MS_seed] = s2_resid + Q s2_seed,
E[MS_query] = s2_resid + S s2_query, E[MS_resid] = s2_resid, each times an independent chi-square
over its df (S - 1, Q - 1, (S-1)(Q-1)), the quantiles of one fixed Latin hypercube of uniforms
(common random numbers: the same draws for every effect and every seed count, so power is smooth in
both). For each draw, h is the pivot's critical half-
width, its quadrature over the seed and query chi-squares (the residual's (S-1)(Q-1) df make it
nearly known), tabulated once per (S, Q, level) over the share of the seed mean square and
interpolated (``critical_table``). Given the draws, the power at a
true difference delta is exact over the normal mean difference:

    power(delta) = mean over draws of [Phi((delta - h) / SE) + Phi((-delta - h) / SE)]

and the MDE solves power(MDE) = ``power``. The simulation in tests/stats/test_power_sim.py checks that the table's own test, run on simulated studies with a true difference equal to the MDE,
marks it 80% +- 4 points of the time at the corrected level. More seeds shrink the seed and residual
terms only: as S grows the MDE falls towards the query floor, the MDE of the one-sample t-test with
Q - 1 df over the seed-averaged differences (``query_floor``; about (z_{1-level/2} + z_{power})
sqrt(s2_query / Q) at many queries), so an effect at or below the floor needs more queries, not
more seeds.

``seeds_needed`` is the smallest S in [2, MAX_SEEDS] whose power at ``effect`` reaches ``power``
(a bisection over S: power grows with S).

>>> comps = VarianceComponents(seed=1e-4, query=4e-3, resid=1e-2)
>>> row = mde(comps, 5, 100, level=0.05, power=0.8)
>>> round(row.se, 5), round(row.mde, 3)
(0.00894, 0.029)
>>> seeds_needed(comps, 100, 0.02, level=0.05, power=0.8), round(query_floor(comps, 100), 4)
(22, 0.0179)
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import special

from harness.cachedir import cache_home
from harness.errors import DataError, is_integer, is_number, refuse
from harness.metrics.measures import lower_is_better
from harness.results.stored import StudyResults
from harness.stats import distributions as dist
from harness.stats.crossed import (
    NODES,
    STRATA,
    TAIL_STRATA,
    CrossedResult,
    VarianceComponents,
    chi2_nodes,
    crossed_test,
)
from harness.stats.identical import identical_groups
from harness.stats.roots import newton

DEFAULT_SEEDS = (3, 5, 10, 20)
MAX_SEEDS = 10_000
FORMATS = ("md", "json")
DRAWS = 4000  # mean-square draws per design: the power's Monte Carlo error is below 0.5 points
DRAWS_SEED = 39  # the generator seed of the draws (a fixed stream: the same study, the same figures)
SHARES = 129  # grid points of the seed mean square's share in ``critical_table``
BISECTIONS, NEWTON_STEPS = 12, 20  # ``critical_table``: a bracket, then Newton to about 1e-14 of it


@dataclass(frozen=True, kw_only=True)
class PowerOptions:
    """What to project: levels, the seed grid, the query count (None: the study's), an effect, and
    the family the table corrects over (None: the study's candidates, stopped ones included)."""

    metrics: tuple[str, ...] | None = None
    alpha: float = 0.05
    power: float = 0.8
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    queries: int | None = None
    effect: float | None = None
    family_size: int | None = None

    def __post_init__(self) -> None:
        if not (is_number(self.alpha) and 0.0 < self.alpha < 1.0):
            raise refuse("alpha", self.alpha, "in (0, 1)")
        if not (is_number(self.power) and 0.0 < self.power < 1.0):
            raise refuse("power", self.power, "in (0, 1)")
        if not self.seeds or not all(is_integer(s) and s >= 2 for s in self.seeds):
            raise refuse("seeds", list(self.seeds), "seed counts >= 2")
        if self.queries is not None and not (is_integer(self.queries) and self.queries >= 2):
            raise refuse("queries", self.queries, "an integer >= 2")
        if self.effect is not None and not (is_number(self.effect) and math.isfinite(self.effect)
                                            and self.effect > 0):
            raise refuse("effect", self.effect, "a positive mean difference")
        if self.family_size is not None and not (is_integer(self.family_size) and self.family_size >= 1):
            raise refuse("family_size", self.family_size, "an integer >= 1")


@dataclass(frozen=True, kw_only=True)
class MdeRow:
    """One seed count: the SE of the mean difference, the MDE of the crossed test at ``level``, and
    Satterthwaite's df of the expected mean squares (a description of the design, not the test's)."""

    seeds: int
    queries: int
    se: float
    df: float
    mde: float
    level: float = 0.05


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
    from scipy import stats  # the rest of scipy.stats only where it runs (harness.stats.distributions)

    df, lam = np.broadcast_arrays(np.asarray(df, dtype=np.float64), np.asarray(noncentrality, dtype=np.float64))
    c = dist.t.ppf(1 - alpha / 2, df)
    finite = np.where(np.isinf(df), 1.0, df)  # df = inf: the normal limit below
    with np.errstate(invalid="ignore"):
        # The far tail is negligible where scipy's nct returns NaN for it (large noncentrality, few df).
        far = np.nan_to_num(stats.nct.cdf(-c, finite, lam), nan=0.0)
        t_power = stats.nct.sf(c, finite, lam) + far
    z_power = dist.norm.sf(c - lam) + dist.norm.cdf(-c - lam)
    return np.where(np.isinf(df), z_power, t_power)


@functools.lru_cache(maxsize=256)
def critical_table(seeds: int, queries: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """``compute_critical_table``'s grid and values, read from the cache folder where an earlier
    process saved them (``harness report`` draws a dozen designs' power curves; each table is the
    same every time for the same code and libraries, and most of the report's arithmetic)."""
    path = _table_path(seeds, queries, level)
    try:
        with np.load(path) as saved:  # no pickles (np.load's default): a planted file runs no code
            w, c = saved["w"], saved["c"]
        if (w.shape == c.shape == (SHARES,) and np.array_equal(w, np.linspace(-1.0, 1.0, SHARES))
                and bool(np.all(np.isfinite(c) & (c >= 0)))):
            return w, c
    except (OSError, ValueError, KeyError):
        pass  # not cached yet, unreadable or not this table's shape: compute it
    w, c = compute_critical_table(seeds, queries, level)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with tmp.open("wb") as fh:
            np.savez(fh, w=w, c=c)
        os.replace(tmp, path)  # whole or absent for a concurrent reader
    except OSError:
        pass  # a read-only cache folder costs time, not correctness
    return w, c


def _table_path(seeds: int, queries: int, level: float) -> Path:
    """The cache file of one table: keyed by the design, the level's exact float, the code that
    computes it (its source and the quadrature's) and the libraries' versions."""
    import scipy

    key = hashlib.sha256(repr((seeds, queries, float(level).hex(), SHARES, BISECTIONS, NEWTON_STEPS,
                               STRATA, TAIL_STRATA, NODES, _code_key(), np.__version__,
                               scipy.__version__)).encode()).hexdigest()[:24]
    return cache_home() / "power" / f"critical-{seeds}-{queries}-{key}.npz"


@functools.lru_cache(maxsize=1)
def _code_key() -> str:
    """The source text of what computes a table (not its bytecode: marshal's bytes vary between
    processes), read once per process."""
    return hashlib.sha256("".join(inspect.getsource(f) for f in (compute_critical_table, chi2_nodes)).encode()
                          ).hexdigest()


def compute_critical_table(seeds: int, queries: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The crossed pivot's critical value c(w) at two-sided ``level`` (module docstring), over the
    grid w in [-1, 1] of b / (MS_seed + |b|), b = MS_query - MS_resid: with the scale
    u = MS_seed + |b|, the pivot of S Q Var(dbar) is u ((1 - |w|) (S-1) / X_seed + w (Q-1) / X_query)
    (the residual's many df neglected), and the test rejects where |dbar| > c(w) sqrt(u / (S Q)). A
    node whose pivot is not positive adds nothing to the tail."""
    ys, ws = chi2_nodes(seeds - 1, 0)
    yq, wq = chi2_nodes(queries - 1, 1)
    inv_s, inv_q = (a.ravel() for a in np.meshgrid(1.0 / ys, 1.0 / yq, indexing="ij"))
    weight = np.outer(ws, wq).ravel()
    w = np.linspace(-1.0, 1.0, SHARES)[:, None]
    r = (1.0 - np.abs(w)) * inv_s[None, :] + w * inv_q[None, :]
    scale = np.sqrt(np.where(r > 0, r, np.nan))
    target = level / 2.0

    usable = ~np.isnan(scale)
    weighted = np.where(usable, weight, 0.0)
    inv = np.where(usable, 1.0 / np.where(usable, scale, 1.0), 0.0)

    def tail(c: np.ndarray) -> np.ndarray:
        return (special.ndtr(-c[:, None] * inv) * weighted).sum(axis=1)

    lo, hi = np.zeros(SHARES), np.full(SHARES, 1.0)
    while (grow := tail(hi) > target).any():
        hi = np.where(grow, hi * 4.0, hi)
    for _ in range(BISECTIONS):
        mid = (lo + hi) / 2.0
        above = tail(mid) > target
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    # Newton from the bracket's low end: the tail is convex and decreasing in c > 0, so each step
    # stays between its start and the root (never past it) and a few reach the precision bisection
    # alone needs about 45 tail evaluations for.
    c = lo.copy()
    for _ in range(NEWTON_STEPS):
        z = c[:, None] * inv
        excess = (special.ndtr(-z) * weighted).sum(axis=1) - target
        slope = (np.exp(-0.5 * z * z) * inv * weighted).sum(axis=1) / math.sqrt(2.0 * math.pi)
        step = np.where(slope > 0, np.maximum(excess, 0.0) / np.where(slope > 0, slope, 1.0), 0.0)
        c = np.minimum(c + step, hi)
        if not (step > 1e-14 * hi).any():
            break
    return w[:, 0], c


@functools.lru_cache(maxsize=1)
def _uniforms() -> np.ndarray:
    """DRAWS x 3 uniforms, one Latin hypercube from DRAWS_SEED: the same for every design."""
    g = np.random.default_rng(DRAWS_SEED)
    return np.stack([(g.permutation(DRAWS) + g.random(DRAWS)) / DRAWS for _ in range(3)], axis=1)


@functools.lru_cache(maxsize=256)
def _chi2_column(axis: int, df: int) -> np.ndarray:
    """Column ``axis`` of the draws: chi-square(df) quantiles of that column's uniforms, over df.
    Kept per (axis, df): the query column is the same for every seed count of a power curve."""
    return dist.chi2.ppf(_uniforms()[:, axis], float(df)) / float(df)


def _chi2_draws(seeds: int, queries: int) -> np.ndarray:
    """DRAWS x 3 chi-square variables over their df (seed, query, residual): the quantiles of one
    Latin hypercube of uniforms from DRAWS_SEED, the same for every design, so the figures of
    neighbouring seed counts share their randomness and move smoothly with S."""
    dfs = (seeds - 1, queries - 1, (seeds - 1) * (queries - 1))
    return np.stack([_chi2_column(axis, df) for axis, df in enumerate(dfs)], axis=1)


def half_widths(comps: VarianceComponents, seeds: int, queries: int, level: float) -> np.ndarray:
    """The crossed test's critical |dbar| in each of the DRAWS simulated studies (module docstring)."""
    x = _chi2_draws(seeds, queries)
    ms_s = (comps.resid + queries * comps.seed) * x[:, 0]
    b = (comps.resid + seeds * comps.query) * x[:, 1] - comps.resid * x[:, 2]
    u = ms_s + np.abs(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(u > 0, b / np.where(u > 0, u, 1.0), 1.0)
    grid, c = critical_table(seeds, queries, level)
    return np.interp(w, grid, c) * np.sqrt(u / (seeds * queries))


def power_of(comps: VarianceComponents, seeds: int, queries: int, effect: float, *,
             level: float = 0.05) -> float:
    """The crossed test's power at two-sided ``level`` against a true mean difference ``effect``."""
    se = float(_se_df(comps, np.array([seeds]), queries)[0][0])
    if se <= 0:
        return 1.0 if effect > 0 else level
    h = half_widths(comps, seeds, queries, level)
    with np.errstate(over="ignore"):  # an effect past any SE: the normal tails are 0 and 1 exactly
        return float(np.mean(special.ndtr((effect - h) / se) + special.ndtr((-effect - h) / se)))


@functools.lru_cache(maxsize=4096)
def mde(comps: VarianceComponents, seeds: int, queries: int, *, level: float = 0.05,
        power: float = 0.8) -> MdeRow:
    """The minimum detectable effect of the crossed test in a study of ``seeds`` x ``queries`` at
    two-sided ``level`` (module docstring). Kept per process: the report's power curves ask again
    for the rows of the power analysis (a row is frozen, its arguments hashable)."""
    se_arr, sat = _se_df(comps, np.array([seeds]), queries)
    se = float(se_arr[0])
    # no standard error (every difference the same): no MDE, never 0
    m = _detectable(half_widths(comps, seeds, queries, level), se, power) if se > 0 else math.nan
    return MdeRow(seeds=seeds, queries=queries, se=se, df=float(sat[0]), mde=m, level=level)


def _detectable(h: np.ndarray, se: float, power: float) -> float:
    """The true difference the test detects with ``power`` when its mean difference is normal with
    ``se`` and it rejects past the half-widths ``h`` of the draws (module docstring); NaN where the
    power is reached at no difference at all (a power at or below the test's size)."""
    def gap(delta: float) -> tuple[float, float]:
        a, b = (delta - h) / se, (-delta - h) / se
        value = float(np.mean(special.ndtr(a) + special.ndtr(b))) - power
        slope = float(np.mean(np.exp(-0.5 * a * a) - np.exp(-0.5 * b * b))) / (se * math.sqrt(2.0 * math.pi))
        return value, slope

    if gap(0.0)[0] >= 0:
        return math.nan
    high = float(h.max()) + 10.0 * se
    while gap(high)[0] < 0:
        high *= 2.0
    # Power rises with delta. The solve starts where it would be reached if the half-width
    # were normal: P(h + SE Z < delta) = power, delta = mean(h) + z_power sqrt(SE^2 + var(h)).
    start = float(np.mean(h)) + float(dist.norm.ppf(power)) * math.sqrt(se * se + float(np.var(h)))
    return newton(gap, 0.0, high, rising=True, start=start)


def query_floor(comps: VarianceComponents, queries: int, *, level: float = 0.05,
                power: float = 0.8) -> float:
    """The limit of MDE(S, Q) as S grows (module docstring): the seed and residual terms vanish,
    the mean difference has SE sqrt(s2_query / Q), and the query mean square alone sets the
    half-width, h = c(1) sqrt(s2_query X / Q) with X the draws' query chi-square over its Q - 1 df
    and c(1) the pivot's critical value where the query share is 1 (``critical_table``'s last,
    which no seed count changes): the one-sample t-test over the Q seed-averaged differences, its
    critical value the quadrature's, as the table's test computes it. With the draws shared with
    ``half_widths`` the MDE of every seed count lies above it (common random numbers), and the
    floor equals statsmodels' noncentral-t MDE with Q - 1 df to the simulation's precision at 10
    or more queries; the normal quantiles' form, (z_{1-level/2} + z_power) sqrt(s2_query / Q), is
    5-12% lower at 20-10 queries. 0 where there is no query variance (or no difference is needed)."""
    if comps.query <= 0:
        return 0.0
    c = critical_table(2, queries, level)[1][-1]
    h = c * np.sqrt(comps.query * _chi2_column(1, queries - 1) / queries)
    floor = _detectable(h, math.sqrt(comps.query / queries), power)
    return 0.0 if math.isnan(floor) else floor


def seeds_needed(comps: VarianceComponents, queries: int, effect: float, *, level: float = 0.05,
                 power: float = 0.8, max_seeds: int = MAX_SEEDS) -> int | None:
    """The smallest seed count in [2, max_seeds] whose power at ``effect`` reaches ``power``; None
    if none does (a bisection over S: about log2(max_seeds) simulated designs)."""
    def enough(s: int) -> bool:
        return power_of(comps, s, queries, effect, level=level) >= power

    if effect <= query_floor(comps, queries, level=level, power=power) or not enough(max_seeds):
        return None
    lo, hi = 1, max_seeds  # enough(hi) holds; lo is below every candidate
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if mid >= 2 and enough(mid) else (mid, hi)
    return hi


# The one-sided confidence of the seed component's upper bound behind a pilot's cautious seed count
# (``ComparisonPower.needed_upper``).
UPPER_CONFIDENCE = 0.8


def seed_upper(observed: CrossedResult, confidence: float = UPPER_CONFIDENCE) -> VarianceComponents:
    """The pilot's components with the seed component at its upper ``confidence`` bound. The seed
    mean square has E[MS_seed] = s2_resid + Q s2_seed and (S - 1) MS_seed / E[MS_seed] ~ chi2(S - 1)
    under the crossed model, so E[MS_seed] <= (S - 1) MS_seed / chi2_{1 - confidence}(S - 1) with that
    confidence, and s2_seed <= (that bound - s2_resid) / Q. From 2 or 3 seeds the point estimate is
    often 0 (clamped) while the seeds it plans from miss the power asked for (docs/statistics.md)."""
    comps = observed.components
    df = observed.seeds - 1
    bound = df * observed.ms_seed / float(dist.chi2.ppf(1.0 - confidence, df))
    return dataclasses.replace(comps, seed=max(comps.seed, (bound - comps.resid) / observed.queries))


def one_seed_seeds(differences: np.ndarray, *, level: float, power: float = 0.8) -> int | None:
    """A lower bound on the seeds a one-seed study's difference needs: its per-query differences'
    variance v taken as all residual and no training variance counted (the most optimistic split
    one seed cannot rule out), with the normal quantiles, S >= v (z_{1-level/2} + z_power)^2 / (Q d^2),
    at least 2; None where the mean difference d is 0. The crossed test counts the training variance
    it cannot see here, so a study needs at least this many (docs/statistics.md)."""
    d = np.asarray(differences, dtype=np.float64)
    mean = float(d.mean())
    if mean == 0.0 or len(d) < 2:
        return None
    lam = float(dist.norm.isf(level / 2.0) + dist.norm.ppf(power))
    return max(2, math.ceil(float(d.var(ddof=1)) * lam * lam / (len(d) * mean * mean)))


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
    # with an effect: the seeds needed where the seed component is at its upper UPPER_CONFIDENCE
    # bound from the pilot (``seed_upper``); None where none reaches it within MAX_SEEDS
    needed_upper: int | None = None

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
    family_size: int = 1  # m: the figures are at the corrected level alpha / m
    # Metrics identical in every run (harness.stats.identical), the analysed one first: one
    # comparison each, as the table shows and counts them (MAP = MRR), not the same figures twice.
    identical: tuple[tuple[str, ...], ...] = ()

    def aliases(self, metric: str) -> tuple[str, ...]:
        """The metrics ``metric`` stands for (itself first): its identical group, or itself."""
        return next((g for g in self.identical if g[0] == metric), (metric,))

    @property
    def level(self) -> float:
        """The two-sided level of every figure: Holm's first step, alpha / m."""
        return self.options.alpha / self.family_size


def study_family(results: StudyResults) -> int:
    """The family of one metric's table: every candidate, the stopped ones included."""
    return max(len(results.configs) - 1 + len(results.stopped), 1)


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
    family = options.family_size or study_family(results)
    level = options.alpha / family
    if options.power <= level:
        raise refuse("power", options.power, f"above the test's level {level:.4g} (alpha / m, m = {family})",
                     why="the test rejects up to that often with no difference at all, so the MDE would be 0")
    grid = sorted({*options.seeds, s})  # the options' seed counts and this study's own
    groups = identical_groups(results, metrics, lower_is_better)
    metrics = tuple(g[0] for g in groups)
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
            observed = _rounding_only(observed, cand, base)
            comps = observed.components
            rows = tuple(mde(comps, n, queries, level=level, power=options.power) for n in grid)
            needed = (seeds_needed(comps, queries, options.effect, level=level, power=options.power)
                      if options.effect is not None else None)
            upper = (seeds_needed(seed_upper(observed), queries, options.effect, level=level, power=options.power)
                     if options.effect is not None and needed is not None else None)
            comparisons.append(ComparisonPower(
                config=config, metric=metric, observed=observed, rows=rows, needed=needed, needed_upper=upper,
                floor=query_floor(comps, queries, level=level, power=options.power)))
    return PowerAnalysis(source=results.source, baseline=results.baseline, seeds=s, queries=q,
                         options=options, comparisons=tuple(comparisons), dropped=len(results.dropped),
                         family_size=family, identical=tuple(g for g in groups if len(g) > 1))


# A variance component within this of 0, relative to the squared scale of the values, is rounding:
# d = b - a with b = a + 0.1 in every cell has components of about 1e-33, not 0.
ROUNDING = (64 * float(np.finfo(np.float64).eps)) ** 2


def _rounding_only(observed: CrossedResult, cand: np.ndarray, base: np.ndarray) -> CrossedResult:
    """``observed`` with every variance component 0 where all three are float rounding (each
    within ROUNDING times the largest squared value): the differences are one constant, which has
    no standard error and so no MDE ("not estimable"), not an MDE of 0.0000 from an SE of 1e-17."""
    comps = observed.components
    scale = max(float(np.max(np.abs(cand), initial=0.0)), float(np.max(np.abs(base), initial=0.0)))
    if max(comps.seed, comps.query, comps.resid) > ROUNDING * scale * scale:
        return observed
    zero = VarianceComponents(seed=0.0, query=0.0, resid=0.0, raw=comps.raw or (comps.seed, comps.query, comps.resid))
    return dataclasses.replace(observed, components=zero)


def outcome_metrics(analysis: PowerAnalysis, config: str) -> dict[str, float]:
    """MLflow metrics of one configuration: <m>_var_seed, <m>_var_query, <m>_var_resid,
    <m>_mde_s<S> for every seed count of the grid (the crossed test's, at the corrected level) and
    <m>_mde_level, that level (alpha / m)."""
    out: dict[str, float] = {}
    for c in analysis.comparisons:
        if c.config != config:
            continue
        m = c.metric
        out.update({f"{m}_var_seed": c.components.seed, f"{m}_var_query": c.components.query,
                    f"{m}_var_resid": c.components.resid})
        out.update({f"{m}_mde_s{r.seeds}": r.mde for r in c.rows if math.isfinite(r.mde)})  # none where not estimable
        out[f"{m}_mde_level"] = analysis.level
    return out
