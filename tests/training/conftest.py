"""Fixtures shared by the compiled-step tests (test_compile.py, test_step_graph.py,
test_fused_step.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo's caches and counters empty before and after the test (graph counts are per test)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def prepared():
    """A small toy data set prepared for the tiny model (24 train, 4 dev, 4 test queries)."""
    return prepare_data(toy_splits(n_train=24, n_dev=4, n_test=4), tiny_config().model)
