"""The examples in the data modules' docstrings hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [*(f"harness.data.{m}" for m in ("bm25", "cache", "chitchat", "first_stage", "negatives",
                                             "progress", "splits", "stats")),
           "harness.records", "harness.errors", "harness.suggest"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
