"""GPU benchmark: trainer throughput and model FLOP utilisation (MFU) in bf16, the Hugging Face peers
side by side, and the cascade's realised vs predicted speed-up.

Trainers (each in its own process, one after the other, same training pairs, batch, steps, AdamW
lr 5e-5, bf16 autocast / mixed precision, SDPA attention): ``harness``, ``hf`` (the Hugging Face
Trainer with dynamic padding and group_by_length) and ``st`` (sentence-transformers'
CrossEncoderTrainer), defined in ``benchmarks/peers.py`` and shared with ``benchmarks/trainer.py``.
Models: ``packaged`` (the 6-layer MiniLM-L6-H384 shipped with the harness) and ``bert-base`` (a
randomly initialised BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072), at each ``--lengths``.

Timing: ``--warmup`` steps first (kernel selection, allocator growth; the harness compiles every
batch width before its first step), then ``--steps`` timed steps, synchronised wall clock. The
harness trainers run as a study runs them (the loss read back every ``peers.LOG_EVERY`` steps) and
report the compiles inside their timed window. Every training batch's attention mask is counted
(``peers.Meter``: the harness's when its step consumes it, the peers' where they build it), giving
the pairs and their real lengths L. ``benchmarks/device.py`` runs these rows on a lent GPU machine
(``make bench-gpu``).

Model FLOPs (``peers.train_flops``): the full encoder's matrix products on the real tokens of each
pair, training = 3 x forward. Padding is not model work, so a trainer that pads more (or one that
skips work, as the harness's [CLS]-only last layer does) is not credited for it: MFU is model FLOP/s
over the peak, directly comparable between trainers. Peak: the GPU's dense bf16 datasheet figure
(H100 SXM: 989 TFLOP/s) and an 8192^3 bf16 matrix product measured in the same run.

Evaluation (the harness row): pairs/s of ``harness.model.scoring.score_candidates`` with the trained
model, length-sorted batches of ``--eval-batch``, inference mode, bf16 as in training.

Trials sharing a GPU: ``--packing`` N = 1, 2, 4, 8 trainer processes on the one GPU (what a fractional
``resources.gpus`` of 1/N gives Ray trials), ``harness`` and ``harness-fused``, timing the same steps
together: aggregate pairs/s, MFU and the sum of their peak memories.

Cascade: ``benchmarks/cascade.py``'s measurement on the GPU under bf16 autocast, per model and
length (batch 128 candidates of one query; speed-ups from synchronised wall clock).

    python benchmarks/gpu.py                   # on a CUDA machine: everything, ~8 minutes on an H100 (estimated; one unattended command)
    python benchmarks/gpu.py --smoke           # CPU check: tiny model, 30 conversations, 1+1 steps, into a temp folder
Results: benchmarks/results/gpu.{json,md} with the GPU's name, driver and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import peers
from peers import GPU_TRAINERS, RUNNERS, Meter, dims_of, model_dir, train_flops
from staged import block_imports

block_imports()  # $HARNESS_BENCH_BLOCK: packages the device machine lacks (benchmarks/staged.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"
PEAK_BF16_TFLOPS = {  # dense (no sparsity) bf16 tensor-core peaks from the datasheets
    "H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "H800": 989.4,
    "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0,
}


# -- one trainer in its own process (the trainers live in peers.py) ---------------------------

def side(args: argparse.Namespace) -> int:
    print("RESULT " + json.dumps(side_result(args)), flush=True)
    return 0


def in_process(cmd: list[str]) -> dict[str, Any]:
    """The result of a side command (``_side_cmd``'s ``[python, gpu.py, --side, ...]``) run in this
    process instead of its own (``benchmarks/device.py --rehearse --quick``: the same runner and
    result, without a process start-up per row)."""
    args = parser().parse_args(cmd[2:])
    args.deadline = None
    if args.conversations:
        peers.DATA = {**peers.DATA, "data.conversations": args.conversations}
    return side_result(args)


def side_result(args: argparse.Namespace) -> dict[str, Any]:
    """One trainer (``args.side``) timed: ``Meter.result``'s fields, whether it ran compiled, the
    graph breaks met, evaluation pairs/s (harness) and peak memory (CUDA); or ``error``."""
    import torch
    from torch._dynamo.utils import counters

    if args.compile_backend:  # the CPU rehearsal: compiled code paths without code generation
        from harness.training import _compile

        _compile.BACKEND = args.compile_backend
    meter = Meter(args.device)
    args.precision = "bf16"
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any]
    breaks = sum(counters["graph_break"].values())
    try:
        trainer = RUNNERS[args.side](args, meter)
        out = meter.result(args.batch, args.steps)
        # whether the compiled code is what ran (a compile that failed falls back to eager)
        compiled = getattr(trainer, "compiled", None)
        out["compiled"] = compiled is not None and compiled.effective
        out["compile_failed"] = None if compiled is None else compiled.failed
        if args.side in ("harness", "harness-eager") and args.eval_pairs > 0:
            out.update(eval_rate(trainer, args))
        # every graph break dynamo met in this trainer's compiles (a compiled step should have none)
        out["graph_breaks"] = int(sum(counters["graph_break"].values()) - breaks)
        if args.device.startswith("cuda"):
            out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, never faked
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out = {"error": f"{type(exc).__name__}: {first[:300]}"}
    return out


def eval_rate(trainer: Any, args: argparse.Namespace) -> dict[str, float]:
    """Evaluation throughput of the trained model: ``score_candidates`` (length-sorted batches of
    ``--eval-batch``, inference mode, the trainer's bf16 choice) over the first ``--eval-pairs``
    candidate pairs of the training queries; one untimed pass first, then the median of 3 timed
    ones (synchronised wall clock)."""
    import torch

    from harness.model.scoring import score_candidates

    queries, tokens = [], trainer.data.train
    contexts, candidates, n = [], [], 0
    for qi, q in enumerate(trainer.data.splits.train):
        if n >= args.eval_pairs:
            break
        queries.append(q)
        contexts.append(tokens.contexts[qi])
        candidates.append(tokens.candidates[qi])
        n += len(q.candidates)
    toks = type(tokens)(tuple(contexts), tuple(candidates))
    sync = torch.cuda.synchronize if trainer.device.type == "cuda" else (lambda: None)

    def once() -> float:
        sync()
        t0 = time.perf_counter()
        score_candidates(trainer.model, trainer.collator, queries, toks, batch_size=args.eval_batch,
                         device=trainer.device, autocast=trainer.autocast)
        sync()
        return time.perf_counter() - t0

    once()
    return {"eval_pairs": float(n), "eval_pairs_per_s": n / statistics.median(once() for _ in range(3))}


# -- the GPU itself --------------------------------------------------------------------------------

def matmul_peak(device: str, n: int) -> float | None:
    """Measured bf16 matrix-product rate (TFLOP/s): median of 20 n^3 products on random data."""
    import torch

    if not device.startswith("cuda"):
        return None
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16, generator=g)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(20):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        a @ b
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) / 1e3)
    return 2.0 * n**3 / statistics.median(times) / 1e12


def gpu_info(device: str) -> dict[str, Any]:
    import torch

    if not device.startswith("cuda"):
        return {"name": None, "driver": None}
    info: dict[str, Any] = {"name": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                            "memory_gb": torch.cuda.get_device_properties(0).total_memory / 2**30,
                            "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=False)
        driver, clock, power = (x.strip() for x in q.stdout.strip().splitlines()[0].split(","))
        info.update(driver=driver, max_sm_clock=clock, power_limit=power)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        info["driver"] = None
    return info


def datasheet_peak(name: str | None) -> float | None:
    if not name:
        return None
    for key, peak in PEAK_BF16_TFLOPS.items():  # most specific names first
        if key in name:
            return peak
    return None


# -- the driver -----------------------------------------------------------------------------------

def run_trainers(args: argparse.Namespace, root: Path, peak: float | None,
                 measured: float | None) -> list[dict[str, Any]]:
    jobs = []
    for model in args.models:
        path = model_dir(model, root)
        dims = dims_of(path)
        for length in args.lengths:
            for name in args.trainers:
                if name in ("hf-compile", "harness-eager") and model not in args.compile_models:
                    continue
                jobs.append(({"model": model, "length": length, "trainer": name, **dims},
                             [_side_cmd(args, name, path, length, args.steps)]))
    rows = []
    for meta, results, seconds in pipeline(jobs, root, ahead=args.ahead, deadline=args.deadline):
        (res,) = results
        label = f"{meta['model']} length {meta['length']}: {meta['trainer']}"
        if "error" in res:
            print(f"[gpu bench] {label} failed: {res['error']}", file=sys.stderr, flush=True)
        else:
            res.update(utilisation(meta, res, peak, measured))
            print(f"[gpu bench] {label}: {res['pairs_per_s']:.0f} pairs/s, {res['model_tflops']:.1f} TFLOP/s",
                  file=sys.stderr, flush=True)
        rows.append({**meta, "process_s": seconds, **res})
    return rows


def pipeline(jobs: list[tuple[dict[str, Any], list[list[str]]]], root: Path,
             ahead: int = 1, deadline: float | None = None) -> Any:
    """Run ``jobs`` (each: its metadata and the commands of its processes) one at a time on the GPU,
    with the next ``ahead`` jobs' processes already started: they import, load the data and build
    their model, then wait for their turn (``peers.wait_turn``) while the current job times its
    steps. Yields (metadata, one result per process, seconds from its turn to its end).

    ``deadline`` (``time.monotonic()``): a job whose turn comes after it is not run, and one still
    running at it is killed; either yields a result with an ``error`` saying so (``--budget-s``)."""
    started: list[tuple[Path, list[subprocess.Popen[str]]]] = []

    def start(i: int) -> None:
        go = root / f"go-{i}"
        cmds = jobs[i][1]
        started.append((go, [subprocess.Popen([*c, "--go", str(go)], stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True) for c in cmds]))

    for i in range(min(len(jobs), 1 + ahead)):
        start(i)
    for i, (meta, _) in enumerate(jobs):
        if _past(deadline):  # this job and every later one: end what was started ahead, skip them
            for _, ahead_procs in started[i:]:
                _kill(ahead_procs)
            for later, cmds in jobs[i:]:
                yield later, [{"error": OUT_OF_TIME}] * len(cmds), 0.0
            return
        go, procs = started[i]
        print(f"[gpu bench] {meta.get('label') or meta['trainer']} ({meta['model']}, length {meta['length']}"
              f"{', ' + str(len(procs)) + ' trials' if len(procs) > 1 else ''}) ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        go.touch()
        results = []
        for proc in procs:
            try:
                left = None if deadline is None else max(1.0, deadline - time.monotonic())
                out, err = proc.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                _kill(procs)
                results = [{"error": KILLED_AT_DEADLINE}] * len(procs)
                break
            res = _result(proc, out, err)
            if "error" in res:
                print(err[-3000:], file=sys.stderr, flush=True)
            results.append(res)
        seconds = time.perf_counter() - t0
        if i + 1 + ahead < len(jobs) and not _past(deadline):
            start(i + 1 + ahead)
        yield meta, results, seconds


OUT_OF_TIME = "skipped: the time budget (--budget-s) was spent"
KILLED_AT_DEADLINE = "stopped: still running when the time budget (--budget-s) ran out"


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def utilisation(dims: dict[str, int], res: dict[str, Any], peak: float | None,
                measured: float | None) -> dict[str, Any]:
    """Model TFLOP/s of a timed result and its MFU: ``mfu`` against the datasheet peak (None without
    one), ``mfu_measured`` against the matrix product measured in the same run."""
    flops = train_flops(dims, res["sum_len"], res["sum_len_sq"]) / res["timed_s"]
    mfu = None if peak is None else flops / 1e12 / peak
    return {"model_tflops": flops / 1e12, "flops_per_pair": flops * res["timed_s"] / res["pairs"],
            "mfu": mfu, "mfu_datasheet": mfu, "mfu_measured": None if measured is None else flops / 1e12 / measured}


def _side_cmd(args: argparse.Namespace, trainer: str, path: Path, length: int, steps: int) -> list[str]:
    return [sys.executable, __file__, "--side", trainer, "--model-path", str(path), "--length", str(length),
            "--batch", str(args.batch), "--steps", str(steps), "--warmup", str(args.warmup), "--device",
            args.device, "--conversations", str(peers.DATA["data.conversations"]), "--fused", str(args.fused),
            "--eval-batch", str(args.eval_batch), "--eval-pairs", str(args.eval_pairs)]


def _result(proc: subprocess.CompletedProcess[str] | Any, stdout: str, stderr: str) -> dict[str, Any]:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
    if lines:
        return dict(json.loads(lines[-1][len("RESULT "):]))
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit {proc.returncode}: {tail[:300]}"}


def run_packing(args: argparse.Namespace, root: Path, peak: float | None,
                measured: float | None) -> list[dict[str, Any]]:
    """N trials on one GPU (fractional ``resources.gpus`` = 1/N: Ray gives each trial the same device),
    each a trainer process of its own, with and without fused seeds: N processes start together and
    time the same steps at once (``peers.barrier``); aggregate pairs/s and the sum of their peak
    memories (each process's ``max_memory_allocated``; CUDA contexts are not counted)."""
    path = model_dir(args.packing_model, root)
    dims = dims_of(path)
    jobs = []
    for trainer in ("harness", "harness-fused"):
        for n in args.packing:
            gate = Path(tempfile.mkdtemp(prefix="pack-", dir=root))
            cmd = [*_side_cmd(args, trainer, path, args.packing_length, args.packing_steps),
                   "--barrier", str(gate), str(n)]
            meta = {"model": args.packing_model, "length": args.packing_length, "trainer": trainer,
                    "trials_per_gpu": n, "seeds_per_trial": args.fused if trainer == "harness-fused" else 1}
            jobs.append((meta, [cmd] * n))
    rows = []
    for meta, results, seconds in pipeline(jobs, root, ahead=args.ahead, deadline=args.deadline):
        row: dict[str, Any] = {**meta, "process_s": seconds}
        failed = [r["error"] for r in results if "error" in r]
        if failed:
            row["error"] = failed[0]
            print(f"[gpu bench]   failed: {failed[0]}", file=sys.stderr, flush=True)
        else:
            total = {k: sum(r[k] for r in results) for k in ("pairs", "sum_len", "sum_len_sq")}
            # the processes time the same window (the barrier); the slowest one bounds it
            total["timed_s"] = max(r["timed_s"] for r in results)
            row.update(total, pairs_per_s=total["pairs"] / total["timed_s"],
                       per_trial_pairs_per_s=[r["pairs_per_s"] for r in results],
                       peak_gpu_mem_gb=sum(r.get("peak_gpu_mem_gb", 0.0) for r in results),
                       **utilisation(dims, total, peak, measured))
            print(f"[gpu bench]   {row['pairs_per_s']:.0f} pairs/s together, {row['peak_gpu_mem_gb']:.1f} GiB",
                  file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def run_cascades(args: argparse.Namespace) -> list[dict[str, Any]]:
    import cascade

    out = []
    for model in args.cascade_models:
        for length in args.cascade_lengths:
            if _past(args.deadline):
                out.append({"model": model, "seq_len": length, "error": OUT_OF_TIME})
                continue
            print(f"[gpu bench] cascade {model} length {length} ...", file=sys.stderr, flush=True)
            ns = argparse.Namespace(model=model, batch=args.cascade_batch, seq_len=length,
                                    alphas=[0.0, 0.3, 0.4, 0.5], rounds=args.cascade_rounds,
                                    device=args.device, seed=0, threads=1, bf16=args.device.startswith("cuda"))
            try:
                res = cascade.run(ns)
            except Exception as exc:  # noqa: BLE001 - reported beside the rest
                traceback.print_exc()
                res = {"model": model, "seq_len": length, "error": f"{type(exc).__name__}: {exc}"[:300]}
            out.append(res)
    return out


def markdown(rec: dict[str, Any]) -> str:
    g, s = rec["gpu"], rec["settings"]
    peak, meas = rec["peak_tflops_datasheet"], rec["peak_tflops_measured"]
    lines = [f"# GPU benchmark: {g['name'] or 'no GPU (smoke run on ' + rec['device'] + ')'}", ""]
    if rec["smoke"]:
        lines += [("**Smoke run on CPU: the GPU benchmark has not run on this file's machine; these numbers "
                  "only show the script works.**"), ""]
    lines += [
        (f"GPU: {g['name']}, driver {g.get('driver')}, CUDA {g.get('cuda')}, {g.get('sms')} SMs, "
         f"{(g.get('memory_gb') or 0):.0f} GiB; torch {rec['machine']['torch']}, transformers "
         f"{rec['machine']['transformers']}, sentence-transformers {rec['sentence_transformers']}."),
        (f"Peak bf16: datasheet {peak} TFLOP/s (dense), measured {'-' if meas is None else f'{meas:.0f}'} "
         f"TFLOP/s (8192^3 matrix product, median of 20)."),
        (f"Training: batch {s['batch']}, {s['warmup']} warm-up + {s['steps']} timed steps, bf16, AdamW lr 5e-5; "
         f"data: the embedded set's balanced training pairs ({rec['data']['data.conversations']} conversations)."),
        "",
        ("| model | max length | trainer | pairs/s | eval pairs/s | mean real length | model TFLOP/s "
        "| MFU (datasheet) | MFU (measured peak) | peak GPU mem (GiB) | harness / this |"),
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    base = {(r["model"], r["length"]): r for r in rec["trainers"] if r["trainer"] == "harness" and "error" not in r}
    for r in rec["trainers"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['length']} | {r['trainer']} | did not run: {r['error']} "
                         "| | | | | | | |")
            continue
        b = base.get((r["model"], r["length"]))
        ratio = "-" if b is None else f"{b['pairs_per_s'] / r['pairs_per_s']:.2f}x"
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
        ev = f"{r['eval_pairs_per_s']:.0f}" if "eval_pairs_per_s" in r else "-"
        lines.append(f"| {r['model']} | {r['length']} | {r['trainer']} | {r['pairs_per_s']:.0f} | {ev} | "
                     f"{r['mean_len']:.0f} | {r['model_tflops']:.1f} | {pct(r['mfu_datasheet'])} | "
                     f"{pct(r['mfu_measured'])} | {r.get('peak_gpu_mem_gb', 0):.2f} | "
                     f"{ratio} |")
    lines += ["", ("Trainers: `harness` = harness.training.loop.Trainer (one seed; train.compile auto: "
              "compiled on CUDA), `harness-eager` the same with train.compile false; `harness-fused` = "
              f"{s.get('fused', 5)} seeds of that configuration as one fused model "
              "(harness.training.fused.SeedGroup, pairs of every seed counted); `hf` = transformers Trainer "
              "(DataCollatorWithPadding, group_by_length, bf16), `hf-compile` the same with torch_compile; "
              "`st` = sentence-transformers "
              "CrossEncoderTrainer (BinaryCrossEntropyLoss, bf16). Model FLOPs count the full encoder on "
              "real tokens (3 x forward; see benchmarks/gpu.py), so MFU compares useful work per second. "
              f"Eval pairs/s (harness only): harness.model.scoring.score_candidates on {s.get('eval_pairs')} "
              f"training pairs in length-sorted batches of {s.get('eval_batch')}, inference mode, bf16 as "
              "in training, median of 3 after one untimed pass."),
              *packing_lines(rec),
              "", "## Cascade: realised vs predicted speed-up (bf16 autocast, synchronised wall clock)", "",
              ("| model | length | setting | survivors | predicted | realised | realised / predicted "
              "| ms / batch |"), "|---|--:|---|---|--:|--:|--:|--:|"]
    for c in rec["cascade"]:
        if "error" in c:
            lines.append(f"| {c['model']} | {c['seq_len']} | did not run: {c['error']} | | | | | |")
            continue
        for r in c["results"]:
            surv = "-" if r["survivors"] is None else ",".join(map(str, r["survivors"]))
            lines.append(f"| {c['model']} | {c['seq_len']} | {r['setting']} | {surv} | "
                         f"{r['predicted_speedup']:.2f}x | {r['realised_speedup_wall']:.2f}x | "
                         f"{100 * r['efficiency_wall']:.0f}% | {1e3 * r['median_wall_s']:.2f} |")
    if rec["cascade"]:
        c0 = rec["cascade"][0]
        lines.append(f"\nBatch {c0.get('batch')} candidates of one query, median of {c0.get('rounds')} "
                     "interleaved rounds; `plain` is the Hugging Face forward of the same weights.")
    lines += ["", f"Machine: {rec['machine']}", ""]
    return "\n".join(lines)


def packing_lines(rec: dict[str, Any]) -> list[str]:
    rows = rec.get("packing") or []
    if not rows:
        return []
    lines = ["", "## Trials sharing one GPU (fractional resources.gpus)", "",
             ("| trainer | trials per GPU | seeds per trial | pairs/s together | per trial | model TFLOP/s | MFU "
              "| peak GPU mem, all trials (GiB) |"), "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['trainer']} | {r['trials_per_gpu']} | {r['seeds_per_trial']} | did not run: "
                         f"{r['error']} | | | | |")
            continue
        mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
        per = "/".join(f"{x:.0f}" for x in r["per_trial_pairs_per_s"])
        lines.append(f"| {r['trainer']} | {r['trials_per_gpu']} | {r['seeds_per_trial']} | {r['pairs_per_s']:.0f} | "
                     f"{per} | {r['model_tflops']:.1f} | {mfu} | {r['peak_gpu_mem_gb']:.2f} |")
    r0 = rows[0]
    lines += ["", (f"{r0['model']} encoder, length {r0['length']}: N trainer processes on one GPU start timing "
                   "together (a file barrier) and run the same steps; pairs/s together = all their pairs over "
                   "the slowest one's timed window.")]
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["packaged", "bert-base"],
                   choices=["packaged", "bert-base", "tiny"])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    p.add_argument("--trainers", nargs="+", default=list(GPU_TRAINERS), choices=GPU_TRAINERS)
    p.add_argument("--fused", type=int, default=5, help="seeds per fused model (harness-fused, packing); default 5")
    p.add_argument("--compile-models", nargs="*", default=["bert-base"],
                   help="models the compile comparisons run for: hf-compile, and harness-eager beside harness "
                        "(train.compile auto compiles on CUDA)")
    p.add_argument("--packing", type=int, nargs="*", default=[1, 2, 4, 8],
                   help="trials per GPU to measure (each its own process, all on one GPU); empty: skip")
    p.add_argument("--packing-model", default="packaged", choices=["packaged", "bert-base", "tiny"])
    p.add_argument("--packing-length", type=int, default=128)
    p.add_argument("--packing-steps", type=int, default=30, help="timed steps per packed trial")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=60, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", default=None, help="default: cuda if available (else refuse unless --smoke)")
    p.add_argument("--eval-batch", type=int, default=256, help="evaluation batch (train.eval_batch_size)")
    p.add_argument("--eval-pairs", type=int, default=4096, help="candidate pairs scored per timed evaluation")
    p.add_argument("--cascade-models", nargs="*", default=["packaged", "bert-base"],
                   choices=["packaged", "bert-base", "tiny"])
    p.add_argument("--cascade-lengths", type=int, nargs="*", default=[128, 512])
    p.add_argument("--cascade-batch", type=int, default=128)
    p.add_argument("--cascade-rounds", type=int, default=20)
    p.add_argument("--smoke", action="store_true",
                   help="CPU check: tiny model, length 32, 30 conversations, 1 warm-up + 1 timed step, results in a "
                        "temp folder")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix (default results/gpu)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="time budget in seconds from the start (default 480, so `make bench-gpu` ends within 10 "
                        "minutes): a measurement whose turn comes later is skipped and one still running then is "
                        "stopped, each recorded as such in the results; 0: no budget")
    p.add_argument("--ahead", type=int, default=1,
                   help="trainer processes started ahead of their turn (start-up overlaps the timed steps)")
    p.add_argument("--side", choices=GPU_TRAINERS, help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    p.add_argument("--barrier", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    p.add_argument("--conversations", type=int, help=argparse.SUPPRESS)
    p.add_argument("--compile-backend", help=argparse.SUPPRESS)  # torch.compile's backend in a side
    p.add_argument("--compile-mode", help=argparse.SUPPRESS)  # train.compile in a side (default auto)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.deadline = time.monotonic() + args.budget_s if args.budget_s > 0 and not args.side else None
    import torch

    if args.smoke and not args.conversations:
        # the data set the tests' studies use (30 conversations): the smoke run checks the script
        args.conversations = 30
    if args.conversations:
        peers.DATA = {**peers.DATA, "data.conversations": args.conversations}
    if args.side:
        return side(args)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if args.smoke:
        args.models, args.lengths, args.batch, args.steps, args.warmup = ["tiny"], [32], 4, 1, 1
        args.eval_pairs = min(args.eval_pairs, 8)
        args.cascade_models, args.cascade_lengths, args.cascade_batch, args.cascade_rounds = ["tiny"], [32], 8, 1
        args.fused, args.compile_models, args.packing_model, args.packing_length = 2, [], "tiny", 32
        args.packing, args.packing_steps = [n for n in args.packing if n <= 2], 1
        args.out = args.out or Path(tempfile.mkdtemp(prefix="gpu-smoke-")) / "gpu"
    elif not args.device.startswith("cuda"):
        print("benchmarks/gpu.py: no CUDA GPU visible (device " + args.device + "); run it on a GPU machine, "
              "or use --smoke for a CPU check", file=sys.stderr)
        return 2
    out = args.out or RESULTS / "gpu"
    from machine import describe

    info = gpu_info(args.device)
    measured = matmul_peak(args.device, 8192)
    peak = datasheet_peak(info.get("name"))
    work = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    try:
        trainers = run_trainers(args, work, peak, measured)
        packing = run_packing(args, work, peak, measured) if args.packing else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cascades = run_cascades(args)
    try:
        import sentence_transformers
        st_version = sentence_transformers.__version__
    except ImportError:
        st_version = "not installed"
    rec = {"benchmark": "GPU trainer throughput, MFU and cascade speed-up", "smoke": args.smoke,
           "device": args.device, "gpu": info, "peak_tflops_datasheet": peak, "peak_tflops_measured": measured,
           "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                        if k not in ("side", "model_path", "length", "deadline")},
           "data": peers.DATA, "sentence_transformers": st_version, "trainers": trainers,
           "packing": packing, "cascade": cascades, "machine": describe("torch", "transformers")}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(rec))
    print(markdown(rec))
    print(f"written: {out.with_suffix('.md')} and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
