"""The fused engine behind ``harness.training.fused.SeedGroup`` (that module's docstring)."""

from __future__ import annotations

import torch

from harness.training.loop import Trainer


def unfusable(trainer: Trainer) -> str | None:
    """Why this seed's model cannot be trained fused (None: it can)."""
    return "the fused engine is not built yet"


def fused_pays(device: torch.device, k: int) -> bool:
    """Whether fusing k seeds is the default on ``device`` (benchmarks/results/fused.md)."""
    return False


class FusedEngine:
    def __init__(self, members: list[Trainer]) -> None:
        raise NotImplementedError
