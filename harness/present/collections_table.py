"""The table of a study over several collections, the papers' shape: built from a
``CollectionsAnalysis`` (harness.stats.across); no formatting (``collections_render`` formats it).

Two forms:
- ``configs`` (``auto``'s choice; the label-smoothing paper's Table 2): one table, one row per
  configuration (the baseline first), a column group per collection with the study's metrics
  inside (each cell mean +- SD over seeds with its marker, its per-seed tally under the per-seed
  test) and a ``combined`` group: per metric the combined difference to the baseline across the
  collections with its marker. ``summary`` is the same table with each tested cell's confidence
  interval of the difference in place of the SD.
- ``seeds`` (Penha & Hauff 2020, Table 5): one table per metric, one column per configuration, a
  block of rows per collection (one row per seed, then AVG and SD, markers as in the one-collection
  seeds form) and a last block with the combined difference to the baseline.

Every marker is the whole table's family's (``CollectionsAnalysis.family``), and the footnote says
which family and its size m. "Best" (bold) compares the values as displayed, per column (configs)
or per row (seeds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.metrics.measures import label_of
from harness.present.table import (
    AUTO_FORM,
    VALUES_NOTE,
    best_shown,
    check_layout,
    direction_note,
    dropped_note,
    library_versions,
    resolve_form,
)
from harness.results.stored import seed_summary
from harness.stats.across import COMBINED, CollectionsAnalysis, CombinedComparison
from harness.stats.combined import TAU2_METHODS
from harness.stats.corrections import describe
from harness.stats.significance import CROSSED, TESTS, Comparison, Tally

_TAU2_NAMES = dict(zip(TAU2_METHODS, ("Paule-Mandel", "DerSimonian-Laird"), strict=True))
_FAMILY_WORDS = {"table": "every comparison in the table (all collections, metrics and combined verdicts)",
                 "metric": "each metric's comparisons over all collections, its combined verdicts included",
                 "collection": "each collection's comparisons, and the combined verdicts as one family"}


@dataclass(frozen=True, kw_only=True)
class GridCell:
    """One cell: a value (a mean, or a difference when ``signed``), its SD or interval, its marker
    and the test behind it (``comparison`` on a collection, ``combined`` across collections).
    ``collection`` and ``metric`` name what the cell is about (the CSV's columns)."""

    collection: str
    metric: str
    value: float | None = None
    sd: float | None = None
    interval: tuple[float, float] | None = None
    bold: bool = False
    marker: str | None = None
    tally: tuple[Tally, ...] = ()
    signed: bool = False
    comparison: Comparison | None = None
    combined: CombinedComparison | None = None


@dataclass(frozen=True, kw_only=True)
class GridRow:
    label: str
    cells: tuple[GridCell, ...]
    block: str | None = None  # a block's heading above this row (the seeds form's collections)
    rule_before: bool = False


@dataclass(frozen=True, kw_only=True)
class CollectionsNotes:
    """The footnote's facts, each renderer words and escapes them (``collections_render.footnote``)."""

    test: str
    test_description: str
    units: tuple[str, ...]  # per collection: "MSDialog: n = 200 queries x 3 seeds"
    baseline: str
    placement: str
    levels: tuple[float, ...]
    better: tuple[str, ...]
    worse: tuple[str, ...]
    correction: str
    correction_name: str
    family: str
    family_words: str
    comparisons: int
    combined: str
    fewest: int = 0  # the smallest family's m, where families differ in size
    remarks: tuple[str, ...] = ()
    tie_rule: str = ""
    versions: str = ""


@dataclass(frozen=True, kw_only=True)
class CollectionsTable:
    """A table whose columns may come in groups: ``groups`` (label, span) over ``columns``, or ()."""

    form: str
    title: str
    corner: str
    groups: tuple[tuple[str, int], ...]
    columns: tuple[str, ...]
    rows: tuple[GridRow, ...]
    decimals: int
    notes: CollectionsNotes
    metrics: tuple[str, ...]
    collections: tuple[str, ...]


def build_collection_tables(analysis: CollectionsAnalysis, form: str = AUTO_FORM, decimals: int = 4,
                            names: str = "label") -> list[CollectionsTable]:
    """The tables of ``form`` (module docstring): one (configs, summary) or one per metric (seeds)."""
    form = "configs" if form == AUTO_FORM else resolve_form(form, 0)  # one table over the collections
    check_layout(decimals, names)
    if form == "seeds":
        return [_seeds_table(analysis, m, decimals, names) for m in analysis.metrics]
    return [_grouped_table(analysis, form, decimals, names)]


def _sd(sd: float) -> float | None:
    return None if math.isnan(sd) else sd


def _grouped_table(analysis: CollectionsAnalysis, form: str, decimals: int, names: str) -> CollectionsTable:
    metrics = analysis.metrics
    labels = tuple(label_of(m, names) for m in metrics)
    cols: list[list[GridCell]] = []  # column-major, then transposed into rows
    for name, a in analysis.analyses.items():
        res = a.results
        for m in metrics:
            summary = {c: seed_summary(res.seed_values(c, m)) for c in res.configs}
            best = best_shown((mean for mean, _ in summary.values()), decimals, analysis.options.lower(m))
            column = []
            for c in analysis.configs:
                if c not in summary:
                    column.append(GridCell(collection=name, metric=m))
                    continue
                comp = a.get(c, m)
                column.append(GridCell(
                    collection=name, metric=m, value=summary[c][0],
                    sd=_sd(summary[c][1]) if form == "configs" else None,
                    interval=comp.interval if form == "summary" and comp is not None else None,
                    bold=round(summary[c][0], decimals) == best, marker=analysis.marker(comp),
                    tally=a.tallies(c, m), comparison=comp))
            cols.append(column)
    for m in metrics:
        column = []
        for c in analysis.configs:
            comb = analysis.get_combined(c, m)
            column.append(GridCell(
                collection=COMBINED, metric=m, value=comb.result.estimate if comb else None,
                interval=comb.interval if comb and form == "summary" else None,
                signed=True, marker=analysis.marker(comb), combined=comb))
        cols.append(column)
    rows = tuple(GridRow(label=c, cells=tuple(col[i] for col in cols)) for i, c in enumerate(analysis.configs))
    groups = tuple((name, len(metrics)) for name in analysis.collections) + ((f"{COMBINED} \u0394", len(metrics)),)
    inside = "mean \u00b1 SD over seeds" if form == "configs" else "mean over seeds [interval of the difference]"
    placement = (f"each collection's cells show {inside} with the marker of its comparison with the baseline; "
                 f"the {COMBINED} \u0394 columns the combined difference across the collections")
    title = ", ".join(labels) + f" on {_enumerate(list(analysis.collections))}" + _phase(analysis)
    return CollectionsTable(form=form, title=title, corner="configuration", groups=groups,
                            columns=labels * (len(analysis.collections) + 1), rows=rows, decimals=decimals,
                            notes=_notes(analysis, placement), metrics=metrics,
                            collections=analysis.collections)


def _seeds_table(analysis: CollectionsAnalysis, metric: str, decimals: int, names: str) -> CollectionsTable:
    configs = analysis.configs
    per_seed = analysis.test == "per-seed"
    rows: list[GridRow] = []
    for name, a in analysis.analyses.items():
        res = a.results
        values = {c: res.seed_values(c, metric) for c in res.configs}
        for j, seed in enumerate(res.seeds):
            vals = [float(values[c][j]) if c in values and j < len(values[c]) else None for c in configs]
            comps = [a.get(c, metric, seed) if per_seed and c in values else None for c in configs]
            rows.append(_value_row(analysis, name, metric, seed, vals, comps, decimals,
                                   block=name if j == 0 else None))
        means = [float(values[c].mean()) if c in values else None for c in configs]
        comps = [None if per_seed or c not in values else a.get(c, metric) for c in configs]
        tallies = [a.tallies(c, metric) if c in values else () for c in configs]
        rows.append(_value_row(analysis, name, metric, "AVG", means, comps, decimals, rule=True,
                               tallies=tallies))
        rows.append(GridRow(label="SD", cells=tuple(
            GridCell(collection=name, metric=metric, value=_sd(seed_summary(values[c])[1]) if c in values else None)
            for c in configs)))
    cells = []
    for c in configs:
        comb = analysis.get_combined(c, metric)
        cells.append(GridCell(collection=COMBINED, metric=metric, value=comb.result.estimate if comb else None,
                              signed=True, marker=analysis.marker(comb), combined=comb))
    rows.append(GridRow(label="\u0394", cells=tuple(cells), block=f"{COMBINED} across collections"))
    placement = ("per collection, a row per seed, AVG and SD; markers on the seed rows, their count on the "
                 "AVG row" if per_seed else "per collection, a row per seed, AVG and SD; markers on the AVG row")
    return CollectionsTable(form="seeds", title=f"{label_of(metric, names)} on "
                            f"{_enumerate(list(analysis.collections))}{_phase(analysis)}", corner="seed", groups=(),
                            columns=configs, rows=tuple(rows), decimals=decimals,
                            notes=_notes(analysis, placement + f"; the last row the {COMBINED} difference"),
                            metrics=(metric,), collections=analysis.collections)


def _value_row(analysis: CollectionsAnalysis, collection: str, metric: str, label: str,
               values: Sequence[float | None], comps: Sequence[Comparison | None], decimals: int, *,
               block: str | None = None, rule: bool = False,
               tallies: Sequence[tuple[Tally, ...]] | None = None) -> GridRow:
    shown = [v for v in values if v is not None]
    best = best_shown(shown, decimals, analysis.options.lower(metric)) if shown else None
    cells = tuple(GridCell(collection=collection, metric=metric, value=v,
                           bold=v is not None and round(v, decimals) == best,
                           marker=analysis.marker(comp), comparison=comp,
                           tally=tallies[i] if tallies else ())
                  for i, (v, comp) in enumerate(zip(values, comps, strict=True)))
    return GridRow(label=label, cells=cells, block=block, rule_before=rule)


def _units(analysis: CollectionsAnalysis) -> tuple[str, ...]:
    out = []
    for name, a in analysis.analyses.items():
        res = a.results
        seeds = f"{len(res.seeds)} seed{'s' if len(res.seeds) != 1 else ''}"
        if analysis.test == "across-seeds":
            out.append(f"{name}: n = {seeds}")
        elif analysis.test == CROSSED:
            out.append(f"{name}: n = {len(res.qids or ())} queries \u00d7 {seeds}")
        else:
            out.append(f"{name}: n = {len(res.qids or ())} queries, {seeds}")
    return tuple(out)


def _notes(analysis: CollectionsAnalysis, placement: str) -> CollectionsNotes:
    opts = analysis.options
    # The phase (confirmatory or exploratory) and a study that did not finish: one sentence for the
    # table, said once where every collection says the same.
    remarks: list[str] = list(dict.fromkeys(a.results.phase_note for a in analysis.analyses.values()
                                            if a.results.phase_note))
    if assumed := direction_note(analysis.metrics, opts.lower, label_of):
        remarks.append(assumed)
    for name, a in analysis.analyses.items():
        remarks += [f"{name}: {r}" for r in a.remarks]
        if a.results.dropped:
            remarks.append(f"{name}: " + dropped_note(a.results.dropped, len(a.results.qids or ())))
        if a.results.stopped:
            remarks.append(f"{name}: stopped early and left out: " + ", ".join(a.results.stopped))
    for name, group in analysis.counted_once:
        remarks.append(f"{name}: {' = '.join(label_of(m) for m in group)} there (equal per-query values in "
                       "every run, one relevant document per query): one comparison each, counted once "
                       "in the family")
    k = len(analysis.collections)
    weights = ("inverse-variance random-effects weights, tau^2 by "
               f"{_TAU2_NAMES[analysis.tau2_method]}" if analysis.weighting == "inverse-variance"
               else "equal weights")
    # A configuration missing from a collection is combined over the collections it has (its own k).
    fewer = sorted({(c.config, len(c.collections)) for c in analysis.combined if len(c.collections) < k})
    own = "".join(f"; {config} over its {n} collections, t on {n - 1} df" for config, n in fewer)
    combined = (f"Combined: the random-effects combination of the {k} collections' differences "
                f"(Hartung-Knapp-Sidik-Jonkman variance, t on k - 1 = {k - 1} df{own}, {weights}; tau^2 "
                f"and I^2 in the CSV)")
    return CollectionsNotes(
        test=analysis.test, test_description=TESTS[analysis.test].description, units=_units(analysis),
        baseline=analysis.baseline, placement=placement, levels=opts.markers.levels,
        better=opts.markers.better, worse=opts.markers.worse, correction=describe(opts.correction),
        correction_name=opts.correction, family=analysis.family, family_words=_FAMILY_WORDS[analysis.family],
        comparisons=analysis.comparisons, fewest=analysis.fewest_comparisons, combined=combined,
        remarks=tuple(remarks),
        tie_rule=VALUES_NOTE, versions=library_versions())


def _phase(analysis: CollectionsAnalysis) -> str:
    """The title's phase in a study with a confirmation phase, " (confirmatory)", as on one
    collection (harness.present.table); "" otherwise."""
    phases = {a.results.phase for a in analysis.analyses.values()} - {""}
    return f" ({', '.join(sorted(phases))})" if phases else ""


def _enumerate(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
