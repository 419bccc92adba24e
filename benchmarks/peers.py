"""The trainers the benchmarks compare, one per process, and the model-FLOP count they share.

Used by ``benchmarks/trainer.py`` (CPU, fp32 and bf16) and ``benchmarks/gpu.py`` (CUDA, bf16).
Every trainer sees the same training pairs (the embedded set's balanced instances, one negative per
positive), batch, steps, AdamW (lr 5e-5, eps 1e-8, weight decay 0.01, clip 1.0, 10% warm-up) and
SDPA attention:

- ``harness``: the harness's own ``Trainer`` (``harness.training.loop``), as ``harness train`` runs it;
- ``hf``: the Hugging Face ``Trainer`` on ``AutoModelForSequenceClassification`` (2 labels), the
  usual recipe for variable-length pairs: dynamic padding (``DataCollatorWithPadding``) and
  ``group_by_length=True``; its pairs are the harness's own token ids (same truncation), so both
  see the same tokens;
- ``st``: sentence-transformers' ``CrossEncoderTrainer`` (its current major version) with
  ``BinaryCrossEntropyLoss`` on a 1-label ``CrossEncoder``, fed the text pairs (it tokenises each
  batch itself, padding to the batch's longest pair and truncating to the same total length);
- GPU only (``benchmarks/gpu.py``): ``harness-fused``, K seeds of the ``harness`` configuration
  trained as one fused model (``harness.training.fused.SeedGroup``, what ``resources.seeds_per_trial``
  runs; every seed's pairs count), ``harness-eager`` (``train.compile: false``, beside ``harness``
  whose ``auto`` compiles on CUDA), and ``hf-compile``, ``hf`` with ``torch_compile=True``.

Precision: ``fp32``, or ``bf16`` (the harness's autocast; ``bf16=True`` for the Hugging Face peers,
autocast on CPU through accelerate, mixed precision on CUDA).

Counting: no forward hooks (sentence-transformers 6 calls its model in ways a hook on the wrapped
Hugging Face model never sees). Each trainer's *batches* are counted where they are built, from
their attention masks: the harness's ``PairCollator.collate``, the HF ``DataCollatorWithPadding``,
sentence-transformers' ``CrossEncoder.preprocess``; the same ``Meter`` for all. Model FLOPs then follow
analytically from the real lengths L (``train_flops``), identically for every trainer.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

DATA = {"data.conversations": 120, "data.max_dev_queries": 8, "data.max_test_queries": 8}
DIMS = {  # random-init encoders (the packaged one is read from its package)
    "bert-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                  "intermediate_size": 3072},
    "tiny": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
}
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# The Trainer's default, which studies run with (harness/driver/_trainable.py builds its Trainer
# with it): the loss is read back from the device every LOG_EVERY steps, not at every step.
LOG_EVERY = 10
TRAINERS = ("harness", "hf", "st")  # the CPU benchmark's (benchmarks/trainer.py)
# the GPU benchmark's: also K seeds fused into one model, and the HF Trainer compiled
GPU_TRAINERS = ("harness", "harness-eager", "harness-fused", "hf", "hf-compile", "st")


# -- models ---------------------------------------------------------------------------------------

def model_dir(name: str, root: Path) -> Path:
    """A plain Hugging Face model directory for ``name`` (config, weights, tokenizer): the packaged
    encoder's files linked, or a seeded random-init BERT of ``DIMS[name]`` written once."""
    from staged import packaged_dir

    src = packaged_dir()
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
    """Model FLOPs of training (3 x forward: backward = 2 x forward) over pairs with the given sums
    of real lengths L and L^2: per layer and pair 2 L (4 h^2 + 2 h f) for the projections and the
    feed-forward block plus 4 L^2 h for q k^T and the attention-weighted values (h hidden, f FFN
    width). Embeddings (look-ups) and the classification head (< 0.01%) are left out. Padding is not
    model work, and a trainer that skips work (the harness's [CLS]-only last layer) is not credited
    for it either: FLOP/s computed this way compare useful work per second between trainers."""
    h, f, n = dims["hidden"], dims["ffn"], dims["layers"]
    return 3.0 * n * (2.0 * (4 * h * h + 2 * h * f) * sum_len + 4.0 * h * sum_len_sq)


# -- counting -------------------------------------------------------------------------------------

class Meter:
    """Counts the pairs and real lengths of every training batch built while ``on`` (from its
    attention mask, kept on the host), and the (synchronised) wall and CPU time between ``start``
    and ``stop``."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.on = self.done = False
        self.compiles = self.compiles_total = 0
        self.pairs = self.sum_len = self.sum_len_sq = 0.0
        self.batches = 0
        self.t0 = self.t1 = self.c0 = self.c1 = 0.0

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self) -> None:
        self.sync()
        self.on, self.t0, self.c0 = True, time.perf_counter(), time.process_time()

    def stop(self) -> None:
        self.sync()
        self.on, self.t1, self.c1 = False, time.perf_counter(), time.process_time()
        self.done = True

    def count(self, batch: Any) -> Any:
        """Count one batch (a mapping with ``attention_mask``); returns it unchanged."""
        if self.on:
            mask = batch["attention_mask"]
            lengths = (mask.sum(dim=1) if hasattr(mask, "sum") else self.torch.as_tensor(mask).sum(dim=1))
            lengths = lengths.detach().to("cpu", self.torch.float64)
            self.pairs += float(len(lengths))
            self.sum_len += float(lengths.sum())
            self.sum_len_sq += float((lengths * lengths).sum())
            self.batches += 1
        return batch

    def result(self, batch: int, steps: int) -> dict[str, float]:
        if not self.batches:
            raise RuntimeError("no training batch was counted")
        wall, cpu, n = self.t1 - self.t0, self.c1 - self.c0, self.pairs
        return {"timed_s": wall, "cpu_s": cpu, "pairs": n, "batches": float(self.batches),
                "pairs_per_s": n / wall, "pairs_per_cpu_s": n / cpu if cpu > 0 else 0.0,
                "tokens_per_s": self.sum_len / wall, "mean_len": self.sum_len / n, "sum_len": self.sum_len,
                "sum_len_sq": self.sum_len_sq, "expected_pairs": float(batch * steps),
                "compiles_in_window": self.compiles, "compiles": self.compiles_total}


def _counted(meter: Meter, fn: Any) -> Any:
    def wrapped(*a: Any, **kw: Any) -> Any:
        return meter.count(fn(*a, **kw))
    return wrapped


# -- the trainers ---------------------------------------------------------------------------------

def training_pairs(args: argparse.Namespace) -> tuple[Any, Any, list[str], list[str], list[int], Any]:
    """The balanced training instances of the harness (one negative per positive), as harness
    token-id pairs and as texts, with labels."""
    import numpy as np
    from staged import load_splits

    from harness.config import TrialConfig
    from harness.model.collate import PairCollator, context_text
    from harness.model.encoder import load_tokenizer
    from harness.training._instances import build_instances

    cfg = TrialConfig.from_flat({**DATA, "model.name": args.model_path, "model.max_length": args.length})
    splits = load_splits(cfg.data, DATA)
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


def _harness_config(args: argparse.Namespace, seed: int = 1) -> Any:
    from harness.config import TrialConfig

    total = args.warmup + args.steps
    return TrialConfig.from_flat({**DATA, "model.name": args.model_path, "model.max_length": args.length,
                                  "train.steps": total, "train.batch_size": args.batch,
                                  "train.eval_every": 10**6, "train.warmup": 0.1, "train.weight_decay": 0.01,
                                  "train.device": args.device,
                                  "train.bf16": args.precision == "bf16", "train.seed": seed,
                                  "train.compile": getattr(args, "compile_mode", None) or "auto"})


def time_steps(args: argparse.Namespace, meter: Meter, owner: Any, batch_of: Any, records: Any) -> None:
    """Times ``owner``'s (a ``Trainer`` or a fused engine) optimizer steps ``--warmup`` + 1 ..
    ``--warmup`` + ``--steps`` as its run takes them: ``owner.train_step`` is wrapped so that the
    meter starts just before the first timed step (after the ``barrier``, when trainers share a
    GPU) and stops (synchronised) just after the last, and counts each step's batch
    (``batch_of(inputs)``) as the step consumes it. Everything the run does between those steps is
    in the window, as a study pays it: building the next batch, the loss read-back every
    ``log_every`` steps; what it does before (precompiling every batch width, the warm-up steps)
    and after (evaluation) is not. The compiles inside the window are counted."""
    total = args.warmup + args.steps
    step = owner.train_step
    compiled = getattr(owner, "compiled", None)

    def compiles() -> int:
        return 0 if compiled is None else int(compiled.compiles)

    def wrapped(inputs: Any, *a: Any) -> Any:
        s = owner.step
        if s == args.warmup:
            barrier(args)
            meter.start()
            meter.compiles = -compiles()
        meter.count(batch_of(inputs))
        out = step(inputs, *a)
        if s + 1 == total:
            meter.stop()
            meter.compiles += compiles()
            meter.compiles_total = compiles()
        return out

    owner.train_step = wrapped
    for _ in records:
        if meter.done:
            break


def wait_turn(args: argparse.Namespace, timeout_s: float = 900.0) -> None:
    """With ``--go FILE`` (benchmarks/gpu.py's pipeline): the trainer is built, and waits here until
    FILE exists before its first step, so the next trainer's start-up (imports, data, model) overlaps
    the current one's timed steps without sharing the GPU's time with them."""
    go = getattr(args, "go", None)
    if not go:
        return
    deadline = time.monotonic() + timeout_s
    while not Path(go).exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def barrier(args: argparse.Namespace, timeout_s: float = 600.0) -> None:
    """Trainers that share a GPU (``--barrier DIR N``) start timing together: each leaves a file in
    DIR and waits until N are there, so the timed windows overlap."""
    spec = getattr(args, "barrier", None)
    if not spec:
        return
    folder, n = Path(spec[0]), int(spec[1])
    folder.mkdir(parents=True, exist_ok=True)
    tempfile.NamedTemporaryFile(dir=folder, prefix="ready-", delete=False).close()
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("ready-*"))) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def run_harness(args: argparse.Namespace, meter: Meter) -> Any:
    """Times the harness trainer; returns it (benchmarks/gpu.py then times its evaluation)."""
    from staged import load_splits

    from harness.training.loop import Trainer
    from harness.training.tokenized import prepare_data

    cfg = _harness_config(args)
    bf16 = args.precision == "bf16"
    trainer = Trainer(cfg, prepare_data(load_splits(cfg.data, DATA), cfg.model), log_every=LOG_EVERY)
    # train.bf16 asks for autocast; the Trainer turns it on where it pays (CUDA, CPUs with native
    # bf16). Set it explicitly so each precision is measured as named, whatever that rule says.
    trainer.autocast = bf16
    wait_turn(args)
    # Each batch is counted when its step consumes it (on CUDA the trainer builds the next one ahead).
    time_steps(args, meter, trainer, lambda inputs: inputs.batch, trainer.run())
    return trainer


def run_harness_eager(args: argparse.Namespace, meter: Meter) -> Any:
    """``harness`` with ``train.compile: false`` (beside ``harness``, whose ``auto`` compiles on CUDA)."""
    args.compile_mode = "false"
    return run_harness(args, meter)


def run_harness_fused(args: argparse.Namespace, meter: Meter) -> Any:
    """``--fused K`` seeds of one configuration as one fused model (harness.training.fused.SeedGroup,
    as ``resources.seeds_per_trial: K`` trains them); every seed's pairs are counted. Returns the
    fused engine."""
    from staged import load_splits

    from harness.training.fused import SeedGroup
    from harness.training.tokenized import prepare_data

    k = max(1, int(getattr(args, "fused", 0) or 5))
    cfgs = [_harness_config(args, seed) for seed in range(1, k + 1)]
    group = SeedGroup(cfgs, prepare_data(load_splits(cfgs[0].data, DATA), cfgs[0].model), fused=True,
                      log_every=LOG_EVERY)
    for member in group.members:
        member.autocast = args.precision == "bf16"
    group._engine.autocast = args.precision == "bf16"
    wait_turn(args)
    # every seed's pairs: the stacked batch's rows, each real length from its attention keys
    time_steps(args, meter, group._engine,
               lambda inputs: {"attention_mask": inputs.stacked.keep.flatten(1)}, group.run())
    return group._engine


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
               logging_strategy="no", use_cpu=cpu, dataloader_num_workers=0, seed=1,
               bf16=args.precision == "bf16", disable_tqdm=True)


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
    collator = DataCollatorWithPadding(tok)
    with tempfile.TemporaryDirectory() as tmp:
        targs = _hf_args(args, tmp, TrainingArguments)
        targs.group_by_length = True
        targs.torch_compile = bool(getattr(args, "compile", False))
        trainer = Trainer(model=model, args=targs, train_dataset=Pairs(),
                          data_collator=_counted(meter, collator),
                          callbacks=[_Callback(meter, args.warmup, args.warmup + args.steps)])
        wait_turn(args)
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
    model = CrossEncoder(args.model_path, num_labels=1, max_length=args.length, device=device,
                         model_kwargs={"attn_implementation": "sdpa"})
    # The loss tokenises each batch through model.preprocess just before the forward: count there.
    model.preprocess = _counted(meter, model.preprocess)
    with tempfile.TemporaryDirectory() as tmp:
        targs = _hf_args(args, tmp, CrossEncoderTrainingArguments)
        trainer = CrossEncoderTrainer(model=model, args=targs, train_dataset=data,
                                      loss=BinaryCrossEntropyLoss(model),
                                      callbacks=[_Callback(meter, args.warmup, args.warmup + args.steps)])
        wait_turn(args)
        trainer.train()


def run_hf_compiled(args: argparse.Namespace, meter: Meter) -> None:
    """The Hugging Face Trainer as ``hf`` with ``torch_compile=True`` (where compiling pays: CUDA)."""
    args.compile = True
    run_hf(args, meter)


RUNNERS = {"harness": run_harness, "harness-eager": run_harness_eager, "harness-fused": run_harness_fused, "hf": run_hf,
           "hf-compile": run_hf_compiled, "st": run_st}
