"""End of a study: aggregates, paired tests against the seeded baseline, tables, plots and the power
analysis into MLflow.

The statistics live in harness.stats and the tables in harness.present (read the experiment back exactly as `harness table
--experiment` and `harness power --experiment` do, so the figures in MLflow and the exported ones are
the same); this module only moves the outcome onto the runs:
- each config run: <metric>_mean/_sd/_delta/_p, test_<metric> (the mean again, under the seed
  runs' name), a marker tag, the test and correction (harness.test, harness.correction) and its
  one-line verdict on the study's objective metric as its description (mlflow.note.content; a
  configuration stopped early gets why, harness.driver._early_stop_ray); for candidates, where per-query
  values and 2+ seeds exist, the variance components <metric>_var_seed/_var_query/_var_resid and the
  minimum detectable effect <metric>_mde_s<S> for S in 3, 5, 10, 20 and the study's seed count
  (alpha 0.05, power 0.8, the study's query count);
- the study run: tables/*, plots/*, power/power.md (what `harness power` prints),
  power/power.json and report.html (the one-page report `harness report` writes). A study with a
  confirmation phase (harness.driver._confirm): those are the confirmatory report's (the
  confirmation's runs only, titled confirmatory), and exploratory/tables/* and exploratory/power/*
  the exploratory one's (the runs that picked).

A study with trials that failed after their retries gets no report (a table over the seeds that
happened to finish would compare what was not planned): ``TrialsFailed`` names them, the config
runs with a failed seed and the study run end FAILED, and `harness run` exits non-zero; `--resume`
runs them again. When the report cannot be produced for another reason (runs were evaluated on
different test candidates, per-query values are missing...), every trial is still recorded: the
runs are ended (the study run FAILED), the study run gets the reason as tag harness.report_error and
``ReportUnavailable`` is raised, so `harness run` exits non-zero saying why. No study is skipped
silently: the studies with nothing to compare by design still get a report (a baseline-only study
its tables without tests or power analysis; a one-seed study tests per query), so a report error
always means something went wrong.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError
from harness.study.spec import StudySpec
from harness.tracking.conventions import TAG_NOTE
from harness.tracking.records import StudyRecords

if TYPE_CHECKING:
    from harness.present.report import StudyReport
    from harness.stats.power import PowerAnalysis


class ReportUnavailable(HarnessError):
    """The study's trials are recorded but its significance report could not be produced."""


class TrialsFailed(ReportUnavailable):
    """Trials of the study failed after their retries (named in the message); no report."""


def check_trials(spec: StudySpec, records: StudyRecords, config_ids: set[str] | None) -> None:
    """Raise ``TrialsFailed`` (after ending the runs) when seed runs of the study's configurations
    (``config_ids``; None: all) failed after their retries."""
    failed = records.failed_trials(config_ids)
    if not failed:
        return
    shown = "; ".join(f"{r.name or r.run_id} ({_first_line(r.error) or 'no error recorded'})" for r in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    reason = f"{len(failed)} trial(s) failed after their retries: {shown}{more}"
    records.report_failed(reason)
    records.end(study_status="FAILED", failed={r.config_id for r in failed if r.config_id})
    raise TrialsFailed(f"study {spec.name!r}: {reason}; the finished trials are recorded, no report was "
                       "made; `harness run STUDY --resume` runs the failed trials again")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else ""


def summarise_config(records: StudyRecords, config_id: str, seeds: list[int]) -> dict[str, float] | None:
    """Log a configuration's summary over ``seeds`` (harness.results.stored.summary_metrics of
    their test metrics) onto its config run once every seed is done; None before."""
    from harness.results.stored import summary_metrics

    per_seed = records.seed_tests(config_id, seeds)
    if per_seed is None:
        return None
    summary = summary_metrics({m: [per_seed[s][m] for s in seeds] for m in per_seed[seeds[0]]})
    records.config_summary(config_id, summary, seeds)
    return summary


def _unavailable(spec: StudySpec, records: StudyRecords, what: str, exc: HarnessError) -> ReportUnavailable:
    """Every trial is recorded, but ``what`` could not be made: the reason (missing seeds, different
    evaluation sets, ...) goes onto the study run, which ends FAILED, and into the one-line error."""
    reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    records.report_failed(reason)
    records.end(study_status="FAILED")
    return ReportUnavailable(f"study {spec.name!r}: every trial is recorded, but {what} could not be "
                             f"produced: {reason}")


def report_study(spec: StudySpec, records: StudyRecords, log: Callable[[str], None]) -> dict[str, Any]:
    from harness.driver._rounds import received
    from harness.present.plots import write_plots
    from harness.present.report import study_report
    from harness.present.table import AUTO_FORM, resolve_form
    from harness.results.mlflow_reader import read_experiment

    for cid in records.config_runs():
        summarise_config(records, cid, received(spec, records, cid))
    out: dict[str, Any] = {}
    # A study of fixed configurations reports exactly those: runs of configurations the study
    # file no longer names (it was edited since) stay in MLflow but out of this table.
    ids = None if spec.search is not None else {nc.config.config_id() for nc in spec.fixed_configs()}
    # ... and their confirmation runs (harness.driver._confirm), whose trials must have finished too.
    with_confirm = None if ids is None else ids | {f"{cid}-confirm" for cid in ids}
    check_trials(spec, records, with_confirm)
    if spec.collections:  # a study over several collections: one table over all of them
        from harness.driver._collections_report import report_collections

        try:
            return report_collections(spec, records, with_confirm, log)
        except HarnessError as exc:
            raise _unavailable(spec, records, "the table over collections", exc) from None
    try:
        confirmed = {cid for cid in records.config_runs() if cid.endswith("-confirm")}
        exploratory = None
        if confirmed:  # harness.driver._confirm: the confirmatory report, and the exploratory one beside it
            exploratory = study_report(read_experiment(spec.name, tracking_uri=records.store.uri,
                                                       config_ids=ids, phase="exploratory"),
                                       verdict_metric=spec.metric)
            ids = confirmed
        results = read_experiment(spec.name, tracking_uri=records.store.uri, config_ids=ids,
                                  phase="confirmatory" if confirmed else "auto")
        report = study_report(results, verdict_metric=spec.metric)
    except HarnessError as exc:
        raise _unavailable(spec, records, "the significance report", exc) from None
    if exploratory is not None:
        for outcome in exploratory.outcomes.values():
            # The runs that picked the confirmed configurations: their verdict says so.
            tags = outcome.tags
            if TAG_NOTE in tags:
                tags[TAG_NOTE] = f"exploratory: {tags[TAG_NOTE]}"
            records.config_report(outcome.config_id or "", outcome.metrics, tags)
        records.study_artifacts({f"exploratory/{path}": text for path, text in exploratory.artifacts.items()})
    for name, outcome in report.outcomes.items():
        if records.config_report(outcome.config_id or "", outcome.metrics, outcome.tags):
            out[name] = {"role": outcome.role, **outcome.metrics, **outcome.tags}
    records.study_artifacts(report.artifacts)
    with tempfile.TemporaryDirectory() as tmp:
        records.study_artifacts(files=[(png, "plots") for png in write_plots(report.analysis, tmp)])
    _log_report_page(spec, records, report, log)
    # The default form: the seeds table, or past table.SUMMARY_ABOVE configurations the summary one.
    md = report.tables.get(f"tables/{resolve_form(AUTO_FORM, len(report.analysis.results.configs))}.md", "")
    if md:
        # The first metric's table (MAP) and its footnote; every metric is in the artifacts.
        log("\n" + md.split("\n\n**")[0].strip())
    if report.power is not None:
        log(_power_summary(report.power))
    else:
        log(f"power: skipped ({report.power_skipped})")
    page = records.verdict_view(spec.metric)
    records.end()
    logged = "tables, plots and power analysis" if report.power is not None else "tables and plots"
    log(f"study {spec.name}: finished; {logged} logged to study run {records.study_run}")
    log(f"each configuration's verdict: MLflow runs page {page} (`harness ui` prints its address)")
    return out



def _log_report_page(spec: StudySpec, records: StudyRecords, report: StudyReport,
                     log: Callable[[str], None]) -> None:
    """The one-page report (harness.present.html_report) as report.html at the study run's
    artifact root; a page that cannot be made is said in the log and costs the study nothing."""
    from harness.present.html_report import study_page

    try:
        page = study_page(report, spec.name, tracking_uri=records.store.uri)
    except HarnessError as exc:
        log(f"report.html: skipped ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")
        return
    records.study_artifacts({"report.html": page})


def _power_summary(power: PowerAnalysis) -> str:
    """One line per comparison of the first metric: the MDE now and with the largest seed count."""
    from harness.present.power_text import not_estimable

    first = power.comparisons[0].metric
    lines = [(f"power ({first}, crossed test at level {power.level:.3g}, power {power.options.power:g}, "
              f"{power.queries} queries; power/power.md has every metric):")]
    for c in power.comparisons:
        if c.metric != first:
            continue
        now = next(r for r in c.rows if r.seeds == power.seeds)
        most = c.rows[-1]
        why = not_estimable(c)
        if why is not None:
            lines.append(f"  {c.config}: detectable difference not estimable ({why})")
            continue
        lines.append(f"  {c.config}: detectable difference {_mde(now.mde)} with {now.seeds} seeds, "
                     f"{_mde(most.mde)} with {most.seeds} (seed variance {c.components.seed:.2g}, query "
                     f"{c.components.query:.2g}, residual {c.components.resid:.2g})")
    return "\n".join(lines)


def _mde(value: float) -> str:
    return f"{value:.4f}" if math.isfinite(value) else "not estimable"
