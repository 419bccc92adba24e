"""Per-instance training signals the loop applies at step s: loss weights (curriculum by loss
weighting) and soft targets (label smoothing). The math lives in harness.curriculum and
harness.losses; this module only gathers each instance's inputs and resolves step units."""

from __future__ import annotations

import numpy as np

from harness.config import TrialConfig
from harness.training.instances import Instances
from harness.training.prepare import PreparedData


class TrainingSignals:
    def __init__(self, cfg: TrialConfig, data: PreparedData, instances: Instances, total_steps: int) -> None:
        self.cfg = cfg
        self.instances = instances
        self.total_steps = total_steps

    def resolved(self) -> dict[str, float]:
        return {}

    def weights(self, idx: np.ndarray, step: int) -> np.ndarray | None:
        return None

    def targets(self, idx: np.ndarray, step: int) -> np.ndarray:
        labels = self.instances.label[idx]
        out = np.zeros((len(idx), 2), dtype=np.float64)
        out[np.arange(len(idx)), labels] = 1.0
        return out
