"""The examples in the curriculum and loss docstrings run and hold."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

MODULES = [
    "harness.curriculum.pacing",
    "harness.curriculum.sampler",
    "harness.curriculum.scoring",
    "harness.curriculum.heuristics",
    "harness.curriculum.weights",
    "harness.curriculum.embeddings",
    "harness.losses.smoothing",
    "harness.losses.kinds",
    "harness.losses.targets",
    "harness.losses.losses",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


def test_math_modules_import_without_torch_ray_mlflow() -> None:
    # One interpreter for all modules: losses.losses is the only one allowed to import torch.
    pure = [m for m in MODULES if m != "harness.losses.losses"] + ["harness.cli.curriculum"]
    code = (f"import sys\nfor m in {pure!r}: __import__(m)\n"
            "heavy = ('torch', 'ray', 'mlflow', 'transformers', 'matplotlib')\n"
            "bad = [m for m in heavy if m in sys.modules]\n"
            "sys.exit(str(bad) if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
