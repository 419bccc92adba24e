"""`harness submit` / `harness jobs` against a real Ray head (token auth) and a real MLflow server,
both on loopback: the quickstart study in smoke mode runs as a Ray Job and its runs are found through
the MLflow server's REST API; bad input fails with one line before anything is submitted."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    FAKE_SECRET,
    QUICKSTART,
    SmokeJob,
    explain,
    harness,
    job_ids,
    rest,
    write_env_file,
)
from .services import RayHead, free_port

pytestmark = pytest.mark.slow


def _one_error(result: Any) -> str:
    """The failure is one `harness: error:` line, with no traceback, and is the last line."""
    assert result.returncode == 2, explain(result)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("harness: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], explain(result)
    assert "Traceback" not in result.stderr
    return errors[0]


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _metrics(run: dict[str, Any]) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


# -- bad input: nothing is submitted -------------------------------------------------------------

@pytest.mark.heavy
def test_invalid_study_is_refused_before_anything_is_submitted(ray_head: RayHead, cluster_root: Path) -> None:
    bad = cluster_root / "bad-study.yaml"
    bad.write_text(QUICKSTART.read_text().replace("curriculum.pacing: root_n", "curriculum.pacing: root_nn"))
    env_file = write_env_file(cluster_root / "ok.env", RAY_AUTH_TOKEN=ray_head.token)
    before = job_ids(ray_head)
    result = harness("submit", str(bad), "--smoke", "--address", ray_head.address, "--env-file", str(env_file),
                     "--tracking-uri", "http://127.0.0.1:9", "--skip-tracking-check")
    line = _one_error(result)
    assert "bad-study.yaml:" in line and "curriculum.pacing" in line and "root_nn" in line, line
    assert result.stderr.strip() == line and result.stdout == ""
    assert job_ids(ray_head) == before


@pytest.mark.heavy
def test_rejected_and_missing_token(ray_head: RayHead, cluster_root: Path) -> None:
    before = job_ids(ray_head)
    wrong = write_env_file(cluster_root / "wrong.env", RAY_AUTH_TOKEN="not-the-cluster-token")
    common = ["--smoke", "--address", ray_head.address, "--tracking-uri", "http://127.0.0.1:9",
              "--skip-tracking-check"]
    line = _one_error(harness("submit", str(QUICKSTART), *common, "--env-file", str(wrong)))
    assert "rejected the token from RAY_AUTH_TOKEN (403)" in line
    assert "not-the-cluster-token" not in line
    line = _one_error(harness("submit", str(QUICKSTART), *common))
    assert "requires a token" in line and "RAY_AUTH_TOKEN" in line
    line = _one_error(harness("jobs", "list", "--address", ray_head.address, "--env-file", str(wrong)))
    assert "rejected the token" in line
    assert job_ids(ray_head) == before


def test_unreachable_address(cluster_root: Path) -> None:
    address = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = _one_error(harness("submit", str(QUICKSTART), "--smoke", "--address", address,
                              "--tracking-uri", "http://127.0.0.1:9", "--skip-tracking-check"))
    assert f"Ray job server at {address} is not reachable" in line
    line = _one_error(harness("jobs", "list", "--address", address))
    assert "is not reachable" in line


@pytest.mark.heavy
def test_unreachable_tracking_server_is_caught_before_submission(ray_head: RayHead, cluster_root: Path) -> None:
    env_file = write_env_file(cluster_root / "ok2.env", RAY_AUTH_TOKEN=ray_head.token)
    before = job_ids(ray_head)
    line = _one_error(harness("submit", str(QUICKSTART), "--smoke", "--address", ray_head.address,
                              "--env-file", str(env_file), "--tracking-uri", f"http://127.0.0.1:{free_port()}"))
    assert "is not reachable" in line and "tracking URI" in line
    assert job_ids(ray_head) == before


# -- the quickstart study as a Ray Job -----------------------------------------------------------

@pytest.mark.heavy
def test_quickstart_smoke_job_succeeds_and_its_runs_are_on_the_mlflow_server(smoke_job: SmokeJob) -> None:
    result = smoke_job.result
    assert result.returncode == 0, explain(result)
    assert smoke_job.job_id.startswith("harness-quickstart-")
    assert f"job {smoke_job.job_id} SUCCEEDED" in result.stderr
    assert "study quickstart: finished" in result.stdout  # the job's own log, streamed by --wait

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in smoke_job.runs:
        by_kind[_tags(run).get("harness.kind", "")].append(run)
    assert [len(by_kind[k]) for k in ("study", "config", "trial")] == [1, 3, 9]
    study_id = by_kind["study"][0]["info"]["run_id"]
    configs = {r["info"]["run_id"]: r for r in by_kind["config"]}
    for run in configs.values():
        assert _tags(run)["mlflow.parentRunId"] == study_id
        if _tags(run)["harness.role"] == "candidate":
            assert {"map_p", "map_delta", "map_mean"} <= set(_metrics(run))
            assert _tags(run)["harness.marker.map"]
    for run in by_kind["trial"]:
        assert _tags(run)["mlflow.parentRunId"] in configs
        assert run["info"]["status"] == "FINISHED" and "test_map" in _metrics(run)
    assert sorted({_tags(r)["harness.seed"] for r in by_kind["trial"]}) == ["1", "2", "3"]
    # Smoke settings reached the cluster; the params are the resolved config.
    params = {p["key"]: p["value"] for p in by_kind["trial"][0]["data"]["params"]}
    assert params["model.name"] == "tiny" and params["train.steps"] == "6"


@pytest.mark.heavy
def test_artifacts_go_through_the_tracking_server(smoke_job: SmokeJob, mlflow_server: Any) -> None:
    assert smoke_job.result.returncode == 0, explain(smoke_job.result)
    trial = next(r for r in smoke_job.runs if _tags(r).get("harness.kind") == "trial")
    listed = rest(mlflow_server.url, f"/api/2.0/mlflow/artifacts/list?run_id={trial['info']['run_id']}")
    assert "per_query" in {f["path"] for f in listed.get("files", [])}
    # Stored by the server under its own artifact root, not on the job's disk.
    assert list((mlflow_server.root / "artifacts").rglob("test.csv"))


@pytest.mark.heavy
def test_secrets_never_reach_output_params_or_artifacts(smoke_job: SmokeJob, ray_head: RayHead,
                                                        mlflow_server: Any) -> None:
    result = smoke_job.result
    assert result.returncode == 0, explain(result)
    assert "MLFLOW_TRACKING_PASSWORD=***" in result.stderr  # shown as set, never its value
    listing = harness("jobs", "list", "--address", ray_head.address, "--env-file", str(smoke_job.env_file))
    logs = harness("jobs", "logs", smoke_job.job_id, "--address", ray_head.address,
                   "--env-file", str(smoke_job.env_file))
    assert listing.returncode == 0 and smoke_job.job_id in listing.stdout, explain(listing)
    assert logs.returncode == 0 and "study quickstart: finished" in logs.stdout, explain(logs)
    for text in (result.stdout, result.stderr, listing.stdout, logs.stdout):
        assert FAKE_SECRET not in text and ray_head.token not in text
    for path in mlflow_server.root.rglob("*"):  # the SQLite store (params, tags) and every artifact
        if path.is_file():
            assert FAKE_SECRET.encode() not in path.read_bytes(), path
            assert ray_head.token.encode() not in path.read_bytes(), path


@pytest.mark.heavy
def test_jobs_stop_and_unknown_job(ray_head: RayHead, smoke_job: SmokeJob) -> None:
    env_file = str(smoke_job.env_file)
    result = harness("jobs", "stop", smoke_job.job_id, "--address", ray_head.address, "--env-file", env_file)
    assert result.returncode == 0 and "not running (SUCCEEDED)" in result.stdout, explain(result)
    line = _one_error(harness("jobs", "logs", "no-such-job", "--address", ray_head.address, "--env-file", env_file))
    assert "no job no-such-job" in line
