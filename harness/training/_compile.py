"""Compiled forward passes (``train.compile``): ``torch.compile`` of the model where it pays.

- ``auto`` (the default): on for CUDA, off on CPU (there the eager step, with its unpadded layers
  and fast dropout, is the fast one, and compiling costs minutes of the run on 2 cores);
  ``true`` / ``false``: on / off on every device.
- What is compiled: the ranker's ``forward`` (a cascade ranker's ``logits_at`` and
  ``exit_scores``, the entries its training and scoring use), with ``dynamic=False``: every
  distinct input shape gets its own graph. So that their number stays bounded, the trainer's
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


def use_compile(setting: str, device: torch.device) -> bool:
    """Whether ``train.compile`` = ``setting`` compiles on ``device`` (the module docstring)."""
    if setting == "auto":
        return device.type == "cuda"
    return setting == "true"


def _entries(model: torch.nn.Module) -> tuple[str, ...]:
    return ("logits_at", "exit_scores") if hasattr(model, "exit_scores") else ("forward",)


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


class _Compiled:
    """A model method compiled on first call; eager for good once compiling has failed."""

    def __init__(self, state: CompiledModel, name: str, eager: Callable[..., Any]) -> None:
        self.state, self.name, self.eager = state, name, eager
        self.compiled = torch.compile(eager, dynamic=False, backend=BACKEND)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.state.failed is None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 -- inductor and dynamo raise many kinds: eager from here on
                self.state.fail(f"{self.name}: {_reason(err)}")
        return self.eager(*args, **kwargs)


class CompiledModel:
    """Compiles ``model``'s entry methods in place (instance attributes over the class's methods:
    parameters, state dicts and checkpoints are unchanged); ``effective`` says whether the compiled
    code is what runs."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.failed: str | None = None
        dynamo = torch._dynamo.config
        for knob in ("recompile_limit", "cache_size_limit"):
            if hasattr(dynamo, knob):
                setattr(dynamo, knob, max(int(getattr(dynamo, knob)), RECOMPILE_LIMIT))
        for name in _entries(model):
            setattr(model, name, _Compiled(self, name, getattr(model, name)))

    @property
    def effective(self) -> bool:
        return self.failed is None

    def fail(self, why: str) -> None:
        self.failed = why
        warnings.warn(f"train.compile: compiling the model failed, running eager ({why})",
                      RuntimeWarning, stacklevel=3)
