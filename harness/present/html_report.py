"""The one-page study report: a self-contained HTML page (inline CSS, figures as base64 PNG, no
script, nothing fetched) that MLflow's artifact viewer and any browser open.

Built from a ``StudyReport`` (harness.present.report: the analysis, the power analysis) and a
``StudyRecord`` (harness.results.study_record: dev curves, tested checkpoints, decisions):
- what the study decided: the test and its correction, the phase (a confirmation's pick), the
  configurations early stopping stopped and the trial-steps it saved, a seed schedule's reasons;
- the significance table, one row per configuration (``SignificanceTable.build(..., "configs").to_html()``), and the per-seed tables folded below it;
- a forest plot per metric: each candidate's mean difference to the baseline with the interval the
  table reports (``Comparison.estimate`` and ``interval``: the correction's level, simultaneous under maxt), coloured
  by its marker;
- dev curves per configuration: the mean over seeds of ``dev_<metric>`` per step, a band from the
  lowest to the highest seed, and each seed's tested checkpoint (its best-dev step) marked on its
  own curve; a stopped configuration's panel marks the step it was stopped at;
- the power curve per metric: the minimum detectable difference against the seed count at the
  study's query count (``power.mde``: the table's crossed test at the corrected level alpha / m of
  the analysis), the study's own seed count marked with the value power/power.md reports, and the
  query floor.

Figures through matplotlib's Agg canvas, created per figure as harness.present.plots does, their
panels placed by harness.present.panels (drawn once, when saved).

The footer's "made" time is ``made_at``'s: SOURCE_DATE_EPOCH where it is set (reproducible-builds.org's
convention), else the study run's end as the store holds it, else now, so that the same study and
the same code give the same bytes.
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from harness.errors import ConfigError
from harness.present import panels
from harness.present.power_text import not_estimable
from harness.present.render import the_baseline
from harness.present.report import CORRECTION_NAMES, StudyReport
from harness.present.significance_table import SignificanceTable
from harness.present.table import display_name, identical_note, library_versions, shown_name
from harness.results.study_record import StudyRecord, read_study_record
from harness.stats.power import PowerAnalysis, mde, power_analysis
from harness.stats.significance import BETTER, WORSE, Analysis

# Seed counts the power curve is drawn through (plus the study's own).
POWER_GRID = (3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50)
COLOURS = {BETTER: "#1a7f37", WORSE: "#cf222e", "": "#57606a"}
TICKS = (3, 5, 10, 20, 50)
SECTIONS = ("decisions", "significance", "forest", "curves", "power")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;margin:0;background:#f6f8fa}
main{max-width:1180px;margin:0 auto;padding:18px 24px;background:#fff}
h1{font-size:22px;margin:4px 0 2px}h2{font-size:17px;margin:22px 0 6px;border-bottom:1px solid #d0d7de;padding-bottom:3px}
.sub{color:#57606a;margin:0 0 10px}
ul.decisions{margin:4px 0 0 0;padding-left:20px}ul.decisions li{margin:2px 0}
table.harness-table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
table.harness-table caption{text-align:left;font-weight:600;padding:2px 0}
table.harness-table th,table.harness-table td{border:1px solid #d0d7de;padding:3px 8px;text-align:right}
table.harness-table th:first-child{text-align:left}
table.harness-table thead th{background:#f6f8fa}
table.harness-table tfoot td{text-align:left;font-size:12px;color:#57606a;max-width:1100px}
figure{margin:6px 0 12px}figure img{max-width:100%;height:auto}figcaption{font-size:12px;color:#57606a}
details summary{cursor:pointer;color:#0969da}
p.none{color:#57606a;font-style:italic}
footer{margin-top:24px;font-size:11px;color:#6e7781}
"""


def report_html(report: StudyReport, record: StudyRecord | None = None, *, title: str | None = None,
                decimals: int = 4, ended: datetime | None = None) -> str:
    """The page (module docstring) as one HTML string; ``record`` None: no dev curves or
    recorded decisions (results that did not come from MLflow). ``ended``: when the study run
    ended (``study_ended``), the footer's time unless SOURCE_DATE_EPOCH is set (``made_at``)."""
    made = made_at(ended)  # first: a malformed SOURCE_DATE_EPOCH is refused before the work
    record = record or StudyRecord()
    analysis = report.analysis
    # The page's decisions, its tables, its forest plot and its power curves read one analysis: the
    # configs table's (its family the whole table), so no sentence marks what a table beside it does not.
    shown = report.whole or analysis
    res = analysis.results
    name = title or res.source
    seeds = _count(len(res.seeds), "seed")
    queries = f", {len(res.qids)} queries" if res.qids else ""
    phase = f" ({res.phase})" if res.phase else ""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(name)}: study report</title><style>{CSS}</style></head><body><main>",
        f"<h1>{_e(name)}</h1>",
        (f'<p class="sub">{_count(len(res.configs) - 1, "candidate")} against '
         f"{_e(the_baseline(res.baseline))}, {seeds}{queries}; {_e(analysis.test)} test, "
         f"{_e(_correction(analysis))} correction{_e(phase)}</p>"),
        _section("decisions", "What the study decided", _decisions(shown, record)),
        _section("significance", "Significance", _tables(shown, decimals)),
        _section("forest", "Difference to the baseline", _forest(shown)),
        _section("curves", "Dev curves", _curves(res.baseline, res.configs, record)),
        _section("power", "Power: the difference the study can detect", _power(report)),
        f"<footer>{_e(library_versions())}; made {made:%Y-%m-%d %H:%M} UTC</footer>",
        "</main></body></html>",
    ]
    return "\n".join(parts) + "\n"


def study_page(report: StudyReport, experiment: str, *, tracking_uri: str | None = None,
               metric: str | None = None) -> str:
    """The page of MLflow experiment ``experiment`` whose results ``report`` analysed: its record
    (dev curves of ``metric``, default the objective; decisions) read from the store."""
    record = read_study_record(experiment, report.analysis.results, tracking_uri=tracking_uri, metric=metric)
    return report_html(report, record, title=experiment, ended=study_ended(experiment, tracking_uri=tracking_uri))


def made_at(ended: datetime | None = None) -> datetime:
    """The time the footer gives (UTC): SOURCE_DATE_EPOCH's where it is set and not empty (seconds
    since 1970-01-01 UTC, the reproducible-builds.org convention: a rebuild gives the same bytes),
    else ``ended`` (the study run's end), else now. A value that is no such count is refused, as the
    convention asks, rather than read as now."""
    raw = os.environ.get("SOURCE_DATE_EPOCH", "")
    if raw:
        try:
            if not re.fullmatch(r"[0-9]+", raw):
                raise ValueError(raw)
            return datetime.fromtimestamp(int(raw), UTC)
        except (ValueError, OverflowError, OSError):
            raise ConfigError(f"SOURCE_DATE_EPOCH={raw!r}: expected the report's time as whole seconds since "
                              "1970-01-01 UTC (date +%s); set it so, or unset it") from None
    return ended.astimezone(UTC) if ended is not None else datetime.now(UTC)


def study_ended(experiment: str, *, tracking_uri: str | None = None) -> datetime | None:
    """When the latest study run of MLflow experiment ``experiment`` ended, as the store records it;
    None while it runs (the page the driver logs before it ends the run) or where the store cannot
    say (the footer then gives the time it is made)."""
    from harness.results.mlflow_reader import open_experiment, store_errors
    from harness.tracking import conventions as C

    snapshot, _ = open_experiment(experiment, tracking_uri)
    studies = sorted(snapshot.runs(C.KIND_STUDY), key=lambda r: (r.info.start_time or 0, r.info.run_id))
    if not studies:
        return None
    client = snapshot.client()  # the snapshot holds no end times: the one run asked for its own
    try:
        end = client.get_run(studies[-1].info.run_id).info.end_time
    except store_errors():  # evaluated once MLflow is imported, its exceptions among them
        return None
    return datetime.fromtimestamp(end / 1000, UTC) if end else None


def _correction(analysis: Analysis) -> str:
    """The correction as a reader names it: Holm, Benjamini-Hochberg."""
    return CORRECTION_NAMES.get(analysis.options.correction, analysis.options.correction)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _e(text: object) -> str:
    return html.escape(str(text))


def _section(key: str, heading: str, body: str) -> str:
    return f'<section id="{key}"><h2>{_e(heading)}</h2>\n{body}\n</section>'


def _none(text: str) -> str:
    return f'<p class="none">{_e(text)}</p>'


# -- decisions ----------------------------------------------------------------------------------

def decisions(analysis: Analysis, record: StudyRecord) -> list[str]:
    """What the study decided, one plain sentence each (the page's first section)."""
    res = analysis.results
    out = []
    comps = [c for c in analysis.comparisons if c.seed is None]
    if analysis.test == "per-seed":
        out.append(f"Per-seed test: each candidate is tested against the baseline seed by seed "
                   f"({_correction(analysis)} correction).")
    elif analysis.untested:
        out.append("No significance test: one seed, and training variance cannot be estimated from "
                   "one run (the table's footnote says how many seeds the power analysis suggests).")
    elif comps:
        marked = [c for c in comps if analysis.marker(c)]
        family = comps[0].family_size
        out.append(f"{len(marked)} of {len(comps)} comparisons significant ({analysis.test} test, "
                   f"{_correction(analysis)} over families of {family}): "
                   + (", ".join(f"{c.config} on {shown_name(analysis, c.metric)} {analysis.marker(c)} "
                                f"({'better' if c.direction == BETTER else 'worse'})" for c in marked) or "none")
                   + ".")
    identical = identical_note(analysis, analysis.metrics)
    if identical:
        out.append(f"{identical}.")
    if record.confirmation_pick:
        out.append(f"Confirmation: the dev objective picked {', '.join(record.confirmation_pick)} for "
                   "retraining with the baseline on fresh seeds.")
    if res.phase_note:
        out.append(res.phase_note)
    if res.stopped or record.early_stopping:
        stopped = "; ".join(f"{k} {v}" for k, v in res.stopped.items()) or "no configuration"
        es = record.early_stopping
        saved, ran = es.get("early_stopping_steps_saved"), es.get("early_stopping_steps_run")
        steps = ""
        if saved is not None and ran is not None and saved + ran > 0:
            steps = (f"; {saved:.0f} of {saved + ran:.0f} trial-steps saved "
                     f"({100 * saved / (saved + ran):.0f}%)")
        out.append(f"Early stopping stopped {stopped}{steps}; stopped configurations are left out "
                   "of the tables.")
    for config, why in res.sequential.items():
        out.append(f"Seed schedule: {config}: {why} ({len(res.seeds_of(config))} seeds tested).")
    if record.report_error:
        out.append(f"Report error recorded on the study run: {record.report_error}")
    return out


def _decisions(analysis: Analysis, record: StudyRecord) -> str:
    items = decisions(analysis, record)
    return '<ul class="decisions">' + "".join(f"<li>{_e(s)}</li>" for s in items) + "</ul>"


def _tables(whole: Analysis, decimals: int) -> str:
    """The configs table (its family the whole table's, as `harness table --form configs` and the
    study's tables/configs.*) and the per-seed tables, corrected over the same family: one page,
    one meaning of a marker (each metric's family marked a cell the configs table left unmarked)."""
    configs = SignificanceTable.build(whole, "configs", decimals).to_html()
    seeds = SignificanceTable.build(whole, "seeds", decimals).to_html()
    return f"{configs}\n<details><summary>Per-seed values (one table per metric)</summary>\n{seeds}\n</details>"


# -- figures ------------------------------------------------------------------------------------

def _img(fig: Any, alt: str, caption: str) -> str:
    data = base64.b64encode(panels.png(fig)).decode("ascii")
    return (f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def forest_rows(analysis: Analysis, metric: str) -> list[tuple[str, float, float, float, str]]:
    """(candidate, difference, interval low, high, marker) of ``metric``'s comparisons, the
    candidates in table order; none under the per-seed test (no single interval)."""
    rows = []
    for config in analysis.results.configs[1:]:
        c = analysis.get(config, metric)
        if c is not None:
            rows.append((config, c.estimate, *c.interval, analysis.marker(c) or ""))
    return rows


def _forest(analysis: Analysis) -> str:
    metrics = [m for m in analysis.metrics if forest_rows(analysis, m)]
    if not metrics:
        return _none("No interval per candidate: " + (
            "the per-seed test tests each seed on its own." if analysis.test == "per-seed"
            else "one seed, no test." if analysis.untested
            else "the study has the baseline only."))
    n = len(analysis.results.configs) - 1
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = panels.figure(3.8 * cols + 0.8, nrows * (0.32 * n + 1.3))
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    level = analysis.options.confidence
    for k, (ax, metric) in enumerate(zip(axes.flat, metrics, strict=False)):
        rows = forest_rows(analysis, metric)
        for i, (config, diff, low, high, marker) in enumerate(rows):
            c = analysis.get(config, metric)
            colour = COLOURS[c.direction] if marker and c is not None and c.direction in (BETTER, WORSE) else COLOURS[""]
            y = len(rows) - 1 - i
            ax.plot([low, high], [y, y], color=colour, lw=2, solid_capstyle="butt")
            ax.plot([diff], [y], "o", color=colour, ms=5)
            if marker:
                ax.annotate(marker, (high, y), xytext=(3, -1), textcoords="offset points", va="center",
                            fontsize=10, color=colour)
        ax.axvline(0.0, color="0.3", lw=0.8, ls="--")
        ax.set_yticks(range(len(rows)), [panels.literal(r[0]) for r in reversed(rows)] if k % cols == 0
                      else [""] * len(rows))
        ax.set_ylim(-0.7, len(rows) - 0.3)
        panels.title(ax, shown_name(analysis, metric), 10)
        ax.set_xlabel(panels.literal(f"difference to {the_baseline(analysis.results.baseline)}"), fontsize=8)
        ax.tick_params(labelsize=8)
    panels.place(fig, axes)
    interval = "simultaneous " if analysis.options.correction == "maxt" else ""
    caption = (f"Each candidate's mean difference to {the_baseline(analysis.results.baseline)} (point) and its "
               f"{level:.0%} {interval}interval ({analysis.test} test), as in the table; coloured where "
               f"the corrected test marks it (green better, red worse).")
    return _img(fig, "forest plot of the differences to the baseline", caption)


def curve_bands(curves: Mapping[str, Sequence[tuple[int, float]]]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, low, high) over the seeds' dev curves: at each step any seed evaluated, the mean
    and the range of the seeds that have a value there."""
    steps = np.array(sorted({s for curve in curves.values() for s, _ in curve}), dtype=float)
    grid = np.full((len(curves), len(steps)), np.nan)
    index = {s: j for j, s in enumerate(steps)}
    for i, curve in enumerate(curves.values()):
        for s, v in curve:
            grid[i, index[s]] = v
    with np.errstate(all="ignore"):
        return steps, np.nanmean(grid, axis=0), np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)


def _curves(baseline: str, configs: Sequence[str], record: StudyRecord) -> str:
    if not record.curves or record.metric is None:
        return _none("No dev curves: the runs have no dev_<metric> history (results read from a file, "
                     "or training without dev evaluations).")
    order = [c for c in (*configs, *record.stopped_at) if c in record.curves]
    cols = min(4, len(order))
    nrows = math.ceil(len(order) / cols)
    fig = panels.figure(3.2 * cols + 0.6, 2.5 * nrows + 0.4)
    axes = fig.subplots(nrows, cols, squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[len(order):]:
        ax.set_visible(False)
    base = curve_bands(record.curves[baseline]) if baseline in record.curves else None
    label = display_name(record.metric)
    for k, (ax, config) in enumerate(zip(axes.flat, order, strict=False)):
        runs = record.curves[config]
        steps, mean, low, high = curve_bands(runs)
        colour = "C3" if config in record.stopped_at else "C0"
        if base is not None and config != baseline:
            ax.plot(base[0], base[1], color="0.6", lw=1, ls="--", label=panels.literal(f"{baseline} (mean)"))
        ax.fill_between(steps, low, high, color=colour, alpha=0.2, lw=0, label="range over seeds")
        ax.plot(steps, mean, color=colour, lw=1.6, label="mean over seeds")
        tested = record.tested.get(config, {})
        points = [(t, dict(runs[s]).get(t)) for s, t in tested.items() if s in runs]
        points = [(t, v) for t, v in points if v is not None]
        if points:
            ax.plot(*zip(*points, strict=True), "*", color="k", ms=8, label="tested checkpoint (per seed)")
        title = config
        if config in record.stopped_at:
            ax.axvline(record.stopped_at[config], color="C3", lw=1, ls=":")
            title += f" (stopped at {record.stopped_at[config]})"
        panels.title(ax, title, 9)
        ax.tick_params(labelsize=8)
        if k % cols == 0:
            ax.set_ylabel(panels.literal(f"dev {label}"), fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("step", fontsize=8)
    panels.place(fig, axes, panels.legend_above(fig, axes))
    caption = (f"Dev {label} per configuration against the training step: the mean over seeds (line), "
               "the range from the lowest to the highest seed (band), and each seed's tested checkpoint, "
               "the best-dev step whose test values the table reports (stars).")
    return _img(fig, "dev curves per configuration", caption)


def power_curve(power: PowerAnalysis, config: str, metric: str) -> list[tuple[int, float]]:
    """(seeds, minimum detectable difference) of one comparison over POWER_GRID and the study's own
    seed count, for the crossed test at the analysis's corrected level (as power/power.md's rows)."""
    comp = next(c for c in power.comparisons if c.config == config and c.metric == metric)
    o = power.options
    queries = o.queries or power.queries
    return [(s, mde(comp.components, s, queries, level=power.level, power=o.power).mde)
            for s in sorted({*POWER_GRID, power.seeds})]


def own_mde(power: PowerAnalysis, config: str, metric: str) -> float:
    """The study's own row of power/power.md: its seed count."""
    comp = next(c for c in power.comparisons if c.config == config and c.metric == metric)
    return next(r.mde for r in comp.rows if r.seeds == power.seeds)


def page_power(report: StudyReport) -> PowerAnalysis | None:
    """The power analysis at the level of the page's tables: Holm's first step over the whole
    table's family (the configs table's, and the per-seed tables' on the page), where the study's
    own (power/power.md, beside the per-metric tables) is over each metric's."""
    power, whole = report.power, report.whole
    if power is None or whole is None:
        return power
    family = max((c.family_size for c in whole.comparisons), default=power.family_size)
    if family == power.family_size:
        return power
    return power_analysis(report.analysis.results, replace(power.options, family_size=family))


def _power(report: StudyReport) -> str:
    power = page_power(report)
    if power is None:
        return _none(f"No power analysis: {report.power_skipped}")
    analysis = report.analysis
    metrics = list(dict.fromkeys(c.metric for c in power.comparisons))
    cols = min(3, len(metrics))
    nrows = math.ceil(len(metrics) / cols)
    fig = panels.figure(3.8 * cols + 0.8, 2.8 * nrows + 0.4)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    said: list[str] = []  # what the figure cannot draw, in words under it
    for k, (ax, metric) in enumerate(zip(axes.flat, metrics, strict=False)):
        comps = [c for c in power.comparisons if c.metric == metric]
        for i, comp in enumerate(comps):
            where = f"{comp.config} on {shown_name(analysis, metric)}"
            why = not_estimable(comp)
            if why is not None:
                said.append(f"{where}: not estimable ({why})")
                continue
            points = power_curve(power, comp.config, metric)
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, color=f"C{i % 10}", lw=1.4, label=panels.literal(comp.config))
            ax.plot([power.seeds], [own_mde(power, comp.config, metric)], "o", color=f"C{i % 10}", ms=5)
            if "query" in comp.components.clamped:
                # A floor of 0 would claim more seeds reach any effect; the estimate was negative.
                said.append(f"{where}: the query variance component was estimated negative and "
                            "set to 0, so no query floor is drawn")
            elif comp.floor > 0:
                ax.axhline(comp.floor, color=f"C{i % 10}", lw=0.7, ls=":")
            said += [f"{where}: the {name} variance component was estimated negative and set to 0"
                     for name in comp.components.clamped if name != "query"]
        ax.axvline(power.seeds, color="0.5", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_xticks(TICKS, [str(s) for s in TICKS])
        ax.set_xticks([], minor=True)
        panels.title(ax, shown_name(analysis, metric), 10)
        ax.set_xlabel("seeds", fontsize=8)
        if k % cols == 0:
            ax.set_ylabel("detectable difference", fontsize=8)
        ax.tick_params(labelsize=8)
    panels.place(fig, axes, panels.legend_above(fig, axes))
    o = power.options
    level = (f"{o.alpha:g}/{power.family_size} (Holm's first step over the table's {power.family_size} "
             f"comparisons)" if power.family_size > 1 else f"{o.alpha:g}")
    caption = (f"The smallest true difference to {the_baseline(power.baseline)} that the table's crossed test detects with "
               f"probability {o.power:g} at two-sided level {level} and {o.queries or power.queries} "
               f"queries, against the seed count (log scale); dots: this study's {power.seeds} seeds at this level "
               "(power/power.md and the terminal give each metric's level, a smaller difference where "
               "the table's family is larger); dotted: the query floor that more seeds cannot go below.")
    notes = "".join(f"<li>{_e(s)}.</li>" for s in said)
    return (_img(fig, "power curves: detectable difference against seeds", caption)
            + (f'<ul class="decisions">{notes}</ul>' if notes else ""))
