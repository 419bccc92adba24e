"""One metric table (metrics.METRIC_TABLE): every list of names derives from it; ir-measures'
canonical names work wherever a harness key does (--metric, long CSVs, evaluate) and tables can
show them."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

import ir_measures
import pytest

from harness.config import SELECT_METRICS
from harness.errors import ConfigError
from harness.metrics.measures import (
    IR_MEASURES_NAMES,
    MEASURES,
    METRIC_KEYS,
    METRIC_TABLE,
    canonical_name,
    evaluate,
    label_of,
    metric_key,
)
from harness.tracking.conventions import METRICS
from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


def test_lists_agree_with_the_table() -> None:
    assert METRIC_KEYS == METRICS == SELECT_METRICS
    assert tuple(MEASURES) == METRIC_KEYS
    assert [m.canonical for m in METRIC_TABLE] == ["AP", "RR", "RR@10", "P@1", "nDCG@10", "Rprec"]
    # the canonical names are the ones ir_measures itself parses back to the same measure
    for spec in METRIC_TABLE:
        assert ir_measures.parse_measure(spec.canonical) == spec.measure
        assert "@" not in spec.key and spec.higher_is_better
    assert IR_MEASURES_NAMES == {m.canonical: m.key for m in METRIC_TABLE}


def test_name_conversions() -> None:
    assert [metric_key(n) for n in ("AP", "map", "RR@10", "nDCG@10", "cascade_cost")] == \
        ["map", "map", "mrr_10", "ndcg_10", "cascade_cost"]
    assert canonical_name("p_1") == "P@1" and canonical_name("cascade_cost") == "cascade_cost"
    assert [label_of("rprec", s) for s in ("label", "ir-measures", "key")] == ["R-Prec", "Rprec", "rprec"]
    with pytest.raises(ConfigError, match="metric names must be one of label, ir-measures, key"):
        label_of("map", "fancy")
    qrels, run = {"q": {"a": 1, "b": 0}}, {"q": {"a": 0.1, "b": 0.9}}
    assert evaluate(qrels, run, ["AP", "RR@10"]).per_query == evaluate(qrels, run, ["map", "mrr_10"]).per_query


@pytest.mark.slow
def test_table_names_and_csv_columns(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "r.csv", synthetic_records(metrics=("map", "mrr_10")))
    rc, out, err = run_cli("table", "--from", str(src), "--form", "configs", "--names", "ir-measures",
                           "--metric", "AP", "mrr_10")
    assert rc == 0, err
    assert "| configuration | AP | RR@10 |" in out
    rc, out, _ = run_cli("table", "--from", str(src), "--metric", "RR@10", "--names", "key")
    assert rc == 0 and "**mrr\\_10**" in out and "**map**" not in out
    rc, out, _ = run_cli("table", "--from", str(src), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["table"], r["metric"], r["measure"]) for r in rows} == {
        ("MAP", "map", "AP"), ("MRR@10", "mrr_10", "RR@10")}
    rc, out, _ = run_cli("table", "--from", str(src), "--format", "csv", "--form", "configs")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {(r["column"], r["metric"], r["measure"]) for r in rows} == {
        ("MAP", "map", "AP"), ("MRR@10", "mrr_10", "RR@10")}


@pytest.mark.slow
def test_long_csv_with_ir_measures_names(tmp_path: Path, run_cli: Cli) -> None:
    records = synthetic_records(metrics=("map", "mrr_10"))
    by_key = write_long_csv(tmp_path / "keys.csv", records)
    by_name = tmp_path / "names.csv"
    by_name.write_text(by_key.read_text().replace(",map,", ",AP,").replace(",mrr_10,", ",RR@10,"))
    assert ",AP," in by_name.read_text()
    outs = [run_cli("table", "--from", str(p), "--format", "csv") for p in (by_key, by_name)]
    assert outs[0][0] == outs[1][0] == 0 and outs[0][1] == outs[1][1]


def test_unknown_metric_names_both_ways(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "r.csv", synthetic_records(metrics=("map", "mrr_10")))
    rc, out, err = run_cli("table", "--from", str(src), "--metric", "nDCG@20")
    assert rc != 0 and out == ""
    assert err.strip().splitlines() == [
        f"harness: error: unknown metric 'nDCG@20' in {src}; valid: map, mrr_10 (or AP, RR@10)"]
    rc, _, err = run_cli("power", "--from", str(src), "--metric", "AP", "--format", "json")
    assert rc == 0, err
