"""The cross-encoder ranker: ``[CLS] context [SEP] response [SEP]`` through a Hugging Face encoder,
with the standard sequence-classification head on [CLS] (BERT's pooler, dense + tanh, then dropout
and a dense layer to ONE logit), the head of ``BertForSequenceClassification`` that Penha & Hauff
(2020, "Implementation Details") fine-tune; one logit s is their two-class head with the non-relevant
logit fixed at 0 (softmax([0, s]) = (1 - sigmoid(s), sigmoid(s))) under the cross-entropy losses;
under ``train.loss: pointwise_mse`` s regresses the label itself (a score, not a logit).

Parameter names are those of ``BertForSequenceClassification`` with ``num_labels=1``
(``bert.embeddings...``, ``bert.pooler.dense...``, ``classifier...``), so a state dict loads into
``AutoModelForSequenceClassification`` as it is (``harness.model.export``). The forward pass is the
trainer's own: only [CLS] of the last layer is computed (``layers.first_token_state``), unpadded,
with the fast CPU dropout.

A ranker module offers two calls the training loop relies on:
- ``train_scores(batch, rng)``: (B,) logits for the loss; ``rng`` lets multi-exit models pick
  which exit a mini-batch trains (the plain ranker ignores it);
- ``score(batch)``: (B,) relevance scores for ranking, the same logit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from harness.model._layers import first_token_state, use_fast_dropout

Batch = dict[str, torch.Tensor]


class Pooler(nn.Module):
    """BERT's pooler, tanh(W h_[CLS] + b), for encoders loaded without one."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()


class CrossEncoder(nn.Module):
    """``encoder`` is a Hugging Face base model, with its pooler where it has one (``load_encoder``
    keeps the checkpoint's pooler, or initialises one as Hugging Face does)."""

    def __init__(self, encoder: Any, *, dropout: float | None = None) -> None:
        super().__init__()
        config = encoder.config
        # The encoder sits under its base-model prefix ("bert"), as in *ForSequenceClassification.
        self.prefix = str(getattr(encoder, "base_model_prefix", "") or "bert")
        self.add_module(self.prefix, encoder)
        hidden = int(config.hidden_size)
        if getattr(encoder, "pooler", None) is None:
            self.pooler = Pooler(hidden)
            self._init_linear(self.pooler.dense, config)
        if dropout is None:
            dropout = getattr(config, "classifier_dropout", None)
        p = config.hidden_dropout_prob if dropout is None else dropout
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(hidden, 1)
        self._init_linear(self.classifier, config)
        use_fast_dropout(self)

    @staticmethod
    def _init_linear(layer: nn.Linear, config: Any) -> None:
        """As Hugging Face initialises a new dense layer: N(0, initializer_range), zero bias."""
        nn.init.normal_(layer.weight, mean=0.0, std=float(getattr(config, "initializer_range", 0.02)))
        nn.init.zeros_(layer.bias)

    @property
    def encoder(self) -> Any:
        return getattr(self, self.prefix)

    @property
    def num_layers(self) -> int:
        return int(self.encoder.config.num_hidden_layers)

    def head(self, cls: torch.Tensor) -> torch.Tensor:
        """(B,) logits from the last layer's [CLS] encodings (B, H): pooler, dropout, classifier.
        The head runs in float32 even under bf16 autocast: bf16 logits (8-bit mantissa) round
        nearby candidates' scores to ties, which the pessimistic tie rule then ranks worst."""
        pooler = getattr(self.encoder, "pooler", None) or self.pooler
        with torch.autocast(cls.device.type, enabled=False):
            pooled = pooler.activation(pooler.dense(cls.float()))
            return self.classifier(self.dropout(pooled)).squeeze(-1)  # type: ignore[no-any-return]

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.head(first_token_state(self.encoder, batch))

    def train_scores(self, batch: Batch, rng: np.random.Generator) -> torch.Tensor:
        return self(batch)  # type: ignore[no-any-return]

    def score(self, batch: Batch) -> torch.Tensor:
        return self(batch).float()  # type: ignore[no-any-return]
