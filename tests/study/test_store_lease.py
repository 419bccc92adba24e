"""One driver per study from any working directory: the lease on the study's MLflow experiment
(harness.driver.lease), on a real MLflow SQLite store, no Ray. The two-driver scenario through
`harness run` (a second directory, the same store): tests/study/test_early_stop_study.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.lease import Lease, LeaseHeld
from harness.tracking.conventions import TAG_DRIVER

RESUME = "harness run s.yaml --resume"


def _store(tmp_path: Path) -> tuple[MlflowClient, str, str]:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    return client, client.create_experiment("s"), uri


def _lease(client: MlflowClient, exp: str, uri: str, **kw: object) -> Lease:
    kw.setdefault("settle_s", 0.05)
    return Lease.on_experiment(client, exp, study="s", resume=RESUME, where=uri, **kw)  # type: ignore[arg-type]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_driver_is_named_on_the_experiment_while_it_holds_the_study(tmp_path):
    client, exp, uri = _store(tmp_path)
    with _lease(client, exp, uri) as lease:
        held = json.loads(client.get_experiment(exp).tags[TAG_DRIVER])
        assert held["pid"] == os.getpid() and held["token"] == lease.token and held["resume"] == RESUME
    assert TAG_DRIVER not in client.get_experiment(exp).tags


def test_a_second_driver_is_refused_in_one_line_whatever_its_directory(tmp_path):
    client, exp, uri = _store(tmp_path)
    with _lease(client, exp, uri, host="h1", pid=123):
        # Another driver, with its own client (another process, another working directory).
        with pytest.raises(LeaseHeld) as exc:
            _lease(MlflowClient(uri), exp, uri, host="h2", pid=456).acquire()
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith("study 's' is already being run by pid 123 on host h1 since ")
        assert f"tag {TAG_DRIVER} of MLflow experiment 's' at {uri}" in msg and f"`{RESUME}`" in msg
        assert json.loads(client.get_experiment(exp).tags[TAG_DRIVER])["pid"] == 123  # untouched


def test_a_killed_driver_on_this_host_is_taken_over_at_once(tmp_path):
    client, exp, uri = _store(tmp_path)
    dead = _dead_pid()
    _lease(client, exp, uri, pid=dead).acquire()  # never released: as a SIGKILLed driver leaves it
    logs: list[str] = []
    with _lease(client, exp, uri, log=logs.append) as lease:
        assert json.loads(client.get_experiment(exp).tags[TAG_DRIVER])["token"] == lease.token
    assert logs == [(f"lease: taking over study 's' in the tracking store from pid {dead} on host "
                    f"{lease.host} (pid {dead} is no longer running on {lease.host})")]


def test_a_silent_driver_elsewhere_is_taken_over_after_the_heartbeat_timeout(tmp_path):
    client, exp, uri = _store(tmp_path)
    gone = _lease(client, exp, uri, host="elsewhere", pid=1, clock=lambda: 0.0)
    gone.acquire()  # its last heartbeat: long ago
    gone._stop.set()  # and no more: the driver is gone
    with _lease(client, exp, uri, timeout_s=60.0):
        pass
    alive = _lease(client, exp, uri, host="elsewhere", pid=1)
    alive.acquire()  # a fresh heartbeat from another host: refused, even though pid 1 is no driver here
    try:
        with pytest.raises(LeaseHeld):
            _lease(client, exp, uri, timeout_s=60.0).acquire()
    finally:
        alive.release()


def test_of_two_drivers_starting_together_exactly_one_goes_on(tmp_path):
    """Both read an empty tag before either writes: the settle read makes one of them give way."""
    client, exp, uri = _store(tmp_path)
    leases = [_lease(MlflowClient(uri), exp, uri, host=f"h{i}", pid=100 + i, settle_s=0.5) for i in range(2)]
    start = threading.Barrier(2)
    outcome: dict[int, str] = {}

    def drive(i: int) -> None:
        start.wait()
        try:
            leases[i].acquire()
            outcome[i] = "held"
        except LeaseHeld:
            outcome[i] = "refused"

    threads = [threading.Thread(target=drive, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sorted(outcome.values()) == ["held", "refused"]
        winner = next(i for i, v in outcome.items() if v == "held")
        assert json.loads(client.get_experiment(exp).tags[TAG_DRIVER])["token"] == leases[winner].token
    finally:
        for lease in leases:
            lease.release()


def test_a_driver_whose_tag_was_taken_over_stops_renewing_it(tmp_path):
    """A driver silent past the timeout (a partitioned host) whose tag another driver took over no
    longer writes its heartbeat over the new holder's, as with the lease file."""
    client, exp, uri = _store(tmp_path)
    logs: list[str] = []
    old = _lease(client, exp, uri, host="h1", pid=123, timeout_s=0.4, log=logs.append)
    old.acquire()
    try:
        new = _lease(MlflowClient(uri), exp, uri, host="h2", pid=456, timeout_s=0.4)
        new.medium.write(new._mine())  # the new holder's record, as its claim writes it
        old._thread.join(timeout=5)  # the old driver's next beat sees it and stops
        assert json.loads(client.get_experiment(exp).tags[TAG_DRIVER])["token"] == new.token
        assert logs == [("lease: study 's' was taken over by another driver in the tracking store (pid 456 "
                         "on h2); this driver no longer holds it")]
    finally:
        old.release()
    assert json.loads(client.get_experiment(exp).tags[TAG_DRIVER])["token"] == new.token  # not ours to remove
