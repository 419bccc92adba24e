"""The examples in the data modules' docstrings hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [*(f"harness.data.{m}" for m in ("_bm25", "cache", "_chitchat", "first_stage", "_negatives",
                                             "_progress", "_splits", "stats")),
           "harness.records", "harness.errors", "harness.suggest"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
