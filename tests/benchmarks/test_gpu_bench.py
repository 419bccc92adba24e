"""benchmarks/gpu.py without a GPU: its help, its refusal to time on a CPU, its FLOP count, and a
smoke run (tiny model, a few steps) that writes both result files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu.py"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          check=False)


def test_help_names_the_peers_and_the_smoke_option():
    out = _run("--help")
    assert out.returncode == 0
    assert "--smoke" in out.stdout and "CrossEncoderTrainer" in out.stdout and "group_by_length" in out.stdout


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_to_time_on_a_cpu_in_one_line():
    out = _run("--device", "cpu", "--out", "/nonexistent/gpu")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--smoke" in out.stderr and "Traceback" not in out.stderr


def test_train_flops_counts_projections_ffn_and_quadratic_attention():
    import gpu

    dims = {"hidden": 4, "ffn": 8, "layers": 2, "heads": 1}
    # one pair of length 3: per layer 2*3*(4*16 + 2*4*8) + 4*9*4 = 768 + 144; x2 layers x3 (training)
    assert gpu.train_flops(dims, 3.0, 9.0) == 3 * 2 * (768 + 144)
    assert gpu.datasheet_peak("NVIDIA H100 80GB HBM3") == 989.4
    assert gpu.datasheet_peak("NVIDIA H100 PCIe") == 756.0
    assert gpu.datasheet_peak("Some GPU") is None


@pytest.mark.heavy
def test_smoke_run_writes_results_that_say_it_is_a_smoke_run(tmp_path):
    out = _run("--smoke", "--trainers", "harness", "--packing", "2", "--out", str(tmp_path / "gpu"))
    assert out.returncode == 0, out.stderr[-2000:]
    rec = json.loads((tmp_path / "gpu.json").read_text())
    assert rec["smoke"] is True and rec["gpu"]["name"] is None
    assert rec["data"]["data.conversations"] == 30  # the data set of the tests' studies
    (row,) = rec["trainers"]
    assert row["trainer"] == "harness" and row["pairs"] == 4 and row["pairs_per_s"] > 0
    assert row["eval_pairs"] >= 64 and row["eval_pairs_per_s"] > 0  # score_candidates, timed
    assert rec["cascade"][0]["results"][0]["setting"] == "plain"
    # two trials sharing the device, each process timing the same steps after the barrier
    plain, fused = rec["packing"]
    assert (plain["trainer"], plain["trials_per_gpu"], plain["seeds_per_trial"]) == ("harness", 2, 1)
    assert len(plain["per_trial_pairs_per_s"]) == 2 and plain["pairs"] == 2 * 4
    assert (fused["trainer"], fused["seeds_per_trial"]) == ("harness-fused", 2)
    assert fused["pairs"] == 2 * 2 * 4, fused  # two trials of two fused seeds, one timed step of 4 pairs each
    assert "has not run" in (tmp_path / "gpu.md").read_text()


@pytest.mark.slow
def test_the_time_budget_stops_what_runs_at_it_and_skips_the_rest(tmp_path):
    """``--budget-s``: one job ends in time, the next is still running at the deadline (stopped),
    the last one's turn comes after it (skipped, though started ahead); each gets its result."""
    import time

    import gpu

    done = [sys.executable, "-c", 'print("RESULT " + \'{"pairs": 4}\')']
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    jobs = [({"trainer": name, "model": "tiny", "length": 32}, [cmd]) for name, cmd in
            (("done", done), ("slow", slow), ("late", done))]
    t0 = time.monotonic()
    got = list(gpu.pipeline(jobs, tmp_path, ahead=1, deadline=t0 + 4.0))
    assert time.monotonic() - t0 < 30
    assert [(meta["trainer"], results) for meta, results, _ in got] == [
        ("done", [{"pairs": 4}]), ("slow", [{"error": gpu.KILLED_AT_DEADLINE}]), ("late", [{"error": gpu.OUT_OF_TIME}])]
