"""What a study recorded besides its test values, read from MLflow for the study report
(harness.present.html_report): the seed runs' dev curves, the checkpoint each seed run tested, and
what early stopping, the confirmation phase and a seed schedule decided.

Read from the records of harness.tracking.conventions, for the configurations of a ``StudyResults``
already read by ``mlflow_reader.read_experiment`` (the same phase, the same runs):
- dev curves: each seed run's metric history ``dev_<metric>`` (one point per dev evaluation) of one
  metric, by default the study's objective (``objective.metric`` of the study run's study.yaml, else
  the first metric of the results with a dev curve); configurations stopped early
  (``harness.stopped=1``, left out of the tables) are read too, with the step they were stopped at;
- the tested checkpoint: each seed run's ``best_step`` metric (the best-dev checkpoint its test
  values come from);
- the study run: ``early_stopping_*`` metrics (trial-steps saved and run, configurations stopped),
  the tags ``harness.confirmation_pick`` (the configurations the confirmation phase retrained, by
  name) and ``harness.report_error``.

A seed schedule's reasons (``harness.sequential``) and the stopped configurations' reasons are
already in ``StudyResults`` (``sequential``, ``stopped``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.results.mlflow_reader import FAST_FAIL_ENV, _env_defaults, open_experiment, store_errors
from harness.results.stored import StudyResults
from harness.tracking import conventions as C
from harness.tracking.records import local_artifact
from harness.tracking.snapshot import ExperimentSnapshot

Curve = tuple[tuple[int, float], ...]  # (step, value) in step order


@dataclass(frozen=True, kw_only=True)
class StudyRecord:
    """Dev curves and decisions of one study (module docstring). ``curves[label][seed]``: the seed
    run's dev curve of ``metric``; ``tested[label][seed]``: its tested (best-dev) step;
    ``stopped_at[label]``: the step an early-stopped configuration was stopped at."""

    metric: str | None = None
    curves: Mapping[str, Mapping[str, Curve]] = field(default_factory=dict)
    tested: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    stopped_at: Mapping[str, int] = field(default_factory=dict)
    early_stopping: Mapping[str, float] = field(default_factory=dict)
    confirmation_pick: tuple[str, ...] = ()
    report_error: str = ""


def read_study_record(name: str, results: StudyResults, *, tracking_uri: str | None = None,
                      metric: str | None = None) -> StudyRecord:
    """The record of MLflow experiment ``name`` for the configurations of ``results`` (module
    docstring); ``metric``: the dev curves' metric (default: the study's objective)."""
    with _env_defaults(**FAST_FAIL_ENV):
        snapshot, uri = open_experiment(name, tracking_uri)
        try:
            return _read(snapshot, results, metric)
        except store_errors() as exc:
            raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None


def _read(snapshot: ExperimentSnapshot, results: StudyResults, metric: str | None) -> StudyRecord:
    studies = sorted(snapshot.runs(C.KIND_STUDY), key=lambda r: r.info.start_time or 0)
    study = studies[-1] if studies else None
    configs = {r.data.tags.get(C.TAG_CONFIG_ID, r.info.run_id): r for r in snapshot.runs(C.KIND_CONFIG)}
    label = {cid: lab for lab, cid in results.config_ids.items()}
    stopped_at: dict[str, int] = {}
    for cid, run in configs.items():
        name = run.info.run_name or cid
        if run.data.tags.get(C.TAG_STOPPED) == "1" and name in results.stopped and cid not in label:
            label[cid] = name
            stopped_at[name] = _int(run.data.tags.get(C.TAG_STOPPED_RUNG))
    seed_runs = [r for r in snapshot.runs(C.KIND_TRIAL)
                 if r.data.tags.get(C.TAG_CONFIG_ID) in label and r.data.tags.get(C.TAG_SEED) is not None
                 and (r.info.status == "FINISHED" or label[r.data.tags[C.TAG_CONFIG_ID]] in stopped_at)]
    seed_runs.sort(key=lambda r: (r.info.start_time or 0, r.info.run_id))
    if metric is not None and seed_runs and not any(f"{C.DEV_PREFIX}{metric}" in r.data.metrics for r in seed_runs):
        found = sorted({k[len(C.DEV_PREFIX):] for r in seed_runs for k in r.data.metrics if k.startswith(C.DEV_PREFIX)})
        raise DataError(f"no seed run of the study has a dev curve of {metric!r} ({C.DEV_PREFIX}{metric}); "
                        f"dev curves there: {', '.join(found) or 'none'}")
    metric = metric or _objective(snapshot, study) or next(
        (m for m in results.metrics if any(f"{C.DEV_PREFIX}{m}" in r.data.metrics for r in seed_runs)), None)
    curves: dict[str, dict[str, Curve]] = {}
    tested: dict[str, dict[str, int]] = {}
    for run in seed_runs:
        lab, seed = label[run.data.tags[C.TAG_CONFIG_ID]], run.data.tags[C.TAG_SEED]
        if metric is not None and f"{C.DEV_PREFIX}{metric}" in run.data.metrics:
            history = snapshot.metric_history(run.info.run_id, f"{C.DEV_PREFIX}{metric}")
            points = {step: value for step, _, value in sorted(history, key=lambda p: (p[0], p[1]))}
            curves.setdefault(lab, {})[seed] = tuple(sorted(points.items()))
        if "best_step" in run.data.metrics:
            tested.setdefault(lab, {})[seed] = int(run.data.metrics["best_step"])
    names = {cid: r.info.run_name or cid for cid, r in configs.items()}
    tags = study.data.tags if study is not None else {}
    metrics = study.data.metrics if study is not None else {}
    pick = tuple(names.get(c, c) for c in tags.get(C.TAG_CONFIRM_PICK, "").split(",") if c)
    early = {k: float(metrics[k]) for k in (C.METRIC_STEPS_SAVED, C.METRIC_STEPS_RUN, C.METRIC_STOPPED)
             if k in metrics}
    return StudyRecord(metric=metric if curves else None, curves=curves, tested=tested, stopped_at=stopped_at,
                       early_stopping=early, confirmation_pick=pick,
                       report_error=tags.get(C.TAG_REPORT_ERROR, ""))


def _objective(snapshot: ExperimentSnapshot, study: Any) -> str | None:
    """``objective.metric`` of the study run's study.yaml (default map where the file has none);
    None where the run has no study file (`harness train`). Read in place where the run's artifact
    root is a local folder (no store query)."""
    if study is None:
        return None
    import tempfile

    import yaml

    local = local_artifact(study.info.artifact_uri, C.STUDY_FILE_ARTIFACT)
    if local is not None and not local.is_file():
        return None
    with tempfile.TemporaryDirectory() as tmp, _env_defaults(MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
        if local is None:
            client, folder = snapshot.client(), study.info.run_id
            if not any(a.path == C.STUDY_FILE_ARTIFACT for a in client.list_artifacts(folder)):
                return None
            local = Path(client.download_artifacts(folder, C.STUDY_FILE_ARTIFACT, tmp))
        try:
            raw = yaml.safe_load(local.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            return None
    objective = raw.get("objective") if isinstance(raw, dict) else None
    metric = objective.get("metric", "map") if isinstance(objective, dict) else "map"
    return metric if isinstance(metric, str) and metric in C.METRICS else None


def _int(text: str | None) -> int:
    try:
        return int(float(text or ""))
    except ValueError:
        return 0
