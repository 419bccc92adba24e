"""`harness power`'s text: a power analysis (harness.stats.power) as Markdown or JSON. It formats;
it computes nothing."""

from __future__ import annotations

import json
import math

from harness.errors import ConfigError
from harness.present.table import display_name
from harness.stats.crossed import COMPONENTS, VarianceComponents
from harness.stats.power import FORMATS, MAX_SEEDS, ComparisonPower, PowerAnalysis


def render_power(analysis: PowerAnalysis, fmt: str = "md") -> str:
    """The analysis as Markdown (what `harness power` prints) or JSON."""
    if fmt == "json":
        return json.dumps(_as_dict(analysis), indent=2) + "\n"
    if fmt != "md":
        raise ConfigError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    opts = analysis.options
    queries = opts.queries or analysis.queries
    left_out = f" (and {analysis.dropped} that some runs lack, left out)" if analysis.dropped else ""
    m = analysis.family_size
    level = (f"\u03b1/m = {opts.alpha:g}/{m} = {analysis.level:.4g}, the first step of Holm's correction over "
             f"the table's {m} comparisons" if m > 1 else f"\u03b1 = {opts.alpha:g}, one comparison")
    intro = (f"Baseline {analysis.baseline}; this study: {analysis.seeds} seeds \u00d7 {analysis.queries} "
             f"queries{left_out}; power {opts.power:g} at the two-sided level {level}. MDE: the smallest "
             f"true mean difference that the table's test, the crossed seeds \u00d7 queries test with its "
             f"generalized p-value, detects with that power at that level (a seeded simulation of the "
             f"study's mean squares from its variance components); SE\u00b2 = \u03c3\u00b2_seed/S + "
             f"\u03c3\u00b2_query/Q + \u03c3\u00b2_residual/(S\u00b7Q); variance components from the two-way "
             f"ANOVA of d[seed, query] = configuration \u2212 baseline.")
    lines = [f"**Power: {analysis.source}**", "", intro, ""]
    clamped = []
    for c in analysis.comparisons:
        comps, res = c.components, c.observed
        lines += [f"**{c.config} vs {analysis.baseline}, {display_name(c.metric)}**: observed difference "
                  f"{res.mean_diff:+.4f} (crossed test p = {res.p_value:.3g}); variance components: "
                  + ", ".join(_component(comps, name) for name in COMPONENTS) + ".", "",
                  "| seeds | queries | SE | MDE |", "|--:|--:|--:|--:|"]
        for row in c.rows:
            mark = " (this study)" if row.seeds == analysis.seeds and queries == analysis.queries else ""
            lines.append(f"| {row.seeds}{mark} | {row.queries} | {row.se:.4f} | {row.mde:.4f} |")
        lines.append("")
        if opts.effect is not None:
            lines += [_needed_line(c, opts.effect, queries), ""]
        clamped += [f"{name} for {c.config} on {display_name(c.metric)}" for name in comps.clamped]
    if clamped:
        note = (f"Negative variance estimates were set to 0 ({'; '.join(clamped)}): the ANOVA found less "
                "variance between those units than the residual alone implies.")
        lines += [note, ""]
    return "\n".join(lines)


def _component(comps: VarianceComponents, name: str) -> str:
    value = {"seed": comps.seed, "query": comps.query, "residual": comps.resid}[name]
    if name in comps.clamped and comps.raw is not None:
        raw = comps.raw[COMPONENTS.index(name)]
        return f"{name} 0 (estimate {raw:.3g}, clamped)"
    return f"{name} {value:.3g} (sd {math.sqrt(value):.4f})"


def _needed_line(c: ComparisonPower, effect: float, queries: int) -> str:
    if c.needed is not None:
        return f"Effect {effect:g}: needs {c.needed} seeds at {queries} queries."
    if effect <= c.floor:
        return (f"Effect {effect:g}: not reachable at any seed count with {queries} queries: the query "
                f"term alone gives an MDE of {c.floor:.4f}; more queries are needed.")
    return f"Effect {effect:g}: needs more than {MAX_SEEDS} seeds at {queries} queries."


def _as_dict(analysis: PowerAnalysis) -> dict[str, object]:
    opts = analysis.options
    return {
        "source": analysis.source, "baseline": analysis.baseline, "seeds": analysis.seeds,
        "queries": analysis.queries, "alpha": opts.alpha, "power": opts.power, "effect": opts.effect,
        "family_size": analysis.family_size, "level": analysis.level, "test": "crossed",
        "comparisons": [{
            "config": c.config, "metric": c.metric, "mean_diff": c.observed.mean_diff,
            "p_value": c.observed.p_value,
            "components": {"seed": c.components.seed, "query": c.components.query,
                           "residual": c.components.resid},
            "clamped": list(c.components.clamped), "query_floor": c.floor, "seeds_needed": c.needed,
            "mde": [{"seeds": r.seeds, "queries": r.queries, "se": r.se,
                     "df": None if math.isnan(r.df) else r.df, "mde": r.mde} for r in c.rows],
        } for c in analysis.comparisons]}
