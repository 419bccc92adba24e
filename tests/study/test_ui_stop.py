"""`harness ui` stops its MLflow server when it is told to stop (harness.cli.study.cmd_ui): `kill`
(SIGTERM), SIGHUP (a closed terminal) or Ctrl-C on the harness process leaves no server behind, and
neither does `kill -9` (the reaper, harness.study.start_reaper)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.cluster.services import answers, free_port, signal_stops_ui

REPO = Path(__file__).resolve().parents[2]


# SIGINT (Ctrl-C) on a server that has served pages: tests/tracking/test_ui_landing.py (`make test`)
@pytest.mark.heavy
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGHUP, id="SIGHUP"),
                                 pytest.param(signal.SIGKILL, id="SIGKILL")])
def test_a_signal_to_harness_ui_stops_the_mlflow_server(tmp_path: Path, sig: signal.Signals) -> None:
    from mlflow.tracking import MlflowClient

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()  # a store to serve
    cmd = [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
           "--port", str(port)]
    # a session of its own, so that the test can end whatever is left (by group) if it fails
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/health"
    server: list[psutil.Process] = []
    try:
        deadline = time.time() + 120
        while not answers(url):
            assert proc.poll() is None, f"harness ui exited ({proc.returncode}) before the server answered"
            assert time.time() < deadline, "the MLflow server did not answer within 120 s"
            time.sleep(0.5)
        server = psutil.Process(proc.pid).children(recursive=True)
        signal_stops_ui(proc, port, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in server:
            try:
                p.kill()
            except psutil.Error:
                pass


@pytest.mark.slow  # MLflow's server starting: seconds
def test_a_port_taken_after_the_check_is_an_error_not_exit_0(tmp_path: Path) -> None:
    """The port is checked before the server starts; another process taking it meanwhile (a second
    `harness ui` started at once) made uvicorn fail to bind while MLflow's command exited 0 behind
    the addresses printed. harness ui now says so and exits non-zero."""
    import socket

    from tests.synthetic import synthetic_records, write_study_records

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_study_records(uri, "s", synthetic_records(queries=4, effects={"base": 0.0, "better": 0.1}),
                        {"base": "baseline", "better": "ls"}, failed=False)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    log = tmp_path / "err.log"
    with log.open("w") as err, socket.socket() as squatter:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", uri, "--port", str(port)],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        try:
            first = proc.stdout.readline()  # printed after the port check, seconds before the server binds
            assert first.startswith("MLflow UI for "), first
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            rc = proc.wait(300)
        finally:
            if proc.poll() is None:
                proc.kill()
    lines = log.read_text().splitlines()
    assert rc == 2, lines
    # uvicorn's status for a failed bind depends on how MLflow runs it (3 under MLflow 3.17, 1 under
    # 3.18): the one it ended with is named, never 0
    status = re.fullmatch(r"harness: error: the MLflow UI's server stopped \(exit status (\d+)\): nothing serves "
                          + re.escape(f"http://127.0.0.1:{port}") + r"; see its error above", lines[-1])
    assert status and int(status.group(1)) > 0, lines
    assert any("address already in use" in line for line in lines), lines
