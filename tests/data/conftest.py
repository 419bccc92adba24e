"""Shared fixtures of the data tests: one small real build and a tiny chitchat-format file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.config import DataConfig
from harness.data._chitchat import Bm25, Corpus, build_splits, default_path, read_corpus
from harness.records import Splits

SMALL = DataConfig(conversations=12, split_seed=13)  # the response protocol (default)
SMALL_CONTEXT = DataConfig(conversations=12, split_seed=13, protocol="context")


@pytest.fixture(scope="session")
def chitchat_path() -> Path:
    return default_path()


@pytest.fixture(scope="session")
def small_splits(chitchat_path: Path) -> Splits:
    """12 real conversations with BM25 negatives from the whole corpus."""
    return build_splits(SMALL, path=chitchat_path, fingerprint="small")


@pytest.fixture(scope="session")
def indexed(chitchat_path: Path) -> tuple[Corpus, Bm25]:
    """The corpus and its BM25 index, read and built once for the builds that take them
    (``small_splits`` builds its own, as a user's build does, and tests/data/test_chitchat.py
    checks that a build given them builds the same)."""
    corpus = read_corpus(chitchat_path)
    return corpus, Bm25(corpus)


@pytest.fixture(scope="session")
def small_context(chitchat_path: Path, indexed: tuple[Corpus, Bm25]) -> Splits:
    """The same 12 conversations under the context protocol (the top BM25 hits of the context)."""
    corpus, bm25 = indexed
    return build_splits(SMALL_CONTEXT, path=chitchat_path, fingerprint="small-context", corpus=corpus, bm25=bm25)


def _write_chitchat(path: Path, conversations: list[list[tuple[str, str]]]) -> Path:
    raw = {f"conv-{i}": {"messages": [[{"text": text, "sender": sender}] for sender, text in conv]}
           for i, conv in enumerate(conversations)}
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


@pytest.fixture()
def write_chitchat() -> Callable[[Path, list[list[tuple[str, str]]]], Path]:
    """Writes a chitchat-format file: each conversation a list of (sender, text) messages, one
    message per group."""
    return _write_chitchat


@pytest.fixture()
def tiny_chitchat(tmp_path: Path) -> Path:
    """4 conversations of 3 utterances, all 12 texts distinct."""
    words = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape", "hazel", "ivy", "juniper",
             "kiwi", "lime"]
    convs = [[(("a", "b", "a")[j], f"{words[3 * i + j]} pie is {words[(3 * i + j + 1) % 12]}")
              for j in range(3)] for i in range(4)]
    return _write_chitchat(tmp_path / "tiny.json", convs)


WORDS = ("tea", "cake", "rain", "sun", "dog", "cat", "book", "film", "walk", "song", "park", "lake",
         "bike", "snow", "jazz", "soup")


@pytest.fixture()
def wordy_chitchat(tmp_path: Path) -> Path:
    """12 conversations of 5 utterances over a 16-word vocabulary (seeded): responses share words
    with many other utterances, so BM25 rankings are long and mostly without ties. Conversation 0
    repeats one utterance of conversation 1 and has a response ("qwerty zxcv") found nowhere else."""
    rng = np.random.default_rng(5)
    convs = [[(("a", "b")[j % 2], " ".join(rng.choice(WORDS, size=int(rng.integers(3, 7))).tolist()))
              for j in range(5)] for _ in range(12)]
    convs[0][1] = ("b", convs[1][2][1])
    convs[0][3] = ("b", "qwerty zxcv")
    return _write_chitchat(tmp_path / "wordy.json", convs)
