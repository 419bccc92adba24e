"""Pair assembly: [CLS] context [SEP] response [SEP], oldest context dropped first, dynamic padding."""

from __future__ import annotations

import numpy as np

from harness.config import ModelConfig
from harness.model.collate import PairCollator, context_text
from harness.model.encoder import load_tokenizer


def _collator(max_length: int) -> PairCollator:
    return PairCollator(load_tokenizer(ModelConfig(name="tiny")), max_length)


def test_short_pair_is_not_truncated():
    c = _collator(32)
    ctx, resp = c.tokenize(["hello there", "general kenobi"])
    ids, first = c.pair_ids(ctx, resp)
    assert ids[0] == c.cls_id and ids[first - 1] == c.sep_id and ids[-1] == c.sep_id
    assert list(ids[1:first - 1]) == list(ctx)
    assert list(ids[first:-1]) == list(resp)


def test_oldest_context_is_dropped_first():
    c = _collator(16)  # budget 13
    ctx = np.arange(100, 120)  # 20 tokens, oldest first
    resp = np.arange(200, 204)  # 4 tokens
    ids, first = c.pair_ids(ctx, resp)
    assert len(ids) == 16
    assert list(ids[1:first - 1]) == list(range(111, 120))  # the newest 9 context tokens
    assert list(ids[first:-1]) == list(resp)


def test_long_response_keeps_half_the_budget():
    c = _collator(16)
    ids, first = c.pair_ids(np.arange(100, 120), np.arange(200, 230))
    assert len(ids) == 16
    assert first - 2 == 13 - 6 and list(ids[first:-1]) == list(range(200, 206))


def test_dynamic_padding_and_segments():
    c = _collator(64)
    a = (np.array([5, 6]), np.array([7]))
    b = (np.array([5, 6, 7, 8]), np.array([9, 10]))
    batch = c.collate([a, b])
    assert batch["input_ids"].shape == (2, 9)  # longest pair: 1 + 4 + 1 + 2 + 1
    assert batch["attention_mask"][0].tolist() == [1] * 6 + [0] * 3
    assert batch["token_type_ids"][1].tolist() == [0] * 6 + [1] * 3
    assert batch["input_ids"][0, 6:].tolist() == [c.pad_id] * 3


def test_context_text_joins_oldest_first():
    assert context_text(("a ", " b", "c")) == "a b c"
