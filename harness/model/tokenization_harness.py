"""The harness's pair truncation, and the exported rankers' tokenizer that applies it.

A pair is ``[CLS] context [SEP] response [SEP]`` in at most ``max_length`` tokens. Over the budget
(max_length - 3), the response keeps up to ``max(budget - len(context), budget // 2)`` tokens from
its start and the context its LAST ``budget - len(response kept)`` tokens: the oldest context goes
first. No truncation strategy of transformers does this (their truncation side is one for both
texts, and "longest_first" gives an odd budget's spare token to the longer text), so:

- ``pair_lengths`` is the rule, used by the harness's collator (``harness.model.collate``);
- ``HarnessBertTokenizer`` is BERT's tokenizer with the rule for pairs. ``harness export`` copies
  this file next to the saved tokenizer and names the class in ``tokenizer_config.json``'s
  ``auto_map``, so ``AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)`` and
  ``CrossEncoder(DIR, trust_remote_code=True)`` tokenize pairs as the harness does. Without
  ``trust_remote_code`` they refuse the folder (``tokenizer_class`` names this class, and the
  model type is ``harness_bert``, ``modeling_harness.py``) rather than load the plain
  ``BertTokenizer`` (transformers' own truncation).

The file needs transformers 5 only (no harness): it is loaded from the exported folder.
"""

from __future__ import annotations

from typing import Any

from transformers import BertTokenizer
from transformers.tokenization_utils_base import BatchEncoding, TruncationStrategy


def pair_lengths(n_context: int, n_response: int, max_length: int) -> tuple[int, int]:
    """How many context tokens (its last ones) and response tokens (its first ones) a pair keeps."""
    budget = max_length - 3
    r = min(n_response, max(budget - n_context, budget // 2))
    return min(n_context, budget - r), r


def truncated_pair(context: list[int], response: list[int], max_length: int, cls_id: int,
                   sep_id: int) -> tuple[list[int], int]:
    """Input ids of one pair and the length of its first segment ([CLS] context [SEP])."""
    c, r = pair_lengths(len(context), len(response), max_length)
    ctx = list(context[len(context) - c:]) if c > 0 else []
    return [cls_id, *ctx, sep_id, *response[:r], sep_id], len(ctx) + 2


class HarnessBertTokenizer(BertTokenizer):  # type: ignore[misc]
    """BERT's tokenizer; a batch of (context, response) pairs truncated "longest_first" (what
    ``truncation=True`` means, and what sentence-transformers asks for) is truncated as the
    harness does. Single texts, and the other strategies, are BERT's own."""

    def _encode_plus(self, text: Any, text_pair: Any = None, add_special_tokens: bool = True,
                     padding_strategy: Any = None, truncation_strategy: Any = None,
                     max_length: int | None = None, **kwargs: Any) -> BatchEncoding:
        single = isinstance(text, str)
        pairs = text_pair is not None or (
            not single and not kwargs.get("is_split_into_words") and len(text) > 0
            and all(isinstance(t, (list, tuple)) and len(t) == 2 for t in text))
        if (not pairs or not add_special_tokens or max_length is None
                or truncation_strategy != TruncationStrategy.LONGEST_FIRST):
            return super()._encode_plus(text, text_pair, add_special_tokens=add_special_tokens,
                                        padding_strategy=padding_strategy,
                                        truncation_strategy=truncation_strategy, max_length=max_length, **kwargs)
        for option in ("is_split_into_words", "return_overflowing_tokens", "return_offsets_mapping"):
            if kwargs.get(option):
                raise ValueError(f"{type(self).__name__}: {option} is not supported with pair truncation")
        if text_pair is None:
            contexts, responses = [t[0] for t in text], [t[1] for t in text]
        elif single:
            contexts, responses = [text], [text_pair]
        else:
            contexts, responses = list(text), list(text_pair)
        # Whole texts first (cut below): no "longer than the specified maximum" warning for them.
        ids = self(contexts + responses, add_special_tokens=False, verbose=False)["input_ids"]
        rows = [truncated_pair(a, b, max_length, self.cls_token_id, self.sep_token_id)
                for a, b in zip(ids[:len(contexts)], ids[len(contexts):], strict=True)]
        enc: dict[str, list[list[int]]] = {"input_ids": [row for row, _ in rows]}
        if kwargs.get("return_token_type_ids") is not False:
            enc["token_type_ids"] = [[0] * first + [1] * (len(row) - first) for row, first in rows]
        if kwargs.get("return_special_tokens_mask"):
            enc["special_tokens_mask"] = [[int(i in (0, first - 1, len(row) - 1)) for i in range(len(row))]
                                          for row, first in rows]
        if kwargs.get("return_length"):
            enc["length"] = [len(row) for row, _ in rows]
        tensors = kwargs.get("return_tensors")
        out = self.pad(enc, padding=padding_strategy, max_length=max_length,
                       pad_to_multiple_of=kwargs.get("pad_to_multiple_of"),
                       padding_side=kwargs.get("padding_side"),
                       return_attention_mask=kwargs.get("return_attention_mask"),
                       return_tensors=None if single else tensors, verbose=kwargs.get("verbose", True))
        if single:  # one pair: unbatched lists, as transformers returns them
            out = BatchEncoding({k: v[0] for k, v in out.items()}, tensor_type=tensors, prepend_batch_axis=True)
        return out
