"""Fixtures for the cluster tests: one Ray head (token auth) and one MLflow server on loopback, and the
quickstart study submitted to them once in smoke mode (the job test and the browser test both read its
records). Package scope: all of it is stopped as soon as tests/cluster/ is done."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.study.conftest import shared_cache

from .services import (
    REPO,
    MlflowServer,
    RayHead,
    clean_env,
    start_mlflow_server,
    start_ray_head,
)

QUICKSTART = REPO / "search_spaces" / "quickstart.yaml"
# A fake MLflow password: the job gets it, nothing it writes or prints may contain it.
FAKE_SECRET = "s3cr3t-" + secrets.token_hex(6)


@pytest.fixture(scope="package")
def cluster_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="package")
def mlflow_starting(cluster_root: Path, _mlflow_schema_made_once: Path) -> Iterator[MlflowServer]:
    """The MLflow server, started (on a copy of the session's schema template) but not yet waited
    for: the Ray head starts beside it."""
    server = start_mlflow_server(cluster_root / "mlflow", schema=_mlflow_schema_made_once, wait=False)
    yield server
    server.stop()


@pytest.fixture(scope="package")
def ray_head(cluster_root: Path, mlflow_starting: MlflowServer) -> Iterator[RayHead]:
    head = start_ray_head(cluster_root, token=secrets.token_hex(16))
    yield head
    head.stop()


@pytest.fixture(scope="package")
def mlflow_server(mlflow_starting: MlflowServer) -> MlflowServer:
    mlflow_starting.ready()
    return mlflow_starting


def harness(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The `harness` command as a user runs it (a fresh process, no Ray address or token in its env)."""
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=REPO, env=env or clean_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def write_env_file(path: Path, **values: str) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def rest(url: str, path: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{url}{path}", data=data, method="POST" if body is not None else "GET",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def job_ids(head: RayHead) -> set[str]:
    return {j["submission_id"] for j in rest(head.address, "/api/jobs/", headers=head.headers)}


@dataclass(frozen=True)
class SmokeJob:
    result: subprocess.CompletedProcess[str]
    job_id: str
    seconds: float
    experiment_id: str
    runs: list[dict[str, Any]]
    env_file: Path


def search_runs(server: MlflowServer, experiment_id: str) -> list[dict[str, Any]]:
    out = rest(server.url, "/api/2.0/mlflow/runs/search",
               {"experiment_ids": [experiment_id], "max_results": 1000})
    return list(out.get("runs", []))


@pytest.fixture(scope="package")
def smoke_job(ray_head: RayHead, mlflow_server: MlflowServer, cluster_root: Path) -> SmokeJob:
    """`harness submit search_spaces/quickstart.yaml --smoke --wait` against the loopback cluster."""
    env_file = write_env_file(cluster_root / "cluster.env", RAY_AUTH_TOKEN=ray_head.token,
                              MLFLOW_TRACKING_USERNAME="harness-test", MLFLOW_TRACKING_PASSWORD=FAKE_SECRET)
    started = time.time()
    result = harness("submit", str(QUICKSTART), "--smoke", "--wait", "--address", ray_head.address,
                     "--env-file", str(env_file), "--tracking-uri", mlflow_server.url,
                     "--storage-path", str(cluster_root / "tune"),
                     "--env", f"HARNESS_CACHE={shared_cache()}", timeout=420)
    seconds = time.time() - started
    match = re.search(r"submitted job (\S+)", result.stdout)
    exp_id, runs = "", []
    if result.returncode == 0:
        exp = rest(mlflow_server.url, "/api/2.0/mlflow/experiments/get-by-name?experiment_name=quickstart")
        exp_id = exp["experiment"]["experiment_id"]
        runs = search_runs(mlflow_server, exp_id)
    return SmokeJob(result, match.group(1) if match else "", seconds, exp_id, runs, env_file)


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
