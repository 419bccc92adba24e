"""benchmarks/device.py, the prepared GPU run, without a GPU: its plan fits its budget in the order
the goals need, it writes a stage that reads back, and its CPU rehearsal (the same rows, small,
compiled code paths, the device machine's missing packages blocked) runs every row to a result."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra}


@pytest.mark.slow
def test_the_plan_fits_the_budget_in_the_goals_order():
    import device

    planned, stretch = device.fit(device.plan(rehearse=False), device.BUDGET_S)
    assert sum(r.estimate_s for r in planned) <= device.BUDGET_S < 9 * 60
    labels = [r.label() for r in planned]
    assert labels[:3] == ["harness bert-base 128", "harness-fused bert-base 128", "harness packaged 128"]
    assert {"hf bert-base 128", "st bert-base 128", "hf packaged 128", "st packaged 128"} <= set(labels)
    # 512, packing and cascade come after every length-128 trainer row
    later = [r for r in planned + stretch if r.length == 512 or r.kind != "trainer"]
    first_later = (planned + stretch).index(later[0])
    assert all(r.length == 128 and r.kind == "trainer" for r in (planned + stretch)[:first_later])
    assert [r.kind for r in later][-2:] == ["cascade", "cascade"]
    # the rehearsal runs the same rows, small
    small = device.plan(rehearse=True)
    assert [(r.kind, r.trainer) for r in small] == [(r.kind, r.trainer) for r in device.plan(rehearse=False)]
    assert {r.model for r in small} == {"tiny", "packaged"} and {r.length for r in small} == {32, 64}


@pytest.mark.slow
def test_a_budget_too_small_for_a_row_plans_none_and_stretches_all():
    import device

    rows = device.plan(rehearse=False)
    planned, stretch = device.fit(rows, 10.0)
    assert planned == [] and stretch == rows


@pytest.mark.slow
def test_the_benchmark_reads_the_loss_back_as_often_as_a_study():
    import peers

    from harness.training.loop import Trainer

    assert peers.LOG_EVERY == inspect.signature(Trainer).parameters["log_every"].default
    assert peers.LOG_EVERY > 1


@pytest.mark.slow
def test_blocked_packages_fail_to_import_as_if_absent():
    code = ("import staged; staged.block_imports()\n"
            "try:\n    import mlflow\nexcept ImportError as e:\n    print('blocked', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=ROOT / "benchmarks", env=_env(HARNESS_BENCH_BLOCK="mlflow,ray"))
    assert out.returncode == 0 and out.stdout.startswith("blocked"), out.stderr[-2000:]


def test_bench_gpu_runs_no_pip():
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\nbench-gpu:", 1)[1].split("\n\n", 1)[0]
    assert "pip" not in recipe and "device" in recipe


def test_no_stage_is_refused_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device.py"), "--rehearse", "--out",
                          str(tmp_path), "--stage-dir", str(tmp_path / "none")], capture_output=True, text=True,
                         check=False, env=_env())
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--stage" in out.stderr


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """A stage of the tests' data set size (30 conversations), written as ``--stage`` writes one."""
    where = tmp_path_factory.mktemp("stage")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device.py"), "--stage", str(where),
                          "--conversations", "30"], capture_output=True, text=True, check=False, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return where


@pytest.mark.heavy  # minutes: the stage, then every row of the plan in its own process
def test_the_rehearsal_runs_every_row_of_the_plan(stage, tmp_path):
    manifest = json.loads((stage / "manifest.json").read_text())
    assert manifest["bytes"] < 60 * 2**20  # travels with the tree under the 64 MiB limit
    out = tmp_path / "out"
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_run.sh"), "--rehearse", "--budget-s", "0"],
                         capture_output=True, text=True, check=False,
                         env=_env(OUT=str(out), HARNESS_BENCH_STAGE=str(stage), PYTHON=sys.executable))
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    kinds = [x["kind"] for x in lines]
    assert kinds[:3] == ["env", "plan", "peak"] and kinds[-1] == "done"
    assert lines[0]["rehearsal"] is True
    rows = [x for x in lines if x["kind"] in ("trainer", "packing", "cascade")]
    import device

    assert len(rows) == len(device.plan(rehearse=True))
    ours = [x for x in rows if x["kind"] == "cascade" or x["trainer"].startswith("harness")]
    assert [x for x in ours if "error" in x] == []
    # a peer may lack its own packages here (the Hugging Face Trainer needs accelerate,
    # sentence-transformers' trainer datasets): reported as such, never a crash of the run
    assert all("ImportError" in x["error"] or "ModuleNotFoundError" in x["error"] for x in rows if "error" in x)
    trainers = [x for x in rows if x["kind"] == "trainer"]
    assert [(x["trainer"], x["model"]) for x in trainers[:3]] == [
        ("harness", "tiny"), ("harness-fused", "tiny"), ("harness", "packaged")]
    for x in (x for x in trainers if "error" not in x):
        assert x["pairs_per_s"] > 0 and x["step_ms"] > 0 and "mfu" in x and "gpu" in x
    fused = trainers[1]
    assert fused["pairs"] == 2 * 4 * 2  # 2 seeds x batch 4 x 2 timed steps, every seed counted
    harness = [x for x in trainers if x["trainer"] in ("harness", "harness-fused")]
    # compiled (aot_eager): every width compiled before training, none inside the timed window
    assert all(x["compiled"] and x["compiles"] >= 1 and x["compiles_in_window"] == 0 for x in harness), harness
    assert trainers[2]["eval_pairs_per_s"] > 0
    assert (out / "gpu.json").is_file() and "smoke run" in (out / "gpu.md").read_text().lower()
    assert (out / "env.txt").read_text().strip()
