"""System metrics sampled into a real MLflow SQLite store (no Ray)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.tracking.store import TrackingStore
from harness.tracking.system_metrics import SystemMetrics


@pytest.fixture()
def run(tmp_path: Path) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    store = TrackingStore(uri)
    exp = store.experiment("sysmetrics")
    return uri, store.start_run(exp, "study", {"harness.kind": "study"})


def _system(uri: str, run_id: str) -> dict[str, float]:
    metrics = MlflowClient(uri).get_run(run_id).data.metrics
    return {k: v for k, v in metrics.items() if k.startswith("system/")}


def test_samples_land_in_the_run_at_the_interval(run):
    uri, run_id = run
    notes: list[str] = []
    with SystemMetrics(run_id, uri, interval_s=0.2, progress=notes.append) as sm:
        assert sm.active
        time.sleep(1.5)
    assert not sm.active
    got = _system(uri, run_id)
    assert 0 <= got["system/cpu_utilization_percentage"] <= 100
    assert got["system/system_memory_usage_megabytes"] > 0
    assert 0 < got["system/system_memory_usage_percentage"] <= 100
    steps = MlflowClient(uri).get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert len(steps) >= 3  # sampled repeatedly, not once
    assert [m.step for m in steps] == list(range(len(steps)))
    assert len(notes) == 1 and notes[0].startswith("system metrics: every 0.2s")


def test_window_shorter_than_the_interval_still_logs_one_point(run):
    uri, run_id = run
    with SystemMetrics(run_id, uri, interval_s=60, progress=lambda m: None):
        time.sleep(0.2)
    history = MlflowClient(uri).get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert len(history) == 1


def test_run_ended_before_stop_and_double_stop_are_clean(run):
    uri, run_id = run
    sm = SystemMetrics(run_id, uri, interval_s=0.1, progress=lambda m: None).start()
    time.sleep(0.5)
    MlflowClient(uri).set_terminated(run_id, "FINISHED")  # the study writer ends the study run last
    time.sleep(0.3)
    sm.stop()
    sm.stop()
    assert "system/cpu_utilization_percentage" in _system(uri, run_id)


def test_resumed_monitor_continues_the_step_axis(run):
    uri, run_id = run
    for _ in range(2):
        with SystemMetrics(run_id, uri, interval_s=60, progress=lambda m: None):
            time.sleep(0.1)
    history = MlflowClient(uri).get_metric_history(run_id, "system/cpu_utilization_percentage")
    steps = [m.step for m in history]
    assert sorted(steps) == [0, 1]


def test_missing_psutil_is_a_one_line_note_not_a_failure(run, monkeypatch):
    uri, run_id = run
    for name in [m for m in sys.modules if m.startswith("mlflow.system_metrics")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil -> ImportError
    notes: list[str] = []
    with SystemMetrics(run_id, uri, interval_s=0.1, progress=notes.append) as sm:
        assert not sm.active
        time.sleep(0.2)
    assert len(notes) == 1 and notes[0].startswith("system metrics: off") and "psutil" in notes[0]
    assert _system(uri, run_id) == {}


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        SystemMetrics("r", "sqlite:///x.db", interval_s=0)
