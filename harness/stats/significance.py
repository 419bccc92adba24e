"""Every configuration against the baseline with the same seeds: which values are paired, which test
runs on them, the correction over a family of comparisons, and the resulting markers.

Tests (TESTS: name -> procedure and pairing):
- ``crossed``: the crossed seeds x queries test (harness.stats.crossed) of the mean difference
  d[seed, query]: its variance counts the seeds, the queries and their interaction, with a
  generalized p-value that keeps its size at 2 and 3 seeds; needs per-query values and at least 2
  seeds;
- ``per-seed``: for each seed, a paired t-test over the test queries (Penha & Hauff 2020: one marker
  per run and configuration); tables and the study report summarise it as "significant in k of S
  seeds";
- ``across-seeds``: a paired t-test of the per-seed means, paired by seed (the only test that needs
  no per-query values; the query sample does not enter its variance);
- ``seed-averaged``: each query averaged over seeds, then a paired t-test over queries (the WSLS code;
  the seeds do not enter its variance);
- ``randomisation``, ``wilcoxon``: the sign-flip randomisation test or the Wilcoxon signed-rank test
  over seed-averaged queries.
- ``auto``: crossed where every metric has per-query values and there are at least 2 seeds; without
  per-query values across-seeds. With a single seed no test runs by default (``UNTESTED``): the
  variance between training runs cannot be estimated from one run, and a test over that run's
  queries alone marked 70 of 100 null 8-candidate studies in simulation. ``AnalysisOptions.
  one_seed_test = "query"`` opts in to the paired t-test over the seed's queries; its cells carry
  the query-only symbols (``Markers.query_better`` / ``query_worse``), never the multi-seed ones,
  as does any per-query test asked for by name on one seed.

Families (``AnalysisOptions.family``): ``metric`` corrects each metric's comparisons together (every
configuration, and every seed under per-seed); ``all`` corrects every comparison of the analysis at
once. The default correction is Holm's step-down (family-wise error control), over every
configuration that was compared with the baseline: a configuration stopped early
(``StudyResults.stopped``) is not in the table, yet it was compared, so it counts in its family
with p = 1 (as many comparisons as a finished one contributes). The family size m, stopped ones
included, is kept on each comparison. Metrics identical by construction (equal per-query values in
every run, harness.stats.identical: MAP = MRR with one relevant document per query) are tested
once, as their first member, so the family counts distinct comparisons only
(``AnalysisOptions.merge_identical``; ``Analysis.identical`` names the groups).

``maxt`` (harness.stats.maxt) adjusts the statistics instead of the p-values: every comparison of
a family shares the baseline's runs, and the correlation of their statistics, estimated from the
query-level differences, enters the joint null distribution of max |T|. It also gives each
comparison a simultaneous interval (``Comparison.simultaneous``) with the family's critical value,
which excludes 0 exactly when the adjusted p-value is below 1 - confidence. Stopped configurations
enter it by a union bound. It needs a statistic with a t form whose correlation the queries give
(corrections.MAXT_TESTS: per-seed, seed-averaged): the Wilcoxon and randomisation tests have no t
form, and under the crossed and across-seeds tests the joint null would rest on the seeds, too few
to estimate it (``maxt_refused``). Its integral grows with the cube of the family, so a family past
maxt.MAXT_MAX_FAMILY comparisons is refused before any test runs (``maxt_too_large``).

Markers: a comparison is marked at the strictest level its adjusted p-value is below, with the
``better`` symbol when the test's estimate (``PairedResult.point``: the mean difference, or the
Hodges-Lehmann estimate under wilcoxon) is positive and the ``worse`` one when it is negative; for a
metric that is lower when the ranker is better (a cost: ``harness.metrics.measures.COSTS``, or one
named in ``AnalysisOptions.lower_better``) the other way round (``Comparison.lower_is_better``).

Intervals (``Comparison.interval``) agree with the corrected verdict: under ``maxt`` the simultaneous
interval; under a p-value correction the test's own interval at the per-comparison level its
correction implies for that comparison, 1 - a p / p~ with a = 1 - confidence, p its p-value and p~
the adjusted one (Bonferroni: a / m for every comparison; Holm: a over the multiplier of its step),
so it excludes 0 exactly when p~ < a; under ``none`` the per-comparison interval. An interval that
inverts its test at level 1 - a' excludes 0 exactly when p < a', and p < a p / p~ holds exactly when
p~ < a.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from harness.errors import ConfigError, DataError, UnknownName, is_integer, is_number, refuse, shown
from harness.metrics.measures import known_measure, lower_is_better, metric_key
from harness.registry import Registry
from harness.results.stored import StudyResults
from harness.stats import maxt as _maxt
from harness.stats.corrections import (
    CORRECTIONS,
    DEFAULT_CORRECTION,
    MAXT,
    MAXT_SEED_REASON,
    MAXT_SEED_TESTS,
    MAXT_TESTS,
    adjust,
)
from harness.stats.crossed import crossed_test
from harness.stats.identical import identical_groups
from harness.stats.paired import BETTER, MAX_RESAMPLES, WORSE, PairedResult, oriented, paired_test

# (seed or None, candidate, baseline): one value per query or seed, or seeds x queries (crossed)
Pairs = list[tuple[str | None, np.ndarray, np.ndarray]]
PAIRINGS: Registry[Callable[[StudyResults, str, str], Pairs]] = Registry("evaluation.pairing")


# Every pairing takes the candidate's seeds (``StudyResults.seeds_of``: all of them, or the first
# ones where a seed schedule stopped it) from both configurations.
@PAIRINGS.register("per-seed")
def _per_seed(results: StudyResults, config: str, metric: str) -> Pairs:
    return [(s, results.query_values(config, s, metric), results.query_values(results.baseline, s, metric))
            for s in results.seeds_of(config)]


@PAIRINGS.register("across-seeds")
def _across_seeds(results: StudyResults, config: str, metric: str) -> Pairs:
    return [(None, results.seed_values(config, metric),
             results.seed_values(results.baseline, metric, results.seeds_of(config)))]


@PAIRINGS.register("seed-averaged")
def _seed_averaged(results: StudyResults, config: str, metric: str) -> Pairs:
    def averaged(c: str) -> np.ndarray:
        return np.asarray(np.mean([results.query_values(c, s, metric) for s in results.seeds_of(config)],
                                  axis=0))

    return [(None, averaged(config), averaged(results.baseline))]


@PAIRINGS.register("crossed")
def _crossed(results: StudyResults, config: str, metric: str) -> Pairs:
    def matrix(c: str) -> np.ndarray:  # seeds x queries
        return np.array([results.query_values(c, s, metric) for s in results.seeds_of(config)])

    return [(None, matrix(config), matrix(results.baseline))]


CROSSED = "crossed"


@dataclass(frozen=True)
class TestDesign:
    procedure: str
    pairing: str
    description: str
    # What d_z divides the mean difference by, which differs per pairing (PairedResult.effect_basis).
    effect_basis: str = "the SD of the per-query differences"

    def run(self, x: np.ndarray, y: np.ndarray, options: AnalysisOptions) -> PairedResult:
        """The test on one pairing's values (a crossed design takes whole seeds x queries matrices)."""
        if self.procedure == CROSSED:
            res: PairedResult = crossed_test(x, y, confidence=options.confidence)
        else:
            res = paired_test(self.procedure, x, y, rng=np.random.default_rng(options.seed),
                              resamples=options.resamples, confidence=options.confidence)
        return replace(res, effect_basis=self.effect_basis)


_SEED_AVERAGED_SD = "the SD of the per-query differences of seed-averaged values"
TESTS: Mapping[str, TestDesign] = MappingProxyType({
    CROSSED: TestDesign(CROSSED, "crossed", "crossed seeds \u00d7 queries test of the mean difference",
                        "the SD of one (seed, query) difference, from the variance components"),
    "per-seed": TestDesign("t", "per-seed", "paired t-test over queries, for each seed",
                           "the SD of the per-query differences of that seed"),
    "across-seeds": TestDesign("t", "across-seeds", "paired t-test over the per-seed means, paired by seed",
                               "the SD of the per-seed mean differences"),
    "seed-averaged": TestDesign("t", "seed-averaged", "paired t-test over queries, each query averaged "
                                "over seeds", _SEED_AVERAGED_SD),
    "randomisation": TestDesign("randomisation", "seed-averaged", "paired randomisation (sign-flip) test "
                                "over queries, each query averaged over seeds", _SEED_AVERAGED_SD),
    "wilcoxon": TestDesign("wilcoxon", "seed-averaged", "Wilcoxon signed-rank test over queries, each "
                           "query averaged over seeds", _SEED_AVERAGED_SD),
})
# How each test's confidence interval is made (Notes.interval): every one inverts its test.
INTERVALS: Mapping[str, str] = MappingProxyType({
    CROSSED: "the values the crossed pivot does not reject",
    "randomisation": "the shifts the sign-flip test, over its own sign vectors, does not reject",
    "wilcoxon": "the Hodges-Lehmann interval between Walsh averages, around the Hodges-Lehmann "
                "estimate (the median Walsh average)",
})
AUTO = "auto"
FAMILIES = ("metric", "all")
# The resolved test of an analysis that ran none (one seed, no opt-in): no comparisons, no markers.
UNTESTED = "untested"
# --one-seed-test: the opt-in test of a one-seed study, by what its variance counts.
ONE_SEED_TESTS: Mapping[str, str] = MappingProxyType({"query": "seed-averaged"})
ONE_SEED_REASON = ("training variance cannot be estimated from one run, and a test over its queries "
                   "alone treats one trained model as the configuration")


@dataclass(frozen=True, kw_only=True)
class Markers:
    """Significance levels (strictly decreasing) and a symbol per level for gains and for losses."""

    levels: tuple[float, ...] = (0.05, 0.01)
    better: tuple[str, ...] = ("\u2020", "\u2021", "\u00a7")  # dagger, double dagger, section
    worse: tuple[str, ...] = ("\u2193", "\u21d3", "\u21ca")   # down arrow, double, paired arrows
    # A test over one seed's queries: symbols that cannot be read as the multi-seed ones.
    query_better: tuple[str, ...] = ("*", "**", "***")
    query_worse: tuple[str, ...] = ("\u2193*", "\u2193**", "\u2193***")

    def __post_init__(self) -> None:
        if not self.levels or any(not 0.0 < a < 1.0 for a in self.levels) \
                or list(self.levels) != sorted(set(self.levels), reverse=True):
            raise ConfigError(f"levels must be strictly decreasing values in (0, 1), got {shown(list(self.levels))}")
        most = min(len(self.better), len(self.worse), len(self.query_better), len(self.query_worse))
        if len(self.levels) > most:
            raise ConfigError(f"levels: at most {most} levels have symbols, got {len(self.levels)}")

    def level_of(self, p: float) -> int | None:
        """Index of the strictest level that ``p`` is below, None when not significant."""
        passed = [i for i, a in enumerate(self.levels) if p < a]
        return passed[-1] if passed else None

    def symbol(self, direction: str, level: int, query_only: bool = False) -> str:
        if query_only:
            return (self.query_better if direction == BETTER else self.query_worse)[level]
        return (self.better if direction == BETTER else self.worse)[level]


@dataclass(frozen=True, kw_only=True)
class AnalysisOptions:
    """What to test and how to mark it; defaults need nothing (auto test, Holm over the family)."""

    metrics: tuple[str, ...] | None = None
    test: str = AUTO
    correction: str = DEFAULT_CORRECTION
    family: str = "metric"
    markers: Markers = field(default_factory=Markers)
    confidence: float = 0.95
    resamples: int = 10_000
    seed: int = 0
    # Metrics with equal per-query values in every run (harness.stats.identical) tested and shown once.
    merge_identical: bool = True
    # One seed: None runs no test (the table says why); "query" runs the query-only test, marked apart.
    one_seed_test: str | None = None
    # Metrics that are lower when the ranker is better, besides the harness's own costs (measures.COSTS):
    # their falls are marked better and their least value is the best (harness keys or ir-measures names).
    lower_better: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        declared = (self.lower_better,) if isinstance(self.lower_better, str) else tuple(self.lower_better)
        for name in declared:
            if not isinstance(name, str) or not name.strip():
                raise refuse("lower_better", name, "a metric name")
            if known_measure(name):  # every IR measure is higher when the ranking is better
                raise ConfigError(f"lower_better: {name} is an IR measure, higher when the ranking is "
                                  "better; name costs, losses or latencies only")
        object.__setattr__(self, "lower_better", tuple(dict.fromkeys(metric_key(n) for n in declared)))
        if self.test != AUTO and self.test not in TESTS:
            raise UnknownName("test", self.test, [AUTO, *TESTS])
        if self.one_seed_test is not None and self.one_seed_test not in ONE_SEED_TESTS:
            raise UnknownName("one_seed_test", self.one_seed_test, ONE_SEED_TESTS)
        if self.correction not in CORRECTIONS:
            raise UnknownName(CORRECTIONS.key, self.correction, CORRECTIONS.names())
        if self.correction == MAXT and self.test not in (AUTO, *MAXT_TESTS):
            raise maxt_refused(self.test)
        if self.family not in FAMILIES:
            raise UnknownName("family", self.family, FAMILIES)
        if not (is_number(self.confidence) and 0.0 < self.confidence < 1.0):
            raise refuse("confidence", self.confidence, "in (0, 1)")
        if not (is_integer(self.resamples) and 1 <= self.resamples <= MAX_RESAMPLES):
            raise refuse("resamples", self.resamples, f"an integer in [1, {MAX_RESAMPLES}]")
        if not (is_integer(self.seed) and self.seed >= 0):  # the randomisation test's generator
            raise refuse("seed", self.seed, "an integer >= 0")

    def lower(self, metric: str) -> bool:
        """Whether a fall of ``metric`` is an improvement (a cost; module docstring)."""
        return lower_is_better(metric, self.lower_better)



@dataclass(frozen=True, kw_only=True)
class Comparison:
    """One configuration vs the baseline on one metric (and one seed under per-seed)."""

    config: str
    metric: str
    seed: str | None
    result: PairedResult
    p_adjusted: float
    family_size: int
    level: int | None
    # maxt: the simultaneous interval (options.confidence) of the mean difference; None otherwise
    simultaneous: tuple[float, float] | None = None
    # a p-value correction: the test's interval at the level the correction implies (module docstring)
    corrected: tuple[float, float] | None = None
    # the metric is lower when the ranker is better (a cost): a fall is BETTER
    lower_is_better: bool = False

    @property
    def direction(self) -> str:
        return oriented(self.result.point, self.lower_is_better)

    @property
    def interval(self) -> tuple[float, float]:
        """The interval reported beside the marker, around ``estimate``: the simultaneous one under
        maxt, the correction's under a p-value correction (both exclude 0 exactly when the adjusted
        p-value is below 1 - confidence), else the test's own."""
        return self.simultaneous or self.corrected or (self.result.ci_low, self.result.ci_high)

    @property
    def estimate(self) -> float:
        """The test's point estimate, whose sign the marker's direction is: the mean difference, or
        the Hodges-Lehmann estimate under wilcoxon."""
        return self.result.point

    @property
    def marked(self) -> bool:
        return self.level is not None and self.direction in (BETTER, WORSE)


@dataclass(frozen=True, kw_only=True)
class Tally:
    """Per-seed verdicts summarised: significant (``symbol``, the loosest level's) in ``count`` of
    ``total`` seeds."""

    symbol: str
    count: int
    total: int

    @property
    def text(self) -> str:
        return f"{self.symbol}{self.count}/{self.total}"


@dataclass(frozen=True, kw_only=True)
class Analysis:
    """The executed tests: ``test`` is the resolved test name (never auto)."""

    results: StudyResults
    options: AnalysisOptions
    test: str
    metrics: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    per_run_only: bool
    remarks: tuple[str, ...] = ()  # what the footnote must add (the single-seed fallback)
    # Groups of metrics identical in every run (harness.stats.identical), the shown one first; each
    # group's first member is in ``metrics``, the others are not tested.
    identical: tuple[tuple[str, ...], ...] = ()

    def aliases(self, metric: str) -> tuple[str, ...]:
        """The metrics ``metric`` stands for (itself first): its identical group, or itself."""
        return next((g for g in self.identical if g[0] == metric), (metric,))
    # One seed: the test ran over that seed's queries only, and its markers are the query-only ones.
    query_only: bool = False

    @property
    def untested(self) -> bool:
        """No test ran (one seed, no opt-in): no markers; ``remarks`` says why."""
        return self.test == UNTESTED

    def get(self, config: str, metric: str, seed: str | None = None) -> Comparison | None:
        """The comparison of ``config`` with the baseline on ``metric`` (a harness key or an
        ir-measures name) and, under the per-seed test, ``seed``; None where none was made (the
        baseline; a seed without a test of its own). A configuration, metric or seed that the
        analysis lacks raises UnknownName, naming the valid ones."""
        res = self.results
        if config not in res.configs:
            raise UnknownName("configuration", config, res.configs, where=res.source)
        if metric not in self.metrics:
            key = res.select([metric])[0]  # an ir-measures name, or UnknownName
            if key not in self.metrics:
                raise UnknownName("metric", metric, self.metrics, where="this analysis")
            metric = key
        seed = None if seed is None else str(seed)  # seeds are labels; 1 is seed "1"
        if seed is not None and seed not in res.seeds:
            raise UnknownName("seed", seed, res.seeds, where=res.source)
        for c in self.comparisons:
            if c.config == config and c.metric == metric and c.seed == seed:
                return c
        return None

    def marker(self, comparison: Comparison | None) -> str | None:
        if comparison is None or not comparison.marked or comparison.level is None:
            return None
        return self.options.markers.symbol(comparison.direction, comparison.level, self.query_only)

    def seed_tally(self, config: str, metric: str) -> tuple[int, int, int]:
        """Under per-seed: (seeds significantly better, seeds significantly worse, seeds), at any of
        the marker levels after correction."""
        comps = [c for c in self.comparisons if c.config == config and c.metric == metric
                 and c.seed is not None]
        return (sum(c.marked and c.direction == BETTER for c in comps),
                sum(c.marked and c.direction == WORSE for c in comps), len(comps))

    def tallies(self, config: str, metric: str) -> tuple[Tally, ...]:
        """Under per-seed: the non-zero better and worse counts of ``seed_tally`` with the loosest
        level's symbols; empty for the baseline and under every other test."""
        if self.test != "per-seed" or config == self.results.baseline:
            return ()
        better, worse, total = self.seed_tally(config, metric)
        m = self.options.markers
        return tuple(Tally(symbol=sym, count=k, total=total)
                     for sym, k in ((m.better[0], better), (m.worse[0], worse)) if k)


def maxt_refused(test: str) -> ConfigError:
    """Why ``--correction maxt`` does not run with ``test``, in one line (corrections.MAXT_TESTS)."""
    if test in MAXT_SEED_TESTS:
        # No other test is suggested: the t-tests over queries it serves treat the seeds as fixed.
        return ConfigError(f"correction maxt is not available with the {test} test: {MAXT_SEED_REASON}; use "
                           "holm (the default)")
    return ConfigError(f"correction maxt needs a test statistic with a t form ({', '.join(MAXT_TESTS)}); "
                       f"the {test} test has none")


def maxt_family_size(results: StudyResults, metrics: Sequence[str], pairing: str, family: str) -> int:
    """The comparisons of the largest family ``analyse`` corrects, counted from the design before
    any test runs (``metrics`` after identical ones are merged): every candidate once per metric,
    once per seed it has under the per-seed pairing; the metric family holds one metric's, the
    family ``all`` every metric's. Stopped configurations are not counted: max-t adds them by a
    union bound, not as dimensions of its integral."""
    per_metric = sum(len(results.seeds_of(c)) if pairing == "per-seed" else 1 for c in results.configs[1:])
    return per_metric * (len(metrics) if family == "all" else 1)


def maxt_too_large(size: int, results: StudyResults, metrics: Sequence[str], test: str,
                   family: str) -> ConfigError:
    """Why ``--correction maxt`` does not run on a family of ``size`` comparisons, past
    maxt.MAXT_MAX_FAMILY, and the smaller families (or Holm) that would do, in one line."""
    ways = []
    if family == "all" and len(metrics) > 1:
        ways += ["--family metric (each metric's comparisons apart)", "fewer metrics (--metric)"]
    if test == "per-seed" and len(results.seeds) > 1:
        ways.append("--test seed-averaged (a comparison per configuration, not per seed)")
    ways.append("fewer configurations")
    whose = "every metric's together" if family == "all" else "each metric's"
    return ConfigError(f"correction maxt: a family of {size} comparisons ({whose}) is over max-t's limit of "
                       f"{_maxt.MAXT_MAX_FAMILY}, its integral growing with the cube of the family (minutes "
                       f"past 40); use holm (the default), or a smaller family: {', '.join(ways)}")


def resolve_test(results: StudyResults, metrics: Sequence[str], test: str,
                 one_seed_test: str | None = None) -> tuple[str, bool, str | None]:
    """(test name, per-run only, remark): auto picks crossed when per-query values and at least 2 seeds
    exist, else across-seeds; with one seed none (UNTESTED), or with ``one_seed_test`` its test (the
    remark says which and why its markers differ)."""
    per_query = all(results.has_per_query(m) for m in metrics)
    seeds = len(results.seeds)
    if test == AUTO:
        if seeds < 2:
            if one_seed_test is None:
                return UNTESTED, False, None
            if not per_query:
                raise DataError(f"{results.source} has one seed ({results.seeds[0]}) and per-run values only: "
                                f"the query-only test (one_seed_test {one_seed_test!r}) needs per-query values, "
                                "and across seeds there is one pair; leave it out for a table without markers")
            return ONE_SEED_TESTS[one_seed_test], False, _query_only_remark(results)
        if not per_query:
            return "across-seeds", True, None
        return CROSSED, False, None
    if TESTS[test].pairing != "across-seeds" and not per_query:
        lacking = [m for m in metrics if not results.has_per_query(m)]
        raise DataError(f"{results.source} has per-run values only for {', '.join(lacking)}; "
                        f"--test {test} needs per-query values, per-run values support "
                        f"--test across-seeds alone")
    if test == CROSSED and seeds < 2:
        raise DataError(f"{results.source} has one seed ({results.seeds[0]}); the crossed seeds x "
                        f"queries test needs at least 2 (auto marks nothing from one seed; --one-seed-test "
                        f"query runs the query-only test, marked apart)")
    if seeds < 2:
        return test, not per_query, _query_only_remark(results)
    return test, not per_query, None


def _query_only_remark(results: StudyResults) -> str:
    return (f"Only one seed ({results.seeds[0]}): the test counts the variance between that run's "
            f"queries only, not between training runs ({ONE_SEED_REASON}); its markers are the "
            f"query-only ones, and a marker here says that this one trained model differs, not the "
            f"configuration")


def analyse(results: StudyResults, options: AnalysisOptions | None = None) -> Analysis:
    """Run the tests of every candidate configuration against the baseline, then correct."""
    options = options or AnalysisOptions()
    metrics = results.select(options.metrics)
    test, per_run_only, remark = resolve_test(results, metrics, options.test, options.one_seed_test)
    if options.correction == MAXT and test not in (UNTESTED, *MAXT_TESTS):
        raise maxt_refused(test)  # auto's test: crossed, or across-seeds for per-run values
    if test == UNTESTED:
        return Analysis(results=results, options=options, test=test, metrics=metrics, comparisons=(),
                        per_run_only=False)
    identical: tuple[tuple[str, ...], ...] = ()
    if options.merge_identical:
        groups = identical_groups(results, metrics, options.lower)
        metrics = tuple(g[0] for g in groups)
        identical = tuple(g for g in groups if len(g) > 1)
    design = TESTS[test]
    if options.correction == MAXT:  # before any test runs: a family past the limit runs for minutes
        size = maxt_family_size(results, metrics, design.pairing, options.family)
        if size > _maxt.MAXT_MAX_FAMILY:
            raise maxt_too_large(size, results, metrics, test, options.family)
    pairing = PAIRINGS.get(design.pairing)
    raw: list[tuple[str, str, str | None, PairedResult]] = []
    diffs: list[np.ndarray] = []
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    for metric in metrics:
        for config in results.configs[1:]:
            for seed, x, y in pairing(results, config, metric):
                try:
                    res = design.run(x, y, options)
                except DataError as exc:
                    where = f" seed {seed}" if seed is not None else ""
                    raise DataError(f"{test} test of {config!r} vs {results.baseline!r} on "
                                    f"{metric}{where}: {exc}") from None
                raw.append((config, metric, seed, res))
                pairs.append((x, y))
                diffs.append(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64))
    groups: dict[str, list[int]] = {}
    for i, (_, metric, _, _) in enumerate(raw):
        groups.setdefault(metric if options.family == "metric" else "all", []).append(i)
    # Each configuration stopped early counts in its family as often as a finished one does, p = 1.
    candidates = max(len(results.configs) - 1, 1)
    stopped = len(results.stopped)
    adjusted = np.empty(len(raw))
    sizes = np.empty(len(raw), dtype=int)
    intervals: list[tuple[float, float] | None] = [None] * len(raw)
    for members in groups.values():
        phantom = stopped * len(members) // candidates
        if options.correction == MAXT:
            p_max, ints = maxt_family(test, [raw[i][3] for i in members], [diffs[i] for i in members],
                                      phantom, options.confidence)
            adjusted[members] = p_max
            for i, interval in zip(members, ints, strict=True):
                intervals[i] = interval
        else:
            p = [raw[i][3].p_value for i in members] + [1.0] * phantom
            adjusted[members] = adjust(options.correction, p)[:len(members)]
        sizes[members] = len(members) + phantom
    corrected: list[tuple[float, float] | None] = [None] * len(raw)
    if options.correction not in (MAXT, "none"):
        for i, (_, _, _, r) in enumerate(raw):
            level = corrected_confidence(options.confidence, r.p_value, float(adjusted[i]), int(sizes[i]))
            if level != r.confidence:
                again = design.run(*pairs[i], replace(options, confidence=level))
                corrected[i] = (again.ci_low, again.ci_high)
    comparisons = tuple(
        Comparison(config=c, metric=m, seed=s, result=r, p_adjusted=float(adjusted[i]),
                   family_size=int(sizes[i]), level=options.markers.level_of(float(adjusted[i])),
                   simultaneous=intervals[i], corrected=corrected[i], lower_is_better=options.lower(m))
        for i, (c, m, s, r) in enumerate(raw))
    return Analysis(results=results, options=options, test=test, metrics=metrics,
                    comparisons=comparisons, per_run_only=per_run_only,
                    remarks=(remark,) if remark else (), query_only=len(results.seeds) < 2,
                    identical=identical)


def corrected_interval(results: StudyResults, comparison: Comparison, test: str, options: AnalysisOptions,
                       p_adjusted: float, family_size: int) -> tuple[float, float] | None:
    """The interval of ``comparison`` at the level its correction implies (``corrected_confidence``;
    the test run again at that confidence), for a family corrected outside ``analyse`` (a table
    over several collections); None where that level is the test's own."""
    r = comparison.result
    level = corrected_confidence(options.confidence, r.p_value, p_adjusted, family_size)
    if level == r.confidence:
        return None
    design = TESTS[test]
    for seed, x, y in PAIRINGS.get(design.pairing)(results, comparison.config, comparison.metric):
        if seed == comparison.seed:
            again = design.run(x, y, replace(options, confidence=level))
            return again.ci_low, again.ci_high
    return None


def corrected_confidence(confidence: float, p: float, p_adjusted: float, family_size: int) -> float:
    """The confidence of a comparison's interval under a p-value correction: 1 - a p / p~ with
    a = 1 - confidence (module docstring), so the interval excludes 0 exactly when p~ < a. Where
    p = 0 the multiplier is undefined and the family's Bonferroni level a / m is used (the interval
    excludes 0 at any level then)."""
    alpha = 1.0 - confidence
    if p <= 0.0 or p_adjusted <= 0.0:
        return 1.0 - alpha / max(family_size, 1)
    return 1.0 - alpha * min(1.0, p / p_adjusted)


def maxt_family(test: str, results: Sequence[PairedResult], differences: Sequence[np.ndarray],
                phantoms: int, confidence: float) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Single-step max-t over one family (harness.stats.maxt): the adjusted p-values and the
    simultaneous intervals at ``confidence``: the tests' t with the correlation of the query-level
    differences and the family's smallest df (``test`` one of corrections.MAXT_TESTS)."""
    alpha = 1.0 - confidence
    t = np.array([r.statistic for r in results])
    df = float(min(len(d) for d in differences) - 1)
    corr = _maxt.unit_correlation(differences)
    # never below the test's own p: a constant shift's t is +-inf, and its p is paired.tie_p's
    p_adj = np.maximum(_maxt.adjusted(t, corr, df, phantoms=phantoms), [r.p_value for r in results])
    c = _maxt.critical_value(corr, df, alpha, phantoms=phantoms)
    ints = []
    for r, d, p in zip(results, differences, p_adj, strict=True):
        # a constant shift has t = +-inf and no spread (as paired_test): the interval is the point,
        # or the whole line where its p rejects nothing
        se = 0.0 if math.isinf(r.statistic) else float(d.std(ddof=1)) / math.sqrt(len(d))
        ints.append((-math.inf, math.inf) if se == 0.0 and p >= alpha
                    else (r.mean_diff - c * se, r.mean_diff + c * se))
    return p_adj, ints
