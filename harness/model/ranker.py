"""The cross-encoder ranker: ``[CLS] context [SEP] response [SEP]`` through a Hugging Face encoder,
with a two-class classification head on [CLS] (Penha & Hauff 2020, "Implementation Details").
Only [CLS] of the last layer is read, so that layer runs for [CLS] alone (``layers.first_token_state``).

A ranker module offers two calls the training loop relies on:
- ``train_logits(batch, rng)``: (B, 2) logits for the loss; ``rng`` lets multi-exit models pick
  which exit a mini-batch trains (the plain ranker ignores it);
- ``score(batch)``: (B,) relevance scores for ranking, logit(rel) - logit(non-rel).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from harness.model.layers import first_token_state, use_fast_dropout

Batch = dict[str, torch.Tensor]


class CrossEncoder(nn.Module):
    def __init__(self, encoder: Any, *, dropout: float | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        p = encoder.config.hidden_dropout_prob if dropout is None else dropout
        self.dropout = nn.Dropout(p)
        self.head = nn.Linear(hidden, 2)
        use_fast_dropout(self)

    @property
    def num_layers(self) -> int:
        return int(self.encoder.config.num_hidden_layers)

    def forward(self, batch: Batch) -> torch.Tensor:
        cls = first_token_state(self.encoder, batch)
        # The head runs in float32 even under bf16 autocast: bf16 logits (8-bit mantissa) round
        # nearby candidates' scores to ties, which the pessimistic tie rule then ranks worst.
        with torch.autocast(cls.device.type, enabled=False):
            return self.head(self.dropout(cls.float()))  # type: ignore[no-any-return]

    def train_logits(self, batch: Batch, rng: np.random.Generator) -> torch.Tensor:
        return self(batch)  # type: ignore[no-any-return]

    def score(self, batch: Batch) -> torch.Tensor:
        logits = self(batch).float()
        return logits[:, 1] - logits[:, 0]
