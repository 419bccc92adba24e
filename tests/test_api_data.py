"""The Python API's results are data: a SignificanceTable's rows are the executed tests' numbers
(and agree with its CSV rendering), a PowerReport's rows are the power analysis'; unknown names
raise UnknownName with the close matches and the valid names; dir(harness) is the public API."""

from __future__ import annotations

import csv
import doctest
import importlib
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import harness
from harness.analysis import StudyAnalysis
from harness.errors import ConfigError, HarnessError, UnknownName
from harness.present.power_text import COLUMNS as POWER_COLUMNS
from harness.present.significance_table import COLUMNS
from tests.synthetic import EFFECTS, synthetic_records, write_long_csv

pd = pytest.importorskip("pandas")

Cli = Callable[..., tuple[int, str, str]]
CONFIGS = tuple(EFFECTS)  # base (the baseline), better, same, worse
METRICS = ("map", "mrr")
SEEDS = ("1", "2", "3")


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_long_csv(tmp_path_factory.mktemp("api") / "results.csv", synthetic_records())


@pytest.fixture(scope="module")
def analysis(csv_path: Path) -> StudyAnalysis:
    return harness.compare(csv_path)


def _close(a: object, b: float | None) -> bool:
    return (b is None and pd.isna(a)) or (b is not None and not pd.isna(a) and math.isclose(a, b))


def test_a_table_holds_the_tests_numbers(analysis: StudyAnalysis) -> None:
    table = analysis.table(form="configs")
    frame = table.frame
    assert tuple(frame.columns) == COLUMNS
    assert len(frame) == len(METRICS) * len(CONFIGS) and frame["seed"].isna().all()
    assert list(zip(frame["metric"], frame["config"], strict=True)) == [(m, c) for m in METRICS for c in CONFIGS]
    assert set(frame["measure"]) == {"AP", "RR"} and set(frame["test"]) == {"crossed"}
    tested = table.analysis
    res = analysis.results
    for row in frame.itertuples():
        values = res.seed_values(row.config, row.metric)
        assert row.n_seeds == 3 and _close(row.mean, float(values.mean()))
        assert _close(row.sd, float(values.std(ddof=1)))
        comp = tested.get(row.config, row.metric)
        if row.config == "base":
            assert comp is None and row.role == "baseline"
            assert frame.loc[row.Index, ["delta", "ci_low", "ci_high", "p_value", "marker"]].isna().all()
            continue
        assert row.role == "candidate" and row.comparisons == comp.family_size == 6  # both metrics: one family
        for column, value in [("delta", comp.result.mean_diff), ("ci_low", comp.interval[0]),
                              ("ci_high", comp.interval[1]), ("d_z", comp.result.d_z),
                              ("p_value", comp.result.p_value), ("p_adjusted", comp.p_adjusted)]:
            assert _close(getattr(row, column), float(value)), column
        assert row.direction == comp.direction
        assert (row.marker if isinstance(row.marker, str) else None) == tested.marker(comp)
    by_config = frame[frame["metric"] == "map"].set_index("config")
    assert by_config.loc["better", "marker"] == "\u2021" and by_config.loc["worse", "marker"] == "\u21d3"
    assert pd.isna(by_config.loc["same", "marker"])
    # the CSV rendering (from the table model) says the same as the data (from the analysis)
    rendered = {(r["row"], r["metric"]): r for r in csv.DictReader(io.StringIO(table.to_csv()))}
    for row in frame.itertuples():
        cell = rendered[(row.config, row.metric)]
        assert float(cell["value"]) == row.mean and float(cell["sd"]) == row.sd
        assert (cell["p_adjusted"] == "") == pd.isna(row.p_adjusted)
        if cell["p_adjusted"]:
            assert float(cell["p_adjusted"]) == row.p_adjusted and float(cell["mean_diff"]) == row.delta


def test_the_frame_follows_the_tables_form_and_test(analysis: StudyAnalysis) -> None:
    """Each form corrects over its own family; the seeds form adds a row per seed (its value), the
    per-seed test a row per seed with that seed's own test."""
    summary = analysis.table(form="summary").frame
    assert len(summary) == 8 and set(summary["comparisons"].dropna()) == {3}  # one family per metric
    seeds = analysis.table(form="seeds").frame
    assert len(seeds) == len(METRICS) * len(CONFIGS) * (1 + len(SEEDS))
    per_seed_rows = seeds[seeds["seed"].notna()]
    assert per_seed_rows["p_value"].isna().all() and (per_seed_rows["n_seeds"] == 1).all()
    for row in per_seed_rows.itertuples():
        assert row.mean == analysis.results.value(row.config, row.seed, row.metric)
    aggregate = seeds[seeds["seed"].isna()].reset_index(drop=True)
    columns = [c for c in COLUMNS if c != "seed"]
    assert aggregate[columns].equals(summary[columns])  # same family (each metric) as the summary form

    per_seed = analysis.with_options(test="per-seed").table(form="configs")
    frame, tested = per_seed.frame, per_seed.analysis
    assert set(frame["test"]) == {"per-seed"}
    for row in frame.itertuples():
        if row.config == "base":
            assert pd.isna(row.p_value)
        elif pd.isna(row.seed):  # the configuration over its seeds: the difference and the seed count
            paired = analysis.results.seed_values("base", row.metric).mean()
            assert _close(row.delta, row.mean - float(paired)) and pd.isna(row.p_value)
            tally = " ".join(t.text for t in tested.tallies(row.config, row.metric)) or None
            assert (row.marker if isinstance(row.marker, str) else None) == tally
        else:
            comp = tested.get(row.config, row.metric, row.seed)
            assert _close(row.p_adjusted, comp.p_adjusted) and _close(row.delta, comp.result.mean_diff)
    better = frame[(frame["config"] == "better") & (frame["metric"] == "map")]
    assert better["marker"].iloc[0] == "\u20203/3" and list(better["seed"].iloc[1:]) == list(SEEDS)


def test_a_table_renders_itself_and_its_data_is_json(analysis: StudyAnalysis) -> None:
    table = analysis.table()
    assert table.form == "seeds" and len(table.tables) == len(METRICS)
    assert str(table) == table.to_markdown() == table._repr_markdown_() == table.render("md")
    assert table._repr_html_() == table.to_html() == table.render("html")
    assert table.to_latex() == table.render("latex") and table.to_csv() == table.render("csv")
    assert repr(table) == ("SignificanceTable(form='seeds', test='crossed', correction='holm', baseline='base', "
                           "configs=4, metrics=('map', 'mrr'))")
    data = json.loads(table.to_json())
    assert data == table.to_dict()
    assert data["baseline"] == "base" and data["configs"] == list(CONFIGS) and len(data["rows"]) == len(table.frame)
    assert table.frame is not table.frame and table.to_frame().equals(table.frame)  # a new frame each time


@pytest.mark.slow
def test_a_power_report_holds_the_power_analysis(analysis: StudyAnalysis, run_cli: Cli, csv_path: Path) -> None:
    report = analysis.power(metric="map", seeds=(2, 10), effect=0.02)
    frame = report.to_frame()
    assert tuple(frame.columns) == POWER_COLUMNS
    assert len(frame) == 3 * 3  # 3 candidates x seed counts 2, 3 (this study's), 10
    assert list(frame[frame["this_study"]]["seeds"]) == [3, 3, 3]
    for comp in report.comparisons:
        rows = frame[frame["config"] == comp.config]
        assert list(rows["seeds"]) == [r.seeds for r in comp.rows] == [2, 3, 10]
        assert list(rows["mde"]) == [r.mde for r in comp.rows] and list(rows["se"]) == [r.se for r in comp.rows]
        assert set(rows["var_seed"]) == {comp.components.seed} and set(rows["mean_diff"]) == {comp.observed.mean_diff}
        assert set(rows["seeds_needed"]) == {comp.needed} and set(rows["query_floor"]) == {comp.floor}
    assert json.loads(report.to_json()) == report.to_dict()
    assert report.to_dict()["comparisons"][0]["mde"][0]["mde"] == frame["mde"].iloc[0]
    rc, out, _ = run_cli("power", "--from", str(csv_path), "--metric", "map", "--seeds", "2", "10",
                         "--effect", "0.02", "--format", "json")
    assert rc == 0 and out == report.to_json()
    assert str(report) == report.to_markdown() == report._repr_markdown_()
    assert repr(report) == (f"PowerReport(source={str(csv_path)!r}, baseline='base', comparisons=3, seeds=3, "
                            "queries=40)")


def _unknown(call: Callable[[], object]) -> UnknownName:
    with pytest.raises(UnknownName) as exc:
        call()
    error = exc.value
    assert isinstance(error, ConfigError) and isinstance(error, KeyError) and isinstance(error, HarnessError)
    message = str(error)  # not KeyError's quoted repr
    assert "\n" not in message and not message.startswith(("'", '"'))
    assert message.endswith("valid: " + ", ".join(error.valid)) or "; valid: " + ", ".join(error.valid) in message
    return error


@pytest.mark.slow
@pytest.mark.parametrize(("call", "kind", "name", "hint"), [
    (lambda a, p: harness.compare(p, metric="mapp"), "metric", "mapp", "map"),
    (lambda a, p: a.with_options(metric="mrr@10"), "metric", "mrr@10", "mrr"),
    (lambda a, p: a.analyse().get("bettr", "map"), "configuration", "bettr", "better"),
    (lambda a, p: a.analyse().get("better", "ndcg"), "metric", "ndcg", None),
    (lambda a, p: a.analyse(metric="map").get("better", "mrr"), "metric", "mrr", None),
    (lambda a, p: a.with_options(test="per-seed").analyse().get("better", "map", "9"), "seed", "9", None),
    (lambda a, p: harness.compare(p, test="wilcox"), "test", "wilcox", "wilcoxon"),
    # named as the Python argument, not as the study file's key (evaluation.correction)
    (lambda a, p: harness.compare(p, correction="holn"), "correction", "holn", "holm"),
    (lambda a, p: harness.compare(p, family="metrics"), "family", "metrics", "metric"),
    (lambda a, p: harness.compare(p, baseline="bas"), "baseline", "bas", "base"),
    (lambda a, p: a.table(form="summry"), "form", "summry", "summary"),
    (lambda a, p: a.table(names="labels"), "names", "labels", "label"),
    (lambda a, p: a.table().render("tex"), "format", "tex", "latex"),
    (lambda a, p: a.with_options(correction="bonferoni"), "correction", "bonferoni", "bonferroni"),
    (lambda a, p: a.power().render("jsn"), "format", "jsn", "json"),
], ids=["metric", "metric-option", "configuration", "metric-get", "metric-not-analysed", "seed", "test",
        "correction", "family", "baseline", "form", "names", "format", "correction-option", "power-format"])
def test_unknown_names_raise_unknown_name(call: Callable[[StudyAnalysis, Path], object], kind: str, name: str,
                                          hint: str | None, analysis: StudyAnalysis, csv_path: Path) -> None:
    error = _unknown(lambda: call(analysis, csv_path))
    assert (error.kind, error.name) == (kind, name) and error.valid
    assert (f"did you mean {hint}" in str(error)) if hint else ("did you mean" not in str(error))


def test_get_answers_for_known_names(analysis: StudyAnalysis) -> None:
    tested = analysis.analyse()
    assert tested.get("base", "map") is None  # the baseline is not compared with itself
    assert tested.get("better", "AP") is tested.get("better", "map") is not None  # ir-measures' name
    per_seed = analysis.with_options(test="per-seed").analyse()
    assert per_seed.get("better", "map") is None and per_seed.get("better", "map", 1) is per_seed.get("better", "map", "1")


def test_the_command_says_what_is_unknown_in_one_line(run_cli: Cli, csv_path: Path) -> None:
    rc, out, err = run_cli("table", "--from", str(csv_path), "--metric", "mapp")
    assert rc != 0 and out == ""
    assert err.strip() == (f"harness: error: unknown metric 'mapp' in {csv_path} (did you mean map?); "
                           "valid: map, mrr (or AP, RR)")


def test_dir_of_harness_is_its_public_api() -> None:
    assert dir(harness) == sorted(harness.__all__)
    assert not {"face", "annotations", "_face"} & set(dir(harness))
    for name in harness.__all__:
        assert getattr(harness, name) is not None
    assert harness.UnknownName is UnknownName and harness.StudyAnalysis is StudyAnalysis
    # one name, one thing: the study file parser is harness.study.load_spec
    study = importlib.import_module("harness.study")
    assert "load_spec" in study.__all__ and not hasattr(study, "load_study")


def test_the_public_signatures_resolve() -> None:
    """typing.get_type_hints of every public function and method: the DataFrame annotations name
    pandas lazily (harness.present.frames.lazy_pandas), as pandas is not imported with harness."""
    import inspect
    import typing

    checked = 0
    for name in harness.__all__:
        value = getattr(harness, name)
        members = [value] if inspect.isfunction(value) else [
            m.fget if isinstance(m, property) else m for n, m in vars(value).items()
            if (not n.startswith("_") or n == "__init__") and (inspect.isfunction(m) or isinstance(m, property))
        ] if inspect.isclass(value) else []
        for member in members:
            typing.get_type_hints(member)
            checked += 1
    assert checked > 30
    assert typing.get_type_hints(harness.compare)["source"] == str | os.PathLike[str] | pd.DataFrame
    assert typing.get_type_hints(harness.CollectionsStudy.runs)["return"] is pd.DataFrame
    # a table rendered without its frame still imports no pandas
    code = ("import sys, typing\nimport harness\nfrom harness.results.stored import RunRecord, StudyResults\n"
            "typing.get_type_hints(harness.StudyAnalysis.table)\n"
            "records = [RunRecord(config=c, seed=s, values={'map': v}) for c, s, v in [('a', '1', 0.3), "
            "('a', '2', 0.31), ('b', '1', 0.35), ('b', '2', 0.37)]]\n"
            "print(harness.StudyAnalysis(results=StudyResults.build(records)).table().to_latex()[:1], "
            "'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.split() == ["%", "False"]


def test_the_collections_types_are_public() -> None:
    from harness.analysis import CollectionsStudy
    from harness.present.collections_significance import CollectionsSignificanceTable

    assert harness.CollectionsStudy is CollectionsStudy
    assert harness.CollectionsSignificanceTable is CollectionsSignificanceTable


def test_the_same_results_from_a_csv_and_its_dataframe_are_equal(csv_path: Path, analysis: StudyAnalysis) -> None:
    """Where results were read (``source``) names them in messages; it is not part of their value."""
    from_frame = harness.compare(pd.read_csv(csv_path))
    assert from_frame.results.source == "DataFrame" != analysis.results.source
    assert from_frame == analysis and from_frame.results == analysis.results
    assert from_frame != analysis.with_options(correction="bonferroni")
    # tables and power reports compare by identity; their data compare by value
    assert from_frame.table() != analysis.table() and from_frame.table().to_dict() == analysis.table().to_dict()


def test_a_float_seed_column_reads_as_integer_seeds(tmp_path: Path) -> None:
    """A seed column pandas made float (1.0) is seed 1, as a CSV's "1", so the runs pair; a fraction
    is refused naming the row."""
    frame = pd.DataFrame({"config": ["bm25", "bert"] * 3, "seed": [1.0, 1.0, 2.0, 2.0, 3.0, 3.0], "metric": "map",
                          "value": [0.30, 0.35, 0.31, 0.37, 0.29, 0.36]})
    assert harness.compare(frame).results.seeds == ("1", "2", "3")
    path = tmp_path / "ints.csv"
    frame.astype({"seed": int}).to_csv(path, index=False)
    assert harness.compare(frame) == harness.compare(path)
    with pytest.raises(HarnessError) as exc:
        harness.compare(frame.assign(seed=[1.5, 1.5, 2, 2, 3, 3]))
    assert str(exc.value) == "DataFrame row 0: seed 1.5 is not a whole number; seeds are integers or labels"


def test_power_rows_cover_every_metric_and_need_no_seeds_without_an_effect(analysis: StudyAnalysis) -> None:
    rows = analysis.power().rows()
    assert len(rows) == len(METRICS) * 3 * 4  # 3 candidates x seed counts 3 (this study's), 5, 10, 20
    assert {row["metric"] for row in rows} == set(METRICS)
    assert all(np.isfinite(row["mde"]) and row["seeds_needed"] is None for row in rows)


def test_the_errors_docstring_examples() -> None:
    assert doctest.testmod(importlib.import_module("harness.errors")).failed == 0


@pytest.mark.parametrize(("call", "message"), [
    (lambda: harness.TrialConfig.from_flat(None), "flat must be a mapping of config keys (section.key) to values, got NoneType"),
    (lambda: harness.TrialConfig.from_flat([("train.seed", 1)]), "flat must be a mapping of config keys"),
    (lambda: harness.TrialConfig.from_flat({1: 2}), "config key 1 is not a string; config keys are section.key"),
    (lambda: harness.TrialConfig.key_type("nope"), "unknown config key 'nope'"),
    (lambda: harness.TrialConfig().with_seed("1"), "seed must be an integer, got '1'"),
], ids=["none", "list", "int-key", "key-type", "with-seed"])
def test_trial_config_refuses_bad_input_in_one_line(call: Callable[[], object], message: str) -> None:
    """harness.TrialConfig is public: bad input is a ConfigError naming the argument or key, never
    an AttributeError, TypeError or ValueError from inside."""
    with pytest.raises(ConfigError) as exc:
        call()
    assert str(exc.value).startswith(message) and "\n" not in str(exc.value)
    assert harness.TrialConfig().with_seed(7).train.seed == 7
    assert harness.TrialConfig.key_type("train.seed") is int
