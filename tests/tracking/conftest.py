"""Shared by the tracking tests: a finished study written as the driver writes it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def write_benchmark_study(uri: str, **kw: object) -> str:
    """benchmarks/table_report.py's study (real MLflow records, as the driver writes them) into the
    store at ``uri``; ``kw`` its size (queries, seeds). Returns the study's (experiment's) name."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import table_report
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    table_report.write_study(uri, **kw)
    return str(table_report.STUDY)
