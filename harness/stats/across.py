"""A study over several collections: each collection's comparisons against the baseline, a combined
verdict per configuration and metric across the collections, and one family for the whole table
(docs/statistics.md, "Across collections").

Each collection is analysed as a study of its own (``significance.analyse``, the same test on
every collection); nothing is paired across collections, whose queries and trained runs differ.
The combined verdict of a configuration on a metric is the HKSJ random-effects combination
(harness.stats.combined) of its per-collection mean differences, by default with equal weights
(``weighting``; the one-sample t-test of the k differences on k - 1 df): inverse-variance weights
estimated from 3 to 5 seeds carry those estimates' noise into the verdict and raise its size to
6-9% at alpha .05 (docs/statistics.md, tests/stats/test_combined.py), which equal weights do
not. Each per-collection difference comes with its test's variance (for the weights and tau^2):
the crossed test's squared standard error; for the t-tests (across-seeds, seed-averaged) the
squared SE behind their t interval; for tests with no one standard error (per-seed, Wilcoxon,
randomisation) that of the paired t-test over seed-averaged queries. A configuration needs results
on at least 2 collections for a combined verdict.

Families (``family``):
- ``table`` (the default): every comparison in the table, every collection, every metric and every
  combined verdict, corrected together;
- ``metric``: each metric's comparisons over all collections, its combined verdicts included;
- ``collection``: each collection's comparisons (all its metrics) together, and the combined
  verdicts as a family of their own.

The correction is any of harness.stats.corrections but ``maxt``: max-t's joint null distribution
comes from the baseline's runs that a family's comparisons share, and comparisons on different
collections share none (over one collection, ``significance.analyse`` runs it). Configurations
stopped early count with p = 1 in their collection's family, as in ``significance.analyse``; a
configuration without a combined verdict (stopped, or on fewer than 2 collections) counts one
comparison with p = 1 per metric among the combined ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.errors import ConfigError, DataError, UnknownName, prefixed
from harness.results.stored import COMBINED, StudyResults
from harness.stats.combined import (
    DEFAULT_TAU2,
    TAU2_METHODS,
    WEIGHTINGS,
    CombinedResult,
    combine,
    standard_error,
)
from harness.stats.corrections import MAXT, adjust
from harness.stats.crossed import CrossedResult
from harness.stats.identical import identical_groups
from harness.stats.paired import BETTER, WORSE, PairedResult, oriented, paired_test
from harness.stats.significance import (
    PAIRINGS,
    UNTESTED,
    Analysis,
    AnalysisOptions,
    Comparison,
    analyse,
    corrected_confidence,
    corrected_interval,
)

FAMILIES = ("table", "metric", "collection")
DEFAULT_FAMILY = "table"
DEFAULT_WEIGHTING = "equal"
_T_TESTS = ("across-seeds", "seed-averaged")


@dataclass(frozen=True, kw_only=True)
class CombinedComparison:
    """One configuration's combined verdict on one metric across ``collections``."""

    config: str
    metric: str
    collections: tuple[str, ...]
    result: CombinedResult
    p_adjusted: float
    family_size: int
    level: int | None
    # the combination's interval at the level the correction implies (None: its own, uncorrected)
    corrected: tuple[float, float] | None = None
    # the metric is lower when the ranker is better (a cost): a fall is BETTER
    lower_is_better: bool = False

    @property
    def direction(self) -> str:
        return oriented(self.result.estimate, self.lower_is_better)

    @property
    def interval(self) -> tuple[float, float]:
        """The interval beside the marker: at the level the correction implies, so it excludes 0
        exactly when the adjusted p-value is below 1 - confidence."""
        return self.corrected or (self.result.ci_low, self.result.ci_high)

    @property
    def marked(self) -> bool:
        return self.level is not None and self.direction in (BETTER, WORSE)


@dataclass(frozen=True, kw_only=True)
class CollectionsAnalysis:
    """The executed tests of a study over several collections: ``analyses`` per collection (in the
    study's order; their p_adjusted, family_size and level are the whole table's family's) and the
    ``combined`` verdicts."""

    analyses: Mapping[str, Analysis]
    combined: tuple[CombinedComparison, ...]
    options: AnalysisOptions
    family: str
    test: str
    metrics: tuple[str, ...]
    configs: tuple[str, ...]
    baseline: str
    tau2_method: str = DEFAULT_TAU2
    weighting: str = DEFAULT_WEIGHTING
    # (collection, metrics): metrics identical on that collection alone (shown apart, since another
    # collection tells them apart), whose comparisons there are one member of the family each
    counted_once: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def collections(self) -> tuple[str, ...]:
        return tuple(self.analyses)

    @property
    def family_sizes(self) -> list[int]:
        """The family size m of every comparison and combined verdict."""
        sizes = [c.family_size for a in self.analyses.values() for c in a.comparisons]
        return [*sizes, *(c.family_size for c in self.combined)]

    @property
    def comparisons(self) -> int:
        """The largest family's size m (the footnote's)."""
        return max(self.family_sizes, default=0)

    @property
    def fewest_comparisons(self) -> int:
        """The smallest family's size m: below ``comparisons`` where families differ (per
        collection, a collection without some configuration)."""
        return min(self.family_sizes, default=0)

    def get_combined(self, config: str, metric: str) -> CombinedComparison | None:
        """The combined verdict of ``config`` on ``metric`` across the collections; None where a
        known configuration has none (the baseline). A name the analysis lacks raises UnknownName,
        as the one-collection ``Analysis.get`` does (it returned None, read as "no verdict")."""
        for c in self.combined:
            if c.config == config and c.metric == metric:
                return c
        if config not in self.configs:
            raise UnknownName("configuration", config, self.configs, where="this analysis")
        if metric not in self.metrics:
            raise UnknownName("metric", metric, self.metrics, where="this analysis")
        return None

    def marker(self, comparison: Comparison | CombinedComparison | None) -> str | None:
        if comparison is None or not comparison.marked or comparison.level is None:
            return None
        return self.options.markers.symbol(comparison.direction, comparison.level)


def collection_effect(analysis: Analysis, config: str, metric: str) -> tuple[float, float]:
    """(mean difference, its variance) of ``config`` against the baseline on one collection, the
    input of the combined verdict (module docstring)."""
    comp = analysis.get(config, metric)
    if comp is not None and isinstance(comp.result, CrossedResult):
        return comp.result.mean_diff, comp.result.se ** 2
    if comp is not None and analysis.test in _T_TESTS:
        return _t_effect(comp.result)
    res = analysis.results
    [(_, x, y)] = PAIRINGS.get("seed-averaged")(res, config, metric)
    # the t procedure draws nothing: the generator is only the signature's
    return _t_effect(paired_test("t", x, y, rng=np.random.default_rng(0), confidence=analysis.options.confidence))


def _t_effect(r: PairedResult) -> tuple[float, float]:
    """A t-test's mean difference and the variance behind its interval; a constant shift's is 0 (its
    interval is the point or, where its p rejects nothing, the whole line: harness.stats.paired)."""
    if math.isinf(r.statistic):
        return r.mean_diff, 0.0
    return r.mean_diff, standard_error(r.mean_diff, r.ci_low, r.ci_high, r.confidence, r.n - 1) ** 2


def analyse_collections(collections: Mapping[str, StudyResults], options: AnalysisOptions | None = None,
                        *, family: str = DEFAULT_FAMILY, tau2_method: str = DEFAULT_TAU2,
                        weighting: str = DEFAULT_WEIGHTING) -> CollectionsAnalysis:
    """Every collection's comparisons, the combined verdicts, and the correction over ``family``
    (module docstring). ``options.family`` is not used: ``family`` names the table's."""
    options = options or AnalysisOptions()
    if family not in FAMILIES:
        raise ConfigError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    if tau2_method not in TAU2_METHODS:
        raise ConfigError(f"tau2 method must be one of {', '.join(TAU2_METHODS)}, got {tau2_method!r}")
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if not collections:
        raise DataError("no collections to analyse")
    names = list(collections)
    if len(names) > 1 and (taken := [n for n in names if n.casefold() == COMBINED]):
        raise DataError(f"collection {taken[0]!r} has the name of the combined verdicts' columns; rename the "
                        "collection")
    if options.correction == MAXT and len(names) > 1:
        raise ConfigError("correction maxt is not available over several collections: its joint null "
                          "comes from the baseline runs a family shares, and collections share none; "
                          "use holm (the default)")
    baselines = {n: r.baseline for n, r in collections.items()}
    if len(set(baselines.values())) > 1:
        raise DataError("the collections have different baselines: "
                        + ", ".join(f"{n}: {b!r}" for n, b in baselines.items())
                        + "; every collection compares with the same baseline configuration")
    raw_options = replace(options, correction="none", family="all")
    shown, identical = _shared_identical(collections, options)
    if shown is not None:
        raw_options = replace(raw_options, metrics=shown, merge_identical=False)
    analyses: dict[str, Analysis] = {}
    for name, res in collections.items():
        try:
            analyses[name] = replace(analyse(res, raw_options), identical=identical) \
                if shown is not None else analyse(res, raw_options)
        except (DataError, ConfigError) as exc:
            raise prefixed(exc, f"collection {name!r}") from None
    tests = {n: a.test for n, a in analyses.items()}
    if len(set(tests.values())) > 1:
        raise DataError("the collections' results call for different tests ("
                        + ", ".join(f"{n}: {t}" for n, t in tests.items())
                        + "); name one with --test that every collection supports")
    test = tests[names[0]]
    one_seed = [n for n, a in analyses.items() if test == UNTESTED or a.query_only]
    if one_seed:
        # One seed: untested by default, and a test named for it (--test seed-averaged) counts the
        # variance between that run's queries only; a combined verdict would rest on query-level
        # tests alone, marked as if it counted training variance.
        n = one_seed[0]
        raise DataError(f"a table over several collections needs 2 or more seeds per collection; "
                        f"collection {n!r} has one ({collections[n].seeds[0]}): add seeds, or tabulate "
                        "one collection at a time")
    metrics = analyses[names[0]].metrics
    for n, a in analyses.items():
        if set(a.metrics) != set(metrics):
            raise DataError(f"collection {n!r} has metrics {', '.join(a.metrics)}, collection "
                            f"{names[0]!r} {', '.join(metrics)}; pick common ones with --metric")
    baseline = baselines[names[0]]
    configs = list(dict.fromkeys(c for r in collections.values() for c in r.configs))
    stopped = list(dict.fromkeys(c for r in collections.values() for c in r.stopped))
    combined_raw: list[tuple[str, str, tuple[str, ...], CombinedResult]] = []
    missing_combined = 0
    for metric in metrics:
        for config in [*configs[1:], *(c for c in stopped if c not in configs)]:
            where = tuple(n for n in names if config in collections[n].configs)
            if len(where) < 2:
                missing_combined += 1
                continue
            effects = [collection_effect(analyses[n], config, metric) for n in where]
            try:
                result = combine([e for e, _ in effects], [v for _, v in effects],
                                 confidence=options.confidence, tau2_method=tau2_method,
                                 weighting=weighting)
            except DataError as exc:
                raise DataError(f"combined verdict of {config!r} on {metric}: {exc} (a difference "
                                f"without spread on some collection)") from None
            combined_raw.append((config, metric, where, result))

    # Metrics identical on one collection only (MAP = MRR with one relevant document per query there)
    # are shown apart, but there they are one hypothesis tested once: one member of the family, whose
    # adjusted p-value each of them shows.
    same, counted_once = _same_comparisons(analyses, collections) if options.merge_identical else ({}, ())
    # Every test of the table, keyed by its family, then corrected family by family.
    entries: list[tuple[str, str | None, int]] = []  # (family key, collection or None, index)
    p_values: list[float] = []
    for name, a in analyses.items():
        for i, c in enumerate(a.comparisons):
            if (name, i) in same:
                continue
            entries.append((_family_key(family, name, c.metric), name, i))
            p_values.append(c.result.p_value)
    for i, (_, metric, _, r) in enumerate(combined_raw):
        entries.append((_family_key(family, None, metric), None, i))
        p_values.append(r.p_value)
    phantoms = _phantoms(family, analyses, collections, metrics, missing_combined,
                         {(n, m) for n, group in counted_once for m in group[1:]})
    adjusted = np.empty(len(entries))
    sizes = np.empty(len(entries), dtype=int)
    for key in dict.fromkeys(k for k, _, _ in entries):
        members = [j for j, (k, _, _) in enumerate(entries) if k == key]
        extra = phantoms.get(key, 0)
        p = [p_values[j] for j in members] + [1.0] * extra
        adjusted[members] = adjust(options.correction, np.asarray(p))[:len(members)]
        sizes[members] = len(members) + extra
    lookup = {(name, i): j for j, (_, name, i) in enumerate(entries)}
    lookup.update({key: lookup[rep] for key, rep in same.items()})
    # Intervals at the level each comparison's correction implies, as over one collection
    # (significance.analyse): an interval excludes 0 exactly when its cell is marked.
    correct = options.correction != "none"
    out: dict[str, Analysis] = {}
    for name, a in analyses.items():
        comps = []
        for i, c in enumerate(a.comparisons):
            p_adj, size = float(adjusted[lookup[(name, i)]]), int(sizes[lookup[(name, i)]])
            interval = corrected_interval(collections[name], c, test, options, p_adj, size) if correct else None
            comps.append(replace(c, p_adjusted=p_adj, family_size=size, level=options.markers.level_of(p_adj),
                                 corrected=interval))
        out[name] = replace(a, comparisons=tuple(comps), options=replace(options, family="all"))
    combined = []
    for i, (c, m, w, r) in enumerate(combined_raw):
        p_adj, size = float(adjusted[lookup[(None, i)]]), int(sizes[lookup[(None, i)]])
        level = corrected_confidence(options.confidence, r.p_value, p_adj, size) if correct else r.confidence
        interval = None
        if level != r.confidence:
            effects = [collection_effect(analyses[n], c, m) for n in w]
            again = combine([e for e, _ in effects], [v for _, v in effects], confidence=level,
                            tau2_method=tau2_method, weighting=weighting)
            interval = (again.ci_low, again.ci_high)
        combined.append(CombinedComparison(config=c, metric=m, collections=w, result=r, p_adjusted=p_adj,
                                           family_size=size, level=options.markers.level_of(p_adj),
                                           corrected=interval, lower_is_better=options.lower(m)))
    return CollectionsAnalysis(analyses=out, combined=tuple(combined), options=options, family=family, test=test,
                               metrics=metrics, configs=tuple(configs), baseline=baseline,
                               tau2_method=tau2_method, weighting=weighting, counted_once=counted_once)


def _same_comparisons(analyses: Mapping[str, Analysis], collections: Mapping[str, StudyResults]
                      ) -> tuple[dict[tuple[str, int], tuple[str, int]], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Per collection, the comparisons of a metric identical there to an earlier shown metric (equal
    per-query values in every run, so the same test and p-value): (collection, index) -> the
    (collection, index) of the same configuration's comparison on that earlier metric; and the
    groups of such metrics per collection."""
    same: dict[tuple[str, int], tuple[str, int]] = {}
    groups: list[tuple[str, tuple[str, ...]]] = []
    for name, a in analyses.items():
        for group in identical_groups(collections[name], a.metrics, a.options.lower):
            if len(group) < 2:
                continue
            groups.append((name, group))
            index = {(c.config, c.metric): i for i, c in enumerate(a.comparisons)}
            for i, c in enumerate(a.comparisons):
                if c.metric in group[1:] and (c.config, group[0]) in index:
                    same[(name, i)] = (name, index[(c.config, group[0])])
    return same, tuple(groups)


def _shared_identical(collections: Mapping[str, StudyResults], options: AnalysisOptions
                      ) -> tuple[tuple[str, ...] | None, tuple[tuple[str, ...], ...]]:
    """Metrics merged as identical only where they are identical on every collection (MAP = MRR
    on a collection with one relevant document per query need not hold on another): the metrics
    to show and the shared groups, or (None, ()) where every collection merges alike (or nothing
    is merged, or the collections do not share their metrics: the caller's check names them)."""
    if not options.merge_identical or len(collections) < 2:
        return None, ()
    try:
        selected = {n: r.select(options.metrics) for n, r in collections.items()}
    except (DataError, ConfigError):
        return None, ()
    first = next(iter(selected.values()))
    if any(set(m) != set(first) for m in selected.values()):
        return None, ()
    member = [{m: g for g in identical_groups(r, first, options.lower) for m in g} for r in collections.values()]
    if all(p == member[0] for p in member[1:]):
        return None, ()
    groups: list[tuple[str, ...]] = []
    for metric in first:
        if any(metric in g for g in groups):
            continue
        groups.append(tuple(m for m in first if all(m in p[metric] for p in member)))
    return tuple(g[0] for g in groups), tuple(g for g in groups if len(g) > 1)


def _family_key(family: str, collection: str | None, metric: str) -> str:
    if family == "table":
        return "table"
    if family == "metric":
        return f"metric:{metric}"
    return f"collection:{collection}" if collection is not None else COMBINED


def _phantoms(family: str, analyses: Mapping[str, Analysis], collections: Mapping[str, StudyResults],
              metrics: Sequence[str], missing_combined: int, once: set[tuple[str, str]]) -> dict[str, int]:
    """Comparisons counted with p = 1 per family: each collection's stopped configurations (as
    many comparisons as a finished one has there, a metric of ``once`` (collection, metric) not
    again) and the combined verdicts that could not be made."""
    out: dict[str, int] = {}
    for name, a in analyses.items():
        res = collections[name]
        if not res.stopped:
            continue
        candidates = max(len(res.configs) - 1, 1)
        for metric in metrics:
            if (name, metric) in once:
                continue
            per_metric = sum(c.metric == metric for c in a.comparisons)
            # as many as a finished candidate has: one per seed under per-seed, else one (the
            # count where every candidate stopped there, and none finished to count from)
            each = per_metric // candidates if per_metric else (len(res.seeds) if a.test == "per-seed" else 1)
            key = _family_key(family, name, metric)
            out[key] = out.get(key, 0) + len(res.stopped) * each
    if missing_combined:
        per_metric = missing_combined // max(len(metrics), 1)
        for metric in metrics:
            key = _family_key(family, None, metric)
            out[key] = out.get(key, 0) + per_metric
    return out
