"""End of a study: per configuration what goes onto its config run, plus the rendered tables.

A plain function over ``StudyResults``; it writes nothing. The study runner logs ``outcome.metrics``
and ``outcome.tags`` to each config run and ``report.artifacts`` (artifact path -> text: the tables
and the power analysis) to the study run; ``harness.present.plots.write_plots(report.analysis,
dir)`` draws the figures.

Per configuration and metric (conventions: <metric>_mean, <metric>_sd, <metric>_delta, <metric>_p,
tag harness.marker.<metric>):
- every configuration: ``<m>_mean`` and ``<m>_sd`` (sample SD) of the per-run values over seeds;
- candidates only: ``<m>_delta`` (mean difference to the baseline), ``<m>_p`` (the p-value after the
  chosen correction, the one the marker is based on), ``<m>_ci_low``/``<m>_ci_high`` (confidence
  interval of the difference; under maxt the simultaneous one, which agrees with the marker), ``<m>_dz`` (effect size), and the tag ``harness.marker.<m>``: the
  marker symbol, or ``ns`` when not significant;
- under the per-seed test, instead of one p-value: ``<m>_seeds_better``/``<m>_seeds_worse`` (how many
  seeds are significantly better or worse) and the tag holds the tally ("\u20202/3": significantly
  better in 2 of 3 seeds), or ``ns`` when no seed is significant;
- every configuration, for the verdict metric (the study's objective; by default the first
  metric): a one-line ``verdict`` (``verdict``), which the runner logs as the run's description (tag
  ``mlflow.note.content``), e.g. "ns: MAP +0.012 [-0.004, 0.028], p = 0.14; crossed, Holm over 8";
  the baseline's "baseline: MAP 0.412 \u00b1 0.010 over 3 seeds"; candidates also get the tags
  ``harness.test`` (the test behind ``<m>_p``) and ``harness.correction``;
- candidates, when per-query values and at least 2 seeds exist: the power analysis
  (harness.stats.power) as ``<m>_var_seed``, ``<m>_var_query``, ``<m>_var_resid`` (variance
  components of the differences) and ``<m>_mde_s<S>`` (minimum detectable effect with S seeds at the
  study's query count, alpha 0.05, power 0.8); the study run gets ``power/power.md`` and
  ``power/power.json``.

>>> from harness.results.stored import RunRecord, StudyResults
>>> runs = [RunRecord(config=c, seed=str(s), values={"map": v + s / 100 + (c == "new") * s * s / 1000})
...         for c, v in (("base", 0.5), ("new", 0.6)) for s in (1, 2, 3)]
>>> report = study_report(StudyResults.build(runs), formats=("md",))
>>> round(report.outcomes["new"].metrics["map_delta"], 4), sorted(report.tables)
(0.1047, ['tables/configs.md', 'tables/seeds.md', 'tables/summary.md'])
>>> report.power is None, report.power_skipped   # per-run values only: no variance components
(True, 'results has per-run values only for map; a power analysis needs per-query values (the query variance cannot be estimated without them)')
>>> report.outcomes["base"].verdict
'baseline: MAP 0.520 \u00b1 0.010 over 3 seeds'
>>> report.outcomes["new"].verdict   # per-run values: a paired t-test of the seed means
'\u2021 better: MAP +0.105 [0.095, 0.115], p < 0.001; across-seeds, Holm over 1'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from harness.errors import DataError
from harness.metrics.measures import label_of
from harness.present.power_text import PowerReport
from harness.present.render import RENDERERS
from harness.present.significance_table import SignificanceTable
from harness.present.table import FORMS
from harness.results.stored import StudyResults, summary_metrics
from harness.stats.power import (
    PowerAnalysis,
    PowerOptions,
    outcome_metrics,
    power_analysis,
)
from harness.stats.significance import Analysis, AnalysisOptions, analyse
from harness.tracking.conventions import (
    ROLE_BASELINE,
    ROLE_CANDIDATE,
    TAG_CORRECTION,
    TAG_MARKER_PREFIX,
    TAG_NOTE,
    TAG_TEST,
)

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
    verdict: str = ""  # one line on the verdict metric (``verdict``): the run's description
    test: str = ""  # candidates: the test behind <m>_p and its correction
    correction: str = ""

    @property
    def tags(self) -> dict[str, str]:
        out = {f"{TAG_MARKER_PREFIX}{m}": marker for m, marker in self.markers.items()}
        if self.verdict:
            out[TAG_NOTE] = self.verdict
        if self.test:
            out.update({TAG_TEST: self.test, TAG_CORRECTION: self.correction})
        return out


@dataclass(frozen=True, kw_only=True)
class StudyReport:
    analysis: Analysis
    outcomes: Mapping[str, ConfigOutcome]
    tables: Mapping[str, str]
    power: PowerAnalysis | None = None
    power_skipped: str | None = None  # why there is no power analysis
    # the configs form's analysis: one table of every metric, its family the whole table (as
    # `harness table --form configs`); ``analysis`` itself where that is corrected over all
    whole: Analysis | None = None

    @property
    def artifacts(self) -> dict[str, str]:
        """What goes onto the study run: the tables, and power/power.md and .json where computed."""
        out = dict(self.tables)
        if self.power is not None:
            power = PowerReport(analysis=self.power)
            out["power/power.md"] = power.to_markdown()
            out["power/power.json"] = power.to_json()
        return out


def study_report(results: StudyResults, options: AnalysisOptions | None = None, *,
                 formats: Sequence[str] = ("md", "latex", "csv", "html"),
                 decimals: int = 4, verdict_metric: str | None = None) -> StudyReport:
    """Test every configuration against the baseline, render every table form in ``formats``, and
    (where the data allow it) run the power analysis over the same metrics. ``verdict_metric``:
    the metric of each configuration's one-line verdict (the study's objective; None, or a metric
    the analysis lacks: its first metric)."""
    analysis = analyse(results, options)
    for fmt in formats:
        RENDERERS.get(fmt)
    # As `harness table` corrects them (harness.analysis.TableOptions): the configs form is one
    # table of every metric, its family the whole table; the other forms one table per metric.
    whole = analysis if analysis.options.family != "metric" else analyse(
        results, replace(analysis.options, family="all"))
    power, skipped = None, None
    try:
        # At the level of the tables beside it (the terminal's and `harness table`'s per-metric
        # tables): Holm's first step over the analysis's family. The report page, whose tables
        # correct over the whole table, draws its own (harness.present.html_report.page_power).
        family = max((c.family_size for c in analysis.comparisons), default=None)
        # every metric of the analysis's groups (MAP = MRR = MRR@10), so the power names each group
        # as the tables do, not its first member alone
        grouped = tuple(m for metric in analysis.metrics for m in analysis.aliases(metric))
        power = power_analysis(results, PowerOptions(metrics=grouped, family_size=family))
    except DataError as exc:
        skipped = str(exc)
    # An objective identical to a shown metric (MRR@10 = MAP here) is judged as that metric.
    verdict_metric = next((g[0] for g in analysis.identical if verdict_metric in g), verdict_metric)
    if verdict_metric not in analysis.metrics:
        verdict_metric = analysis.metrics[0]
    outcomes = {config: _outcome(analysis, config, power, verdict_metric) for config in results.configs}
    tables = {}
    for form in FORMS:
        table = SignificanceTable.build(whole if form == "configs" else analysis, form, decimals)
        for fmt in formats:
            tables[f"tables/{form}.{EXTENSIONS.get(fmt, fmt)}"] = table.render(fmt)
    return StudyReport(analysis=analysis, outcomes=outcomes, tables=tables, power=power,
                       power_skipped=skipped, whole=whole)


# How a verdict names a correction.
CORRECTION_NAMES = {"holm": "Holm", "bonferroni": "Bonferroni", "bh": "Benjamini-Hochberg",
                    "maxt": "max-T", "none": "uncorrected"}


def _num(value: float, decimals: int, sign: bool = False) -> str:
    return f"{value:+.{decimals}f}" if sign else f"{value:.{decimals}f}"


def _p(p: float, levels: Sequence[float]) -> str:
    """``p = ...`` in 2 significant digits, or as many more as it takes to stay on its side of each
    marker's level (0.0497 beside a dagger at 0.05 is 0.0497, not 0.05).

    >>> _p(0.0497, (0.05, 0.01)), _p(0.0123, (0.05, 0.01)), _p(0.0004, (0.05,))
    ('p = 0.0497', 'p = 0.012', 'p < 0.001')
    """
    if p < 0.001 and all(level > 0.001 for level in levels):
        return "p < 0.001"
    for digits in range(2, 17):
        text = f"{p:.{digits}g}"
        if all((float(text) < level) == (p < level) for level in levels):
            return f"p = {text}"
    return f"p = {p!r}"


def _bound(value: float, decimals: int) -> str:
    """An interval's end in ``decimals``, or in 2 significant digits where those round a non-zero
    end to zero (the end that keeps a marked interval off 0 would read 0.000)."""
    text = _num(value, decimals)
    if value != 0 and float(text) == 0:
        return np.format_float_positional(value, precision=2, unique=False, fractional=False)
    return text


def verdict(analysis: Analysis, config: str, metric: str, decimals: int = 3) -> str:
    """One line on ``config`` and ``metric``, the decision first (MLflow's runs table shows the first
    50 characters of a description): for a candidate the marker with its direction, or ns; its mean
    difference to the baseline, the interval beside the marker and the adjusted p-value; then the
    test and the correction over a family of m comparisons. Under the per-seed test: in how many
    seeds it is significant. For the baseline its mean and SD over seeds. Empty for a candidate
    with no comparison on ``metric``."""
    res = analysis.results
    name = label_of(metric)
    seeds = res.seed_values(config, metric)
    n = len(seeds)
    if config == res.baseline:
        sd = float(seeds.std(ddof=1)) if n > 1 else float("nan")
        spread = f" \u00b1 {_num(sd, decimals)}" if n > 1 else ""
        return f"baseline: {name} {_num(float(seeds.mean()), decimals)}{spread} over {n} seed{'s' * (n != 1)}"
    correction = CORRECTION_NAMES.get(analysis.options.correction, analysis.options.correction)
    if analysis.test == "per-seed":
        comps = [c for c in analysis.comparisons if c.config == config and c.metric == metric
                 and c.seed is not None]
        if not comps:
            return ""
        paired = res.seed_values(res.baseline, metric, res.seeds_of(config))
        better, worse, total = analysis.seed_tally(config, metric)
        said = " and ".join(f"{word} in {k} of {total} seeds" for word, k in
                            (("better", better), ("worse", worse)) if k) or "ns"
        return (f"{said}: {name} {_num(float(seeds.mean() - paired.mean()), decimals, sign=True)}; "
                f"per-seed t-tests, {correction} over {comps[0].family_size}")
    comp = analysis.get(config, metric)
    if comp is None:
        return ""
    low, high = comp.interval
    marker = analysis.marker(comp)
    decided = "ns" if marker is None else f"{marker} {comp.direction}"
    estimate = " (HL)" if analysis.test == "wilcoxon" else ""  # the estimate the interval is around
    return (f"{decided}: {name}{estimate} {_num(comp.estimate, decimals, sign=True)} [{_bound(low, decimals)}, "
            f"{_bound(high, decimals)}], {_p(comp.p_adjusted, analysis.options.markers.levels)}; {analysis.test}, {correction} over "
            f"{comp.family_size}")


def _outcome(analysis: Analysis, config: str, power: PowerAnalysis | None, verdict_metric: str) -> ConfigOutcome:
    res = analysis.results
    metrics: dict[str, float] = {}
    markers: dict[str, str] = {}
    # A metric identical to a tested one (Analysis.identical) gets that test's figures under its
    # own name too, so every metric keeps its MLflow columns.
    for tested, m in [(t, m) for t in analysis.metrics for m in analysis.aliases(t)]:
        seeds = res.seed_values(config, m)
        metrics.update(summary_metrics({m: seeds}))
        if analysis.test == "per-seed" and config != res.baseline:
            better, worse, _ = analysis.seed_tally(config, tested)
            paired = res.seed_values(res.baseline, m, res.seeds_of(config))
            metrics.update({f"{m}_delta": float(seeds.mean() - paired.mean()),
                            f"{m}_seeds_better": float(better), f"{m}_seeds_worse": float(worse)})
            markers[m] = " ".join(t.text for t in analysis.tallies(config, tested)) or NOT_SIGNIFICANT
            continue
        comp = analysis.get(config, tested)
        if comp is None:
            continue
        metrics.update({f"{m}_delta": comp.result.mean_diff, f"{m}_p": comp.p_adjusted,
                        f"{m}_ci_low": comp.interval[0], f"{m}_ci_high": comp.interval[1],
                        f"{m}_dz": comp.result.d_z})
        markers[m] = analysis.marker(comp) or NOT_SIGNIFICANT
    if power is not None and config != res.baseline:
        metrics.update(outcome_metrics(power, config))
    baseline = config == res.baseline
    return ConfigOutcome(config=config, config_id=res.config_ids.get(config),
                         role=ROLE_BASELINE if baseline else ROLE_CANDIDATE,
                         metrics=metrics, markers=markers,
                         verdict=verdict(analysis, config, verdict_metric),
                         test="" if baseline else analysis.test,
                         correction="" if baseline else analysis.options.correction)
