"""The embedded data set: conversation response ranking built from the chitchat-dataset package.

Source: ``chitchat_dataset/dataset.json`` (7,168 conversations). Each conversation's ``messages``
is a list of message groups, each a list of ``{text, sender, ...}``. Consecutive messages of one
sender, across groups too, form one utterance: their stripped texts joined with a space (blank
messages are dropped first, so they never split an utterance).

Queries (the task of Penha & Hauff 2020): for conversation c with utterances u_0..u_{n-1} and each
turn t >= 1, the context U is u_{t-k}..u_{t-1} (``data.context_turns`` = k, oldest first), the
positive r+ is u_t, and ``data.negatives`` negatives come from ``harness.data.negatives``:

- ``bm25``: the top BM25 hits for U (its utterances' tokens, concatenated) among the utterances of
  all other conversations; each candidate, the positive included, keeps its BM25 score.
- ``random``: drawn uniformly from those utterances with a Generator seeded by
  (split_seed, conversation, turn); scores are None.

The BM25 index spans every utterance of every conversation in the file, whatever
``data.conversations`` selects, so a subset gets the negatives the full set would.

Ids: document ``c{conv}u{utt}``, query ``c{conv}t{turn}``, group ``c{conv}`` (conv = position in
the file). Candidates: the positive first, then the negatives best first (evaluation breaks ties
itself, so the order leaks nothing). Conversations with one utterance give no query. The seeded
subset and the split by conversation are ``harness.data.splits``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import DataConfig
from harness.data import negatives as neg
from harness.data.bm25 import BM25Index, tokenize
from harness.data.progress import Progress, Ticker
from harness.data.records import Candidate, Query, Splits
from harness.data.splits import choose_subset, split_groups
from harness.errors import ConfigError, DataError

_RANDOM_STREAM = 7  # seed stream of the random sampler (see harness.data.splits)


@dataclass(frozen=True, slots=True)
class Conversation:
    index: int
    key: str
    utterances: tuple[str, ...]


def default_path() -> Path:
    """The dataset.json shipped in the chitchat-dataset package."""
    try:
        from importlib.resources import files

        return Path(str(files("chitchat_dataset") / "dataset.json"))
    except ModuleNotFoundError:
        raise DataError("the embedded data set needs chitchat-dataset: "
                        "pip install chitchat-dataset") from None


def merge_utterances(groups: Sequence[Sequence[dict[str, Any]]]) -> tuple[str, ...]:
    """Utterances of one conversation from its message groups (see the module docstring).

    >>> merge_utterances([[{"text": "hi", "sender": "a"}], [{"text": "yo", "sender": "b"}],
    ...                   [{"text": "how are", "sender": "b"}, {"text": "you?", "sender": "b"}]])
    ('hi', 'yo how are you?')
    """
    utterances: list[list[str]] = []
    previous: object = None
    for group in groups:
        for message in group:
            text = message["text"].strip()
            if not text:
                continue
            if utterances and message["sender"] == previous:
                utterances[-1].append(text)
            else:
                utterances.append([text])
            previous = message["sender"]
    return tuple(" ".join(parts) for parts in utterances)


def read_conversations(path: Path) -> tuple[Conversation, ...]:
    """Parse a chitchat-format JSON file: ``{conversation_id: {"messages": [[message, ...], ...]}}``."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    if not isinstance(raw, dict):
        raise DataError(f"{path}: expected a JSON object of conversations, got {type(raw).__name__}")
    out = []
    for index, (key, conv) in enumerate(raw.items()):
        try:
            out.append(Conversation(index=index, key=str(key),
                                    utterances=merge_utterances(conv["messages"])))
        except (KeyError, TypeError, AttributeError) as exc:
            raise DataError(f"{path}: conversation {key!r}: expected messages as a list of groups of "
                            f"{{text, sender}} messages ({type(exc).__name__}: {exc})") from None
    return tuple(out)


def _query(conv: Conversation, turn: int, start: int, context_turns: int, sampled: neg.Sampled,
           doc_ids: Sequence[str], texts: Sequence[str]) -> Query:
    first = max(0, turn - context_turns)
    pos = start + turn
    scores: Sequence[float | None] = sampled.scores or [None] * len(sampled.negatives)
    candidates = [Candidate(doc_id=doc_ids[pos], text=texts[pos], label=1,
                            score=sampled.positive_score)]
    candidates += [Candidate(doc_id=doc_ids[p], text=texts[p], label=0, score=s)
                   for p, s in zip(sampled.negatives, scores, strict=True)]
    return Query(qid=f"c{conv.index}t{turn}", context=conv.utterances[first:turn],
                 candidates=tuple(candidates), group=f"c{conv.index}")


def build_splits(cfg: DataConfig, *, path: Path, fingerprint: str,
                 progress: Progress | None = None, workers: int | None = None) -> Splits:
    """Build the embedded data set for ``cfg`` from the chitchat-format file at ``path``.

    ``max_*_queries`` caps are not applied here (``harness.data.load`` applies them after the
    cache), so one build serves every cap.
    """
    say = progress or (lambda _msg: None)
    say(f"reading {path}")
    convs = read_conversations(path)
    starts = np.cumsum([0] + [len(c.utterances) for c in convs]).tolist()
    texts = [u for c in convs for u in c.utterances]
    doc_ids = [f"c{c.index}u{i}" for c in convs for i in range(len(c.utterances))]
    eligible = [c.index for c in convs if len(c.utterances) >= 2]
    if len(eligible) < 3:
        raise DataError(f"{path}: {len(eligible)} conversation(s) with two or more utterances; "
                        f"need at least 3 (one per split)")
    chosen = choose_subset(eligible, cfg.conversations, seed=cfg.split_seed, key="data.conversations")
    groups = split_groups(chosen, dev_fraction=cfg.dev_fraction, test_fraction=cfg.test_fraction,
                          seed=cfg.split_seed)
    keys = neg.text_keys(texts)
    available = neg.pool_size(keys) - 1
    if cfg.negatives > available:
        raise ConfigError(f"data.negatives must be <= {available} (distinct utterances of {path.name} "
                          f"other than the positive), got {cfg.negatives}")

    turns = [(ci, t) for ci in chosen for t in range(1, len(convs[ci].utterances))]
    requests = [neg.Request(qid=f"c{ci}t{t}", positive=starts[ci] + t,
                            context=range(starts[ci] + max(0, t - cfg.context_turns), starts[ci] + t),
                            exclude=range(starts[ci], starts[ci + 1]))
                for ci, t in turns]
    say(f"{len(chosen):,} conversations, {len(requests):,} queries, {len(texts):,} utterances "
        f"in the negative pool")
    if cfg.sampler == "bm25":
        say(f"tokenising and indexing {len(texts):,} utterances for BM25")
        tokens = [tokenize(t) for t in texts]
        index = BM25Index(tokens)
        sampled = neg.sample_bm25(index, tokens, keys, requests, cfg.negatives, progress=progress,
                                  workers=workers)
    else:
        ticker = Ticker(progress, "random negatives", total=len(requests))
        sampled = []
        for req, (ci, t) in zip(requests, turns, strict=True):
            rng = np.random.default_rng([cfg.split_seed & 0xFFFFFFFF, _RANDOM_STREAM, ci, t])
            sampled.append(neg.random_negatives(keys, req, cfg.negatives, rng))
            ticker.advance()

    by_conv: dict[int, list[Query]] = {}
    for (ci, t), sample in zip(turns, sampled, strict=True):
        by_conv.setdefault(ci, []).append(
            _query(convs[ci], t, starts[ci], cfg.context_turns, sample, doc_ids, texts))

    def gather(indices: tuple[int, ...]) -> tuple[Query, ...]:
        return tuple(q for ci in indices for q in by_conv[ci])

    return Splits(train=gather(groups.train), dev=gather(groups.dev), test=gather(groups.test),
                  fingerprint=fingerprint)
