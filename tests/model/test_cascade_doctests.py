"""The examples in the cascade modules' docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "harness.model.cascade_cost",
    "harness.model._cascade_rank",
    "harness.model.cascade_eval",
    "harness.model._cascade",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    assert result.attempted > 0
