"""Shared fixtures of the data tests: one small real build and a tiny chitchat-format file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.config import DataConfig
from harness.data.chitchat import build_splits, default_path
from harness.data.records import Splits

SMALL = DataConfig(conversations=12, split_seed=13)


@pytest.fixture(scope="session")
def chitchat_path() -> Path:
    return default_path()


@pytest.fixture(scope="session")
def small_splits(chitchat_path: Path) -> Splits:
    """12 real conversations with BM25 negatives from the whole corpus."""
    return build_splits(SMALL, path=chitchat_path, fingerprint="small")


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
