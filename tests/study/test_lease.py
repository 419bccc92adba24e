"""One driver per study: the lease alone (no Ray), then two real `harness run` drivers at once and a
killed driver's lease under `--resume`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.study.lease import TIMEOUT_ENV, LeaseHeld, StudyLease, lease_timeout, pid_alive

RESUME = "harness run s.yaml --resume"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _lease(path: Path, **kw: object) -> StudyLease:
    kw.setdefault("timeout_s", 60.0)
    return StudyLease(path, study="s", resume=RESUME, **kw)  # type: ignore[arg-type]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_acquire_writes_who_holds_it_and_release_removes_it(tmp_path):
    path = tmp_path / "runs" / "s.lease"
    with _lease(path) as lease:
        data = json.loads(path.read_text())
        assert data["pid"] == os.getpid() and data["study"] == "s" and data["resume"] == RESUME
        assert data["heartbeat"] >= data["started"] and data["token"] == lease.token
    assert not path.exists()


def test_second_driver_is_refused_with_one_line_naming_holder_and_resume(tmp_path):
    path = tmp_path / "s.lease"
    clock = Clock()
    first = _lease(path, clock=clock, host="h1", pid=123)
    first.acquire()
    try:
        clock.t += 20
        with pytest.raises(LeaseHeld) as exc:
            _lease(path, clock=clock, host="h2", pid=456).acquire()
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith("study 's' is already being run by pid 123 on host h1 since ")
        assert f"run `{RESUME}` after 40 s" in msg
        assert json.loads(path.read_text())["pid"] == 123  # untouched
    finally:
        first.release()
    assert not path.exists()


def test_stale_by_heartbeat_age_is_taken_over_and_logged(tmp_path):
    path = tmp_path / "s.lease"
    clock = Clock()
    old = _lease(path, clock=clock, host="elsewhere", pid=123)
    old.acquire()
    old._stop.set()  # the holder dies: no more heartbeats
    clock.t += 61
    logs: list[str] = []
    new = _lease(path, clock=clock, host="here", log=logs.append)
    new.acquire()
    try:
        assert json.loads(path.read_text())["token"] == new.token
        assert "taking over study 's' from pid 123 on host elsewhere (no heartbeat for 61 s" in logs[0]
        old.release()  # the old holder coming back does not remove the new lease
        assert path.exists()
    finally:
        new.release()
    assert not path.exists() and not list(tmp_path.iterdir())


def test_heartbeat_keeps_a_live_lease_fresh(tmp_path):
    path = tmp_path / "s.lease"
    with _lease(path, timeout_s=0.4, host="elsewhere"):
        first = json.loads(path.read_text())["heartbeat"]
        time.sleep(0.5)
        assert json.loads(path.read_text())["heartbeat"] > first
        with pytest.raises(LeaseHeld):  # older than the timeout in total, but beating
            _lease(path, timeout_s=0.4).acquire()


def test_dead_pid_on_this_host_is_stale_at_once(tmp_path):
    path = tmp_path / "s.lease"
    dead = _dead_pid()
    assert not pid_alive(dead) and pid_alive(os.getpid())
    ghost = _lease(path, pid=dead)
    ghost.acquire()
    ghost._stop.set()
    logs: list[str] = []
    with _lease(path, log=logs.append) as lease:
        assert json.loads(path.read_text())["token"] == lease.token
    assert f"pid {dead} is no longer running" in logs[0]


def test_dead_pid_on_another_host_waits_for_the_heartbeat_timeout(tmp_path):
    path = tmp_path / "s.lease"
    holder = _lease(path, host="other-host", pid=_dead_pid())
    holder.acquire()
    try:
        with pytest.raises(LeaseHeld, match="after 60 s"):
            _lease(path).acquire()
    finally:
        holder.release()


def test_a_partial_lease_file_is_stale_after_the_timeout(tmp_path):
    path = tmp_path / "s.lease"
    path.write_text("")
    with pytest.raises(LeaseHeld):
        _lease(path).acquire()
    old = time.time() - 120
    os.utime(path, (old, old))
    with _lease(path):
        assert json.loads(path.read_text())["study"] == "s"


def test_timeout_knob(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert lease_timeout() == 2.5
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(HarnessError, match=f"{TIMEOUT_ENV} must be a positive number"):
        lease_timeout()


# -- real drivers --------------------------------------------------------------------------------

STUDY = """\
name: dup
data: {conversations: 30, max_dev_queries: 8, max_test_queries: 16}
model: {name: tiny, max_length: 32}
train: {steps: 30, batch_size: 8, eval_every: 10, eval_batch_size: 32, lr: 1.0e-3}
baseline: {}
configs:
  - name: ls
    set: {smoothing.method: LS, smoothing.epsilon: 0.2}
seeds: [1, 2]
resources: {cpus: 1, gpus: 0}
concurrency: 2
storage_path: STORAGE
"""


def _wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_two_drivers_one_refused_and_a_killed_drivers_lease_does_not_block_resume(tmp_path, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    from harness.cli import main
    from harness.study import runner  # noqa: F401  (imported now, so the second driver starts at once)
    from harness.tracking import conventions as C

    spec_path = tmp_path / "dup.yaml"
    spec_path.write_text(STUDY.replace("STORAGE", str(tmp_path / "runs")))
    lease = tmp_path / "runs" / "dup.lease"
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    log = tmp_path / "trials.log"
    knobs = {"MLFLOW_TRACKING_URI": uri, TIMEOUT_ENV: "5",
             "HARNESS_CACHE": os.environ.get("HARNESS_CACHE") or str(tmp_path / "cache")}
    env = {**os.environ, **knobs}
    # `harness run` with the trial log hook injected (tests/study/hooked_run.py).
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "run", str(spec_path)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        _wait_for(lambda: log.exists() and " start " in log.read_text(), 240, "the first driver's trials")
        # The second driver: the same `harness run`, in this process so it starts while the first
        # still runs (a subprocess would spend seconds importing, longer than this tiny study).
        for key, value in knobs.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        assert main(["run", str(spec_path)]) == 2
        line = capsys.readouterr().err.strip()
        assert first.poll() is None, "the first driver ended before the second was tried"
        assert "\n" not in line
        assert line.startswith(f"harness: error: study 'dup' is already being run by pid {first.pid} on host ")
        assert f"run `harness run {spec_path} --resume` after " in line
        assert "(at once, once that pid has exited)" in line
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert json.loads(lease.read_text())["pid"] == first.pid  # the killed driver's lease stays ...
    resumed = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True, timeout=600,
                             check=False)
    assert resumed.returncode == 0, resumed.stderr[-2000:]  # ... and does not block --resume
    assert f"lease: taking over study 'dup' from pid {first.pid}" in resumed.stderr
    assert not lease.exists()
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("dup")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    kinds = [r.data.tags.get(C.TAG_KIND) for r in runs]
    keys = [r.data.tags[C.TAG_TRIAL_KEY] for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    assert len(keys) == 4 and len(set(keys)) == 4  # no duplicate seed runs
    assert kinds.count(C.KIND_STUDY) == 1 and kinds.count(C.KIND_CONFIG) == 2
