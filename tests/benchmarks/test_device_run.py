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
    # the rehearsal runs the same rows, small, each distinct one once
    small = device.plan(rehearse=True)
    full = device.plan(rehearse=False)
    assert (list(dict.fromkeys((r.kind, r.trainer) for r in small))
            == list(dict.fromkeys((r.kind, r.trainer) for r in full)))
    assert len({(r.kind, r.model, r.length, r.trainer, r.trials) for r in small}) == len(small)
    assert {r.model for r in small} == {"tiny", "packaged"} and {r.length for r in small} == {32, 64}
    # the packaged encoder's own rows keep it (they read the stage's weights)
    assert [r.label() for r in small if r.model == "packaged"] == [
        "harness packaged 32", "hf packaged 32", "st packaged 32", "cascade packaged 32"]


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


PROBE = "harness_stage_probe"


def _probe_wheel(folder: Path) -> Path:
    """A pure-Python wheel of a one-module package, written here (no index): what the stage's
    wheels are, for the real pip to download from a folder and install."""
    import base64
    import hashlib
    import zipfile

    files = {f"{PROBE}/__init__.py": "VERSION = '1.0'\n",
             f"{PROBE}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n",
             f"{PROBE}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"}

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    record = "".join(f"{n},{digest(t)},{len(t.encode())}\n" for n, t in files.items())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{PROBE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in {**files, f"{PROBE}-1.0.dist-info/RECORD": record + f"{PROBE}-1.0.dist-info/RECORD,,\n"}.items():
            z.writestr(name, text)
    return path


def test_the_stage_downloads_its_wheels_for_the_device_python(tmp_path):
    """``pip download`` for CPython 3.12 on x86-64 Linux, the tags a pure-Python wheel carries
    accepted (the stage's datasets, dill and multiprocess are such wheels); here from a local folder."""
    import staged

    _probe_wheel(tmp_path / "index")
    pins = staged.write_wheels(tmp_path / "wheels", python="3.12", find_links=tmp_path / "index",
                               pins={PROBE.replace("_", "-"): "1.0"})
    assert pins == {"harness-stage-probe": "1.0"}
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == [f"{PROBE}-1.0-py3-none-any.whl"]
    with pytest.raises(SystemExit, match="harness-stage-probe.*3.12"):
        staged.write_wheels(tmp_path / "none", python="3.12", find_links=tmp_path / "index",
                            pins={"harness-stage-probe": "2.0"})


@pytest.fixture(scope="module")
def stage(tmp_path_factory):
    """A stage of the tests' data set size (30 conversations), written by ``--stage`` (its ``main``,
    in this process: the same code without a second start-up of torch), carrying a probe wheel
    for the run to install (the real ones, datasets and its two, come from an index: installed
    here by the test extra)."""
    import device

    where = tmp_path_factory.mktemp("stage")
    wheels = _probe_wheel(tmp_path_factory.mktemp("wheels")).parent
    assert device.main(["--stage", str(where), "--conversations", "30", "--wheels-from", str(wheels)]) == 0
    return where


def test_the_device_machine_lacks_every_package_outside_torch_transformers_and_st():
    import staged

    lacks = set(staged.device_lacks())
    assert set(staged.DEVICE_LACKS) <= lacks
    # installed here, required by none of what the run may import: the rehearsal cannot import them
    assert {"statsmodels", "matplotlib", "numba", "mlflow", "optuna"} <= lacks
    # what those require is there or travels with them (datasets as the stage's wheels, its
    # pandas and pyarrow on the machine); the harness travels with the tree
    assert not {"torch", "transformers", "sentence_transformers", "accelerate", "datasets", "dill", "multiprocess",
                "pandas", "pyarrow", "numpy", "safetensors", "tokenizers", "scipy", "yaml", "harness"} & lacks


@pytest.mark.slow  # the stage: the packaged encoder and the data set written
def test_a_stage_missing_a_file_is_refused_in_one_line_before_any_row(stage, tmp_path):
    import shutil

    broken = tmp_path / "stage"
    shutil.copytree(stage, broken)
    (broken / "packaged" / "model.safetensors").unlink()
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device.py"), "--rehearse", "--out",
                          str(tmp_path / "out"), "--stage-dir", str(broken)], capture_output=True, text=True,
                         check=False, env=_env())
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert "packaged/model.safetensors" in out.stderr and "missing" in out.stderr
    assert not (tmp_path / "out").exists()


# every row of the plan in its own process, as on the GPU, small: still minutes on 2 cores (each
# plain harness row's compiled step takes most of its process's time), so heavy
@pytest.mark.heavy
def test_the_rehearsal_runs_every_row_of_the_plan(stage, tmp_path):
    manifest = json.loads((stage / "manifest.json").read_text())
    assert manifest["bytes"] < 60 * 2**20  # travels with the tree under the 64 MiB limit
    out = tmp_path / "not" / "yet" / "out"  # the script makes its OUT folder
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
    # every row measured, the peers too (accelerate is on the device machine, datasets in the stage;
    # here both come with the test extra)
    assert [x for x in rows if "error" in x] == []
    trainers = [x for x in rows if x["kind"] == "trainer"]
    assert [(x["trainer"], x["model"]) for x in trainers[:3]] == [
        ("harness", "tiny"), ("harness-fused", "tiny"), ("harness", "packaged")]
    for x in (x for x in trainers if "error" not in x):
        assert x["pairs_per_s"] > 0 and x["step_ms"] > 0 and "mfu" in x and "gpu" in x
    fused = trainers[1]
    assert fused["pairs"] == 2 * 4 * 1  # 2 seeds x batch 4 x 1 timed step, every seed counted
    harness = [x for x in trainers if x["trainer"] in ("harness", "harness-fused")]
    # compiled (aot_eager): every width compiled before training, none inside the timed window
    assert all(x["compiled"] and x["compiles"] >= 1 and x["compiles_in_window"] == 0 for x in harness), harness
    assert trainers[2]["eval_pairs_per_s"] > 0
    assert (out / "gpu.json").is_file() and "smoke run" in (out / "gpu.md").read_text().lower()
    assert (out / "env.txt").read_text().strip()


def test_the_quick_rehearsal_plans_each_code_path_once():
    import device

    small, quick = device.plan(rehearse=True), device.plan(rehearse=True, quick=True)
    paths = [device.path_of(r) for r in quick]
    assert len(set(paths)) == len(paths) and set(paths) == {device.path_of(r) for r in small}
    assert [r.label() for r in quick if r.compile] == ["harness tiny 32", "harness-fused tiny 32"]
    assert all(r.compile for r in small)


# each code path of the plan once: the rows in this process but the trials sharing the device,
# which are processes; compiled where compiling is the row's point (`make test`'s rehearsal)
@pytest.mark.slow
def test_the_quick_rehearsal_runs_each_code_path(stage, tmp_path):
    import device

    out = tmp_path / "out"
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_run.sh"), "--rehearse", "--quick",
                          "--budget-s", "0"], capture_output=True, text=True, check=False,
                         env=_env(OUT=str(out), HARNESS_BENCH_STAGE=str(stage), PYTHON=sys.executable))
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert lines[0]["quick"] is True and lines[-1]["kind"] == "done"
    rows = [x for x in lines if x["kind"] in ("trainer", "packing", "cascade")]
    quick = device.plan(rehearse=True, quick=True)
    assert len(rows) == len(quick)
    assert [x for x in rows if "error" in x] == []  # the peers' rows too
    # the stage's wheels installed and importable in the run's processes, as there
    assert "installed" in lines[0]["wheels"] and f"{PROBE}-1.0" in lines[0]["wheels"], lines[0]["wheels"]
    assert lines[0]["versions"]["datasets"] and lines[0]["versions"]["accelerate"]
    trainers = {(x["trainer"], x["model"]): x for x in rows if x["kind"] == "trainer"}
    for key in (("harness", "tiny"), ("harness-fused", "tiny")):  # compiled: one graph, before the window
        x = trainers[key]
        assert x["compiled"] and x["compiles"] >= 1 and x["compiles_in_window"] == 0 and x["graph_breaks"] == 0, x
    packaged = trainers[("harness", "packaged")]  # the stage's fp16 weights, trained in float32
    assert not packaged["compiled"] and packaged["eval_pairs_per_s"] > 0 and packaged["pairs_per_s"] > 0
    assert trainers[("harness-fused", "tiny")]["pairs"] == 2 * 4 * 1
    (packing,) = [x for x in rows if x["kind"] == "packing"]
    assert len(packing["per_trial_pairs_per_s"]) == 2
    assert (out / "gpu.json").is_file()
    env = (out / "env.txt").read_text()  # the machine's versions, read before anything runs
    assert "datasets " in env and "accelerate " in env and "sentence-transformers " in env
