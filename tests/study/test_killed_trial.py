"""A trial whose worker process Ray loses (killed, as Ray's memory monitor or the kernel's OOM killer
kills it) is one line on the terminal: which trial, why, and the command that runs it again; no Ray
traceback. Through real Ray and MLflow: `harness run` in a subprocess whose trial kills its own
worker process with SIGKILL as it starts (tests/study/hooked_run.py --die), then `--resume`
finishes the study. docs/reliability.md."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver._callback import CAUSE_DIED, CAUSE_NODE, CAUSE_OOM, cause_of
from harness.study import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """The driver's RAY_TMPDIR: short, as Ray's socket paths must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kill-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(root: Path, ray_tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "tests.study.hooked_run", str(root / "trials.log"), *argv],
                          env=env, capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)


@pytest.mark.heavy
def test_a_trial_whose_worker_dies_is_one_line_with_its_cause_and_the_resume_command(tmp_path: Path,
                                                                                      ray_tmp: Path) -> None:
    path = write_study(tmp_path, "killed", seeds=[1, 2], concurrency=1, failure={"max_retries": 0})
    spec = load_spec(path)
    key = f"{spec.baseline.config.config_id()}-seed1"
    done = _run(tmp_path, ray_tmp, "--die", key, "run", str(path))
    out = done.stdout + done.stderr
    resume = f"harness run {path} --resume"
    failed = [line for line in out.splitlines() if "seed 1" in line and "FAILED" in line]
    assert len(failed) == 1, out[-4000:]
    assert CAUSE_DIED in failed[0] and f"`{resume}` runs it again" in failed[0], failed[0]
    # none of Ray's traceback or its error's own words: Tune's per-trial traceback is off
    at = out.find("Traceback (most recent call last)")
    assert at < 0, out[max(0, at - 2000):at + 2000]
    assert "The actor died" not in out and "The actor is dead" not in out, out[-4000:]
    assert "A worker died or was killed" not in out, out[-4000:]  # the raylet's report of it
    assert "seed 2: done" in out  # the other seed ran on

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("killed")
    seed_runs = {r.data.tags[C.TAG_SEED]: r for r in client.search_runs(
        [exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")}
    assert seed_runs["1"].info.status == "FAILED" and seed_runs["2"].info.status == "FINISHED"
    assert seed_runs["1"].data.tags[C.TAG_ERROR].startswith(f"{CAUSE_DIED} (traceback: ")

    # The command the line names runs the trial again (no kill this time) and finishes the study.
    again = _run(tmp_path, ray_tmp, "run", str(path), "--resume")
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    finished = [r for r in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")
                if r.data.tags[C.TAG_SEED] == "1" and r.info.status == "FINISHED"]
    assert len(finished) == 1


def _actor_error(detail: str) -> BaseException:
    from ray import exceptions as rx

    return rx.RayActorError(error_msg=f"The actor is dead because its worker process has died. {detail}")


@pytest.mark.parametrize(("error", "cause"), [
    (lambda rx: rx.OutOfMemoryError("Task was killed due to the node running low on memory."), CAUSE_OOM),
    (lambda rx: _actor_error("Worker exit type: NODE_OUT_OF_MEMORY Worker exit detail: Task was killed due to "
                             "the node running low on memory."), CAUSE_OOM),
    (lambda rx: rx.NodeDiedError("node 10.0.0.2 died"), CAUSE_NODE),
    (lambda rx: _actor_error("The actor died because its node has died."), CAUSE_NODE),
    (lambda rx: rx.ActorDiedError(), CAUSE_DIED),
    (lambda rx: rx.WorkerCrashedError(), CAUSE_DIED),
    (lambda rx: RuntimeError("injected failure"), None),  # the trial's own code: its traceback says why
])
def test_the_cause_is_read_from_rays_error(error, cause) -> None:
    from ray import exceptions as rx

    assert cause_of(error(rx)) == cause
