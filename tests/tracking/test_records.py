"""StudyRecords on a resumed study (real MLflow, SQLite, no Ray): runs an earlier driver created but
did not describe (it died between creating a run and logging its params and resolved config) are
described by the next driver, and nothing is duplicated."""

from __future__ import annotations

import json
from pathlib import Path

from harness.config import TrialConfig
from harness.study.protocol import TrialTicket
from harness.tracking import conventions as C
from harness.tracking.records import StudyRecords, iter_runs
from harness.tracking.store import TrackingStore


def _ticket(seed: int) -> TrialTicket:
    cfg = TrialConfig.from_flat({"model.name": "tiny", "smoothing.method": "LS", "smoothing.epsilon": 0.1})
    return TrialTicket.of("ls", C.ROLE_CANDIDATE, cfg, seed)


def test_a_config_and_seed_run_left_undescribed_by_a_killed_driver_are_described_on_resume(tmp_path):
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = StudyRecords.open(store, "resumed")
    study = first.study_started(params={})
    ticket = _ticket(1)
    # what a driver killed right after creating the runs leaves: tagged runs, no params, no artifact
    config = store.start_run(first.experiment_id, ticket.name, {
        C.TAG_KIND: C.KIND_CONFIG, C.TAG_CONFIG_ID: ticket.config_id, C.TAG_ROLE: ticket.role,
        C.TAG_STUDY: "resumed"}, parent=study)
    seed_run = store.start_run(first.experiment_id, "ls-seed1", {
        C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: ticket.config_id, C.TAG_ROLE: ticket.role,
        C.TAG_SEED: "1", C.TAG_TRIAL_KEY: ticket.key, C.TAG_STUDY: "resumed"}, parent=config)
    second = StudyRecords.open(store, "resumed")
    assert second.trial_started(ticket) == seed_run and second.config_run(ticket) == config
    client = store.client
    resolved = Path(client.download_artifacts(config, C.RESOLVED_ARTIFACT.format(config_id=ticket.config_id),
                                              str(tmp_path)))
    flat = {k: v for k, v in ticket.flat.items() if k != "train.seed"}
    assert json.loads(resolved.read_text()) == json.loads(json.dumps(flat, default=str))
    assert client.get_run(config).data.params["smoothing.method"] == "LS"
    assert client.get_run(seed_run).data.params["train.seed"] == "1"
    # the same values logged again by a third driver change nothing; no run is duplicated
    third = StudyRecords.open(store, "resumed")
    third.trial_started(ticket)
    assert [r.info.run_id for r in iter_runs(client, first.experiment_id, C.KIND_CONFIG)] == [config]
    assert [r.info.run_id for r in iter_runs(client, first.experiment_id, C.KIND_TRIAL)] == [seed_run]


def test_a_done_seed_run_left_running_by_a_killed_driver_is_ended_finished_on_resume(tmp_path):
    """A driver killed between trial_finished's done tag (its commit point) and ending the run
    leaves the run RUNNING; the next driver ends it FINISHED, so the report's reader finds it."""
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    first = StudyRecords.open(store, "half-ended")
    first.study_started(params={})
    ticket = _ticket(1)
    run = first.trial_started(ticket)
    store.log_metrics(run, {"test_map": 0.5})
    store.set_tags(run, {C.TAG_DONE: "1"})
    assert store.client.get_run(run).info.status == "RUNNING"
    second = StudyRecords.open(store, "half-ended")
    assert second.is_done(ticket.key)
    assert store.client.get_run(run).info.status == "FINISHED"
    assert second.done_run(ticket.key).status == "FINISHED"  # what the driver holds says so too
