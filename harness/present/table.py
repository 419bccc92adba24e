"""The significance table model: what each cell shows, built from an ``Analysis``; no formatting.

Three forms, and ``auto`` (the default): ``seeds`` up to ``SUMMARY_ABOVE`` (6) configurations, past
that ``summary``, whose width does not grow with the configurations:
- ``seeds`` (Penha & Hauff 2020, Table 5): one table per metric, one row per seed, then AVG (mean
  over seeds) and SD (sample standard deviation over seeds, ddof = 1) rows; one column per
  configuration, the baseline first. Under the per-seed test the markers sit on the seed rows and the
  AVG row counts them (a tally: significantly better in k of S seeds), under every other test the
  markers sit on the AVG row. The best value of each seed row and of AVG is bold.
- ``configs`` (Soldaini & Moschitti 2020, Table 3; Penha & Hauff 2021, Table 1): one row per
  configuration, one column per metric, each cell mean +- SD over seeds with its marker (its tally
  under per-seed); the best mean of each column is bold.
- ``summary``: one table per metric, one row per configuration (the baseline first, the others by
  their mean, best first), columns mean, SD, the mean difference to the baseline with its marker (its
  tally under per-seed) and the difference's confidence interval; the best mean is bold. A study of
  20 configurations reads down one column instead of across 21.

"Best" compares the values as displayed (rounded to ``decimals``), so equal-looking cells are bold
together. Metrics are named by ``names`` (metrics.NAME_STYLES): their table label (MAP, MRR@10, the
default), ir-measures' canonical name (AP, RR@10) or the harness key (map, mrr_10); ``Table.metrics``
keeps the keys whatever the style.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata

from harness import __version__
from harness.errors import UnknownName, is_integer, refuse
from harness.metrics.measures import NAME_STYLES, TIE_RULE, known_measure, label_of
from harness.results.stored import StudyResults, seed_summary
from harness.stats.corrections import describe
from harness.stats.crossed import CrossedResult
from harness.stats.power import one_seed_seeds
from harness.stats.sequential import RULE
from harness.stats.significance import (
    CROSSED,
    INTERVALS,
    ONE_SEED_REASON,
    TESTS,
    Analysis,
    Comparison,
    Tally,
)

FORMS = ("seeds", "configs", "summary")
AUTO_FORM = "auto"
SUMMARY_ABOVE = 6  # ``auto``: the summary form past this many configurations, the seeds form up to it


def resolve_form(form: str, configs: int) -> str:
    """The form a table of ``configs`` configurations gets: ``form`` itself, or for ``auto`` seeds
    up to ``SUMMARY_ABOVE`` configurations and summary past it."""
    if form == AUTO_FORM:
        return "summary" if configs > SUMMARY_ABOVE else "seeds"
    if form not in FORMS:
        raise UnknownName("form", form, (AUTO_FORM, *FORMS))
    return form


# Where a table's values come from, true of every source: a study's are the harness's evaluation
# (its tie rule); a results CSV or DataFrame may hold values computed elsewhere, their ties broken
# otherwise. One sentence for all sources, so an export and the frame read from it give the study's table.
VALUES_NOTE = f"Per-query metrics, where the harness computed them (a study's runs): {TIE_RULE}"


@dataclass(frozen=True, kw_only=True)
class Cell:
    value: float | None
    sd: float | None = None
    bold: bool = False
    marker: str | None = None
    comparison: Comparison | None = None
    tally: tuple[Tally, ...] = ()
    interval: tuple[float, float] | None = None  # a confidence interval's cell (summary form)


@dataclass(frozen=True, kw_only=True)
class Row:
    label: str
    cells: tuple[Cell, ...]
    rule_before: bool = False  # a horizontal rule above this row (summary rows)


@dataclass(frozen=True, kw_only=True)
class Notes:
    """The footnote's facts; each renderer words and escapes them."""

    test: str
    test_description: str
    units: str
    baseline: str
    placement: str
    levels: tuple[float, ...]
    better: tuple[str, ...]
    worse: tuple[str, ...]
    correction: str
    correction_name: str
    family: str
    comparisons: int  # the family's size m, stopped configurations' comparisons included
    per_run_only: bool
    per_run_metrics: tuple[str, ...] = ()
    sd_note: str
    tie_rule: str
    versions: str
    remarks: tuple[str, ...] = ()  # further sentences: a fallback, clamped variance components
    stopped: int = 0  # configurations stopped early, each counted in the family with p = 1
    tally_seeds: int | None = None  # per-seed: the AVG row counts significant seeds out of this many
    # d_z's denominator and how the interval was made (the CSV's and MLflow's d_z, ci_low, ci_high)
    effect_note: str = ""
    seeds_text: str = ""  # "3 seeds", or "4 to 12 seeds (each comparison's)" under a seed schedule
    confidence: float = 0.95
    # No test ran (one seed, no opt-in): why, in a sentence; the footnote then has no legend.
    untested: str = ""


@dataclass(frozen=True, kw_only=True)
class Table:
    form: str
    title: str
    corner: str
    columns: tuple[str, ...]
    rows: tuple[Row, ...]
    decimals: int
    notes: Notes
    # Harness keys of the metrics shown: the table's one metric (seeds form), one per column (configs).
    metrics: tuple[str, ...] = ()


@functools.lru_cache(maxsize=1)  # read from the installed packages' metadata once per process
def library_versions() -> str:
    names = ("numpy", "scipy", "ir-measures")
    return ", ".join([f"harness {__version__}", *(f"{n} {metadata.version(n)}" for n in names)])


def display_name(metric: str, names: str = "label") -> str:
    """How a table names ``metric`` (a harness key) in the ``names`` style (metrics.label_of)."""
    return label_of(metric, names)


def shown_name(analysis: Analysis, metric: str, names: str = "label") -> str:
    """How a table names ``metric`` with the metrics identical to it in this study
    (``Analysis.identical``): "MAP = MRR = MRR@10", or "MAP" alone."""
    return " = ".join(display_name(m, names) for m in analysis.aliases(metric))


def identical_note(analysis: Analysis, metrics: Sequence[str], names: str = "label") -> str | None:
    """The footnote's sentence on ``metrics``' identical groups, None where there is none."""
    groups = [analysis.aliases(m) for m in metrics if len(analysis.aliases(m)) > 1]
    if not groups:
        return None
    said = "; ".join(" = ".join(display_name(m, names) for m in g) for g in groups)
    return (f"{said} here: equal per-query values in every run (one relevant document per query), "
            f"so each is shown once and counted once in the family")


def check_layout(decimals: int, names: str) -> None:
    """Refuse ``decimals`` outside [0, 10] and a ``names`` style that is not one of NAME_STYLES."""
    if not (is_integer(decimals) and 0 <= decimals <= 10):
        raise refuse("decimals", decimals, "an integer in [0, 10]")
    if names not in NAME_STYLES:
        raise UnknownName("names", names, NAME_STYLES)


def build_tables(analysis: Analysis, form: str, decimals: int = 4, names: str = "label") -> list[Table]:
    """The tables of one form: one per metric (seeds, summary) or one in all (configs); ``auto``
    picks by the number of configurations (``resolve_form``)."""
    form = resolve_form(form, len(analysis.results.configs))
    check_layout(decimals, names)
    if form == "seeds":
        return [seeds_table(analysis, m, decimals, names) for m in analysis.metrics]
    if form == "summary":
        return [summary_table(analysis, m, decimals, names) for m in analysis.metrics]
    return [configs_table(analysis, decimals, names)]


def seeds_table(analysis: Analysis, metric: str, decimals: int = 4, names: str = "label") -> Table:
    res = analysis.results
    values = [res.seed_values(c, metric) for c in res.configs]  # per configuration, over its seeds
    per_seed = analysis.test == "per-seed"
    rows = []
    for j, seed in enumerate(res.seeds):
        comps = [analysis.get(c, metric, seed) if per_seed else None for c in res.configs]
        # A configuration a seed schedule stopped before this seed has an empty cell.
        row = [float(v[j]) if j < len(v) else None for v in values]
        rows.append(_value_row(analysis, seed, row, comps, decimals, lower=analysis.options.lower(metric)))
    avg_comps = [None if per_seed else analysis.get(c, metric) for c in res.configs]
    tallies = [analysis.tallies(c, metric) for c in res.configs]
    rows.append(_value_row(analysis, "AVG", [float(v.mean()) for v in values], avg_comps, decimals,
                           rule=True, tallies=tallies, lower=analysis.options.lower(metric)))
    sds = [_sd(seed_summary(v)[1]) for v in values]
    rows.append(Row(label="SD", cells=tuple(Cell(value=s) for s in sds)))
    placement = ("markers on the seed rows, their count on the AVG row" if per_seed
                 else "markers on the AVG row")
    return Table(form="seeds", title=_phase_title(res, shown_name(analysis, metric, names)), corner="seed", columns=res.configs,
                 rows=tuple(rows), decimals=decimals,
                 notes=_notes(analysis, [metric], placement, names), metrics=(metric,))


def _sd(sd: float) -> float | None:
    """A cell's SD: ``seed_summary``'s, None (no cell text) where one seed leaves it undefined."""
    return None if math.isnan(sd) else sd


def configs_table(analysis: Analysis, decimals: int = 4, names: str = "label") -> Table:
    res = analysis.results
    per_seed = analysis.test == "per-seed"
    summary = {(c, m): seed_summary(res.seed_values(c, m)) for c in res.configs for m in analysis.metrics}
    means = {k: mean for k, (mean, _) in summary.items()}
    best = {m: best_shown((means[(c, m)] for c in res.configs), decimals, analysis.options.lower(m))
            for m in analysis.metrics}
    rows = []
    for c in res.configs:
        cells = []
        for m in analysis.metrics:
            comp = analysis.get(c, m)
            cells.append(Cell(value=means[(c, m)], sd=_sd(summary[(c, m)][1]),
                              bold=round(means[(c, m)], decimals) == best[m],
                              marker=analysis.marker(comp), comparison=comp,
                              tally=analysis.tallies(c, m)))
        rows.append(Row(label=c, cells=tuple(cells)))
    return Table(form="configs", title=_phase_title(res, ", ".join(shown_name(analysis, m, names) for m in analysis.metrics)),
                 corner="configuration", columns=tuple(shown_name(analysis, m, names) for m in analysis.metrics),
                 rows=tuple(rows), decimals=decimals,
                 notes=_notes(analysis, analysis.metrics, "cells show mean \u00b1 SD over seeds"
                              + (", their significant seeds counted" if per_seed else ""), names),
                 metrics=tuple(analysis.metrics))


def summary_table(analysis: Analysis, metric: str, decimals: int = 4, names: str = "label") -> Table:
    """One row per configuration: mean, SD, difference to the baseline (marked) and its interval;
    the baseline first, then the others by mean, best first (ties keep the study's order)."""
    res = analysis.results
    per_seed = analysis.test == "per-seed"
    summary = {c: seed_summary(res.seed_values(c, metric)) for c in res.configs}
    lower = analysis.options.lower(metric)
    order = [res.baseline, *sorted((c for c in res.configs if c != res.baseline),
                                   key=lambda c: summary[c][0] if lower else -summary[c][0])]
    best = best_shown((mean for mean, _ in summary.values()), decimals, lower)
    rows = []
    for c in order:
        mean, sd = summary[c]
        comp = None if per_seed or c == res.baseline else analysis.get(c, metric)
        if c == res.baseline:
            diff = None
        elif comp is not None:
            diff = comp.estimate  # the estimate the marker and the interval are of
        else:  # per-seed: the difference of the means over the seeds the two share
            diff = mean - float(res.seed_values(res.baseline, metric, res.seeds_of(c)).mean())
        cells = [Cell(value=mean, bold=round(mean, decimals) == best), Cell(value=_sd(sd)),
                 Cell(value=diff, marker=analysis.marker(comp), comparison=comp,
                      tally=analysis.tallies(c, metric))]
        if not per_seed and not analysis.untested:
            cells.append(Cell(value=None, interval=comp.interval if comp is not None else None))
        rows.append(Row(label=c, cells=tuple(cells)))
    level = f"{analysis.options.confidence:.0%}"
    # Per-seed: a test per seed, so no one interval; the difference carries the significant-seed count.
    placement = ("the difference to the baseline with its significant seeds counted" if per_seed
                 else "the difference to the baseline" if analysis.untested
                 else f"markers on the difference to the baseline, its {level} confidence interval beside it")
    if analysis.test == "wilcoxon":
        placement += " (\u0394 (HL): the Hodges-Lehmann estimate the test and its interval are of)"
    delta = "\u0394 (HL)" if analysis.test == "wilcoxon" else "\u0394"
    columns = ("mean", "SD", delta) + (() if per_seed or analysis.untested else (f"{level} CI",))
    return Table(form="summary", title=_phase_title(res, shown_name(analysis, metric, names)), corner="configuration",
                 columns=columns, rows=tuple(rows), decimals=decimals,
                 notes=_notes(analysis, [metric], placement + "; rows by mean, the baseline first", names),
                 metrics=(metric,))


def _value_row(analysis: Analysis, label: str, values: list[float | None], comps: list[Comparison | None],
               decimals: int, rule: bool = False,
               tallies: list[tuple[Tally, ...]] | None = None, lower: bool = False) -> Row:
    best = best_shown((v for v in values if v is not None), decimals, lower)
    cells = tuple(Cell(value=v, bold=v is not None and round(v, decimals) == best,
                       marker=analysis.marker(comp), comparison=comp,
                       tally=tallies[i] if tallies else ())
                  for i, (v, comp) in enumerate(zip(values, comps, strict=True)))
    return Row(label=label, cells=cells, rule_before=rule)


def best_shown(values: Iterable[float], decimals: int, lower: bool = False) -> float:
    """The best of ``values`` as displayed (rounded to ``decimals``): the largest, or the least for a
    metric that is lower when the ranker is better (a cost)."""
    shown = [round(v, decimals) for v in values]
    return min(shown) if lower else max(shown)


def dropped_note(dropped: Mapping[str, Sequence[str]], kept: int) -> str:
    """The footnote on queries some runs lack: how many, which (the first few, with the runs that
    lack them), and that every mean and test uses the queries every run has."""
    shown = "; ".join(f"{q} (missing from {', '.join(runs[:2])}{', ...' if len(runs) > 2 else ''})"
                      for q, runs in list(dropped.items())[:3])
    more = f"; and {len(dropped) - 3} more" if len(dropped) > 3 else ""
    return (f"{len(dropped)} of {kept + len(dropped)} queries are missing from some runs and left out: "
            f"{shown}{more}. Every mean and test here is over the {kept} queries every run has.")


def _phase_title(res: StudyResults, title: str) -> str:
    """A table's title with its phase (a study with a confirmation phase): "MAP (confirmatory)"."""
    return f"{title} ({res.phase})" if res.phase else title


def _notes(analysis: Analysis, metrics: list[str] | tuple[str, ...], placement: str,
           names: str = "label") -> Notes:
    res, opts = analysis.results, analysis.options
    comps = [c for c in analysis.comparisons if c.metric in metrics]
    queries, seeds = len(res.qids or ()), len(res.seeds)
    counts = sorted({len(res.seeds_of(c)) for c in res.configs})
    # A seed schedule gives each comparison its own seeds: "4 to 12 seeds".
    seeds_text = f"{seeds} seeds" if len(counts) == 1 else f"{counts[0]} to {counts[-1]} seeds (each comparison's)"
    if analysis.untested:
        units = f"n = {queries} queries, 1 seed" if res.qids else "n = 1 seed (per-run values)"
    elif analysis.test == "across-seeds":
        units = f"n = {seeds_text}"
    elif analysis.test == CROSSED:
        units = (f"n = {queries} queries \u00d7 {seeds_text}; variance from seeds, queries and their "
                 f"interaction: crossed random effects, generalized p-value")
    else:
        units = f"n = {queries} queries"
        if analysis.test != "per-seed":
            units += f", {seeds} seeds"
    remarks = [res.phase_note] if res.phase_note else []
    remarks += list(analysis.remarks)
    if assumed := direction_note(metrics, opts.lower, lambda m: display_name(m, names)):
        remarks.append(assumed)
    identical = identical_note(analysis, metrics, names)
    if identical:
        remarks.append(identical)
    if res.dropped:
        remarks.append(dropped_note(res.dropped, len(res.qids or ())))
    if res.sequential:
        remarks.append(sequential_note(res.sequential, res.baseline))
    if res.stopped:
        remarks.append("Stopped early by successive halving over seed-group means and left out of the "
                       "table: " + "; ".join(f"{name} ({why})" for name, why in res.stopped.items()))
    clamped: dict[str, list[str]] = {}
    for c in comps:
        if isinstance(c.result, CrossedResult):
            for name in c.result.clamped:
                clamped.setdefault(name, []).append(f"{c.config} on {display_name(c.metric, names)}")
    if clamped:
        remarks.append("Negative variance estimates, set to 0 in the effect size (the test uses them "
                       "unclamped): " + "; ".join(
                           f"the {name} component for {_enumerate(where)}" for name, where in clamped.items()))
    family = "each metric" if opts.family == "metric" else "all metrics"
    marks = opts.markers
    if analysis.test == "wilcoxon" and not placement.startswith("markers on the difference"):
        remarks.append("Markers point the way the Hodges-Lehmann estimate does, which can differ in "
                       "sign from the difference of the means shown")
    return Notes(
        test=analysis.test, test_description=_description(analysis), units=units,
        baseline=res.baseline, placement=placement, levels=marks.levels,
        better=marks.query_better if analysis.query_only else marks.better,
        worse=marks.query_worse if analysis.query_only else marks.worse,
        correction=describe(opts.correction), correction_name=opts.correction,
        family=family, comparisons=max((c.family_size for c in comps), default=0), stopped=len(res.stopped),
        per_run_only=analysis.per_run_only,
        # the metrics without per-query values, where others have them (one test for the table)
        per_run_metrics=tuple(label_of(m) for m in analysis.metrics if not res.has_per_query(m))
        if analysis.per_run_only and any(res.has_per_query(m) for m in analysis.metrics) else (),
        sd_note=(f"SD is the sample standard deviation over {seeds} seeds" if len(counts) == 1
                 else "SD is the sample standard deviation over each configuration's seeds"),
        tie_rule=VALUES_NOTE,
        versions=library_versions(), remarks=tuple(remarks),
        tally_seeds=seeds if analysis.test == "per-seed" else None,
        effect_note=effect_note(analysis), seeds_text=seeds_text, confidence=opts.confidence,
        untested=untested_note(analysis))


def direction_note(metrics: Sequence[str], is_lower: Callable[[str], bool], name: Callable[[str], str]) -> str:
    """The footnote's sentences on ``metrics`` that are no IR measure ("" for none), each shown as
    ``name`` gives it: those lower when the ranker is better (``is_lower``: a harness cost or one
    named with --lower-better, whose falls are marked better and whose least value is bold), and the
    others the harness does not know (``known_measure``), taken as higher-is-better ("better" and
    "worse" mean higher and lower, true of every IR measure, not of a cost)."""
    lower = [name(m) for m in metrics if is_lower(m)]
    names = [name(m) for m in metrics if not is_lower(m) and not known_measure(m)]
    said = []
    if lower:
        said.append(f"Lower values are better for {_enumerate(list(lower))}: "
                    f"{'its' if len(lower) == 1 else 'their'} falls are marked better and "
                    f"{'its' if len(lower) == 1 else 'their'} least values are bold")
    if names:
        said.append(f"Higher values are taken as better for {_enumerate(list(names))} (not "
                    f"{'an IR measure' if len(names) == 1 else 'IR measures'} the harness knows): for a "
                    "cost or a loss, read better as higher and worse as lower, or name it with "
                    "--lower-better")
    return ". ".join(said)


def _description(analysis: Analysis) -> str:
    if analysis.untested:
        return "no significance test"
    return TESTS[analysis.test].description


def untested_note(analysis: Analysis) -> str:
    """Why a one-seed table has no markers, and what to do: "" where a test ran."""
    if not analysis.untested:
        return ""
    per_query = all(analysis.results.has_per_query(m) for m in analysis.metrics)
    head = (f"No significance markers: this study has one seed ({analysis.results.seeds[0]}); "
            f"{ONE_SEED_REASON}. ")
    if not per_query:  # per-run values: neither a query test nor a power analysis has what it needs
        return (f"{head}A test across seeds needs at least 2 seeds; with per-query values, "
                "--one-seed-test query would run the paired t-test over this seed's queries")
    return (f"{head}The crossed seeds \u00d7 queries test needs at least 2 seeds; {_seeds_suggested(analysis)}"
            f"`harness power` on a pilot of 2 or more gives the seeds each difference needs at this "
            f"table's corrected level. "
            f"--one-seed-test query runs the paired t-test over this seed's queries, with markers of "
            f"its own (stars, not daggers)")


def _seeds_suggested(analysis: Analysis) -> str:
    """The one-seed lower bounds of the first metric's largest differences (power.one_seed_seeds)
    at Holm's first step over the family a test of this table would correct over (its candidates,
    each metric's or, in the configs form, every metric's), power 0.8."""
    res = analysis.results
    metric, seed = analysis.metrics[0], res.seeds[0]
    m = (len(res.configs) - 1 + len(res.stopped)) * (len(analysis.metrics) if analysis.options.family == "all" else 1)
    level = analysis.options.markers.levels[0] / max(m, 1)
    diffs = {c: res.query_values(c, seed, metric) - res.query_values(res.baseline, seed, metric)
             for c in res.configs[1:]}
    largest = sorted(diffs, key=lambda c: -abs(float(diffs[c].mean())))[:3]
    bounds = [(c, float(diffs[c].mean()), one_seed_seeds(diffs[c], level=level)) for c in largest]
    said = "; ".join(f"{c} ({d:+.4f}): at least {n}" for c, d, n in bounds if n is not None)
    if not said:
        return ""
    return (f"counting no training variance (the most optimistic case), the power analysis of this "
            f"seed's {display_name(metric)} differences at {level:.3g} (Holm's first step) with power "
            f"0.8 suggests {said} seeds; ")


# How the interval beside a marker relates to the correction (Comparison.interval).
_INTERVAL_LEVELS = {
    "none": "per comparison, not corrected for the family",
    "maxt": "simultaneous over the family (the max-|t| critical value), so it excludes 0 exactly when "
            "the adjusted p-value is below {a:g}",
    "bonferroni": "at the Bonferroni level 1 - {a:g}/m, simultaneous over the family, so it "
                  "excludes 0 exactly when the adjusted p-value is below {a:g}",
}
_STEP_LEVEL = ("each at the per-comparison level its {name} step implies (1 - {a:g} p / p_adjusted), "
               "so it excludes 0 exactly when the adjusted p-value is below {a:g}; not a simultaneous "
               "confidence region")


def interval_level_note(analysis: Analysis) -> str:
    """The footnote's words on the level of the interval beside each marker."""
    opts = analysis.options
    a = 1.0 - opts.confidence
    names = {"holm": "Holm", "bh": "Benjamini-Hochberg"}
    text = _INTERVAL_LEVELS.get(opts.correction) or _STEP_LEVEL.replace(
        "{name}", names.get(opts.correction, opts.correction))
    return text.format(a=a)


def effect_note(analysis: Analysis) -> str:
    """The footnote's sentence on the effect size d_z and the confidence interval of each cell."""
    if analysis.untested:
        return ""
    design = TESTS[analysis.test]
    interval = INTERVALS.get(analysis.test, "the t interval around the mean difference")
    return (f"Effect size d_z: the mean difference over {design.effect_basis}; "
            f"{analysis.options.confidence:.0%} interval: {interval}, {interval_level_note(analysis)}")


def sequential_note(reasons: Mapping[str, str], baseline: str) -> str:
    """The footnote's sentence on a seed schedule: the rule, and where each comparison stopped."""
    stops = "; ".join(f"{c} ({why})" for c, why in reasons.items() if c != baseline)
    return (f"Seeds were added in rounds until each comparison's verdict on the study's objective (test "
            f"queries) was settled by {RULE}; each comparison uses every seed it received: {stops}")


def _enumerate(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
