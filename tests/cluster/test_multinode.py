"""A real multi-node Ray cluster on this machine: a head with no CPUs and two worker nodes with one CPU
each (`ray start` processes, each with its own --temp-dir and process group, stopped by PID). A study
of two trials spreads over the two workers (each trial needs the one CPU of a worker); Tune storage
and MLflow (SQLite) are on a local directory every node reaches. Killing one worker node mid-trial
makes its trial fail and resume from its last checkpoint on the other worker (the head has no CPU),
with the test metrics of training it without interruption (in the test's process, on one thread
as on a worker node), and no duplicate MLflow run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.study.conftest import write_study

from .services import REPO, VENV_BIN, Service, clean_env, free_port, free_port_block, spawn, sweep


@dataclass
class Node:
    service: Service
    temp_dir: Path

    def kill(self) -> None:
        """SIGKILL the node's process group (its raylet and what it started): a node failure."""
        try:
            os.killpg(self.service.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.service.proc.wait(timeout=30)

    def stop(self) -> None:
        self.service.stop(grace=5.0)
        sweep(self.temp_dir)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _env() -> dict[str, str]:
    return clean_env(
        # several nodes: Ray's multi-node mode (on for Linux; the single-head services turn it off to
        # stay on loopback), every node on this host's own address, as the driver resolves it
        RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_USAGE_STATS_ENABLED="0",
        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0",
        # a dead node is noticed within seconds, not the default ~30 s
        RAY_health_check_period_ms="500", RAY_health_check_timeout_ms="1000",
        RAY_health_check_failure_threshold="4",
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


def _host_ip() -> str:
    from ray._private.services import node_ip_address_from_perspective

    return str(node_ip_address_from_perspective())


def _start(root: Path, name: str, args: list[str]) -> Node:
    temp_dir = Path(tempfile.mkdtemp(prefix=f"hmn{name}", dir="/tmp"))
    workers = free_port_block(40)
    cmd = [str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address", _host_ip(),
           "--temp-dir", str(temp_dir), "--num-gpus", "0", "--object-store-memory", str(200 * 2**20),
           "--min-worker-port", str(workers), "--max-worker-port", str(workers + 39),
           "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
           "--metrics-export-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
           "--dashboard-agent-grpc-port", str(free_port()), "--runtime-env-agent-port", str(free_port()),
           "--disable-usage-stats", *args]
    return Node(spawn(f"ray {name}", cmd, root / f"ray-{name}.log", _env(), root), temp_dir)


NODES = ("import json, sys, ray; ray.init(address=sys.argv[1], log_to_driver=False); "
         "print(json.dumps([n['Resources'].get('CPU', 0) for n in ray.nodes() if n['Alive']]))")


def _nodes_with_cpu(address: str) -> int:
    out = subprocess.run([sys.executable, "-c", NODES, address], env=_env(), capture_output=True, text=True,
                         timeout=120, check=False)
    try:
        return len([c for c in json.loads(out.stdout.strip().splitlines()[-1]) if c >= 1])
    except (IndexError, ValueError):
        return 0


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[tuple[str, list[Node]]]:
    port = free_port()
    nodes = [_start(tmp_path, "head", ["--head", "--port", str(port), "--num-cpus", "0",
                                       "--include-dashboard", "false",
                                       "--ray-client-server-port", str(free_port())])]
    host = _host_ip()
    address = f"{host}:{port}"
    try:
        nodes[0].service.wait_port(host, port, 60)  # the head's GCS, which the workers join through
        for i in (1, 2):
            nodes.append(_start(tmp_path, f"w{i}", ["--address", address, "--num-cpus", "1"]))
        deadline = time.time() + 120
        while _nodes_with_cpu(address) < 2:
            for n in nodes:
                if n.service.proc.poll() is not None:
                    raise RuntimeError(f"{n.service.name} exited:\n{n.service.tail()}")
            if time.time() > deadline:
                raise RuntimeError("worker nodes did not join:\n" + "\n".join(n.service.tail() for n in nodes))
            time.sleep(1)
        yield address, nodes
    finally:
        for n in reversed(nodes):
            n.stop()


def _run(root: Path, name: str, address: str, log: Path) -> subprocess.Popen[str]:
    # long enough to kill a node mid-trial, with a checkpoint at every evaluation to resume from
    path = write_study(root, name, train={"steps": 150, "eval_every": 15},
                       failure={"max_retries": 3, "checkpoint_every_s": 0}, storage_path=root / "tune")
    env = {**_env(), "RAY_ADDRESS": address,
           "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    # `harness run` with the trial log hook injected (tests/study/hooked_run.py)
    return subprocess.Popen([sys.executable, "-m", "tests.study.hooked_run", str(log), "run", str(path)],
                            cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen[str], timeout: float = 400) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"study did not finish in {timeout:.0f}s:\n{out[-4000:]}") from None
    assert proc.returncode == 0, out[-4000:]
    return out


def _trials(root: Path, name: str) -> list:
    from mlflow.tracking import MlflowClient

    from harness.tracking import conventions as C

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.get_experiment_by_name(name)
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000)
            if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]


def _checkpointed(root: Path, name: str) -> int:
    """Trials of study ``name`` with at least one checkpoint on the shared storage."""
    exp = root / "tune" / f"{name}-fixed"
    return sum(1 for d in exp.glob("*") if d.is_dir() and any(d.glob("checkpoint_*"))) if exp.exists() else 0


def _uninterrupted(root: Path, name: str) -> dict[str, dict[str, float]]:
    """Every trial of study ``name`` trained from start to end in this process, on one thread as on
    a one-CPU worker node: its test metrics (the seed run's ``test_*``) by trial key."""
    import torch

    from harness.study.protocol import TrialTicket
    from harness.study.spec import load_spec
    from harness.study.variants import prepare_study, variant_key
    from harness.training.loop import FinalRecord, Trainer

    spec = load_spec(root / f"{name}.yaml")
    prepared = prepare_study(spec, progress=lambda m: None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: dict[str, dict[str, float]] = {}
    try:
        for nc in spec.fixed_configs():
            for seed in spec.seeds:
                ticket = TrialTicket.of(nc.name, nc.role, nc.config, seed)
                cfg = ticket.config()
                final = list(Trainer(cfg, prepared[variant_key(cfg)]).run())[-1]
                assert isinstance(final, FinalRecord)
                out[ticket.key] = {f"test_{k}": float(v) for k, v in final.metrics.items()}
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.mark.heavy
def test_killed_worker_node_resumes_its_trial_on_the_other_node(cluster, tmp_path):
    address, nodes = cluster
    # Once both trials have a checkpoint and neither has ended, worker 1 dies.
    log = tmp_path / "kill.log"
    proc = _run(tmp_path, "mn-kill", address, log)
    deadline = time.time() + 300
    while time.time() < deadline:
        ended = [ln for ln in (log.read_text().splitlines() if log.exists() else []) if " end " in ln]
        assert not ended, "a trial ended before the node could be killed mid-trial"
        if _checkpointed(tmp_path, "mn-kill") == 2:
            break
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        time.sleep(0.05)
    else:
        raise AssertionError("no checkpoints within 300 s")
    nodes[1].kill()
    out = _finish(proc)
    lines = log.read_text().splitlines()
    starts = [ln.split() for ln in lines if " start " in ln]
    # both trials started at step 0, one of them again from its checkpoint (the surviving worker is
    # the only node with a CPU left), and both ended once
    resumed = [(key, int(step)) for key, _, step in starts if int(step) > 0]
    assert len(resumed) == 1 and 15 <= resumed[0][1] < 150, (lines, out[-3000:])  # mid-training
    assert "failed, retrying from its last checkpoint" in out
    # the test metrics of training each trial without interruption (here, from the data the study
    # cached), and one MLflow run per trial
    ref = _uninterrupted(tmp_path, "mn-kill")
    assert len(ref) == 2
    assert sorted(ln.split()[0] for ln in lines if " end " in ln) == sorted(ref)
    trials = _trials(tmp_path, "mn-kill")
    keys = [r.data.tags["harness.trial_key"] for r in trials]
    assert sorted(keys) == sorted(ref) and len(set(keys)) == len(keys)
    for r in trials:
        mine = r.data.metrics
        theirs = ref[r.data.tags["harness.trial_key"]]
        assert theirs and {k: mine[k] for k in theirs} == theirs
        assert r.info.status == "FINISHED"
