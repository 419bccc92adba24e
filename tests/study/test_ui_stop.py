"""`harness ui` stops its MLflow server when it is told to stop (harness.cli.study.cmd_ui): `kill`
(SIGTERM), SIGHUP (a closed terminal) or Ctrl-C on the harness process leaves no server behind, and
neither does `kill -9` (the reaper, harness.study.start_reaper)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                 pytest.param(signal.SIGHUP, id="SIGHUP", marks=pytest.mark.heavy),
                                 pytest.param(signal.SIGKILL, id="SIGKILL", marks=pytest.mark.heavy)])
def test_a_signal_to_harness_ui_stops_the_mlflow_server(tmp_path: Path, sig: signal.Signals) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    cmd = [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
           "--port", str(port)]
    # a session of its own, so that the test can end whatever is left (by group) if it fails
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/health"
    server: list[psutil.Process] = []
    try:
        deadline = time.time() + 120
        while not _answers(url):
            assert proc.poll() is None, f"harness ui exited ({proc.returncode}) before the server answered"
            assert time.time() < deadline, "the MLflow server did not answer within 120 s"
            time.sleep(0.5)
        server = psutil.Process(proc.pid).children(recursive=True)
        assert server and any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                              for p in server for c in p.net_connections(kind="inet")), server
        os.kill(proc.pid, sig)  # the harness process alone, as `kill PID` does
        # generous deadlines (not timings): a loaded machine (two test workers on 2 cores) is slow
        # to end a web server's workers
        proc.wait(timeout=60)
        # SIGKILL: no handler runs; the reaper ends the server (its poll, then SIGTERM and a grace)
        _, alive = psutil.wait_procs(server, timeout=60)
        assert not alive, [(p.pid, " ".join(p.cmdline())[:80]) for p in alive]
        assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 0)  # 0: stopped on request
        assert not _answers(url)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in server:
            try:
                p.kill()
            except psutil.Error:
                pass
