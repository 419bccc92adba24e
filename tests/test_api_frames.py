"""The Python API's DataFrames have one schema each (harness.present.frames): a one-seed study, a
study where nothing is significant and a full one give the same dtypes, so their frames round,
filter and concatenate alike."""

from __future__ import annotations

import pytest

import harness
from harness.present import collections_significance, significance_table
from harness.present.frames import text_dtype
from harness.present.power_text import SCHEMA as POWER_SCHEMA

pd = pytest.importorskip("pandas")


def _dtypes(schema: dict[str, str]) -> dict[str, object]:
    return {c: text_dtype() if kind == "text" else pd.api.types.pandas_dtype(kind) for c, kind in schema.items()}


def _frame(configs: dict[str, list[float]], **columns: object) -> object:
    rows = [(c, s + 1, "map", v) for c, values in configs.items() for s, v in enumerate(values)]
    frame = pd.DataFrame(rows, columns=["config", "seed", "metric", "value"])
    return frame.assign(**columns)


ONE_SEED = {"bm25": [0.30], "bert": [0.40]}
NOTHING = {"bm25": [0.30, 0.31, 0.29], "bert": [0.30, 0.32, 0.28]}
MARKED = {"bm25": [0.30, 0.31, 0.29], "bert": [0.35, 0.37, 0.36]}


@pytest.mark.parametrize("form", ["seeds", "configs", "summary"])
def test_a_tables_frame_has_its_schema_whatever_the_study(form: str) -> None:
    expected = _dtypes(significance_table.SCHEMA)
    frames = [harness.compare(_frame(study)).table(form=form).frame for study in (ONE_SEED, NOTHING, MARKED)]
    for frame in frames:
        assert frame.dtypes.to_dict() == expected
    one_seed, nothing, marked = frames
    assert one_seed["sd"].round(3).isna().all() and one_seed.round(4)["mean"].tolist() in ([0.3, 0.4],
                                                                                            [0.3, 0.3, 0.4, 0.4])
    # a table without a marker filters on its markers, as one with them does
    assert nothing[nothing["marker"].str.contains("†")].empty
    assert len(marked[marked["marker"].str.contains("‡")]) == 1
    assert pd.concat(frames, ignore_index=True).dtypes.to_dict() == expected


def test_runs_and_power_frames_have_their_schema() -> None:
    runs = harness.compare(_frame(MARKED)).runs()  # per-run values only: no query anywhere
    assert runs.dtypes.to_dict() == _dtypes({"config": "text", "seed": "text", "metric": "text",
                                             "value": "float64", "query": "text"})
    assert runs["query"].isna().all()
    per_query = pd.DataFrame([(c, s, "map", 0.3 + 0.05 * (c == "bert") + 0.01 * ((s * q) % 5), f"q{q}")
                              for c in ("bm25", "bert") for s in (1, 2, 3) for q in range(8)],
                             columns=["config", "seed", "metric", "value", "query"])
    power = harness.compare(per_query).power()
    assert power.to_frame().dtypes.to_dict() == _dtypes(POWER_SCHEMA)


def test_the_collections_frame_is_the_one_collection_frame_with_a_collection() -> None:
    frame = pd.concat([_frame(NOTHING, collection="a"), _frame(MARKED, collection="b")], ignore_index=True)
    study = harness.compare(frame)
    table = study.table().frame
    assert table.dtypes.to_dict() == _dtypes(collections_significance.SCHEMA)
    one = harness.compare(_frame(MARKED)).table(form="configs").frame
    assert {c: t for c, t in table.dtypes.items() if c not in ("collection", "n_seeds")} == \
        {c: t for c, t in one.dtypes.items() if c != "n_seeds"}
    assert str(table["n_seeds"].dtype) == "Int64" and table.loc[table["collection"] == "combined",
                                                                "n_seeds"].isna().all()
    assert study.runs().dtypes.to_dict() == _dtypes({"config": "text", "seed": "text", "metric": "text",
                                                     "value": "float64", "query": "text",
                                                     "collection": "text"})
