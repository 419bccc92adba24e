"""End of a study: per configuration what goes onto its config run, plus the rendered tables.

A plain function over ``StudyResults``; it writes nothing. The study runner logs ``outcome.metrics``
and ``outcome.tags`` to each config run and ``report.tables`` (artifact path -> text) to the study
run; ``harness.evaluation.plots.write_plots(report.analysis, dir)`` draws the figures.

Per configuration and metric (conventions: <metric>_mean, <metric>_sd, <metric>_delta, <metric>_p,
tag harness.marker.<metric>):
- every configuration: ``<m>_mean`` and ``<m>_sd`` (sample SD) of the per-run values over seeds;
- candidates only: ``<m>_delta`` (mean difference to the baseline), ``<m>_p`` (the p-value after the
  chosen correction, the one the marker is based on), ``<m>_ci_low``/``<m>_ci_high`` (confidence
  interval of the difference), ``<m>_dz`` (effect size), and the tag ``harness.marker.<m>``: the
  marker symbol, or ``ns`` when not significant.

>>> from harness.evaluation.results import RunRecord, StudyResults
>>> runs = [RunRecord(config=c, seed=str(s), values={"map": v + s / 100})
...         for c, v in (("base", 0.5), ("new", 0.6)) for s in (1, 2, 3)]
>>> report = study_report(StudyResults.build(runs), formats=("md",))
>>> round(report.outcomes["new"].metrics["map_delta"], 4), sorted(report.tables)
(0.1, ['tables/configs.md', 'tables/seeds.md'])
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.errors import ConfigError
from harness.evaluation.render import RENDERERS, render
from harness.evaluation.results import StudyResults
from harness.evaluation.significance import Analysis, AnalysisOptions, analyse
from harness.evaluation.table import build_tables
from harness.tracking.conventions import ROLE_BASELINE, ROLE_CANDIDATE, TAG_MARKER_PREFIX

NOT_SIGNIFICANT = "ns"
EXTENSIONS = {"md": "md", "latex": "tex", "csv": "csv", "html": "html"}


@dataclass(frozen=True, kw_only=True)
class ConfigOutcome:
    """What the study runner logs to one config run (module docstring)."""

    config: str
    config_id: str | None
    role: str
    metrics: Mapping[str, float]
    markers: Mapping[str, str]

    @property
    def tags(self) -> dict[str, str]:
        return {f"{TAG_MARKER_PREFIX}{m}": marker for m, marker in self.markers.items()}


@dataclass(frozen=True, kw_only=True)
class StudyReport:
    analysis: Analysis
    outcomes: Mapping[str, ConfigOutcome]
    tables: Mapping[str, str]


def study_report(results: StudyResults, options: AnalysisOptions | None = None, *,
                 formats: Sequence[str] = ("md", "latex", "csv", "html"),
                 decimals: int = 4) -> StudyReport:
    """Test every configuration against the baseline and render both table forms in ``formats``."""
    analysis = analyse(results, options)
    if analysis.test == "per-seed":
        raise ConfigError("a study report needs one test per configuration and metric; the per-seed "
                          "test gives one per seed (use across-seeds, seed-averaged, randomisation, "
                          "wilcoxon or auto)")
    for fmt in formats:
        RENDERERS.get(fmt)
    outcomes = {config: _outcome(analysis, config) for config in results.configs}
    tables = {}
    for form in ("seeds", "configs"):
        built = build_tables(analysis, form, decimals)
        for fmt in formats:
            tables[f"tables/{form}.{EXTENSIONS.get(fmt, fmt)}"] = render(built, fmt)
    return StudyReport(analysis=analysis, outcomes=outcomes, tables=tables)


def _outcome(analysis: Analysis, config: str) -> ConfigOutcome:
    res = analysis.results
    metrics: dict[str, float] = {}
    markers: dict[str, str] = {}
    for m in analysis.metrics:
        seeds = res.seed_values(config, m)
        metrics[f"{m}_mean"] = float(seeds.mean())
        metrics[f"{m}_sd"] = float(seeds.std(ddof=1)) if len(seeds) > 1 else math.nan
        comp = analysis.get(config, m)
        if comp is None:
            continue
        metrics.update({f"{m}_delta": comp.result.mean_diff, f"{m}_p": comp.p_adjusted,
                        f"{m}_ci_low": comp.result.ci_low, f"{m}_ci_high": comp.result.ci_high,
                        f"{m}_dz": comp.result.d_z})
        markers[m] = analysis.marker(comp) or NOT_SIGNIFICANT
    return ConfigOutcome(config=config, config_id=res.config_ids.get(config),
                         role=ROLE_BASELINE if config == res.baseline else ROLE_CANDIDATE,
                         metrics=metrics, markers=markers)
