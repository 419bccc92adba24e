"""Where the trainer computes in bfloat16: ``train.bf16`` asks for it, the device decides.

- CUDA: autocast to bf16 (as before).
- CPU: autocast to bf16 only where the CPU has native bf16 arithmetic, the ``avx512_bf16`` or
  ``amx_bf16`` flag of /proc/cpuinfo (oneDNN then runs bf16 matmuls faster than fp32), and only
  for an encoder whose hidden size is at least ``MIN_CPU_HIDDEN``: below it the matmuls are too
  small to pay for the casts autocast adds around every op (the ``tiny`` test encoder, hidden 32,
  steps slower in bf16; the packaged MiniLM, hidden 384, faster, as benchmarks/results/bf16_cpu.md
  records with its machine). Elsewhere oneDNN would emulate bf16, slower than fp32, so the trainer
  stays in fp32.

Under autocast the matmuls (linear layers, attention) run in bf16 and the reductions autocast keeps
in fp32 (softmax, layer norm, the losses: ``harness.losses`` upcasts the logits) stay there; the
weights, gradients and AdamW state stay fp32. ``train.bf16: false`` switches it off everywhere.
The effective choice is recorded with the run (``Trainer.resolved``: ``train.bf16_effective``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_CPU_HIDDEN = 128


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has native bf16 arithmetic (Linux: a /proc/cpuinfo flag; else False)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            return any(flag in line.split() for flag in _FLAGS)
    return False


def hidden_size(model: torch.nn.Module) -> int | None:
    """The hidden size of the (first) transformer config inside ``model``; None if none."""
    for module in model.modules():
        size = getattr(getattr(module, "config", None), "hidden_size", None)
        if isinstance(size, int):
            return size
    return None


def use_bf16(requested: bool, device: torch.device, model: torch.nn.Module | None = None) -> bool:
    """Whether the trainer autocasts ``model`` to bf16 on ``device`` when ``train.bf16`` is
    ``requested`` (the module docstring)."""
    if not requested:
        return False
    if device.type == "cuda":
        return True
    if device.type != "cpu" or not cpu_has_bf16():
        return False
    size = hidden_size(model) if model is not None else None
    return size is None or size >= MIN_CPU_HIDDEN
