"""Pre-tokenisation and the collator: ``[CLS] context [SEP] response [SEP]`` with dynamic padding.

Texts are tokenised once (without special tokens) and kept as id arrays; a batch is assembled by
concatenation and padded only to its own longest pair (or, with ``width_multiple`` > 1, up to the
next multiple of it: compiled models see a bounded set of widths). With ``packing`` the batch also
carries the unpadding indices of ``harness.model._layers.Packing``, computed here on the host from
the known lengths, so that the model needs no device-to-host read to find them (on CUDA such a read
synchronises the host with the GPU at every step). Truncation drops the OLDEST context first:
the response keeps up to ``max(budget - len(context), budget // 2)`` tokens and the context keeps its
last ``budget - len(response kept)`` tokens, where budget = max_length - 3
(``harness.model.tokenization_harness.pair_lengths``, which exported tokenizers apply as well).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.model.tokenization_harness import pair_lengths
from harness.records import Query


@dataclass(frozen=True)
class TokenizedQueries:
    """Token ids per query context and per candidate, aligned with the queries' order."""

    contexts: tuple[np.ndarray, ...]
    candidates: tuple[tuple[np.ndarray, ...], ...]


class PairCollator:
    """``width_multiple``: pad a batch's width up to a multiple of it (capped at ``max_length``);
    ``dense``: with ``packing``, keep every position as a packed row (the padded layout, what a
    compiled model with fixed shapes wants) instead of the real tokens only."""

    def __init__(self, tokenizer: Any, max_length: int, *, width_multiple: int = 1,
                 dense: bool = False) -> None:
        self.max_length = max_length
        self.width_multiple = width_multiple
        self.dense = dense
        self.cls_id = int(tokenizer.cls_token_id)
        self.sep_id = int(tokenizer.sep_token_id)
        self.pad_id = int(tokenizer.pad_token_id)
        self._tokenizer = tokenizer

    def tokenize(self, texts: Sequence[str], chunk: int = 2048,
                 memo: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
        """Token ids of each text (no special tokens); duplicates tokenised once. ``memo``: ids
        already known for this tokenizer (text -> ids), used and added to (a study's variants share
        most texts: harness.study.variants)."""
        ids: dict[str, np.ndarray] = {} if memo is None else memo
        unique = [t for t in dict.fromkeys(texts) if t not in ids]
        for i in range(0, len(unique), chunk):
            part = unique[i:i + chunk]
            enc = self._tokenizer(part, add_special_tokens=False, truncation=False)["input_ids"]
            for text, toks in zip(part, enc, strict=True):
                ids[text] = np.asarray(toks, dtype=np.int32)
        return [ids[t] for t in texts]

    def tokenize_queries(self, queries: Sequence[Query],
                         memo: dict[str, np.ndarray] | None = None) -> TokenizedQueries:
        contexts = self.tokenize([context_text(q.context) for q in queries], memo=memo)
        flat = self.tokenize([c.text for q in queries for c in q.candidates], memo=memo)
        out: list[tuple[np.ndarray, ...]] = []
        pos = 0
        for q in queries:
            out.append(tuple(flat[pos:pos + len(q.candidates)]))
            pos += len(q.candidates)
        return TokenizedQueries(tuple(contexts), tuple(out))

    def pair_ids(self, context: np.ndarray, response: np.ndarray) -> tuple[np.ndarray, int]:
        """Input ids of one pair and the length of its first segment ([CLS] context [SEP])."""
        c, r = pair_lengths(len(context), len(response), self.max_length)
        ctx = context[len(context) - c:] if c > 0 else context[:0]
        ids = np.concatenate(([self.cls_id], ctx, [self.sep_id], response[:r], [self.sep_id]))
        return ids, c + 2

    def width_of(self, longest: int) -> int:
        """The padded width of a batch whose longest pair has ``longest`` tokens."""
        m = self.width_multiple
        return min(-(-longest // m) * m, max(longest, self.max_length)) if m > 1 else longest

    def widths(self, pairs: Iterable[tuple[np.ndarray, np.ndarray]]) -> list[int]:
        """Every padded width a batch of these pairs can have: the width of each pair's length
        (a batch's is that of its longest pair). Compiled steps have one graph per width
        (harness.training._compile): these are the graphs to build before training."""
        out = set()
        for context, response in pairs:
            c, r = pair_lengths(len(context), len(response), self.max_length)
            out.add(self.width_of(c + r + 3))
        return sorted(out)

    def at_width(self, batch: dict[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
        """A dense collated batch (``collate(..., packing=True)`` with ``dense``) padded or cut to
        ``width``: a stand-in of that shape, to compile a step for it ahead of training."""
        n, have = batch["input_ids"].shape
        out = {}
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            x = batch[key][:, :width]
            if have < width:
                fill = self.pad_id if key == "input_ids" else 0
                x = torch.cat([x, x.new_full((n, width - have), fill)], dim=1)
            out[key] = x.contiguous()
        if "packed_index" in batch:
            out["packed_index"] = torch.arange(n * width)
            out["first"] = torch.arange(n) * width
        return out

    def collate(self, pairs: Iterable[tuple[np.ndarray, np.ndarray]], *,
                packing: bool = False) -> dict[str, torch.Tensor]:
        """``input_ids``, ``attention_mask``, ``token_type_ids`` (B, L); with ``packing`` also
        ``packed_index`` (N,), the flat positions b * L + t of the rows ``Packing`` keeps (every real
        token and position 0 of every row; every position when ``dense``) and ``first`` (B,), the
        packed row of each pair's position 0."""
        built = [self.pair_ids(c, r) for c, r in pairs]
        width = self.width_of(max(len(ids) for ids, _ in built))
        n = len(built)
        input_ids = np.full((n, width), self.pad_id, dtype=np.int64)
        attention = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for i, (ids, first) in enumerate(built):
            input_ids[i, :len(ids)] = ids
            attention[i, :len(ids)] = 1
            types[i, first:len(ids)] = 1
        out = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention),
               "token_type_ids": torch.from_numpy(types)}
        if packing:
            if self.dense:
                index, first = np.arange(n * width), np.arange(n) * width
            else:
                rows = attention.astype(bool)
                rows[:, 0] = True
                counts = rows.sum(axis=1)
                index, first = np.flatnonzero(rows), np.cumsum(counts) - counts
            out["packed_index"] = torch.from_numpy(index.astype(np.int64))
            out["first"] = torch.from_numpy(first.astype(np.int64))
        return out


def context_text(context: Sequence[str]) -> str:
    """The context as one text: utterances oldest first, separated by spaces."""
    return " ".join(u.strip() for u in context)
