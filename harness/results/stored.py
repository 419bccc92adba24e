"""Stored results of a study: per-run values and, where kept, per-query values, checked once.

The input of every significance test and table. Built from ``RunRecord``s (one per configuration and
seed) by ``StudyResults.build``, which validates what the tests rely on and raises DataError with the
offending configuration, seed, metric or queries named:

- the baseline exists, and every configuration has exactly the baseline's seeds (tests pair by seed),
  except a configuration whose seeds came in rounds of a seed schedule (``sequential``), which has
  the first of the baseline's seeds (``seeds_of``) and is paired with the baseline on those;
- every run that names its evaluation set (``RunRecord.evaluation``, the fingerprint of its dev and
  test candidates) names the same one: runs evaluated on different candidates are never paired;
- every run has a value for every metric (a per-run value, or per-query values whose mean it is);
- per-query values, where present, are tested on the queries every run has (``qids``): a query
  missing from some runs (a failed evaluation, a truncated file) drops out of every comparison, and
  ``dropped`` names it with the runs that lack it (the tables' footnote counts them); no query in
  common is refused;
- a per-run value given next to per-query values equals their mean (within 1e-6).

Seeds are labels (strings), ordered numerically when all are integers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import overload

import numpy as np

from harness.errors import DataError, UnknownName
from harness.metrics.measures import canonical_name, metric_key
from harness.tracking.conventions import MEAN_SUFFIX, SD_SUFFIX, TEST_PREFIX

MEAN_TOLERANCE = 1e-6
_SHOW = 5  # how many query ids an error message lists


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """One (configuration, seed) run: ``values[metric]`` per-run values and/or
    ``per_query[metric][qid]`` per-query values."""

    config: str
    seed: str
    values: Mapping[str, float] = field(default_factory=dict)
    per_query: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    config_id: str | None = None
    evaluation: str | None = None
    run_id: str | None = None  # the MLflow seed run it was read from (an export's per_query.csv names it)

    def metrics(self) -> list[str]:
        return list(dict.fromkeys([*self.values, *self.per_query]))


# The rows a seeds table adds below the seeds (harness.present.table): no seed may be called so.
SEED_ROW_NAMES = ("AVG", "SD")
# The columns of a table over several collections that hold the combined verdicts (and their family
# under harness.stats.across's family "collection"): no collection may be called so.
COMBINED = "combined"


@dataclass(frozen=True, kw_only=True)
class StudyResults:
    """Validated results (module docstring). ``configs`` lists the baseline first."""

    baseline: str
    configs: tuple[str, ...]
    seeds: tuple[str, ...]
    metrics: tuple[str, ...]
    runs: Mapping[tuple[str, str], RunRecord]
    qids: tuple[str, ...] | None
    # Queries left out of every test because some runs lack them -> those runs (``_common_qids``;
    # a ``Lacking``, which names them when read).
    dropped: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # where the results were read (messages and notes name it); not part of their value, so the same
    # results read from a CSV and from its DataFrame are equal
    source: str = field(compare=False)
    config_ids: Mapping[str, str] = field(default_factory=dict)
    # Configurations stopped early (harness.study.early_stop), left out: label -> where and why.
    stopped: Mapping[str, str] = field(default_factory=dict)
    # Configurations whose seeds came in rounds (harness.stats.sequential): label -> why they got
    # no more; and the seeds of those with fewer than the baseline (the first of the baseline's).
    sequential: Mapping[str, str] = field(default_factory=dict)
    config_seeds: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # A study with a confirmation phase (harness.driver._confirm): which runs this is ("confirmatory":
    # the confirmation's only; "exploratory": the runs that picked) and the footnote's sentence on it.
    phase: str = ""
    phase_note: str = ""
    # A study that did not finish: its sentence (mlflow_reader.incomplete_note, also in phase_note),
    # which a power analysis of these results carries too
    incomplete: str = ""

    @classmethod
    def build(cls, records: Iterable[RunRecord], *, baseline: str | None = None,
              source: str = "results", metric_order: Sequence[str] = (),
              sequential: Mapping[str, str] | None = None) -> StudyResults:
        """Validate ``records`` (module docstring). ``baseline`` None: the first record's config.
        ``sequential``: the configurations of a seed schedule and why each stopped (label -> reason);
        they may have the first of the baseline's seeds only."""
        sequential = dict(sequential or {})
        runs: dict[tuple[str, str], RunRecord] = {}
        for rec in records:
            key = (rec.config, str(rec.seed))
            if str(rec.seed).upper() in SEED_ROW_NAMES:
                raise DataError(f"{source}: configuration {rec.config!r} seed {rec.seed!r} is the name of a "
                                "table's mean or SD row; name the seed otherwise (1, 2, ...)")
            if key in runs:
                raise DataError(f"{source}: configuration {rec.config!r} seed {rec.seed} appears twice")
            runs[key] = rec
        if not runs:
            raise DataError(f"{source}: no results")
        configs = list(dict.fromkeys(c for c, _ in runs))
        base = configs[0] if baseline is None else baseline
        if base not in configs:
            raise UnknownName("baseline", base, configs, where=source)
        configs = [base, *(c for c in configs if c != base)]
        _check_evaluation_sets(source, runs, configs)
        seeds = order_seeds([s for c, s in runs if c == base])
        config_seeds: dict[str, tuple[str, ...]] = {}
        for config in configs[1:]:
            have = {s for c, s in runs if c == config}
            missing = [s for s in seeds if s not in have]
            if missing and config in sequential and have and set(seeds[:len(have)]) == have:
                config_seeds[config] = tuple(seeds[:len(have)])  # stopped after a round
            elif missing and config in sequential and not set(have) - set(seeds):
                raise DataError(f"{source}: configuration {config!r} has seeds {', '.join(order_seeds(list(have)))}"
                                f", not the first {len(have)} of the baseline's ({', '.join(seeds)}): the "
                                f"rounds of a seed schedule take the seeds in order")
            elif missing:
                raise DataError(f"{source}: configuration {config!r} is missing seeds "
                                f"{', '.join(missing)} that the baseline {base!r} has")
            extra = order_seeds(list(have - set(seeds)))
            if extra:
                raise DataError(f"{source}: configuration {config!r} has seeds {', '.join(extra)} "
                                f"that the baseline {base!r} lacks; tests pair runs by seed")
        found = list(dict.fromkeys(m for rec in runs.values() for m in rec.metrics()))
        metrics = [m for m in metric_order if m in found] + [m for m in found if m not in metric_order]
        for (config, seed), rec in runs.items():
            lacking = [m for m in metrics if m not in rec.values and m not in rec.per_query]
            if lacking:
                raise DataError(f"{source}: configuration {config!r} seed {seed} has no value for "
                                f"{', '.join(lacking)}")
            _check_means(source, rec)
        ids = {rec.config: rec.config_id for rec in runs.values() if rec.config_id}
        qids, dropped = _common_qids(source, runs)
        return cls(baseline=base, configs=tuple(configs), seeds=tuple(seeds), metrics=tuple(metrics),
                   runs=runs, qids=qids, dropped=dropped, source=source,
                   config_ids=ids, sequential={c: r for c, r in sequential.items() if c in configs},
                   config_seeds=config_seeds)

    def seeds_of(self, config: str) -> tuple[str, ...]:
        """The seeds of ``config`` (all of ``seeds`` but for a configuration that stopped after a
        round of a seed schedule); a comparison pairs the baseline on the candidate's seeds."""
        return self.config_seeds.get(config, self.seeds)

    def has_per_query(self, metric: str) -> bool:
        return self.qids is not None and all(metric in r.per_query for r in self.runs.values())

    def value(self, config: str, seed: str, metric: str) -> float:
        """Per-run value: the mean of the per-query values where the run has them, over the queries
        every run has (``qids``, in their order: where queries were dropped, as the tests see them),
        else the stored one. One rule for every source: the stored mean agrees with it to
        MEAN_TOLERANCE (``build`` checks), but an evaluator's own summation can differ in the last
        bits, so a table from an MLflow store and one from its exported per-query CSV (no per-run
        rows) would differ by 1e-16."""
        rec = self.runs[(config, seed)]
        if self.qids is not None and metric in rec.per_query:
            values = rec.per_query[metric]
            return float(np.mean([values[q] for q in self.qids]))
        return float(rec.values[metric])

    def seed_values(self, config: str, metric: str, seeds: Sequence[str] | None = None) -> np.ndarray:
        """Per-run values of ``config`` in seed order, over ``seeds`` (default: its own, ``seeds_of``)."""
        return np.array([self.value(config, s, metric) for s in (self.seeds_of(config) if seeds is None else seeds)])

    def query_values(self, config: str, seed: str, metric: str) -> np.ndarray:
        """Per-query values of one run, ordered as ``qids``."""
        if self.qids is None or metric not in self.runs[(config, seed)].per_query:
            raise DataError(f"{self.source}: no per-query values for {config!r} seed {seed} {metric}")
        values = self.runs[(config, seed)].per_query[metric]
        return np.array([values[q] for q in self.qids], dtype=np.float64)

    def select(self, metrics: Sequence[str] | None) -> tuple[str, ...]:
        """The requested metrics (all when None), each given by its harness key or ir-measures'
        canonical name (``--metric AP`` = ``--metric map``); unknown names are refused with the
        valid ones."""
        if not metrics:
            return self.metrics
        keys = []
        for m in metrics:
            key = m if m in self.metrics else metric_key(m)
            if key not in self.metrics:
                aliases = [canonical_name(k) for k in self.metrics if canonical_name(k) != k]
                raise UnknownName("metric", m, self.metrics, where=self.source,
                                  also=f" (or {', '.join(aliases)})" if aliases else "")
            keys.append(key)
        return tuple(dict.fromkeys(keys))


def seed_summary(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample SD (ddof 1) of one configuration's values over seeds; the SD of a single seed
    is undefined: NaN. The one summary of seeds (the study's config runs, the report, the tables)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else math.nan


def summary_metrics(values: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """``<metric>_mean`` and ``<metric>_sd`` (``seed_summary``) of one configuration's values over
    seeds, by metric, and the mean again as ``test_<metric>``, the name its seed runs give the
    value (so one MLflow column sorts config and seed runs alike): the one summary of a
    configuration, logged on its config run as its seeds finish and again by the study's report
    (the same values). The SD of one seed is NaN.

    >>> summary_metrics({"map": [0.25, 0.75]})
    {'map_mean': 0.5, 'map_sd': 0.3535533905932738, 'test_map': 0.5}
    """
    out: dict[str, float] = {}
    for metric, seeds in values.items():
        out[f"{metric}{MEAN_SUFFIX}"], out[f"{metric}{SD_SUFFIX}"] = seed_summary(seeds)
        out[f"{TEST_PREFIX}{metric}"] = out[f"{metric}{MEAN_SUFFIX}"]
    return out


class EvaluationMismatch(DataError):
    """Runs of one study were evaluated on different dev/test candidates."""


def _check_evaluation_sets(source: str, runs: Mapping[tuple[str, str], RunRecord],
                           configs: Sequence[str]) -> None:
    """Refuse to pair runs whose evaluation fingerprints differ, naming configurations and seeds
    (runs without a fingerprint, e.g. from a results CSV, are not checked)."""
    groups: dict[str, dict[str, list[str]]] = {}
    for (config, seed), rec in runs.items():
        if rec.evaluation:
            groups.setdefault(rec.evaluation, {}).setdefault(config, []).append(seed)
    if len(groups) <= 1:
        return
    order = {c: i for i, c in enumerate(configs)}
    parts = []
    for fp, members in sorted(groups.items(), key=lambda kv: min(order[c] for c in kv[1])):
        who = "; ".join(f"{c!r} seeds {', '.join(order_seeds(s))}"
                        for c, s in sorted(members.items(), key=lambda kv: order[kv[0]]))
        parts.append(f"evaluation set {fp[:12]}: {who}")
    raise EvaluationMismatch(f"{source}: runs were evaluated on {len(groups)} different evaluation sets "
                             f"(dev/test candidates), so no paired test can compare them: "
                             + " | ".join(parts))


def order_seeds(seeds: list[str]) -> list[str]:
    try:
        return sorted(seeds, key=int)
    except ValueError:
        return list(dict.fromkeys(seeds))


def _check_means(source: str, rec: RunRecord) -> None:
    for metric, per_query in rec.per_query.items():
        if not per_query:
            raise DataError(f"{source}: configuration {rec.config!r} seed {rec.seed} has an empty "
                            f"per-query list for {metric}")
        if metric in rec.values:
            mean = float(np.mean(list(per_query.values())))
            if abs(mean - float(rec.values[metric])) > MEAN_TOLERANCE:
                raise DataError(
                    f"{source}: configuration {rec.config!r} seed {rec.seed}: {metric} is "
                    f"{float(rec.values[metric]):.6f} but its per-query values average {mean:.6f}")


def _common_qids(source: str, runs: Mapping[tuple[str, str], RunRecord]
                 ) -> tuple[tuple[str, ...] | None, dict[str, Lacking]]:
    """The queries every per-query list has (None when no run has any), and each query some lists
    lack with the runs ("ls seed 2 (map)") that lack it (``Lacking``: named as they are read, so a
    file whose runs each have queries of their own costs its size, not its queries times its runs)."""
    lists = [((config, seed, metric), values) for (config, seed), rec in runs.items()
             for metric, values in rec.per_query.items()]
    if not lists:
        return None, {}
    having = Counter(q for _, values in lists for q in values)
    common = {q for q, n in having.items() if n == len(lists)}
    if not common:
        raise DataError(f"{source}: the runs have no query in common ({len(having)} queries, each missing "
                        "from some run's per-query values); nothing can be paired")
    shared = tuple(lists)
    dropped = {q: Lacking(q, len(lists) - having[q], shared) for q in sorted(having.keys() - common)}
    return tuple(sorted(common)), dropped


class Lacking(Sequence[str]):
    """The runs ("ls seed 2 (map)") whose per-query values lack ``query``, in the order of the
    runs: its length is counted once, its names are read off the per-query lists when asked for.
    The first few (all a footnote shows) cost the runs that have the query and those few, so a
    query that one run has and a thousand lack costs no thousand names; a tuple of them compares
    equal to it."""

    __slots__ = ("_count", "_lists", "query")

    def __init__(self, query: str, count: int,
                 lists: Sequence[tuple[tuple[str, str, str], Mapping[str, float]]]) -> None:
        self.query, self._count, self._lists = query, count, lists

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return (f"{c} seed {s} ({m})" for (c, s, m), values in self._lists if self.query not in values)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice) and index.step in (None, 1) and (index.start or 0) >= 0 \
                and index.stop is not None and index.stop >= 0:  # a prefix's part: read no further
            return tuple(islice(self, index.start, index.stop))
        if isinstance(index, int) and 0 <= index < self._count:
            return next(islice(self, index, None))
        return tuple(self)[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lacking | tuple | list):
            return len(other) == self._count and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


def _some(qids: set[str]) -> str:
    shown = sorted(qids)[:_SHOW]
    more = len(qids) - len(shown)
    return ", ".join(shown) + (f" (+{more} more)" if more > 0 else "")
