"""A local study's Ray, seen from outside the driver: credentials in the driver's environment reach no
log or store, its ports listen on loopback only, and a driver killed with SIGKILL leaves no Ray
process behind (harness.driver._orchestrate.init_ray, harness.driver._reaper).

Each test runs `harness run` in a subprocess (tests/study/hooked_run.py, one trial held after its
first evaluation while the test looks) with a Ray of its own under the test's RAY_TMPDIR, so the
session's Ray and other people's Rays on this machine are never looked at or touched."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from harness.study import load_spec
from tests.study.conftest import write_study


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """The driver's RAY_TMPDIR: short, as Ray's socket paths must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="hyg-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(root: Path, ray_tmp: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, Path, str]:
    """A one-trial study driven by a subprocess (its Ray under ``ray_tmp``) whose trial waits after its
    first evaluation until the returned gate file exists; returns (driver, gate, trial log, key)."""
    path = write_study(root, "hygiene", seeds=[1], concurrency=1)
    key = f"{load_spec(path).baseline.config.config_id()}-seed1"
    gate, log = root / "go", root / "trials.log"
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
           **extra_env}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "--hold", str(gate), key, "run", str(path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    return proc, gate, log, key


def _wait_started(proc: subprocess.Popen[bytes], log: Path, key: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and f"{key} start" in log.read_text():
            time.sleep(2)  # past the first evaluation: the trial's worker is up and held
            return
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "driver ended"
        time.sleep(0.1)
    raise AssertionError(f"trial {key} did not start within {timeout} s")


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


@pytest.mark.heavy
def test_credentials_stay_out_of_logs_and_stores_and_ray_listens_on_loopback(tmp_path: Path, ray_tmp: Path) -> None:
    secrets_env = {name: f"planted-{name.lower()}-{secrets.token_hex(12)}"
                   for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                "MLFLOW_TRACKING_PASSWORD", "HF_TOKEN", "SERVICE_CLIENT_SECRET")}
    proc, gate, log, key = _start(tmp_path, ray_tmp, secrets_env)
    try:
        _wait_started(proc, log, key)
        ray_procs = [p for p in _tree(proc.pid) if p.pid != proc.pid]
        names = {p.name() for p in ray_procs}
        assert {"gcs_server", "raylet"} <= names, names
        listening = []
        for p in _tree(proc.pid):
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN or (c.type == 2 and c.laddr):  # TCP listeners, UDP binds
                    listening.append((p.pid, p.name(), c.laddr.ip, c.laddr.port))
        assert len(listening) >= 4, listening  # GCS, raylet, agents, the trial's worker at least
        exposed = [s for s in listening if s[2] not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")]
        assert not exposed, exposed
        gate.touch()
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode() if proc.stderr else ""
    finally:
        gate.touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    files = [f for d in (tmp_path, ray_tmp) for f in d.rglob("*") if f.is_file() and not f.is_symlink()]
    logs = [f for f in files if f.is_relative_to(ray_tmp) and f.name.endswith((".log", ".out", ".err"))]
    assert any(f.name == "runtime_env_agent.log" for f in logs), sorted(f.name for f in logs)
    assert (tmp_path / "mlflow.db").is_file() and any("/runs/" in str(f) for f in files)
    leaks = [(str(f), name) for f in files for name, value in secrets_env.items()
             if value.encode() in f.read_bytes()]
    assert not leaks, leaks


@pytest.mark.heavy
def test_a_killed_driver_leaves_no_ray_process(tmp_path: Path, ray_tmp: Path) -> None:
    proc, gate, log, key = _start(tmp_path, ray_tmp, {})
    ray_procs: list[psutil.Process] = []
    try:
        _wait_started(proc, log, key)
        ray_procs = [p for p in _tree(proc.pid) if p.pid != proc.pid]
        assert {"gcs_server", "raylet"} <= {p.name() for p in ray_procs}
        agents = [p for p in ray_procs if "Agent" in " ".join(p.cmdline())]
        assert len(agents) >= 2, [p.cmdline()[:1] for p in ray_procs]  # the dashboard and runtime-env agents
        os.kill(proc.pid, signal.SIGKILL)  # the driver alone, as the OOM killer or `kill -9 PID` would
        proc.wait()
        _, alive = psutil.wait_procs(ray_procs, timeout=20)
        assert not alive, [(p.pid, " ".join(p.cmdline())[:80]) for p in alive]
    finally:
        gate.touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in ray_procs:  # whatever a failing run left behind, by pid (and start time)
            try:
                p.kill()
            except psutil.Error:
                pass


DRIVER = """
import subprocess, sys, time
from harness.driver._reaper import start_reaper
start_reaper()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env={})  # unmarked: found as a descendant
marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(child.pid, marked.pid, flush=True)
time.sleep(300)
"""


def test_the_reaper_ends_the_dead_drivers_processes_and_no_other() -> None:
    """Without Ray: a driver that started the reaper and two processes (one a plain descendant whose
    environment lacks the mark, one marked in a session of its own) is killed with SIGKILL; both
    end within seconds, while a process the test started beside it is left alone."""
    repo = Path(__file__).resolve().parents[2]
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], cwd=repo, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(repo)}, start_new_session=True)
    procs: list[psutil.Process] = []
    try:
        assert driver.stdout is not None
        procs = [psutil.Process(int(pid)) for pid in driver.stdout.readline().split()]
        assert len(procs) == 2
        time.sleep(1.5)  # the reaper has noted the driver's descendants
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        _, alive = psutil.wait_procs(procs, timeout=15)
        assert not alive, alive
        assert bystander.poll() is None
    finally:
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        bystander.kill()
        bystander.wait()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
