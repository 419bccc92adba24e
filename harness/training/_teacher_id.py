"""Which teacher a curriculum configuration sorts by (bert_pred, bert_loss): its settings and the
short key that names it in a score key (harness.training.tokenized.score_key). Training and caching
the teacher is harness.training.teacher's."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from harness.config import TrialConfig

TEACHER_NAMES = ("bert_pred", "bert_loss")


def teacher_config(cfg: TrialConfig) -> TrialConfig:
    """The teacher: the same data and model, plain training (no curriculum, weighting, smoothing,
    cascade), seed curriculum.teacher_seed, curriculum.teacher_steps steps (default train.steps)."""
    base = TrialConfig()
    train = dataclasses.replace(cfg.train, seed=cfg.curriculum.teacher_seed, loss="pointwise",
                                steps=cfg.curriculum.teacher_steps or cfg.train.steps)
    return TrialConfig(data=cfg.data, model=cfg.model, train=train, curriculum=base.curriculum,
                       weighting=base.weighting, smoothing=base.smoothing, cascade=base.cascade)


def teacher_settings(cfg: TrialConfig) -> dict[str, object]:
    """The teacher's model and training settings (no device: where it trains changes nothing)."""
    t = teacher_config(cfg)
    return {"model": dataclasses.asdict(t.model),
            "train": {k: v for k, v in dataclasses.asdict(t.train).items() if k != "device"}}


def teacher_key(cfg: TrialConfig) -> str:
    """The teacher of ``cfg`` in a score key: 8 hex digits of ``teacher_settings`` (seed, budget,
    the rest of train.*), so configurations of one study with different teachers sort by their
    own.

    >>> a = TrialConfig.from_flat({"curriculum.scoring": "bert_pred"})
    >>> teacher_key(a) == teacher_key(TrialConfig.from_flat({"curriculum.scoring": "bert_loss"}))
    True
    >>> teacher_key(a) == teacher_key(TrialConfig.from_flat({"curriculum.scoring": "bert_pred",
    ...                                                      "curriculum.teacher_seed": 2000}))
    False
    """
    blob = json.dumps(teacher_settings(cfg), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]
