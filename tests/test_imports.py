"""The metrics, results, statistics and presentation layers are pure: importing it pulls in no torch, Ray, MLflow or matplotlib; its
docstring examples hold."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import pytest

MODULES = ("metrics.measures", "metrics.trec", "stats.paired", "stats.crossed", "stats.corrections",
           "stats.maxt", "stats.significance", "stats.sequential", "stats.power", "stats.roots",
           "stats.distributions", "results.stored",
           "results.longcsv", "results.mlflow_reader", "results.study_record", "results.trec_export",
           "present.table", "present.render", "present.significance_table", "present.power_text",
           "present.report", "present.plots", "analysis")


@pytest.mark.slow
def test_imports_pull_in_no_framework() -> None:
    code = ("import sys\n" + "".join(f"import harness.{m}\n" for m in MODULES) +
            "import harness.cli.evaluation, harness.cli.runs\n" +
            "print(sorted(m for m in ('torch', 'ray', 'mlflow', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"harness.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
