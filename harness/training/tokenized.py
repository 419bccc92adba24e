"""Data a trial needs, prepared once on the driver and shared by every trial (Ray object store):
the splits, their token ids, and the collator's settings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.config import ModelConfig
from harness.data.records import Splits
from harness.model.encoder import load_tokenizer
from harness.training.collate import PairCollator, TokenizedQueries


@dataclass(frozen=True)
class PreparedData:
    splits: Splits
    train: TokenizedQueries
    dev: TokenizedQueries
    test: TokenizedQueries
    model_name: str
    max_length: int
    # One difficulty value per training query, by scoring-function name (curriculum by sampling).
    scores: dict[str, np.ndarray]

    def tokens(self, split: str) -> TokenizedQueries:
        return {"train": self.train, "dev": self.dev, "test": self.test}[split]


def prepare_data(splits: Splits, model: ModelConfig,
                 scores: dict[str, np.ndarray] | None = None) -> PreparedData:
    """Tokenise every split once with the model's tokenizer."""
    collator = PairCollator(load_tokenizer(model), model.max_length)
    return PreparedData(
        splits=splits,
        train=collator.tokenize_queries(splits.train),
        dev=collator.tokenize_queries(splits.dev),
        test=collator.tokenize_queries(splits.test),
        model_name=model.name,
        max_length=model.max_length,
        scores=dict(scores or {}),
    )
