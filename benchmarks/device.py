"""The GPU run, prepared: one unattended command for a lent GPU machine, rehearsed on CPU.

A lent GPU machine (docs/benchmarks.md, "The device run") has torch, transformers and
sentence-transformers but not Ray, MLflow, Optuna, ir-measures or the harness's data and model
packages, cannot install from a registry, receives at most 64 MiB per call and gives each command
at most 10 minutes. So:

1. ``--stage DIR`` (here, where the packages are): writes what the run needs from those packages,
   about 47 MB (``benchmarks/staged.py``: the packaged encoder in fp16, the data set's splits, and
   the wheels of datasets and the two of its requirements the machine lacks, for its Python 3.12:
   ``pip download`` from the index here; the run installs them into a temporary folder first).
   Nothing else travels: bert-base is a randomly initialised BERT-base-shaped encoder built on the
   GPU machine (its weights cannot be downloaded there; model FLOPs, hence MFU, do not depend on
   the weights' values).
2. ``benchmarks/device_run.sh`` there: this script on the stage, ``--out $OUT``. It prints the plan
   first, each row with its estimated seconds, and runs only rows whose estimates fit
   ``--budget-s`` in total (default 480 s: the command ends inside 9 minutes by its own estimate;
   past the budget a running row is stopped and the rest skipped, each recorded as such). Rows, in
   the order the goals need them: bert-base at length 128, one seed then 5 fused seeds; the packaged
   encoder; the Hugging Face Trainer and sentence-transformers peers; then length 512, trials
   sharing the GPU and the cascade. Each row is appended to ``$OUT/results.jsonl`` (one JSON object
   per line, flushed) as soon as it is measured, with the GPU's name, step time, pairs/s, MFU, peak
   memory and compiles; ``$OUT/gpu.json`` and ``$OUT/gpu.md`` (benchmarks/gpu.py's formats) are
   written at the end.
3. ``--rehearse`` (here, no GPU): the same plan and code paths on CPU, small: a tiny model (the
   packaged encoder's own rows keep it, read from the stage), length 32, one warm-up and one timed
   step, each distinct row once, every harness row compiled (``aot_eager``: graph capture without
   code generation) and every package the GPU machine lacks blocked from import
   (``staged.device_lacks``), so a crash a CPU could have found is found here
   (tests/benchmarks/test_device_run.py runs it). ``--rehearse --quick``: each code path once (the
   first row of each: a plain, a fused, the packaged encoder read from the stage with its
   evaluation, each peer, eager, trials sharing the device, the cascade), compiled only where
   compiling is the row's point (the plain and fused harness rows), for ``make test``.

The trainer rows are ``benchmarks/gpu.py``'s (one process each, started one row ahead); timing and
FLOPs as documented there and in ``benchmarks/peers.py``: warm-up (every batch width compiled, then
``--warmup`` steps) outside the timed window, the loss read back every 10 steps as in a study,
model FLOPs of the full encoder on the real tokens (so MFU credits neither padding nor the work the
harness skips: its [CLS]-only last layer).

    python benchmarks/device.py --stage .device-stage                # here: ~47 MB to carry
    benchmarks/device_run.sh                                         # there: results in $OUT
    python benchmarks/device.py --rehearse --stage-dir .device-stage --out /tmp/rehearsal
    python benchmarks/device.py --rehearse --quick --stage-dir .device-stage --out /tmp/rehearsal
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import staged

BUDGET_S = 480.0
# Estimated seconds per row on one H100 from its turn to its end (the next row's process starts
# while the previous row runs): (model, trainer) -> (fixed, per compiled width). None measured yet:
# benchmarks/results/gpu.md says what each row took once a run has been made, to recalibrate.
START_S = 25.0  # the first process: imports, data, model (later ones start ahead)
ESTIMATES = {
    ("bert-base", "harness"): (20.0, 45.0), ("bert-base", "harness-fused"): (30.0, 60.0),
    ("packaged", "harness"): (15.0, 25.0), ("bert-base", "harness-eager"): (15.0, 0.0),
    ("bert-base", "hf"): (30.0, 0.0), ("bert-base", "st"): (30.0, 0.0),
    ("packaged", "hf"): (20.0, 0.0), ("packaged", "st"): (20.0, 0.0),
    ("bert-base", "hf-compile"): (90.0, 0.0), ("packaged", "harness-fused"): (20.0, 30.0),
}
WIDTHS = {128: 2, 512: 8}  # compiled batch widths, at most (multiples of 64 up to the length)
PACKING_S = 25.0  # per packing row (N processes, the packaged encoder, eager start-up overlapped)
CASCADE_S = 20.0  # per cascade measurement (model, length)


@dataclass
class Row:
    """One planned measurement: a trainer row (``trainer``), a packing row or a cascade row."""

    kind: str
    model: str
    length: int
    trainer: str = ""
    trials: int = 1
    estimate_s: float = 0.0
    eval_pairs: int = 0
    compile: bool = True  # in a rehearsal: whether the row's harness trainer compiles (aot_eager)
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        if self.kind == "cascade":
            return f"cascade {self.model} {self.length}"
        if self.kind == "packing":
            return f"{self.trainer} x{self.trials} trials {self.model} {self.length}"
        return f"{self.trainer} {self.model} {self.length}"


def plan(rehearse: bool, quick: bool = False) -> list[Row]:
    """Every row, in the order the goals need them (module docstring), with its estimate
    (``quick``, a rehearsal only: each code path once, ``_quick``)."""
    rows: list[Row] = []

    def trainer(model: str, length: int, name: str, eval_pairs: int = 0) -> None:
        fixed, per_width = ESTIMATES[(model, name)]
        est = fixed + per_width * WIDTHS[length]
        rows.append(Row("trainer", model, length, name, estimate_s=est, eval_pairs=eval_pairs))

    trainer("bert-base", 128, "harness")
    trainer("bert-base", 128, "harness-fused")
    trainer("packaged", 128, "harness", eval_pairs=4096)
    for peer in ("hf", "st"):
        trainer("bert-base", 128, peer)
    for peer in ("hf", "st"):
        trainer("packaged", 128, peer)
    trainer("bert-base", 128, "harness-eager")
    trainer("bert-base", 512, "harness")
    trainer("bert-base", 512, "hf")
    for n in (2, 4):
        for name in ("harness", "harness-fused"):
            rows.append(Row("packing", "packaged", 128, name, trials=n, estimate_s=PACKING_S))
    for model in ("bert-base", "packaged"):
        rows.append(Row("cascade", model, 128, estimate_s=CASCADE_S))
    if rows:
        rows[0].estimate_s += START_S
    if rehearse:
        return _quick(_small(rows)) if quick else _small(rows)
    return rows


def path_of(r: Row) -> tuple[Any, ...]:
    """A row's code path: its trainer (the packaged encoder's harness row, which reads the stage's
    weights and measures evaluation, its own); every packing row shares one (the processes and their
    barrier), as does every cascade row. Lengths and models of one trainer are the same code."""
    if r.kind == "trainer":
        return (r.kind, r.trainer, r.eval_pairs > 0)
    return (r.kind,)


def _quick(rows: list[Row]) -> list[Row]:
    """The quick rehearsal's rows: the first of each code path (``path_of``), in the plan's order;
    compiled only where compilation is the row's point (the plain and the fused harness step:
    the packaged row's point is the stage and evaluation, the packing row's the processes)."""
    out: list[Row] = []
    seen: set[tuple[Any, ...]] = set()
    for r in rows:
        if path_of(r) not in seen:
            seen.add(path_of(r))
            r.compile = r.kind == "trainer" and r.trainer in ("harness", "harness-fused") and not r.eval_pairs
            out.append(r)
    return out


def _small(rows: list[Row]) -> list[Row]:
    """The rehearsal's rows: the same rows, small (a tiny BERT for bert-base, and for the packing
    rows, whose code path is the processes and their barrier, not the weights; length 32 for 128,
    64 for 512; 2 trials, the same code path as 4 processes, on 2 cores), each distinct row once
    (packing 2 and 4 are both 2 trials here). The packaged encoder's own rows stay: they read
    the stage's weights as the GPU run does."""
    out: list[Row] = []
    seen: set[tuple[Any, ...]] = set()
    for r in rows:
        if r.model == "bert-base" or r.kind == "packing":
            r.model = "tiny"
        r.length = {128: 32, 512: 64}[r.length]
        r.eval_pairs = min(r.eval_pairs, 8)
        r.trials = min(r.trials, 2)
        key = (r.kind, r.model, r.length, r.trainer, r.trials)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def fit(rows: list[Row], budget_s: float) -> tuple[list[Row], list[Row]]:
    """The planned rows (in order, while the estimates' running total fits the budget) and the
    rest: those run after the planned ones only while the budget lasts (stretch rows)."""
    total, run = 0.0, []
    for i, r in enumerate(rows):
        if total + r.estimate_s > budget_s:
            return run, rows[i:]
        total += r.estimate_s
        run.append(r)
    return run, []


def plan_lines(planned: list[Row], stretch: list[Row], budget_s: float) -> list[str]:
    """The plan as printed before anything runs: each row with its estimate."""
    total = sum(r.estimate_s for r in planned)
    budget = f"budget {budget_s:.0f} s" if budget_s > 0 else "no budget"
    lines = [f"plan: {len(planned)} rows, ~{total:.0f} s estimated on an H100, {budget}"]
    lines += [f"  {i:2d}. {r.label():42s} ~{r.estimate_s:4.0f} s" for i, r in enumerate(planned, 1)]
    if stretch:
        lines.append("then, only while the budget lasts (their estimates do not fit it):")
        lines += [f"  {i:2d}. {r.label():42s} ~{r.estimate_s:4.0f} s"
                  for i, r in enumerate(stretch, len(planned) + 1)]
    return lines


class Sink:
    """``results.jsonl``: one JSON object per line, flushed and synced as each is written, so that
    what was measured survives a run that is cut short."""

    def __init__(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "results.jsonl"
        self.fh = self.path.open("a", encoding="utf-8")

    def write(self, rec: dict[str, Any]) -> None:
        self.fh.write(json.dumps(rec, default=str) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())


def _args(ns: argparse.Namespace, rehearse: bool) -> argparse.Namespace:
    """The settings ``benchmarks/gpu.py``'s helpers read (its defaults; small in a rehearsal)."""
    import peers

    a = argparse.Namespace(batch=32, steps=60, warmup=10, fused=5, eval_batch=256, eval_pairs=4096,
                           device=ns.device, packing_steps=30, cascade_batch=128, cascade_rounds=20,
                           deadline=ns.deadline)
    if rehearse:  # the smallest run of every path: one warm-up step (the compiles before it), one timed
        a.batch, a.steps, a.warmup, a.fused, a.packing_steps = 4, 1, 1, 2, 1
        a.cascade_batch, a.cascade_rounds = 8, 1
        peers.DATA = {**peers.DATA, "data.conversations": ns.conversations or 30}
    elif ns.conversations:
        peers.DATA = {**peers.DATA, "data.conversations": ns.conversations}
    return a


def _side(a: argparse.Namespace, row: Row, path: Path, rehearse: bool, steps: int) -> list[str]:
    import gpu

    cmd = gpu._side_cmd(a, row.trainer, path, row.length, steps) + ["--eval-pairs", str(row.eval_pairs)]
    if rehearse and row.compile:  # compiled code paths on CPU, graph capture without code generation
        cmd += ["--compile-mode", "true", "--compile-backend", "aot_eager"]
    elif rehearse:
        cmd += ["--compile-mode", "false"]
    return cmd


def run(ns: argparse.Namespace) -> int:
    import gpu
    from machine import describe

    rehearse = ns.rehearse
    sink = Sink(ns.out)
    t0 = time.monotonic()
    ns.deadline = t0 + ns.budget_s if ns.budget_s > 0 else None
    a = _args(ns, rehearse)
    info = gpu.gpu_info(ns.device)
    versions = staged.versions()  # read from metadata: importing sentence-transformers takes seconds
    st_version = versions.get("sentence-transformers") or "not installed"
    machine = describe("torch", "transformers")
    sink.write({"kind": "env", "rehearsal": rehearse, "quick": ns.quick, "device": ns.device, "gpu": info,
                "machine": machine, "sentence_transformers": st_version, "versions": versions,
                "wheels": ns.wheels, "stage": str(staged.stage()), "budget_s": ns.budget_s})
    planned, stretch = fit(plan(rehearse, ns.quick), ns.budget_s if ns.budget_s > 0 else float("inf"))
    rows = planned + stretch
    say = lambda msg: print(f"[device] {msg}", file=sys.stderr, flush=True)
    for line in plan_lines(planned, stretch, ns.budget_s):
        say(line)
    sink.write({"kind": "plan", "rows": [{"label": r.label(), "estimate_s": r.estimate_s} for r in planned],
                "estimate_s": sum(r.estimate_s for r in planned), "stretch": [r.label() for r in stretch]})
    measured = gpu.matmul_peak(ns.device, 8192)
    peak = gpu.datasheet_peak(info.get("name"))
    sink.write({"kind": "peak", "datasheet_tflops": peak, "measured_tflops": measured})
    work = Path(tempfile.mkdtemp(prefix="device-run-"))
    trainers: list[dict[str, Any]] = []
    packing: list[dict[str, Any]] = []
    cascades: list[dict[str, Any]] = []
    try:
        jobs, kinds = [], []
        for r in rows:
            if r.kind == "cascade":
                continue
            path = peers_model_dir(r.model, work)
            meta = {"model": r.model, "length": r.length, "trainer": r.trainer, "estimate_s": r.estimate_s,
                    **gpu.dims_of(path)}
            if r.kind == "packing":
                gate = Path(tempfile.mkdtemp(prefix="pack-", dir=work))
                cmd = [*_side(a, r, path, rehearse, a.packing_steps), "--barrier", str(gate), str(r.trials)]
                meta.update(trials_per_gpu=r.trials, seeds_per_trial=a.fused if r.trainer == "harness-fused" else 1)
                jobs.append((meta, [cmd] * r.trials))
            else:
                jobs.append((meta, [_side(a, r, path, rehearse, a.steps)]))
            kinds.append(r.kind)
        measured_rows = _in_process(jobs, work, ns.deadline) if ns.quick else gpu.pipeline(jobs, work,
                                                                                          deadline=ns.deadline)
        for n, ((meta, results, seconds), kind) in enumerate(zip(measured_rows, kinds, strict=True)):
            row = _row(meta, results, seconds, kind, a, info, peak, measured)
            (packing if kind == "packing" else trainers).append(row)
            sink.write({"kind": kind, **row})
            say(f"{n + 1}. {_brief(row)} ({seconds:.0f} s; estimated {meta['estimate_s']:.0f} s)")
        for r in rows:
            if r.kind != "cascade":
                continue
            say(f"cascade {r.model} {r.length} ~{r.estimate_s:.0f} s")
            a.cascade_models, a.cascade_lengths = [r.model], [r.length]
            started = time.monotonic()
            (res,) = gpu.run_cascades(a)
            res.update(gpu=info.get("name"), process_s=time.monotonic() - started, estimate_s=r.estimate_s)
            cascades.append(res)
            sink.write({"kind": "cascade", **res})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rec = {"benchmark": "GPU trainer throughput, MFU and cascade speed-up (benchmarks/device.py)",
           "smoke": rehearse, "device": ns.device, "gpu": info, "peak_tflops_datasheet": peak,
           "peak_tflops_measured": measured,
           "settings": {"batch": a.batch, "warmup": a.warmup, "steps": a.steps, "fused": a.fused,
                        "eval_batch": a.eval_batch, "eval_pairs": a.eval_pairs, "budget_s": ns.budget_s,
                        "log_every": _log_every()},
           "data": _data(), "sentence_transformers": st_version, "trainers": trainers, "packing": packing,
           "cascade": cascades, "machine": machine, "wall_s": time.monotonic() - t0}
    (ns.out / "gpu.json").write_text(json.dumps(rec, indent=2, default=str) + "\n")
    (ns.out / "gpu.md").write_text(gpu.markdown(rec))
    sink.write({"kind": "done", "wall_s": rec["wall_s"]})
    say(f"done in {rec['wall_s']:.0f} s: {ns.out}/results.jsonl, gpu.json, gpu.md")
    return 0


def _in_process(jobs: list[tuple[dict[str, Any], list[list[str]]]], root: Path, deadline: float | None) -> Any:
    """``gpu.pipeline``'s results for the quick rehearsal: a row of one process runs in this one
    (``gpu.in_process``: the same runner, no start-up of torch and transformers per row); a row of
    several (trials sharing the device) runs through the pipeline, whose processes are its point."""
    import gpu

    for meta, cmds in jobs:
        t0 = time.perf_counter()
        if deadline is not None and time.monotonic() >= deadline:
            yield meta, [{"error": gpu.OUT_OF_TIME}] * len(cmds), 0.0
            continue
        if len(cmds) > 1:
            yield from gpu.pipeline([(meta, cmds)], root, deadline=deadline)
            continue
        print(f"[gpu bench] {meta['trainer']} ({meta['model']}, length {meta['length']}, in this process) ...",
              file=sys.stderr, flush=True)
        yield meta, [gpu.in_process(cmds[0])], time.perf_counter() - t0


def peers_model_dir(name: str, root: Path) -> Path:
    import peers

    return peers.model_dir(name, root)


def _log_every() -> int:
    import peers

    return peers.LOG_EVERY


def _data() -> dict[str, Any]:
    import peers

    return dict(peers.DATA)


def _row(meta: dict[str, Any], results: list[dict[str, Any]], seconds: float, kind: str, a: argparse.Namespace,
         info: dict[str, Any], peak: float | None, measured: float | None) -> dict[str, Any]:
    """One measured row: ``benchmarks/gpu.py``'s fields plus the GPU's name and the step time."""
    import gpu

    row: dict[str, Any] = {**meta, "gpu": info.get("name"), "process_s": seconds}
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        return {**row, "error": failed[0]}
    if kind == "packing":
        total = {k: sum(r[k] for r in results) for k in ("pairs", "sum_len", "sum_len_sq")}
        total["timed_s"] = max(r["timed_s"] for r in results)
        row.update(total, pairs_per_s=total["pairs"] / total["timed_s"],
                   per_trial_pairs_per_s=[r["pairs_per_s"] for r in results],
                   peak_gpu_mem_gb=sum(r.get("peak_gpu_mem_gb", 0.0) for r in results),
                   **gpu.utilisation(meta, total, peak, measured))
        return row
    (res,) = results
    row.update(res)
    row.update(gpu.utilisation(meta, res, peak, measured))
    row["step_ms"] = 1e3 * res["timed_s"] / max(1.0, res["batches"])
    return row


def _brief(row: dict[str, Any]) -> str:
    name = f"{row['trainer']} {row['model']} {row['length']}"
    if "error" in row:
        return f"{name}: {row['error']}"
    mfu = row.get("mfu")
    return (f"{name}: {row['pairs_per_s']:.0f} pairs/s, step {row.get('step_ms', 0):.1f} ms, "
            f"MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}, peak {row.get('peak_gpu_mem_gb', 0):.2f} GiB, "
            f"{row.get('compiles_in_window', 0)} compiles in the timed window, "
            f"{row.get('graph_breaks', 0)} graph breaks")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=Path, metavar="DIR",
                   help="write the stage (packaged encoder in fp16, the data snapshot) into DIR and stop")
    p.add_argument("--wheels-python", default=staged.DEVICE_PYTHON, metavar="X.Y",
                   help="with --stage: the wheels it carries (datasets, dill, multiprocess, at the versions "
                        f"installed here) are for this Python (default {staged.DEVICE_PYTHON}, the device "
                        "machine's); 'none': no wheels")
    p.add_argument("--wheels-from", type=Path, metavar="DIR",
                   help="with --stage: carry the wheels in DIR as they are instead of downloading")
    p.add_argument("--stage-dir", type=Path, help="the stage to run on (default: $HARNESS_BENCH_STAGE)")
    p.add_argument("--out", type=Path, help="results folder (results.jsonl, gpu.json, gpu.md)")
    p.add_argument("--rehearse", action="store_true",
                   help="CPU rehearsal: the plan's rows small (tiny model, length 32), compiled paths, and "
                        "the device machine's missing packages blocked")
    p.add_argument("--quick", action="store_true",
                   help="with --rehearse: each code path once (make test's rehearsal), compiled only where "
                        "compiling is the row's point")
    p.add_argument("--plan", action="store_true", help="print the plan with its estimates and stop")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help=f"the plan's time budget in seconds (default {BUDGET_S:.0f}); 0: no budget")
    p.add_argument("--conversations", type=int, default=None,
                   help="data set size (default: benchmarks/peers.py's; 30 in a rehearsal)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --rehearse)")
    ns = p.parse_args(argv)
    if ns.quick and not ns.rehearse:
        p.error("--quick is a rehearsal's (--rehearse --quick)")
    if ns.stage:
        import peers

        data = {**peers.DATA, **({"data.conversations": ns.conversations} if ns.conversations else {})}
        python = None if ns.wheels_python == "none" else ns.wheels_python
        manifest = staged.write_stage(ns.stage, data, python=python, wheels_from=ns.wheels_from)
        print(f"stage written: {ns.stage} ({manifest['bytes'] / 2**20:.1f} MiB)")
        return 0
    if ns.plan:
        print("\n".join(plan_lines(*fit(plan(ns.rehearse, ns.quick), ns.budget_s if ns.budget_s > 0 else float("inf")),
                                   ns.budget_s)))
        return 0
    if ns.out is None:
        p.error("--out is required to run (or --stage DIR, or --plan)")
    if ns.stage_dir:
        os.environ[staged.STAGE_ENV] = str(ns.stage_dir.resolve())
    if staged.stage() is None or not (staged.stage() / "manifest.json").is_file():
        print(f"benchmarks/device.py: no stage ({staged.STAGE_ENV} or --stage-dir); write one with --stage DIR",
              file=sys.stderr)
        return 2
    bad = staged.check_stage(staged.stage())
    if bad:
        print(f"benchmarks/device.py: {bad}", file=sys.stderr)
        return 2
    # what the stage carries as wheels (datasets, for the sentence-transformers rows), installed
    # first, as on the device machine: importable from here on in this process and the rows' (their
    # PYTHONPATH)
    site = Path(tempfile.mkdtemp(prefix="device-site-"))
    try:
        ns.wheels = staged.install_wheels(staged.stage(), site)
        print(f"[device] {ns.wheels}", file=sys.stderr, flush=True)
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH")) if x)
        if ns.rehearse:
            # the device machine's view: every package it lacks fails to import, here and in every
            # row; read with the staged wheels on the path, so what they require counts as there
            os.environ[staged.BLOCK_ENV] = ",".join(staged.device_lacks())
            staged.block_imports()
        import torch

        if ns.device is None:
            ns.device = "cpu" if ns.rehearse else "cuda"
        if ns.device.startswith("cuda") and not torch.cuda.is_available():
            print("benchmarks/device.py: no CUDA GPU visible; use --rehearse for the CPU rehearsal", file=sys.stderr)
            return 2
        return run(ns)
    finally:
        shutil.rmtree(site, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())
