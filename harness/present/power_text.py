"""`harness power`'s text: a power analysis (harness.stats.power) as an object (``PowerReport``)
that holds its data and renders itself as Markdown (what `harness power` prints) or JSON. It
formats; it computes nothing.

>>> from harness.results.stored import RunRecord, StudyResults
>>> runs = [RunRecord(config=c, seed=str(s),
...                   per_query={"map": {f"q{q}": 0.3 + 0.05 * (c == "new") + 0.01 * ((s * q) % 5)
...                                      + 0.02 * (q % 3) for q in range(8)}})
...         for c in ("base", "new") for s in (1, 2, 3)]
>>> report = PowerReport.build(StudyResults.build(runs))
>>> report
PowerReport(source='results', baseline='base', comparisons=1, seeds=3, queries=8)
>>> [row["seeds"] for row in report.rows()], report.to_dict()["comparisons"][0]["config"]
([3, 5, 10, 20], 'new')
>>> str(report) == report.to_markdown() == report.render("md")
True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.errors import UnknownName
from harness.metrics.measures import canonical_name
from harness.present.frames import BOOL, FLOAT, INT, NULLABLE_INT, TEXT, typed_frame
from harness.present.render import md_escape, md_escape_text, the_baseline
from harness.present.table import display_name
from harness.results.stored import StudyResults
from harness.stats.crossed import COMPONENTS, VarianceComponents
from harness.stats.power import (
    FORMATS,
    MAX_SEEDS,
    UPPER_CONFIDENCE,
    ComparisonPower,
    PowerAnalysis,
    PowerOptions,
    power_analysis,
)

if TYPE_CHECKING:
    import pandas as pd
else:  # a name the annotations resolve to at run time (typing.get_type_hints), pandas imported then
    from harness.present.frames import lazy_pandas as pd

# One row per comparison and seed count of ``PowerReport.rows``, and the frame's type of each column
# (harness.present.frames): the seeds needed are missing without an effect
SCHEMA = {"config": TEXT, "metric": TEXT, "measure": TEXT, "seeds": INT, "queries": INT, "this_study": BOOL,
          "se": FLOAT, "df": FLOAT, "mde": FLOAT, "mean_diff": FLOAT, "p_value": FLOAT, "var_seed": FLOAT,
          "var_query": FLOAT, "var_resid": FLOAT, "query_floor": FLOAT, "seeds_needed": NULLABLE_INT,
          "seeds_needed_upper": NULLABLE_INT}
COLUMNS = tuple(SCHEMA)


@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class PowerReport:
    """A power analysis and its renderings: ``analysis`` (harness.stats.power.PowerAnalysis: per
    comparison the observed crossed test, its variance components, the MDE rows, the query floor
    and, with an effect, the seeds needed), ``rows()``/``to_frame()`` (one row per comparison and
    seed count), ``to_dict()``/``to_json()``, ``to_markdown()`` (``str()``: what `harness power`
    prints). Made by ``StudyAnalysis.power()`` or ``build``. ``note``: the sentence of a study that
    is not finished (harness.results.mlflow_reader.incomplete_note), which every rendering carries,
    as the table's footnote does: a file written from it says so where stderr's warning is long gone."""

    analysis: PowerAnalysis
    note: str = ""

    @classmethod
    def build(cls, results: StudyResults, options: PowerOptions | None = None, *, note: str = "") -> PowerReport:
        return cls(analysis=power_analysis(results, options), note=note or results.incomplete)

    @property
    def comparisons(self) -> tuple[ComparisonPower, ...]:
        return self.analysis.comparisons

    @property
    def options(self) -> PowerOptions:
        return self.analysis.options

    def rows(self) -> list[dict[str, Any]]:
        """Per comparison, one dict per seed count (``COLUMNS``): the MDE row (``se``, ``df``,
        ``mde``; ``this_study`` marks the study's own seeds and queries) with the comparison's
        observed difference, p-value, variance components, query floor and seeds needed."""
        a = self.analysis
        queries = a.options.queries or a.queries
        return [{"config": c.config, "metric": c.metric, "measure": canonical_name(c.metric),
                 "seeds": r.seeds, "queries": r.queries,
                 "this_study": r.seeds == a.seeds and queries == a.queries, "se": r.se,
                 "df": None if math.isnan(r.df) else r.df, "mde": r.mde,
                 "mean_diff": c.observed.mean_diff, "p_value": c.observed.p_value,
                 "var_seed": c.components.seed, "var_query": c.components.query,
                 "var_resid": c.components.resid, "query_floor": c.floor, "seeds_needed": c.needed,
                 "seeds_needed_upper": c.needed_upper}
                for c in a.comparisons for r in c.rows]

    def to_frame(self) -> pd.DataFrame:
        """``rows()`` as a pandas DataFrame with the columns ``COLUMNS`` of the types ``SCHEMA``
        (``seeds_needed`` missing without an effect), the same for every study."""
        return typed_frame(self.rows(), SCHEMA)

    def to_dict(self) -> dict[str, object]:
        """The analysis as plain values: what ``to_json`` writes."""
        return _as_dict(self.analysis, self.note)

    def to_json(self) -> str:
        return self.render("json")

    def to_markdown(self) -> str:
        return self.render("md")

    def render(self, format: str = "md") -> str:
        """The analysis as ``format`` (md or json), as `harness power --format` prints it."""
        return render_power(self.analysis, format, note=self.note)

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def __repr__(self) -> str:
        a = self.analysis
        return (f"PowerReport(source={a.source!r}, baseline={a.baseline!r}, comparisons={len(a.comparisons)}, "
                f"seeds={a.seeds}, queries={a.queries})")


def render_power(analysis: PowerAnalysis, fmt: str = "md", *, note: str = "") -> str:
    """The analysis as Markdown (what `harness power` prints) or JSON; ``note`` (an unfinished
    study's ``INCOMPLETE study: ...``) under the Markdown's title, JSON's ``incomplete``."""
    if fmt == "json":
        return json.dumps(_as_dict(analysis, note), indent=2) + "\n"
    if fmt != "md":
        raise UnknownName("format", fmt, FORMATS)
    opts = analysis.options
    queries = opts.queries or analysis.queries
    left_out = f" (and {analysis.dropped} that some runs lack, left out)" if analysis.dropped else ""
    m = analysis.family_size
    level = (f"\u03b1/m = {opts.alpha:g}/{m} = {analysis.level:.4g}, the first step of Holm's correction over "
             f"the table's {m} comparisons" if m > 1 else f"\u03b1 = {opts.alpha:g}, one comparison")
    # Names as the table writes them (harness.present.render): escaped, so that a configuration
    # called <b>x</b> or *star* is its name, not raw HTML or emphasis.
    intro = (f"Against {md_escape_text(the_baseline(analysis.baseline))}; this study: {analysis.seeds} seeds \u00d7 {analysis.queries} "
             f"queries{left_out}; power {opts.power:g} at the two-sided level {level}. MDE: the smallest "
             f"true mean difference that the table's test, the crossed seeds \u00d7 queries test with its "
             f"generalized p-value, detects with that power at that level (a seeded simulation of the "
             f"study's mean squares from its variance components); SE\u00b2 = \u03c3\u00b2_seed/S + "
             f"\u03c3\u00b2_query/Q + \u03c3\u00b2_residual/(S\u00b7Q); variance components from the two-way "
             f"ANOVA of d[seed, query] = configuration \u2212 baseline.")
    lines = [f"**Power: {md_escape(str(analysis.source))}**", ""]
    if note:
        lines += [md_escape_text(note), ""]
    lines += [intro, ""]
    clamped = []
    for c in analysis.comparisons:
        comps, res = c.components, c.observed
        head = (f"**{md_escape(c.config)} vs {md_escape(analysis.baseline)}, "
                f"{md_escape(shown_metric(analysis, c.metric))}**: observed difference "
                f"{res.mean_diff:+.4f} (crossed test p = {res.p_value:.3g})")
        why = not_estimable(c)
        if why is not None:
            lines += [f"{head}; MDE not estimable: {why}.", ""]
            continue
        lines += [f"{head}; variance components: "
                  + ", ".join(_component(comps, name) for name in COMPONENTS) + ".", "",
                  "| seeds | queries | SE | MDE |", "|--:|--:|--:|--:|"]
        for row in c.rows:
            mark = " (this study)" if row.seeds == analysis.seeds and queries == analysis.queries else ""
            if math.isfinite(row.mde):
                lines.append(f"| {row.seeds}{mark} | {row.queries} | {row.se:.4f} | {row.mde:.4f} |")
            else:  # never "MDE nan": the row says what it is
                lines.append(f"| {row.seeds}{mark} | {row.queries} | {row.se:.4f} | not estimable |")
        lines.append("")
        if opts.effect is not None:
            lines += [_needed_line(c, opts.effect, queries, analysis.seeds), ""]
        clamped += [f"{name} for {c.config} on {shown_metric(analysis, c.metric)}" for name in comps.clamped]
    if clamped:
        note = (f"Negative variance estimates were set to 0 ({'; '.join(clamped)}): the ANOVA found less "
                "variance between those units than the residual alone implies.")
        lines += [md_escape_text(note), ""]
    if analysis.identical:
        said = "; ".join(" = ".join(display_name(m) for m in g) for g in analysis.identical)
        lines += [f"{md_escape_text(said)} here: equal per-query values in every run (one relevant document per "
                  + "query), so each is analysed once, as the table shows it once and counts it once in its family.", ""]
    return "\n".join(lines)


def shown_metric(analysis: PowerAnalysis, metric: str) -> str:
    """How the analysis names ``metric`` with the metrics identical to it (``PowerAnalysis.identical``):
    "MAP = MRR", as the table heads it, or "MAP" alone."""
    return " = ".join(display_name(m) for m in analysis.aliases(metric))


def not_estimable(c: ComparisonPower) -> str | None:
    """Why no minimum detectable effect can be given for ``c``, None where it can: every variance
    component 0 (the differences d[seed, query] are one constant, so there is no standard error),
    or no finite MDE at any seed count (a single such row says so in its row)."""
    comps = c.components
    if comps.seed <= 0 and comps.query <= 0 and comps.resid <= 0:
        if c.observed.mean_diff == 0:
            return ("the configuration's per-query values equal the baseline's in every run, so the "
                    "differences have no variance")
        return "every difference d[seed, query] is the same, so the differences have no variance"
    if all(not math.isfinite(r.mde) for r in c.rows):
        return "no seed count gives a finite MDE"
    return None


def _component(comps: VarianceComponents, name: str) -> str:
    value = {"seed": comps.seed, "query": comps.query, "residual": comps.resid}[name]
    if name in comps.clamped and comps.raw is not None:
        raw = comps.raw[COMPONENTS.index(name)]
        return f"{name} 0 (estimate {raw:.3g}, clamped)"
    return f"{name} {value:.3g} (sd {math.sqrt(value):.4f})"


def _needed_line(c: ComparisonPower, effect: float, queries: int, pilot: int) -> str:
    if c.needed is not None:
        upper = (f"{c.needed_upper}" if c.needed_upper is not None else f"more than {MAX_SEEDS}")
        return (f"Effect {effect:g}: needs {c.needed} seeds at {queries} queries ({upper} at the upper "
                f"{UPPER_CONFIDENCE:.0%} confidence bound of the seed variance these {pilot} seeds give).")
    if effect <= c.floor:
        return (f"Effect {effect:g}: not reachable at any seed count with {queries} queries: the query "
                f"term alone gives an MDE of {c.floor:.4f}; more queries are needed.")
    return f"Effect {effect:g}: needs more than {MAX_SEEDS} seeds at {queries} queries."


def _as_dict(analysis: PowerAnalysis, note: str = "") -> dict[str, object]:
    opts = analysis.options
    return {
        "source": analysis.source, "incomplete": note or None, "baseline": analysis.baseline,
        "seeds": analysis.seeds,
        "queries": analysis.queries, "alpha": opts.alpha, "power": opts.power, "effect": opts.effect,
        "family_size": analysis.family_size, "level": analysis.level, "test": "crossed",
        # a comparison of a group's first metric stands for the others (MAP = MRR: ["map", "mrr"])
        "identical": [list(g) for g in analysis.identical],
        "comparisons": [{
            "config": c.config, "metric": c.metric, "mean_diff": c.observed.mean_diff,
            "p_value": c.observed.p_value,
            "components": {"seed": c.components.seed, "query": c.components.query,
                           "residual": c.components.resid},
            "clamped": list(c.components.clamped), "query_floor": c.floor, "seeds_needed": c.needed,
            "seeds_needed_upper": c.needed_upper, "upper_confidence": UPPER_CONFIDENCE,
            "not_estimable": not_estimable(c),
            "mde": [] if not_estimable(c) else [
                {"seeds": r.seeds, "queries": r.queries, "se": r.se,
                 "df": None if math.isnan(r.df) else r.df, "mde": r.mde} for r in c.rows],
        } for c in analysis.comparisons]}
