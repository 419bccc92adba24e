"""A study's analysis in one call, from Python: the significance table, the power analysis and the
runs behind them, from a study's MLflow experiment (``load_study``) or a long results table
(``compare``: a CSV file or a pandas DataFrame). Results are objects that hold their data and
render themselves (docs/python-api.md):

    import harness

    analysis = harness.load_study("quickstart")           # ./mlruns, $MLFLOW_TRACKING_URI or tracking_uri=
    table = analysis.table()                               # a SignificanceTable
    table.frame                                            # its data: a pandas DataFrame
    print(table)                                           # what `harness table --experiment quickstart` prints
    print(analysis.power())                                # what `harness power --experiment quickstart` prints
    analysis.runs()                                        # the long format as a pandas DataFrame
    harness.compare("results.csv").table(form="configs").to_latex()  # `harness table --from results.csv --format latex`

`harness table` and `harness power` (harness.cli.evaluation) run through this module: the table
command builds a ``StudyAnalysis`` and renders its ``table`` (a ``SignificanceTable``) in the
format asked for, the power command its ``power`` (a ``PowerReport``), so a table from Python is
the command's output, byte for byte. The options carry the commands' flag names and defaults
(``TableOptions``); an unknown or out-of-range value is refused when the analysis is made, before
the source is read; an unknown name (metric, test, correction, form, format) raises
``harness.errors.UnknownName``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from harness.errors import ConfigError, UnknownName, is_integer, is_number, refuse
from harness.present.collections_significance import CollectionsSignificanceTable
from harness.present.frames import FLOAT, TEXT, typed_frame
from harness.present.power_text import PowerReport
from harness.present.significance_table import SignificanceTable
from harness.present.table import AUTO_FORM, resolve_form
from harness.results.longcsv import (
    COLLECTION_COLUMNS,
    COLUMNS,
    collection_rows,
    long_rows,
    read_frame_collections,
    read_long_collections,
)
from harness.results.mlflow_reader import (
    incomplete_note,
    one_read,
    read_experiment_collections,
    with_note,
)
from harness.results.stored import StudyResults
from harness.stats.across import CollectionsAnalysis, analyse_collections
from harness.stats.corrections import CORRECTIONS, DEFAULT_CORRECTION
from harness.stats.power import DEFAULT_SEEDS, PowerOptions
from harness.stats.significance import AUTO, Analysis, AnalysisOptions, Markers, analyse

if TYPE_CHECKING:
    import pandas as pd
else:  # a name the annotations resolve to at run time (typing.get_type_hints), pandas imported then
    from harness.present.frames import lazy_pandas as pd

# --family: the comparisons of a whole table, of each metric, or of each collection (a study over
# several collections, harness.stats.across; over one collection it is the whole table)
FAMILIES = ("table", "metric", "collection")
DEFAULT_LEVELS = (0.05, 0.01)

# The types of runs()' columns (harness.present.frames): text but the value, whatever the rows hold
RUNS_SCHEMA = {**dict.fromkeys(COLUMNS, TEXT), "value": FLOAT}
COLLECTION_RUNS_SCHEMA = {**dict.fromkeys(COLLECTION_COLUMNS, TEXT), "value": FLOAT}

MetricNames = str | Sequence[str] | None  # one metric or several, by harness key or ir-measures name


@dataclass(frozen=True, kw_only=True)
class TableOptions:
    """What `harness table` tests and how it marks it, by its flags' names and defaults: ``metric``
    (harness keys or ir-measures names, one or several; None: every metric found), ``test``,
    ``correction``, ``family`` (``table``: the comparisons of one table are corrected together;
    ``metric``: those of each metric), ``levels`` (significance levels, strictest last), and the
    randomisation test's generator ``seed`` and ``resamples``, ``one_seed_test`` (a one-seed
    study: None, no markers; "query", the query-only test), and ``lower_better`` (metrics that are
    lower when the ranker is better, besides the harness's costs: their falls are marked better). A
    bad value raises ConfigError, an unknown name its subclass UnknownName.

    >>> TableOptions(metric="AP", correction="holm").analysis_options("configs").family
    'all'
    >>> TableOptions(test="wilcox")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    harness.errors.UnknownName: test: unknown name 'wilcox' (did you mean wilcoxon?); valid: auto, crossed, ...
    """

    metric: tuple[str, ...] | None = None
    test: str = AUTO
    correction: str = DEFAULT_CORRECTION
    family: str = "table"
    levels: tuple[float, ...] = DEFAULT_LEVELS
    seed: int = 0
    resamples: int = 10_000
    one_seed_test: str | None = None
    lower_better: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "metric", metric_names(self.metric))
        object.__setattr__(self, "lower_better", _lower_names(self.lower_better))
        object.__setattr__(self, "levels", _levels(self.levels))
        if self.correction not in CORRECTIONS:  # named as the argument, not as the study file's key
            raise UnknownName("correction", self.correction, CORRECTIONS.names())
        self.analysis_options()  # refuses a bad test, correction or levels now, not at the first table
        if self.family not in FAMILIES:
            raise UnknownName("family", self.family, FAMILIES)

    def analysis_options(self, form: str = "seeds", metric: MetricNames = None) -> AnalysisOptions:
        """The ``AnalysisOptions`` of a table of ``form`` (``metric``: instead of the options' own).
        The family ``table`` is every metric in the configs form (one table for all) and each metric
        in the seeds and summary forms (one table per metric; ``auto`` is one of these)."""
        resolve_form(form, 0)  # an unknown form is refused here
        family = "all" if self.family in ("table", "collection") and form == "configs" else "metric"
        return AnalysisOptions(
            metrics=metric_names(metric) or self.metric, test=self.test, correction=self.correction,
            family=family, markers=Markers(levels=self.levels), resamples=self.resamples, seed=self.seed,
            one_seed_test=self.one_seed_test, lower_better=self.lower_better,
            # the interval beside a marker excludes 0 exactly when the loosest level marks it
            confidence=1.0 - max(self.levels))


@dataclass(frozen=True, kw_only=True, repr=False)
class StudyAnalysis:
    """A study's validated results and the table options: ``table`` (a ``SignificanceTable``),
    ``power`` (a ``PowerReport``) and ``runs`` (a DataFrame) are what `harness table`, `harness
    power` and the long results format hold. Made by ``load_study`` or ``compare``;
    ``with_options`` gives the same results under other options without reading them again.

    >>> from harness.results.stored import RunRecord
    >>> records = [RunRecord(config=c, seed=s, values={"map": v}) for c, s, v in
    ...            [("bm25", "1", 0.30), ("bm25", "2", 0.31), ("bert", "1", 0.35), ("bert", "2", 0.37)]]
    >>> StudyAnalysis(results=StudyResults.build(records), options=TableOptions(correction="holm"))
    StudyAnalysis(source='results', baseline='bm25', configs=('bm25', 'bert'), seeds=('1', '2'), \
metrics=('map',), queries=None, test='auto', correction='holm')
    """

    results: StudyResults
    options: TableOptions = field(default_factory=TableOptions)

    def __post_init__(self) -> None:
        self.results.select(self.options.metric)  # an unknown metric is refused now, naming the valid ones
        _check_lower(self.options.lower_better, [self.results])

    def with_options(self, **changes: Any) -> StudyAnalysis:
        """The same results under other table options (``TableOptions``' fields).

        >>> analysis.with_options(test="per-seed", correction="holm").table()  # doctest: +SKIP
        """
        return replace(self, options=_changed(self.options, changes))

    def analyse(self, *, form: str = AUTO_FORM, metric: MetricNames = None) -> Analysis:
        """The executed tests behind a table of ``form`` (every comparison's mean difference,
        confidence interval, p-values and marker): harness.stats.significance.Analysis.

        >>> analysis.analyse().get("bert", "map").result.p_value  # doctest: +SKIP
        """
        return analyse(self.results, self.options.analysis_options(form, metric))

    def table(self, *, metric: MetricNames = None, form: str = AUTO_FORM, decimals: int = 4,
              names: str = "label") -> SignificanceTable:
        """The significance table: its data (``.frame``, ``.rows()``) and its renderings
        (``.to_markdown()``, ``.to_latex()``, ``.to_html()``, ``.to_csv()``, ``.render(format)``:
        what `harness table --format` prints). ``form`` seeds (a row per seed, then AVG and SD;
        one table per metric), configs (a row per configuration, a column per metric), summary (a
        row per configuration: mean, SD, difference and interval; one table per metric) or auto
        (the default: seeds up to 6 configurations, summary past that); ``metric`` instead of the
        options' own; ``decimals``; ``names`` label (MAP), ir-measures (AP) or key (map).

        >>> print(analysis.table(metric="map", form="configs").to_latex())  # doctest: +SKIP
        """
        return SignificanceTable.build(self.analyse(form=form, metric=metric), form, decimals, names)

    def power(self, *, metric: MetricNames = None, alpha: float = 0.05, power: float = 0.8,
              seeds: Sequence[int] = DEFAULT_SEEDS, queries: int | None = None,
              effect: float | None = None, family_size: int | None = None) -> PowerReport:
        """The power analysis (a ``PowerReport``; ``str()`` is what `harness power` prints,
        ``.to_json()`` its ``--format json``, ``.to_frame()`` its rows): per comparison the
        variance components and the minimum detectable effect per seed count in ``seeds`` (the
        study's own added) at ``queries`` (default: the study's), two-sided ``alpha`` and
        ``power``; with ``effect``, the seeds that effect needs. The figures are the crossed
        test's at alpha / ``family_size`` (Holm's first step; default: the study's candidates).
        ``metric``: instead of the options' own.

        >>> print(analysis.power(effect=0.02, seeds=(5, 10)))  # doctest: +SKIP
        """
        options = power_options(metric_names(metric) or self.options.metric, alpha=alpha, power=power,
                                seeds=seeds, queries=queries, effect=effect, family_size=family_size)
        return PowerReport.build(self.results, options)

    def runs(self) -> pd.DataFrame:
        """The results in the long format (columns config, seed, metric, value, query) as a pandas
        DataFrame: for every configuration, seed and metric one row without a query (missing:
        ``isna()``) holding its per-run value (the value of the table's seed rows), followed by one
        row per query where per-query values are kept. Written with ``to_csv(path, index=False)``
        it is a long results CSV; ``compare`` of it gives the same tables.

        >>> runs = analysis.runs()                # doctest: +SKIP
        >>> per_run = runs[runs["query"].isna()]  # doctest: +SKIP
        """
        return typed_frame(long_rows(self.results), RUNS_SCHEMA)

    def __repr__(self) -> str:
        r = self.results
        parts = [f"source={r.source!r}", f"baseline={r.baseline!r}", f"configs={r.configs!r}",
                 f"seeds={r.seeds!r}", f"metrics={r.metrics!r}", f"queries={len(r.qids) if r.qids else None}"]
        if r.stopped:
            parts.append(f"stopped={tuple(r.stopped)!r}")
        if r.incomplete:  # the sentence is results.incomplete; the tables' notes and to_dict carry it
            parts.append("incomplete=True")
        always = ("test", "correction")
        defaults = TableOptions()
        parts += [f"{f.name}={getattr(self.options, f.name)!r}" for f in fields(TableOptions)
                  if f.name in always or getattr(self.options, f.name) != getattr(defaults, f.name)]
        return f"StudyAnalysis({', '.join(parts)})"


def load_study(name: str, *, tracking_uri: str | None = None, baseline: str | None = None,
               metric: MetricNames = None, test: str = AUTO, correction: str = DEFAULT_CORRECTION,
               family: str = "table", levels: Sequence[float] = DEFAULT_LEVELS, seed: int = 0,
               resamples: int = 10_000, one_seed_test: str | None = None,
               phase: str = "auto", lower_better: MetricNames = None) -> StudyAnalysis | CollectionsStudy:
    """Study ``name`` read back from its MLflow experiment, as `harness table --experiment NAME`
    reads it: the finished seed runs, their test metrics and per-query values; the baseline is the
    configuration whose role is baseline unless ``baseline`` names one. ``tracking_uri`` defaults to
    $MLFLOW_TRACKING_URI, else the SQLite store ./mlruns/mlflow.db. ``phase`` is `--phase`: in a
    study with a confirmation phase, ``auto`` and ``confirmatory`` read the confirmation,
    ``exploratory`` the runs before it. The other arguments are ``TableOptions``. A study over
    several collections gives a ``CollectionsStudy``, any other a ``StudyAnalysis``. A missing
    store, an unknown experiment or a bad option raises a HarnessError. A study that did not finish
    (``incomplete_note``) is read all the same, its tables' notes saying why (as `harness table`,
    which then exits 3).

    >>> analysis = load_study("quickstart", test="per-seed")  # doctest: +SKIP
    >>> print(analysis.table())                                 # doctest: +SKIP
    """
    options = TableOptions(metric=metric_names(metric), test=test, correction=correction, family=family,
                           levels=levels, seed=seed, resamples=resamples,
                           one_seed_test=one_seed_test, lower_better=_lower_names(lower_better))
    if isinstance(tracking_uri, os.PathLike):
        tracking_uri = os.fspath(tracking_uri)  # a path: refused below as a folder store, with the URI to write
    if tracking_uri is not None and not isinstance(tracking_uri, str):
        raise refuse("tracking_uri", tracking_uri, "a tracking URI (sqlite:///path/mlflow.db, http://host:port)")
    with one_read():  # the results and their note read the runs once, as `harness table`
        collections = read_experiment_collections(name, tracking_uri=tracking_uri, baseline=baseline,
                                                  phase=phase)
        note = incomplete_note(name, tracking_uri=tracking_uri)
    return study_of({c: with_note(res, note) for c, res in collections.items()}, options)


def compare(source: str | os.PathLike[str] | pd.DataFrame, *, baseline: str | None = None,
            metric: MetricNames = None, test: str = AUTO, correction: str = DEFAULT_CORRECTION,
            family: str = "table", levels: Sequence[float] = DEFAULT_LEVELS, seed: int = 0,
            resamples: int = 10_000, one_seed_test: str | None = None,
            lower_better: MetricNames = None) -> StudyAnalysis | CollectionsStudy:
    """Results in the long format (columns config, seed, metric, value and optionally query and
    collection), from
    a CSV file as `harness table --from FILE` reads it, or from a pandas DataFrame with those
    columns, validated alike; the baseline is ``baseline``, else the first configuration. The other
    arguments are ``TableOptions``. A malformed table or a bad option raises a HarnessError.

    >>> import pandas as pd
    >>> frame = pd.DataFrame({"config": ["bm25", "bert"] * 3, "seed": [1, 1, 2, 2, 3, 3],
    ...                       "metric": "map", "value": [0.30, 0.35, 0.31, 0.37, 0.29, 0.36]})
    >>> analysis = compare(frame)
    >>> analysis
    StudyAnalysis(source='DataFrame', baseline='bm25', configs=('bm25', 'bert'), seeds=('1', '2', '3'), \
metrics=('map',), queries=None, test='auto', correction='holm')
    >>> analysis.analyse().test  # per-run values only
    'across-seeds'
    >>> analysis.table(form="summary").frame[["config", "mean", "delta", "p_adjusted", "marker"]].round(4)
      config  mean  delta  p_adjusted marker
    0   bm25  0.30    NaN         NaN    NaN
    1   bert  0.36   0.06      0.0091      ‡
    """
    options = TableOptions(metric=metric_names(metric), test=test, correction=correction, family=family,
                           levels=levels, seed=seed, resamples=resamples,
                           one_seed_test=one_seed_test, lower_better=_lower_names(lower_better))
    return study_of(read_collections(source, baseline=baseline), options)


def power_options(metrics: tuple[str, ...] | None, *, seeds: Any, **values: Any) -> PowerOptions:
    """``PowerOptions`` of the API's arguments: ``seeds`` one count or several."""
    counts = _one_or_several(seeds, is_integer)
    if counts is None:
        raise refuse("seeds", seeds, "a seed count or a sequence of them, integers >= 2")
    return PowerOptions(metrics=metrics, seeds=counts, **values)


def collection_power(collections: Mapping[str, StudyResults], collection: str, options: PowerOptions,
                     source: str = "this study", asked_as: str = "collection") -> PowerReport:
    """The power analysis of ``collection`` of a study over several, at the whole table's family
    (Holm's first step over every comparison of every collection, metric and combined verdict,
    harness.stats.across) unless ``options.family_size`` says otherwise. ``asked_as``: how the
    refusal names the collection's argument (`--collection` from the command line)."""
    if set(collections) == {""}:
        raise ConfigError(f"{asked_as} {collection}: {source} is not a study over several collections; "
                          f"leave out {asked_as}")
    if collection not in collections:
        raise UnknownName("collection", collection, list(collections), where=source)
    if options.family_size is None:
        table = analyse_collections(collections, AnalysisOptions(metrics=options.metrics))
        options = replace(options, family_size=table.comparisons)
    return PowerReport.build(collections[collection], options)


def study_of(collections: Mapping[str, StudyResults], options: TableOptions) -> StudyAnalysis | CollectionsStudy:
    """A ``StudyAnalysis`` of one collection, a ``CollectionsStudy`` of several."""
    if len(collections) == 1:
        return StudyAnalysis(results=next(iter(collections.values())), options=options)
    return CollectionsStudy(collections=dict(collections), options=options)


def read_collections(source: str | os.PathLike[str] | pd.DataFrame, *, baseline: str | None = None
                     ) -> dict[str, StudyResults]:
    """A long results table, collection by collection (``read_long_collections``,
    ``read_frame_collections``); one collection without a name when it has no collection column."""
    if isinstance(source, str | os.PathLike):
        return read_long_collections(source, baseline=baseline)
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        return read_frame_collections(source, baseline=baseline)
    raise ConfigError(f"compare: expected the path of a long results CSV or a pandas DataFrame, got "
                      f"{type(source).__name__}")


def form_for(form: str, format: str, configs: int) -> str:
    """The table form `harness table --format` gets for ``configs`` configurations: ``form``
    itself, but ``auto`` in LaTeX is ``configs`` (one float for the whole study, a paper's table)
    where ``auto`` would give one seeds table per metric, and summary past SUMMARY_ABOVE."""
    if form == AUTO_FORM and format == "latex" and resolve_form(AUTO_FORM, configs) == "seeds":
        return "configs"
    return form


def metric_names(metric: MetricNames) -> tuple[str, ...] | None:
    """One metric name or several as a tuple; None (every metric) when none is given."""
    if metric is None:
        return None
    names = _one_or_several(metric, lambda m: isinstance(m, str))
    if names is None or not all(isinstance(n, str) for n in names):
        raise refuse("metric", metric, "a metric name or a sequence of names")
    return names or None


def _lower_names(names: MetricNames) -> tuple[str, ...]:
    """``TableOptions.lower_better`` as a tuple (a bad value refused naming the option)."""
    if names is None:
        return ()
    several = _one_or_several(names, lambda m: isinstance(m, str))
    if several is None or not all(isinstance(n, str) for n in several):
        raise refuse("lower_better", names, "a metric name or a sequence of names")
    return several


def _check_lower(names: Sequence[str], collections: Sequence[StudyResults]) -> None:
    """Refuse a ``lower_better`` name that no collection of the study has, naming the metrics."""
    for name in names:
        if not any(name in r.metrics for r in collections):
            res = collections[0]
            raise UnknownName("lower-better metric", name, res.metrics, where=res.source)


def _changed(options: TableOptions, changes: Mapping[str, Any]) -> TableOptions:
    """``options`` with ``changes``; a name that is not a ``TableOptions`` field is refused."""
    valid = [f.name for f in fields(TableOptions)]
    for name in changes:
        if name not in valid:
            raise UnknownName("table option", name, valid)
    return replace(options, **changes)


def _levels(levels: Any) -> tuple[float, ...]:
    """``levels`` as a tuple of floats: one number or a sequence of numbers (their range is
    ``Markers``' to check)."""
    values = _one_or_several(levels, is_number)
    if values is None or not all(is_number(a) for a in values):
        raise refuse("levels", levels, "a significance level or a sequence of them, numbers in (0, 1)")
    return tuple(float(a) for a in values)


def _one_or_several(value: Any, one: Callable[[Any], bool]) -> tuple[Any, ...] | None:
    """``(value,)`` where ``one(value)``; the items of a sequence or set (a list, a tuple, a numpy
    array; not a string, bytes or a mapping); else None (the caller refuses it)."""
    if one(value):
        return (value,)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping):
        return tuple(value)
    return None


@dataclass(frozen=True, kw_only=True, repr=False)
class CollectionsStudy:
    """A study over several collections (collection -> validated results, in the study's order) and
    the table options: ``table`` renders the whole table (a column group per collection, a combined
    verdict across them, one family), as `harness table` prints it; ``runs`` is the long format with
    a collection column. The family ``table`` (the default) is every comparison in the table,
    ``metric`` each metric's over the collections, ``collection`` each collection's
    (harness.stats.across).

    >>> from harness.results.stored import RunRecord
    >>> def results(shift):
    ...     return StudyResults.build([RunRecord(config=c, seed=s, values={"map": v + (c == "bert") * shift})
    ...                                for c in ("bm25", "bert") for s, v in (("1", 0.30), ("2", 0.33), ("3", 0.31))])
    >>> study = CollectionsStudy(collections={"a": results(0.05), "b": results(0.04)})
    >>> study
    CollectionsStudy(collections=('a', 'b'), baseline='bm25', configs=('bm25', 'bert'), test='auto', correction='holm')
    >>> round(study.analyse().get_combined("bert", "map").result.estimate, 4)
    0.045
    """

    collections: Mapping[str, StudyResults]
    options: TableOptions = field(default_factory=TableOptions)

    def __post_init__(self) -> None:
        if not self.collections:
            raise ConfigError("a study over collections needs at least one collection")
        for results in self.collections.values():
            results.select(self.options.metric)
        _check_lower(self.options.lower_better, list(self.collections.values()))

    def with_options(self, **changes: Any) -> CollectionsStudy:
        """The same results under other table options (``TableOptions``' fields)."""
        return replace(self, options=_changed(self.options, changes))

    def analyse(self, *, metric: MetricNames = None) -> CollectionsAnalysis:
        """Every collection's tests, the combined verdicts and the correction over the family
        (harness.stats.across.CollectionsAnalysis)."""
        opts = self.options
        options = AnalysisOptions(metrics=metric_names(metric) or opts.metric, test=opts.test,
                                  correction=opts.correction, markers=Markers(levels=opts.levels),
                                  resamples=opts.resamples, seed=opts.seed, lower_better=opts.lower_better,
                                  # as on one collection: the interval beside a marker excludes 0
                                  # exactly when the loosest level marks it
                                  confidence=1.0 - max(opts.levels))
        return analyse_collections(self.collections, options, family=opts.family)

    def table(self, *, metric: MetricNames = None, form: str = AUTO_FORM, decimals: int = 4,
              names: str = "label") -> CollectionsSignificanceTable:
        """The whole table (a ``CollectionsSignificanceTable``: ``.frame``/``.rows()``, a row per
        collection, configuration and metric and one per combined verdict; ``.to_markdown()``,
        ``.to_latex()``, ``.to_html()``, ``.to_csv()``, ``.render(format)``: what `harness table`
        prints) of ``form``: configs (``auto``: rows = configurations, a column group per
        collection, the combined verdict last), summary (the same, intervals of the differences
        instead of SDs) or seeds (per metric a block of seed rows per collection, Penha & Hauff
        2020 Table 5)."""
        return CollectionsSignificanceTable.build(self.analyse(metric=metric), form, decimals, names)

    def power(self, collection: str | None = None, *, metric: MetricNames = None, alpha: float = 0.05, power: float = 0.8,
              seeds: Sequence[int] = DEFAULT_SEEDS, queries: int | None = None,
              effect: float | None = None, family_size: int | None = None) -> PowerReport:
        """``StudyAnalysis.power`` of one collection (its own variance components), as `harness
        power --collection NAME` computes it: at alpha / ``family_size``, by default the whole
        table's family (every comparison of every collection, metric and combined verdict).
        ``collection`` is required: a power analysis is of one collection's variance components."""
        if collection is None:
            raise ConfigError(f"collection: name the collection to analyse, one of "
                              f"{', '.join(self.collections)}")
        options = power_options(metric_names(metric) or self.options.metric, alpha=alpha, power=power,
                                seeds=seeds, queries=queries, effect=effect, family_size=family_size)
        return collection_power(self.collections, collection, options)

    def runs(self) -> pd.DataFrame:
        """The long format with a ``collection`` column (``StudyAnalysis.runs``, per collection)."""
        return typed_frame(collection_rows(self.collections), COLLECTION_RUNS_SCHEMA)

    def __repr__(self) -> str:
        first = next(iter(self.collections.values()))
        configs = tuple(dict.fromkeys(c for r in self.collections.values() for c in r.configs))
        return (f"CollectionsStudy(collections={tuple(self.collections)!r}, baseline={first.baseline!r}, "
                f"configs={configs!r}, test={self.options.test!r}, correction={self.options.correction!r}"
                f"{', incomplete=True' if any(r.incomplete for r in self.collections.values()) else ''})")


