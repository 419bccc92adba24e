"""GPU benchmark: trainer throughput and model FLOP utilisation (MFU) in bf16, the Hugging Face peers
side by side, and the cascade's realised vs predicted speed-up.

Trainers (each in its own process, one after the other, same training pairs, batch, steps, AdamW
lr 5e-5, bf16 autocast / mixed precision, SDPA attention):
- ``harness``: the harness's own ``Trainer`` (``harness.training.loop``), as ``harness train`` runs it;
- ``hf``: the Hugging Face ``Trainer`` on ``AutoModelForSequenceClassification`` (2 labels), the
  usual recipe for variable-length pairs: dynamic padding (``DataCollatorWithPadding``) and
  ``group_by_length=True``, ``bf16=True``; its pairs are the harness's own token ids (same
  truncation), so both see the same tokens;
- ``st``: sentence-transformers' ``CrossEncoderTrainer`` (its current major version) with
  ``BinaryCrossEntropyLoss`` on a 1-label ``CrossEncoder``, ``bf16=True``, fed the text pairs (it
  tokenises them itself, truncating ``longest_first`` to the same total length).
Models: ``packaged`` (the 6-layer MiniLM-L6-H384 shipped with the harness) and ``bert-base`` (a
randomly initialised BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072), at each ``--lengths``.

Timing: ``--warmup`` steps first (kernel selection, allocator growth), then ``--steps`` timed steps,
synchronised wall clock. Every training forward's attention mask is read on the GPU (no extra
synchronisation) to count the pairs and their real lengths L.

Model FLOPs: an exact count of the full encoder's matrix products on the real tokens of each pair,
training = 3 x forward (backward = 2 x forward): per layer and pair,
2 L (4 h^2 + 2 h f) for the projections and the feed-forward block plus 4 L^2 h for
q k^T and the attention-weighted values (h hidden, f FFN width); embeddings (look-ups) and the
classification head (< 0.01%) are left out. Padding is not model work, so a trainer that pads more
(or one that skips work, as the harness's [CLS]-only last layer does) is not credited for it: MFU
is pairs/s x FLOPs per pair over the peak, directly comparable between trainers. Peak: the GPU's
dense bf16 datasheet figure (H100 SXM: 989 TFLOP/s) and an 8192^3 bf16 matrix product measured
in the same run.

Cascade: ``benchmarks/cascade.py``'s measurement on the GPU under bf16 autocast, per model and
length (batch 128 candidates of one query; speed-ups from synchronised wall clock).

    python benchmarks/gpu.py                   # on a CUDA machine: everything, ~5 minutes on an H100
    python benchmarks/gpu.py --smoke           # CPU check: tiny model, 2+1 steps, into a temp folder
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

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"
DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}
DIMS = {  # random-init encoders (the packaged one is read from its package)
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "intermediate_size": 3072},
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
}
PEAK_BF16_TFLOPS = {  # dense (no sparsity) bf16 tensor-core peaks from the datasheets
    "H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.4, "H200": 989.4, "H800": 989.4,
    "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10": 125.0,
}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


# -- models ---------------------------------------------------------------------------------------

def model_dir(name: str, root: Path) -> Path:
    """A plain Hugging Face model directory for ``name`` (config, weights, tokenizer): the packaged
    encoder's files linked, or a seeded random-init BERT of ``DIMS[name]`` written once."""
    from harness.model.encoder import packaged_model_path

    src = packaged_model_path()
    out = root / name
    if (out / "config.json").is_file():
        return out
    tmp = root / f".{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if name == "packaged":
        for f in ("config.json", "model.safetensors", *TOKENIZER_FILES):
            if (src / f).is_file():
                (tmp / f).symlink_to(src / f)
    else:
        import torch
        from transformers import BertConfig, BertModel

        torch.manual_seed(0)
        BertModel(BertConfig(vocab_size=30522, max_position_embeddings=512, **DIMS[name]),
                  add_pooling_layer=False).save_pretrained(tmp)
        for f in TOKENIZER_FILES:
            if (src / f).is_file():
                shutil.copy(src / f, tmp / f)
    tmp.rename(out)
    return out


def dims_of(path: Path) -> dict[str, int]:
    raw = json.loads((path / "config.json").read_text())
    return {"hidden": int(raw["hidden_size"]), "layers": int(raw["num_hidden_layers"]),
            "ffn": int(raw["intermediate_size"]), "heads": int(raw["num_attention_heads"])}


def train_flops(dims: dict[str, int], sum_len: float, sum_len_sq: float) -> float:
    """Model FLOPs of training (3 x forward) over pairs with the given sums of L and L^2."""
    h, f, n = dims["hidden"], dims["ffn"], dims["layers"]
    return 3.0 * n * (2.0 * (4 * h * h + 2 * h * f) * sum_len + 4.0 * h * sum_len_sq)


# -- one trainer in its own process --------------------------------------------------------------

class Meter:
    """Counts the pairs and their real lengths of every training forward while ``on``, on the
    device (no synchronisation), and the synchronised wall time between ``start`` and ``stop``."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.on = False
        self.sums: list[Any] = []
        self.t0 = self.t1 = 0.0

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self) -> None:
        self.sync()
        self.on, self.t0 = True, time.perf_counter()

    def stop(self) -> None:
        self.sync()
        self.on, self.t1 = False, time.perf_counter()

    def count(self, module: Any, mask: Any) -> None:
        if self.on and module.training and mask is not None:
            lengths = mask.sum(dim=1).to(self.torch.float64)
            self.sums.append(self.torch.stack([lengths.new_tensor(float(len(lengths))), lengths.sum(),
                                               (lengths * lengths).sum()]))

    def hook(self, module: Any) -> None:
        """Count forwards of ``module``: its first positional argument is the batch dict
        (``batch_arg``), or it takes ``attention_mask`` as a keyword (Hugging Face models)."""
        def pre(mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            mask = kwargs.get("attention_mask")
            if mask is None and args and isinstance(args[0], dict):
                mask = args[0].get("attention_mask")
            self.count(mod, mask)
        module.register_forward_pre_hook(pre, with_kwargs=True)

    def result(self, batch: int, steps: int) -> dict[str, float]:
        n, sl, sl2 = (float(x) for x in self.torch.stack(self.sums).sum(dim=0).tolist())
        wall = self.t1 - self.t0
        return {"timed_s": wall, "pairs": n, "pairs_per_s": n / wall, "tokens_per_s": sl / wall,
                "mean_len": sl / n, "sum_len": sl, "sum_len_sq": sl2, "expected_pairs": float(batch * steps)}


def training_pairs(args: argparse.Namespace) -> tuple[Any, Any, list[str], list[str], list[int], Any]:
    """The balanced training instances of the harness (one negative per positive), as harness
    token-id pairs and as texts, with labels."""
    import numpy as np

    from harness.config import TrialConfig
    from harness.data.load import load_splits
    from harness.model.encoder import load_tokenizer
    from harness.training.collate import PairCollator, context_text
    from harness.training.instances import build_instances

    cfg = TrialConfig.from_flat({**DATA, "model.name": args.model_path, "model.max_length": args.length})
    splits = load_splits(cfg.data)
    inst = build_instances(splits.train, negatives_per_positive=1, pairwise=False,
                           rng=np.random.default_rng([cfg.train.seed, 1]))
    tok = load_tokenizer(cfg.model)
    collator = PairCollator(tok, args.length)
    qs = [splits.train[int(q)] for q in inst.query]
    ctx = [context_text(q.context) for q in qs]
    resp = [q.candidates[int(c)].text for q, c in zip(qs, inst.cand[:, 0], strict=True)]
    ctx_ids, resp_ids = collator.tokenize(ctx), collator.tokenize(resp)
    ids = [collator.pair_ids(c, r) for c, r in zip(ctx_ids, resp_ids, strict=True)]
    return tok, ids, ctx, resp, [int(x) for x in inst.label], cfg


def run_harness(args: argparse.Namespace, meter: Meter) -> None:
    from harness.config import TrialConfig
    from harness.data.load import load_splits
    from harness.training.loop import StepRecord, Trainer
    from harness.training.tokenized import prepare_data

    total = args.warmup + args.steps
    cfg = TrialConfig.from_flat({**DATA, "model.name": args.model_path, "model.max_length": args.length,
                                 "train.steps": total, "train.batch_size": args.batch,
                                 "train.eval_every": 10**6, "train.warmup": 0.1, "train.device": args.device,
                                 "train.bf16": True})
    trainer = Trainer(cfg, prepare_data(load_splits(cfg.data), cfg.model), log_every=1)
    meter.hook(trainer.model)
    for rec in trainer.run():
        if isinstance(rec, StepRecord):
            if rec.step == args.warmup:
                meter.start()
            if rec.step == total:
                meter.stop()
                break


class _Callback:
    """Starts the meter after the warm-up steps and stops it at the last step (HF callback API)."""

    def __new__(cls, meter: Meter, warmup: int, total: int) -> Any:
        from transformers import TrainerCallback

        class Cb(TrainerCallback):  # type: ignore[misc]
            def on_step_end(self, targs: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.global_step == warmup:
                    meter.start()
                if state.global_step == total:
                    meter.stop()

        return Cb()


def _hf_args(args: argparse.Namespace, tmp: str, cls: Any) -> Any:
    cpu = not args.device.startswith("cuda")
    return cls(output_dir=tmp, per_device_train_batch_size=args.batch, max_steps=args.warmup + args.steps,
               learning_rate=5e-5, adam_epsilon=1e-8, warmup_steps=max(1, (args.warmup + args.steps) // 10),
               weight_decay=0.01, max_grad_norm=1.0, report_to=[], save_strategy="no",
               logging_strategy="no", use_cpu=cpu, dataloader_num_workers=0, seed=1, bf16=not cpu,
               disable_tqdm=True)


def run_hf(args: argparse.Namespace, meter: Meter) -> None:
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
    )

    tok, ids, _, _, labels, _ = training_pairs(args)
    items = []
    for (pair, first), label in zip(ids, labels, strict=True):
        types = [0] * first + [1] * (len(pair) - first)
        items.append({"input_ids": pair.tolist(), "token_type_ids": types,
                      "attention_mask": [1] * len(pair), "labels": label})

    class Pairs(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return len(items)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return items[i]

    model = AutoModelForSequenceClassification.from_pretrained(args.model_path, num_labels=2,
                                                               attn_implementation="sdpa")
    meter.hook(model)
    with tempfile.TemporaryDirectory() as tmp:
        targs = _hf_args(args, tmp, TrainingArguments)
        targs.group_by_length = True
        trainer = Trainer(model=model, args=targs, train_dataset=Pairs(),
                          data_collator=DataCollatorWithPadding(tok),
                          callbacks=[_Callback(meter, args.warmup, args.warmup + args.steps)])
        trainer.train()


def run_st(args: argparse.Namespace, meter: Meter) -> None:
    from datasets import Dataset  # sentence-transformers' trainers need the datasets package
    from sentence_transformers.cross_encoder import (
        CrossEncoder,
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )
    from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

    _, _, ctx, resp, labels, _ = training_pairs(args)
    data = Dataset.from_dict({"sentence1": ctx, "sentence2": resp, "label": [float(x) for x in labels]})
    device = "cpu" if not args.device.startswith("cuda") else args.device
    from transformers import PreTrainedModel

    model = CrossEncoder(args.model_path, num_labels=1, max_length=args.length, device=device)
    hf_model = next(m for m in model.modules() if isinstance(m, PreTrainedModel))
    meter.hook(hf_model)
    with tempfile.TemporaryDirectory() as tmp:
        targs = _hf_args(args, tmp, CrossEncoderTrainingArguments)
        trainer = CrossEncoderTrainer(model=model, args=targs, train_dataset=data,
                                      loss=BinaryCrossEntropyLoss(model),
                                      callbacks=[_Callback(meter, args.warmup, args.warmup + args.steps)])
        trainer.train()


def side(args: argparse.Namespace) -> int:
    import torch

    meter = Meter(args.device)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    out: dict[str, Any]
    try:
        {"harness": run_harness, "hf": run_hf, "st": run_st}[args.side](args, meter)
        out = meter.result(args.batch, args.steps)
        if args.device.startswith("cuda"):
            out["peak_gpu_mem_gb"] = torch.cuda.max_memory_allocated() / 2**30
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, never faked
        traceback.print_exc(file=sys.stderr)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out = {"error": f"{type(exc).__name__}: {first[:300]}"}
    print("RESULT " + json.dumps(out), flush=True)
    return 0


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
    rows = []
    for model in args.models:
        path = model_dir(model, root)
        dims = dims_of(path)
        for length in args.lengths:
            for name in args.trainers:
                cmd = [sys.executable, __file__, "--side", name, "--model-path", str(path), "--length",
                       str(length), "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
                       str(args.warmup), "--device", args.device]
                print(f"[gpu bench] {model} length {length}: {name} ...", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if lines:
                    res = json.loads(lines[-1][len("RESULT "):])
                else:
                    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                    res = {"error": f"exit {proc.returncode}: {tail[:300]}"}
                if "error" in res:
                    print(f"[gpu bench]   failed: {res['error']}\n{proc.stderr[-3000:]}", file=sys.stderr,
                          flush=True)
                else:
                    flops = train_flops(dims, res["sum_len"], res["sum_len_sq"]) / res["timed_s"]
                    res.update(model_tflops=flops / 1e12, flops_per_pair=flops * res["timed_s"] / res["pairs"],
                               mfu_datasheet=None if peak is None else flops / 1e12 / peak,
                               mfu_measured=None if measured is None else flops / 1e12 / measured)
                    print(f"[gpu bench]   {res['pairs_per_s']:.0f} pairs/s, {res['model_tflops']:.1f} TFLOP/s",
                          file=sys.stderr, flush=True)
                rows.append({"model": model, "length": length, "trainer": name, **dims,
                             "process_s": time.perf_counter() - t0, **res})
    return rows


def run_cascades(args: argparse.Namespace) -> list[dict[str, Any]]:
    import cascade

    out = []
    for model in args.cascade_models:
        for length in args.cascade_lengths:
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
         f"data: the embedded set's balanced training pairs ({DATA['data.conversations']} conversations)."),
        "",
        ("| model | max length | trainer | pairs/s | mean real length | model TFLOP/s | MFU (datasheet) "
        "| MFU (measured peak) | peak GPU mem (GiB) | harness / this |"),
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    base = {(r["model"], r["length"]): r for r in rec["trainers"] if r["trainer"] == "harness" and "error" not in r}
    for r in rec["trainers"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['length']} | {r['trainer']} | did not run: {r['error']} "
                         "| | | | | | |")
            continue
        b = base.get((r["model"], r["length"]))
        ratio = "-" if b is None else f"{b['pairs_per_s'] / r['pairs_per_s']:.2f}x"
        pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
        lines.append(f"| {r['model']} | {r['length']} | {r['trainer']} | {r['pairs_per_s']:.0f} | "
                     f"{r['mean_len']:.0f} | {r['model_tflops']:.1f} | {pct(r['mfu_datasheet'])} | "
                     f"{pct(r['mfu_measured'])} | {r.get('peak_gpu_mem_gb', 0):.2f} | "
                     f"{ratio} |")
    lines += ["", ("Trainers: `harness` = harness.training.loop.Trainer; `hf` = transformers Trainer "
              "(DataCollatorWithPadding, group_by_length, bf16); `st` = sentence-transformers "
              "CrossEncoderTrainer (BinaryCrossEntropyLoss, bf16). Model FLOPs count the full encoder on "
              "real tokens (3 x forward; see benchmarks/gpu.py), so MFU compares useful work per second."),
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["packaged", "bert-base"],
                   choices=["packaged", "bert-base", "tiny"])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    p.add_argument("--trainers", nargs="+", default=["harness", "hf", "st"], choices=["harness", "hf", "st"])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=60, help="timed steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", default=None, help="default: cuda if available (else refuse unless --smoke)")
    p.add_argument("--cascade-models", nargs="*", default=["packaged", "bert-base"],
                   choices=["packaged", "bert-base", "tiny"])
    p.add_argument("--cascade-lengths", type=int, nargs="*", default=[128, 512])
    p.add_argument("--cascade-batch", type=int, default=128)
    p.add_argument("--cascade-rounds", type=int, default=20)
    p.add_argument("--smoke", action="store_true",
                   help="CPU check: tiny model, length 32, 2 warm-up + 1 timed step, results in a temp folder")
    p.add_argument("--out", type=Path, default=None, help="output path without suffix (default results/gpu)")
    p.add_argument("--side", choices=["harness", "hf", "st"], help=argparse.SUPPRESS)
    p.add_argument("--model-path", help=argparse.SUPPRESS)
    p.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    import torch

    if args.side:
        return side(args)
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if args.smoke:
        args.models, args.lengths, args.batch, args.steps, args.warmup = ["tiny"], [32], 4, 1, 2
        args.cascade_models, args.cascade_lengths, args.cascade_batch, args.cascade_rounds = ["tiny"], [32], 8, 1
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
                        if k not in ("side", "model_path", "length")},
           "data": DATA, "sentence_transformers": st_version, "trainers": trainers,
           "cascade": cascades, "machine": describe("torch", "transformers")}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(rec))
    print(markdown(rec))
    print(f"written: {out.with_suffix('.md')} and .json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
