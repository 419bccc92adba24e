"""Builds the ranker module a trial trains: the plain [CLS] cross-encoder, or the cascade model with
early-exit classifiers when ``cascade.enabled``."""

from __future__ import annotations

from torch import nn

from harness.config import TrialConfig
from harness.model._ranker import CrossEncoder
from harness.model.encoder import load_encoder


def build_model(cfg: TrialConfig, *, seed: int) -> nn.Module:
    encoder = load_encoder(cfg.model, seed=seed)
    if cfg.cascade.enabled:
        from harness.model._cascade import CascadeRanker

        return CascadeRanker(encoder, exits=cfg.cascade.exits, alpha=cfg.cascade.alpha,
                             rounding=cfg.cascade.rounding)
    return CrossEncoder(encoder)
