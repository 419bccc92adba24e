"""Compiled forward passes (``train.compile``): ``torch.compile`` of the model where it pays.

- ``auto`` (the default): on for CUDA, off on CPU (there the eager step, with its unpadded layers
  and fast dropout, is the fast one, and compiling costs minutes of the run on 2 cores);
  ``true`` / ``false``: on / off on every device.
- What is compiled: a plain ranker's training step (its forward and the loss, one function:
  ``Trainer._step_loss``; the fused seeds' ``FusedEngine.losses``) and its ``score`` (evaluation);
  a cascade ranker's ``logits_at`` and ``exit_scores`` (the entries its training and scoring use).
  All with ``dynamic=False``: every distinct input shape gets its own graph; ``compiles`` counts
  them (the benchmarks report how many fell inside their timed window). On CUDA a training step is
  compiled with ``mode=CUDA_STEP_MODE`` ("reduce-overhead": each shape's forward, loss and backward
  are captured as CUDA graphs and replayed); the optimizer step is the fused AdamW kernel and the
  gradient clip a foreach operation, a few launches each. So that their number stays bounded, the trainer's
  collator then pads a batch's width up to a multiple of ``WIDTH_MULTIPLE`` (capped at
  ``model.max_length``) and keeps the padded layout (``PairCollator(dense=True)``: unpadding
  would give a new token count, hence a new shape, at every step); the recompile limit of
  ``torch._dynamo`` is raised to ``RECOMPILE_LIMIT`` so that those shapes (training and
  evaluation, every width bucket, the last, shorter evaluation batch) all stay compiled.
- Fallback: if compiling fails (no C compiler for inductor, an unsupported op, ...), the call
  runs eager, one warning says why, and every later call stays eager. The effective choice is
  recorded with the run (``Trainer.resolved``: ``train.compile_effective``, 1.0 or 0.0: 0.0 after
  a fallback).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

WIDTH_MULTIPLE = 64
RECOMPILE_LIMIT = 64
BACKEND: Any = "inductor"  # torch.compile's backend (tests swap in lighter ones)
# torch.compile's mode for a training step on CUDA: "reduce-overhead" replays each shape's captured
# CUDA graphs (forward, loss and AOTAutograd's backward) instead of launching every kernel from the
# host; "default" launches them. Evaluation entries always use "default": a CUDA-graph output is
# overwritten by the next replay, and scoring keeps every batch's scores until the end.
CUDA_STEP_MODE = "reduce-overhead"


def use_compile(setting: str, device: torch.device) -> bool:
    """Whether ``train.compile`` = ``setting`` compiles on ``device`` (the module docstring)."""
    if setting == "auto":
        return device.type == "cuda"
    return setting == "true"


def _entries(model: torch.nn.Module) -> tuple[str, ...]:
    # A plain ranker's forward is compiled inside the trainer's step (``CompiledModel.step``).
    return ("logits_at", "exit_scores") if hasattr(model, "exit_scores") else ("score",)


def _reason(err: BaseException) -> str:
    """The root cause of a compile error, in one line (dynamo wraps a backend's own error)."""
    root = err
    for _ in range(8):
        inner = getattr(root, "inner_exception", None) or root.__cause__
        if not isinstance(inner, BaseException) or inner is root:
            break
        root = inner
    lines = [ln.strip() for ln in str(root).splitlines() if ln.strip()]
    return f"{type(root).__name__}: {lines[0][:300]}" if lines else type(root).__name__


def _shapes(x: Any) -> Any:
    """The shape signature of a call's arguments (tensors' shapes, nested in lists, tuples, dicts)."""
    if isinstance(x, torch.Tensor):
        return tuple(x.shape)
    if isinstance(x, (list, tuple)):
        return tuple(_shapes(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, _shapes(v)) for k, v in sorted(x.items()))
    return None if x is None else type(x).__name__


class _Compiled:
    """A method compiled on first call; eager for good once compiling has failed. Each new shape
    signature of its arguments is one compile (``dynamic=False``), counted in ``state.compiles``."""

    def __init__(self, state: CompiledModel, name: str, eager: Callable[..., Any], mode: str | None = None) -> None:
        self.state, self.name, self.eager, self.mode = state, name, eager, mode
        self.compiled = torch.compile(eager, dynamic=False, backend=BACKEND, mode=mode)
        self.seen: set[Any] = set()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.state.failed is None:
            sig = _shapes((args, kwargs))
            if sig not in self.seen:
                self.seen.add(sig)
                self.state.compiles += 1
            try:
                if self.mode == "reduce-overhead":
                    # one training step per call: earlier replays' outputs may be reused
                    torch.compiler.cudagraph_mark_step_begin()
                return self.compiled(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 -- inductor and dynamo raise many kinds: eager from here on
                self.state.fail(f"{self.name}: {_reason(err)}")
        return self.eager(*args, **kwargs)


class CompiledModel:
    """Compiles ``model``'s entry methods in place (instance attributes over the class's methods:
    parameters, state dicts and checkpoints are unchanged); ``effective`` says whether the compiled
    code is what runs."""

    def __init__(self, model: Any, entries: tuple[str, ...] | None = None) -> None:
        self.failed: str | None = None
        self.compiles = 0  # distinct argument shapes compiled so far, every entry together
        dynamo = torch._dynamo.config
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, max(int(getattr(dynamo, knob)), RECOMPILE_LIMIT))
        for name in _entries(model) if entries is None else entries:
            setattr(model, name, _Compiled(self, name, getattr(model, name)))

    def step(self, name: str, fn: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
        """``fn``, a training step's forward and loss, compiled with this model's fallback; on CUDA
        in ``CUDA_STEP_MODE`` (CUDA graphs)."""
        return _Compiled(self, name, fn, CUDA_STEP_MODE if device.type == "cuda" else None)

    @property
    def effective(self) -> bool:
        return self.failed is None

    def fail(self, why: str) -> None:
        self.failed = why
        warnings.warn(f"train.compile: compiling the model failed, running eager ({why})",
                      RuntimeWarning, stacklevel=3)
