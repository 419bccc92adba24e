"""Data a trial needs, prepared once on the driver and shared by every trial (Ray object store):
the splits, their token ids, and the collator's settings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.config import ModelConfig, TrialConfig
from harness.model.collate import PairCollator, TokenizedQueries
from harness.model.encoder import load_tokenizer
from harness.records import Splits
from harness.training._teacher_id import TEACHER_NAMES, teacher_key


@dataclass(frozen=True)
class PreparedData:
    splits: Splits
    train: TokenizedQueries
    dev: TokenizedQueries
    test: TokenizedQueries
    model_name: str
    max_length: int
    # One difficulty value per training query, by ``score_key`` (curriculum by sampling).
    scores: dict[str, np.ndarray]

    def tokens(self, split: str) -> TokenizedQueries:
        return {"train": self.train, "dev": self.dev, "test": self.test}[split]


def prepare_data(splits: Splits, model: ModelConfig, scores: dict[str, np.ndarray] | None = None, *,
                 memo: dict[str, np.ndarray] | None = None) -> PreparedData:
    """Tokenise every split once with the model's tokenizer. ``memo``: token ids of texts this
    model's tokenizer has read already (text -> ids; shared by a study's variants, which differ in
    their training negatives but read the same texts), added to here."""
    collator = PairCollator(load_tokenizer(model), model.max_length)
    memo = {} if memo is None else memo
    return PreparedData(
        splits=splits,
        train=collator.tokenize_queries(splits.train, memo),
        dev=collator.tokenize_queries(splits.dev, memo),
        test=collator.tokenize_queries(splits.test, memo),
        model_name=model.name,
        max_length=model.max_length,
        scores=dict(scores or {}),
    )


def score_key(cfg: TrialConfig) -> str:
    """Names the difficulty scores a trial of ``cfg`` sorts by: the scoring function, the candidate
    set it sees and, where they change the values, the seed, the negatives per positive and the
    teacher (bert_pred, bert_loss: ``teacher.teacher_key``).

    ``pair`` scores the candidates the seed trains on, so they depend on the seed and on
    train.negatives_per_positive; ``random`` is drawn per seed (the authors draw it per run).

    >>> from harness.config import TrialConfig
    >>> score_key(TrialConfig.from_flat({"curriculum.scoring": "uwords", "train.seed": 3}))
    'uwords/pair/k1/seed3'
    """
    cur = cfg.curriculum
    parts = [cur.scoring, cur.candidates]
    if cur.candidates == "pair":
        parts += [f"k{cfg.train.negatives_per_positive}", f"seed{cfg.train.seed}"]
    elif cur.scoring == "random":
        parts.append(f"seed{cfg.train.seed}")
    if cur.scoring in TEACHER_NAMES:
        parts.append(f"teacher-{teacher_key(cfg)}")
    return "/".join(parts)
