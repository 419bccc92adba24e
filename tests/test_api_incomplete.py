"""An unfinished study says so in its data, not only in its rendered notes: a table's ``incomplete``
and ``to_dict``/``to_json`` (as a power report's JSON), and the analysis' repr; the queries left out
are in the data too. The collections table has the one-collection table's ``to_dict``/``to_json``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import harness
from harness.errors import ConfigError, UnknownName
from harness.tracking.store import default_tracking_uri
from tests.synthetic import synthetic_records, write_long_csv, write_unfinished_studies

pytest.importorskip("mlflow")

EFFECTS = {"base": 0.0, "better": 0.06}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A one-collection study and one over two collections, each with a failed seed run."""
    return write_unfinished_studies(default_tracking_uri(tmp_path_factory.mktemp("store")))


@pytest.mark.slow  # the module's MLflow store: seconds
def test_an_unfinished_study_says_so_in_its_data(store: str) -> None:
    study = harness.load_study("one", tracking_uri=store)
    table = study.table()
    assert table.incomplete.startswith("INCOMPLETE study: ")
    assert table.to_dict()["incomplete"] == table.incomplete == study.power().to_dict()["incomplete"]
    assert json.loads(table.to_json())["incomplete"] == table.incomplete
    assert "queries=8, incomplete=True, test=" in repr(study) and repr(table).endswith("incomplete=True)")
    many = harness.load_study("many", tracking_uri=store)
    whole = many.table()
    assert whole.incomplete.startswith("INCOMPLETE study: ") and whole.to_dict()["incomplete"] == whole.incomplete
    assert json.loads(whole.to_json())["incomplete"] == whole.incomplete
    assert "incomplete=True" in repr(many) and "incomplete=True" in repr(whole)


def test_a_finished_study_has_no_note_and_names_its_dropped_queries(tmp_path: Path) -> None:
    records = synthetic_records(queries=6, effects=EFFECTS, metrics=("map",))
    del records[-1].per_query["map"]["q005"]  # one run lacks q005: it is left out of every test
    study = harness.compare(write_long_csv(tmp_path / "r.csv", records))
    table = study.table()
    assert table.incomplete == "" and table.to_dict()["incomplete"] is None and "incomplete" not in repr(study)
    assert table.dropped == ("q005",) and table.to_dict()["dropped_queries"] == ["q005"]
    assert json.loads(table.to_json())["dropped_queries"] == ["q005"]


def test_the_collections_table_is_data_as_the_one_collection_table(tmp_path: Path) -> None:
    a = write_long_csv(tmp_path / "a.csv", synthetic_records(queries=6, effects=EFFECTS, metrics=("map",)))
    header, *rows = a.read_text().splitlines()
    both = tmp_path / "both.csv"
    both.write_text("\n".join([f"{header},collection", *(f"{r},a" for r in rows), *(f"{r},b" for r in rows)]) + "\n")
    table = harness.compare(both).table()
    data = table.to_dict()
    assert data["collections"] == ["a", "b"] and data["baseline"] == "base" and data["metrics"] == ["map"]
    assert data["rows"] == table.rows() and data["incomplete"] is None
    assert data["dropped_queries"] == {"a": [], "b": []}
    assert json.loads(table.to_json()) == json.loads(json.dumps(data))
    one = harness.compare(a).table(form="configs").to_dict()
    assert set(one) - {"dropped_queries"} <= set(data)
    # power() is of one collection: without one, a one-line refusal naming the argument and the choices
    with pytest.raises(ConfigError) as refused:
        harness.compare(both).power()
    assert str(refused.value) == "collection: name the collection to analyse, one of a, b"
    # an unknown format is named as the argument, as on one collection
    with pytest.raises(UnknownName) as exc:
        table.render("json")
    assert str(exc.value).startswith("format: unknown name 'json'; valid: ")
