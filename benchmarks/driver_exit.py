"""A study driver's exit: `harness run` through the console entry against ``main`` alone.

The console entry (``harness.cli.entry``) runs ``main`` and then freezes the heap
(``harness.heap.then_exit``), so the interpreter's last collections skip the driver's modules and
prepared data; the entry before was ``main`` alone. Both variants run the same tiny study
(benchmarks/study.py's: baseline and LS, seeds 1-3, 6 steps of the tiny model on local Ray, MLflow
SQLite, a data cache built by an uncounted warm-up run) as a subprocess, in alternating order; each run's exit is the time from the driver's last line on stderr
to the end of the process (Ray's own shutdown included, which both pay), and its total the whole
run. The study driver's ``frozen()`` block (harness.heap) is in both: this isolates the exit.

    python benchmarks/driver_exit.py [--rounds 3]
Results: benchmarks/results/driver_exit.{json,md} with the machine and its load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import describe
from study import CANDIDATE, STUDY  # benchmarks/study.py's tiny study

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
VARIANTS = {
    "entry": ["-m", "harness.cli"],
    "main": ["-c", "import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))"],
}


def run_once(variant: str, n: int, cache: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="harness-exit-") as tmp:
        study = Path(tmp) / "study.yaml"
        study.write_text(STUDY.format(name=f"exit-{n}", steps=6, eval_every=3, cpus=1, gpus=0, configs=CANDIDATE,
                                      seeds=[1, 2, 3], concurrency=2, storage=Path(tmp) / "runs"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update(MLFLOW_TRACKING_URI=f"sqlite:///{tmp}/mlflow.db", HARNESS_CACHE=cache)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *VARIANTS[variant], "run", str(study)], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        last = started
        assert proc.stderr is not None
        for _ in proc.stderr:
            last = time.perf_counter()
        code = proc.wait()
        ended = time.perf_counter()
        if code != 0:
            raise SystemExit(f"{variant} run {n} exited {code}")
    return {"exit_s": ended - last, "total_s": ended - started}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="harness-exit-cache-")
    run_once("entry", 0, cache)  # builds the data cache; not counted
    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    n = 0
    for r in range(args.rounds):
        for variant in (VARIANTS if r % 2 == 0 else reversed(list(VARIANTS))):
            n += 1
            runs[variant].append(run_once(variant, n, cache))
            print(f"round {r + 1} {variant}: {runs[variant][-1]}", file=sys.stderr, flush=True)
    summary: dict[str, Any] = {v: {key: statistics.median(x[key] for x in rs) for key in ("exit_s", "total_s")}
                               for v, rs in runs.items()}
    record = {"machine": describe("ray", "mlflow"), "load_average": os.getloadavg(), "rounds": args.rounds,
              "runs": runs, "median": summary,
              "exit_ratio": summary["main"]["exit_s"] / summary["entry"]["exit_s"]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "driver_exit.json").write_text(json.dumps(record, indent=2) + "\n")
    m = record["machine"]
    lines = ["# A study driver's exit: console entry (main, then the heap frozen) vs main alone", "",
             (f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, ray {m['ray']}, mlflow {m['mlflow']}; "
             f"load average at the end {', '.join(f'{x:.2f}' for x in record['load_average'])}. "
             f"{args.rounds} rounds, variants alternating; medians."), "",
             "| variant | exit (last line to process end) | whole run |", "|---|--:|--:|"]
    for v in VARIANTS:
        each = ", ".join(f"{x['exit_s']:.2f}" for x in runs[v])
        lines.append(f"| {v} | {summary[v]['exit_s']:.2f} s ({each}) | {summary[v]['total_s']:.1f} s |")
    lines += ["", (f"The entry's exit is {record['exit_ratio']:.2f}x shorter. Both include Ray's own shutdown; "
              "`python benchmarks/driver_exit.py` reproduces this.")]
    (RESULTS / "driver_exit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
