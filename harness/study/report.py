"""End of a study: aggregates, paired tests against the seeded baseline, tables and plots into MLflow.

The statistics live in harness.evaluation (read the experiment back exactly as `harness table
--experiment` does, so the tables in MLflow and the exported ones are the same); this module only
moves the outcome onto the runs: each config run gets <metric>_mean/_sd/_delta/_p and a marker tag,
the study run gets tables/* and plots/* artifacts.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.study.spec import StudySpec
from harness.tracking.study_writer import StudyWriter


def report_study(spec: StudySpec, writer: StudyWriter, store: Any, study_run: str,
                 log: Callable[[str], None]) -> dict[str, Any]:
    from harness.evaluation.mlflow_reader import read_experiment
    from harness.evaluation.plots import write_plots
    from harness.evaluation.report import study_report
    from harness.evaluation.results import EvaluationMismatch

    config_runs = writer.config_runs()
    for cid in config_runs:
        writer.aggregate(cid, list(spec.seeds))
    out: dict[str, Any] = {}
    try:
        # A study of fixed configurations reports exactly those: runs of configurations the study
        # file no longer names (it was edited since) stay in MLflow but out of this table.
        ids = None if spec.search is not None else {nc.config.config_id() for nc in spec.fixed_configs()}
        results = read_experiment(spec.name, tracking_uri=store.uri, config_ids=ids)
        report = study_report(results)
    except EvaluationMismatch:
        # Every trial is recorded; pairing them would compare different test candidates.
        writer.end()
        raise
    except HarnessError as exc:
        log(f"significance: skipped ({exc})")
        writer.end()
        return out
    for name, outcome in report.outcomes.items():
        run = config_runs.get(outcome.config_id or "")
        if run is None:
            continue
        store.log_metrics(run, outcome.metrics)
        store.set_tags(run, outcome.tags)
        out[name] = {"role": outcome.role, **outcome.metrics, **outcome.tags}
    for path, text in report.tables.items():
        store.log_text(study_run, text, path)
    with tempfile.TemporaryDirectory() as tmp:
        for png in write_plots(report.analysis, tmp):
            store.log_file(study_run, png, "plots")
    md = report.tables.get("tables/seeds.md", "")
    if md:
        # The first metric's table (MAP) and its footnote; every metric is in the artifacts.
        log("\n" + md.split("\n\n**")[0].strip())
    writer.end()
    log(f"study {spec.name}: finished; tables and plots logged to study run {study_run}")
    return out

