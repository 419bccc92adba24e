"""`harness table` and `harness report` on a finished small study, as a user runs them.

A study of three configurations x three seeds x 50 test queries with the six metrics of a real
study (map, mrr, mrr_10, p_1, rprec, ndcg_10; per-query values) is written once into a fresh MLflow
SQLite store, as `harness run` writes it (harness.tracking.records.StudyRecords, no Ray), together
with one failed seed run. Then each command runs as a subprocess (`python -m harness.cli ...`, a
new interpreter each time: imports included, as the user pays them), alternating, ``--rounds``
times; the record is the median wall time of each. ``--code DIR`` runs the commands with another
checkout's harness first on PYTHONPATH (the "before" of a change), the store written once by this
one.

    python benchmarks/table_report.py [--rounds 5] [--code /path/to/checkout] [--label after]
Results: benchmarks/results/table_report.{json,md} (one entry per label) with the machine.
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

import numpy as np
from machine import describe

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STUDY = "bench-table"
CONFIGS = {"baseline": 0.0, "curriculum": 0.05, "smoothing": 0.01}
METRICS = ("map", "mrr", "mrr_10", "p_1", "rprec", "ndcg_10")


def write_study(uri: str, queries: int = 50, seeds: int = 3) -> None:
    """The finished study (module docstring) in the store at ``uri``."""
    os.environ["MLFLOW_TRACKING_URI"] = uri
    from harness.config import TrialConfig
    from harness.metrics.measures import mean_of
    from harness.study.protocol import TrialOutcome, TrialTicket
    from harness.tracking import conventions as C
    from harness.tracking.records import StudyRecords
    from harness.tracking.store import TrackingStore

    g = np.random.default_rng(8)
    qids = [f"q{i:03d}" for i in range(queries)]
    hardness = g.uniform(0.0, 1.5, queries)
    writer = StudyRecords.open(TrackingStore(uri), STUDY)
    writer.study_started(params={})
    tickets = {}
    for i, (name, gain) in enumerate(CONFIGS.items()):
        flat: dict[str, Any] = {"model.name": "tiny"}
        if i:
            flat.update({"smoothing.method": "LS", "smoothing.epsilon": 0.1 * i})
        tickets[name] = (name, C.ROLE_CANDIDATE if i else C.ROLE_BASELINE, TrialConfig.from_flat(flat))
        for seed in range(1, seeds + 1):
            ranks = np.clip(np.round(1 + 4 * hardness - 20 * gain + g.normal(0, 0.8, queries)), 1, 10)
            rr, p1, ndcg = 1.0 / ranks, (ranks == 1).astype(float), 1.0 / np.log2(ranks + 1)
            values = dict(zip(METRICS, (rr, rr, rr, p1, p1, ndcg), strict=True))
            per_query = {m: dict(zip(qids, v.tolist(), strict=True)) for m, v in values.items()}
            ticket = TrialTicket.of(*tickets[name], seed)
            test = {m: mean_of(v.values()) for m, v in per_query.items()}
            writer.trial_finished(ticket, TrialOutcome(ticket.key, test["map"], test=test, evaluation="e"),
                                  per_query)
    writer.trial_failed(TrialTicket.of(*tickets["baseline"], 99), "injected")
    writer.end()


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "harness.cli", *argv], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose harness runs the commands")
    parser.add_argument("--label", default="after")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="harness-table-") as tmp:
        uri = f"sqlite:///{tmp}/mlflow.db"
        write_study(uri)
        env = {**os.environ, "PYTHONPATH": str(args.code.resolve()), "MLFLOW_TRACKING_URI": uri,
               "HF_HUB_OFFLINE": "1"}
        commands = {"table": ["table", "--experiment", STUDY],
                    "report": ["report", "--experiment", STUDY, "--to", f"{tmp}/report.html"]}
        times: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(args.rounds):
            for name, argv in commands.items():
                times[name].append(timed(argv, env))
    load = os.getloadavg()
    entry = {"label": args.label, "code": str(args.code), "rounds": args.rounds,
             "median_s": {k: statistics.median(v) for k, v in times.items()},
             "times_s": times, "loadavg": load, "machine": describe("mlflow")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "table_report.json"
    entries = json.loads(path.read_text()) if path.exists() else []
    entries = [e for e in entries if e["label"] != args.label] + [entry]
    path.write_text(json.dumps(entries, indent=1) + "\n")
    print(json.dumps(entry["median_s"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
