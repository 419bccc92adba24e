"""`harness table` and `harness report` before and after a change, side by side, on one machine.

The finished small study of table_report.py (three configurations x three seeds x 50 test queries,
six metrics with per-query values, one failed seed run; MLflow SQLite, written once by this
checkout) is read by both checkouts' `python -m harness.cli` (a new interpreter each time: imports
included, as the user pays them), interleaved (before table, after table, before report, after
report) ``--rounds`` times, so a change in the machine's load falls on both alike. The record is
each command's median wall time, with the load average before and after and the machine.

    git worktree add /tmp/before 4f543bf
    python benchmarks/table_speed.py --before /tmp/before [--rounds 5]

Results: benchmarks/results/table_speed.json (the latest run), table_speed.md (read by a person).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe
from table_report import STUDY, write_study

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def commit_of(checkout: Path) -> str:
    return subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one command."""
    cpu, start = cpu_of_children(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "harness.cli", *argv], env=env, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 3):  # 3: the study is marked incomplete (its failed seed run)
        raise SystemExit(f"{argv[0]} failed ({done.returncode}): {done.stderr[-500:]}")
    return wall, cpu_of_children() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout before the change")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shared", default="",
                        help="a note on what else ran on the machine (recorded as given)")
    args = parser.parse_args()
    checkouts = {"before": args.before.resolve(), "after": ROOT}
    times: dict[str, dict[str, list[float]]] = {k: {"table": [], "report": []} for k in checkouts}
    cpu: dict[str, dict[str, list[float]]] = {k: {"table": [], "report": []} for k in checkouts}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="harness-table-speed-") as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        write_study(uri)
        commands = {"table": ["table", "--experiment", STUDY],
                    "report": ["report", "--experiment", STUDY, "--to", f"{tmp}/report.html"]}
        for _ in range(args.rounds):
            for command, argv in commands.items():
                for label, code in checkouts.items():
                    env = {**os.environ, "PYTHONPATH": str(code), "MLFLOW_TRACKING_URI": uri, "HF_HUB_OFFLINE": "1"}
                    wall, used = timed(argv, env)
                    times[label][command].append(wall)
                    cpu[label][command].append(used)
    entry = {"rounds": args.rounds, "commits": {k: commit_of(v) for k, v in checkouts.items()},
             "median_s": {label: {c: statistics.median(v) for c, v in t.items()} for label, t in times.items()},
             "median_cpu_s": {label: {c: statistics.median(v) for c, v in t.items()} for label, t in cpu.items()},
             "times_s": times, "cpu_s": cpu, "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
             "shared": args.shared, "machine": describe("mlflow", "scipy")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "table_speed.json").write_text(json.dumps(entry, indent=1) + "\n")
    print(json.dumps({"wall": entry["median_s"], "cpu": entry["median_cpu_s"]}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
