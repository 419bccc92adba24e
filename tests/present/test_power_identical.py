"""`harness power` on metrics identical in every run (MRR = MAP with one relevant document per
query): one analysis per group, named as the table names it ("MAP = MRR"), at the table's family.
Power repeated every comparison under each name, the same figures twice."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def identical_csv(tmp_path: Path) -> Path:
    records = synthetic_records(metrics=("map", "mrr"))
    for r in records:
        r.per_query["mrr"] = dict(r.per_query["map"])
    return write_long_csv(tmp_path / "ident.csv", records)


def test_power_analyses_identical_metrics_once_at_the_tables_family(identical_csv: Path, run_cli: Cli) -> None:
    rc, table, err = run_cli("table", "--from", str(identical_csv), "--format", "csv")
    assert rc == 0, err
    avg = [r for r in csv.DictReader(table.splitlines()) if r["row"] == "AVG" and r["comparisons"]]
    assert {r["table"] for r in avg} == {"MAP = MRR"}
    table_family = {int(r["comparisons"]) for r in avg}

    rc, out, err = run_cli("power", "--from", str(identical_csv), "--seeds", "3")
    assert rc == 0, err
    heads = [line for line in out.splitlines() if line.startswith("**") and " vs base" in line]
    assert [h.split("**")[1] for h in heads] == [f"{c} vs base, MAP = MRR" for c in ("better", "same", "worse")]
    assert ", MRR**" not in out and ", MAP**" not in out
    assert "MAP = MRR here: equal per-query values in every run" in out

    rc, out, err = run_cli("power", "--from", str(identical_csv), "--seeds", "3", "--format", "json")
    data = json.loads(out)
    assert rc == 0, err
    assert [(c["config"], c["metric"]) for c in data["comparisons"]] == [
        ("better", "map"), ("same", "map"), ("worse", "map")]
    assert data["identical"] == [["map", "mrr"]]
    assert {data["family_size"]} == table_family


def test_the_study_report_s_power_names_each_group_as_the_tables_do() -> None:
    """The power the driver logs (``study_report``, power/power.md) got the analysis's shown metrics
    alone, so it named the group by its first member ("MAP") and lost the others."""
    from harness.present.power_text import PowerReport
    from harness.present.report import study_report
    from harness.results.stored import StudyResults

    records = synthetic_records(metrics=("map", "mrr"))
    for r in records:
        r.per_query["mrr"] = dict(r.per_query["map"])
    report = study_report(StudyResults.build(records), formats=("md",))
    assert report.power is not None and report.power.identical == (("map", "mrr"),)
    text = PowerReport(analysis=report.power).to_markdown()
    assert "vs base, MAP = MRR**" in text and "MAP = MRR here: equal per-query values in every run" in text
