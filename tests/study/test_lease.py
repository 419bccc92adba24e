"""One driver per study: the lease alone (no Ray). Two real `harness run` drivers at once and a
killed driver's lease under `--resume`: tests/study/test_early_stop_study.py (one killed-driver
scenario)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.driver.lease import TIMEOUT_ENV, Lease, LeaseHeld, lease_timeout, pid_alive
from harness.errors import HarnessError

RESUME = "harness run s.yaml --resume"


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _lease(path: Path, **kw: object) -> Lease:
    kw.setdefault("timeout_s", 60.0)
    return Lease.on_file(path, study="s", resume=RESUME, **kw)  # type: ignore[arg-type]


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
