"""Cascade Transformer inference throughput: realised vs predicted speed-up (Soldaini & Moschitti 2020,
Sec. 4.3.2 and Table 3).

One batch = the candidates of one query (``--batch``, default 128, the paper's setting), each pair
``--seq-len`` tokens long (all equal, so every candidate costs the same, as the cost formula assumes).
Side by side, in one process and interleaved round by round (so load drift hits every setting alike):
- ``plain``: the same encoder without exits, one full forward (Hugging Face ``BertModel.forward``)
  and the final classifier on the mean of the last layer;
- ``cascade alpha=a``: ``CascadeRanker.cascade`` with the same weights, for a in --alphas.
Realised speed-up = median time(plain) / median time(cascade); predicted = 1 / relative cost of
``CascadePlan`` (cascade_cost). The ratio realised/predicted is the efficiency (target >= 0.9).

Time. Both wall-clock and the process's CPU time are recorded per call. On a CPU the speed-ups are
computed from CPU time with one torch thread (``--threads 1``): on a shared machine the wall clock
measures the neighbours' load as much as our work (a 2-core box running 10 processes gives us a
fraction of a core, varying by the second), while the CPU time our single thread spends is the work
itself. Wall-clock speed-ups are reported beside them. On a GPU, wall clock (synchronised) is used.

Models: ``packaged`` (the 6-layer MiniLM shipped with the harness, exits 2,3,4,5,6; default: runs in
about two minutes on two CPU cores), ``bert-base`` (a randomly initialised 12-layer, 768-wide BERT, the
paper's size, exits 4,6,8,10,12; slow on a CPU), ``tiny`` (a smoke test).

    python benchmarks/cascade.py                       # packaged, batch 128, alphas 0 0.3 0.4 0.5
    python benchmarks/cascade.py --model bert-base --seq-len 32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from machine import describe

from harness.config import ModelConfig
from harness.model._cascade import CascadeRanker
from harness.model.encoder import load_encoder

RESULTS = Path(__file__).resolve().parent / "results"


def build(model: str, seed: int) -> CascadeRanker:
    if model in ("bert-base", "tiny"):
        from transformers import BertConfig, BertModel

        from harness.model.encoder import TINY

        dims = TINY if model == "tiny" else {"hidden_size": 768, "num_hidden_layers": 12,
                                             "num_attention_heads": 12, "intermediate_size": 3072}
        cfg = BertConfig(vocab_size=30522, **dims)
        cfg._attn_implementation = "sdpa"
        torch.manual_seed(seed)
        encoder = BertModel(cfg, add_pooling_layer=False)
    else:
        from staged import packaged_dir

        # the packaged encoder from its package, or from a stage (benchmarks/staged.py)
        encoder = load_encoder(ModelConfig(name=str(packaged_dir())), seed=seed)
    torch.manual_seed(seed)
    return CascadeRanker(encoder).eval()


def make_batch(n: int, seq_len: int, vocab: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (n, seq_len), generator=g)
    types = torch.zeros_like(ids)
    types[:, seq_len // 2:] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types}


@torch.no_grad()
def plain_forward(model: CascadeRanker, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model without exits: one full encoder forward, the final classifier on its mean."""
    hidden = model.encoder(**batch).last_hidden_state
    return model.exit_logits(hidden, batch["attention_mask"], len(model.exits) - 1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    model = build(args.model, args.seed)
    device = torch.device(args.device)
    model.to(device)
    batch = {k: v.to(device) for k, v in make_batch(args.batch, args.seq_len, model.encoder.config.vocab_size,
                                                    args.seed).items()}
    plans = {a: model.plan.with_alpha((a,)) for a in args.alphas}
    with torch.no_grad():  # the cascade at alpha 0 and the plain model rank identically
        full = plain_forward(model, batch)
        same = torch.allclose(full, model.score(batch), atol=1e-4)
    bf16 = bool(getattr(args, "bf16", False))

    def amp() -> Any:  # bf16 autocast around the timed calls only (the check above is float32)
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)

    def plain() -> Any:
        with amp():
            return plain_forward(model, batch)

    settings: dict[str, Any] = {"plain": plain}
    for a, plan in plans.items():
        def run_cascade(plan: Any = plan) -> Any:
            with amp():
                return model.cascade(batch, plan)
        settings[f"cascade alpha={a:g}"] = run_cascade

    def timed(fn: Any) -> float:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    for fn in settings.values():  # warm-up
        timed(fn)
    wall: dict[str, list[float]] = {name: [] for name in settings}
    cpu: dict[str, list[float]] = {name: [] for name in settings}
    load_before = os.getloadavg()
    for r in range(args.rounds):
        for name, fn in settings.items():
            c0 = time.process_time()
            wall[name].append(timed(fn))
            cpu[name].append(time.process_time() - c0)
        print(f"round {r + 1}/{args.rounds}: " + "  ".join(
            f"{k} {wall[k][-1]:.2f}s wall {cpu[k][-1]:.2f}s cpu" for k in settings), file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    clock = "wall" if device.type == "cuda" else "cpu"
    primary = wall if clock == "wall" else cpu
    base, base_wall = statistics.median(primary["plain"]), statistics.median(wall["plain"])
    rows = []
    for name in settings:
        plan = plans.get(float(name.split("=")[1])) if name != "plain" else None
        t, tw = statistics.median(primary[name]), statistics.median(wall[name])
        predicted = 1.0 if plan is None else plan.speedup(args.batch)
        rows.append({
            "setting": name, "alpha": None if plan is None else plan.alphas[0],
            "survivors": None if plan is None else list(plan.entering(args.batch)),
            "relative_cost": 1.0 if plan is None else plan.relative_cost(args.batch),
            "median_s": t, "candidates_per_s": args.batch / t, "predicted_speedup": predicted,
            "realised_speedup": base / t, "efficiency": base / t / predicted,
            "median_wall_s": tw, "realised_speedup_wall": base_wall / tw,
            "efficiency_wall": base_wall / tw / predicted, "wall_s": wall[name], "cpu_s": cpu[name]})
    return {
        "benchmark": "cascade inference throughput vs the plain full forward",
        "model": args.model, "num_layers": model.num_layers, "hidden": int(model.encoder.config.hidden_size),
        "exits": list(model.exits), "batch": args.batch, "seq_len": args.seq_len, "rounds": args.rounds,
        "device": str(device), "precision": "bf16 autocast" if bf16 else "float32", "clock": clock, "threads": torch.get_num_threads(), "rounding": model.plan.rounding, "plain_equals_final_exit": bool(same),
        "machine": describe("torch", "transformers"), "loadavg_before": list(load_before), "loadavg_after": list(load_after),
        "results": rows,
    }


def markdown(res: dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        f"# Cascade inference throughput ({res['model']}, {res['num_layers']} layers, hidden {res['hidden']})",
        "",
        (f"Exits {','.join(map(str, res['exits']))}; batch {res['batch']} candidates of {res['seq_len']} tokens; "
        f"median of {res['rounds']} interleaved rounds on {res['device']}, {res['threads']} torch thread(s); "
        f"speed-ups from {res['clock']} time (wall-clock ones beside them)."),
        (f"Machine: {m['cpu']}, {m['cores']} cores ({m['torch_threads']} torch threads), torch {m['torch']}, "
        f"transformers {m['transformers']}{', ' + str(m['gpu']) if m.get('gpu') else ''}. "
        f"Load average before/after: {res['loadavg_before'][0]:.1f} / {res['loadavg_after'][0]:.1f}."),
        "",
        (f"| setting | survivors per exit | relative cost | {res['clock']} s / batch | candidates / s "
        "| predicted speed-up | realised speed-up | realised / predicted | wall s / batch | realised (wall) |"),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["results"]:
        surv = "-" if r["survivors"] is None else ",".join(map(str, r["survivors"]))
        lines.append(f"| {r['setting']} | {surv} | {r['relative_cost']:.3f} | {r['median_s']:.3f} | "
                     f"{r['candidates_per_s']:.1f} | {r['predicted_speedup']:.2f}x | "
                     f"{r['realised_speedup']:.2f}x | {100 * r['efficiency']:.0f}% | "
                     f"{r['median_wall_s']:.3f} | {r['realised_speedup_wall']:.2f}x |")
    lines += [
        "",
        ("Notes: every candidate has the same length, as the cost formula assumes (with mixed lengths the "
        "cascade also trims padding no survivor needs, which the formula does not count). `plain` is the "
        "Hugging Face forward of the same weights; `cascade alpha=0` measures the exits' overhead. "
        f"Plain forward equals the cascade's final exit: {res['plain_equals_final_exit']}."),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("packaged", "bert-base", "tiny"), default="packaged")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.3, 0.4, 0.5])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bf16", action="store_true", help="time under bf16 autocast (CUDA)")
    p.add_argument("--threads", type=int, default=1, help="torch threads on a CPU (default 1)")
    p.add_argument("--out", type=Path, default=RESULTS / "cascade", help="output path without suffix")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    res = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
