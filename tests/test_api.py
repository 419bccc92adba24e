"""The Python API (harness.load_study, harness.compare): objects whose renderings are what
`harness table` and `harness power` print, from a real MLflow store written as a study writes it and
from a long results CSV or DataFrame; the README's Python block runs as written. The tables' and the
power analysis' data: test_api_data.py."""

from __future__ import annotations

import doctest
import re
import runpy
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import harness
from harness import analysis as analysis_module
from harness.analysis import StudyAnalysis, form_for
from harness.errors import ConfigError, DataError, HarnessError
from harness.present.render import md_escape_text
from harness.present.table import AUTO_FORM
from harness.tracking.store import default_tracking_uri
from tests.synthetic import synthetic_records, write_long_csv, write_study_records

pd = pytest.importorskip("pandas")
pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]

ROOT = Path(__file__).resolve().parents[1]
STUDY = "quickstart"  # the README's study
NAMES = {"base": "baseline (no CL)", "better": "root_2 + BERT_pred", "worse": "anti-curriculum"}
FORMATS = ("md", "latex", "csv", "html")
TO = {"md": "to_markdown", "latex": "to_latex", "csv": "to_csv", "html": "to_html"}  # format -> method

# (flags of `harness table`, the same as load_study/compare options, the same as table() arguments)
OPTIONS: list[tuple[list[str], dict[str, Any], dict[str, Any]]] = [
    ([], {}, {}),
    (["--test", "per-seed", "--correction", "holm"], {"test": "per-seed", "correction": "holm"}, {}),
    (["--test", "randomisation", "--correction", "bonferroni", "--family", "metric", "--levels", "0.1",
      "0.05", "--seed", "3", "--resamples", "500", "--metric", "AP", "--form", "configs", "--names",
      "ir-measures", "--decimals", "3"],
     {"test": "randomisation", "correction": "bonferroni", "family": "metric", "levels": (0.1, 0.05),
      "seed": 3, "resamples": 500, "metric": "AP"},
     {"form": "configs", "names": "ir-measures", "decimals": 3}),
]


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """./mlruns/mlflow.db: the finished study "quickstart"; results.csv: a long results CSV."""
    root = tmp_path_factory.mktemp("study")
    records = synthetic_records(queries=12, seeds=(1, 2, 3),
                                effects={"base": 0.0, "better": 0.06, "worse": -0.08})
    write_study_records(default_tracking_uri(root), STUDY, records, NAMES)
    write_long_csv(root / "results.csv", synthetic_records())
    return root


@pytest.fixture(scope="module")
def uri(study_dir: Path) -> str:
    return default_tracking_uri(study_dir)


@pytest.fixture(scope="module")
def study(uri: str) -> StudyAnalysis:
    return harness.load_study(STUDY, tracking_uri=uri)


def _python_block(markdown: str, heading: str) -> str:
    """The first ```python block after the line containing ``heading``."""
    after = markdown[markdown.index(heading):]
    match = re.search(r"^```python\n(.*?)^```", after, re.MULTILINE | re.DOTALL)
    assert match, f"no python block after {heading!r}"
    return match.group(1)


def _ok(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli(*argv)
    # The study holds a FAILED seed run: `harness table --experiment` writes the table marked
    # INCOMPLETE and exits 3 (docs/reliability.md), and so does `harness power`; a CSV of it is just results.
    assert rc == (3 if "--experiment" in argv and argv[0] in ("table", "power") else 0), err
    return out


def _one_line(exc: pytest.ExceptionInfo[HarnessError]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


@pytest.mark.slow
def test_the_readme_block_runs_and_prints_what_the_commands_print(
        study_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], run_cli: Cli) -> None:
    block = _python_block((ROOT / "README.md").read_text(encoding="utf-8"), "From Python")
    assert block in (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")  # one block, two pages
    assert 'harness.load_study("quickstart")' in block and 'harness.compare("results.csv")' in block
    script = tmp_path / "readme_block.py"
    script.write_text(block, encoding="utf-8")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(study_dir)  # ./mlruns is the store, results.csv the CSV
    namespace = runpy.run_path(str(script))
    printed = capsys.readouterr().out
    table = _ok(run_cli, "table", "--experiment", STUDY)
    power = _ok(run_cli, "power", "--experiment", STUDY)
    assert printed == f"{table}\n{power}\n"
    assert "| seed | baseline (no CL) | root\\_2 + BERT\\_pred | anti-curriculum |" in table
    assert isinstance(namespace["analysis"], StudyAnalysis)
    assert isinstance(namespace["table"], harness.SignificanceTable)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(("flags", "options", "table_args"), OPTIONS, ids=["defaults", "per-seed-holm", "configs"])
def test_table_is_the_commands_output(fmt: str, flags: list[str], options: dict[str, Any],
                                      table_args: dict[str, Any], study_dir: Path, uri: str,
                                      run_cli: Cli) -> None:
    # harness table's LaTeX without --form is one float (harness.analysis.form_for): the same table
    table_args = {"form": form_for(AUTO_FORM, fmt, 3), **table_args}
    table = harness.load_study(STUDY, tracking_uri=uri, **options).table(**table_args)
    expected = _ok(run_cli, "table", "--experiment", STUDY, "--tracking-uri", uri, "--format", fmt, *flags)
    assert getattr(table, TO[fmt])() == table.render(fmt) == expected
    csv_path = study_dir / "results.csv"
    expected = _ok(run_cli, "table", "--from", str(csv_path), "--format", fmt, *flags)
    assert getattr(harness.compare(csv_path, **options).table(**table_args), TO[fmt])() == expected
    assert harness.compare(str(csv_path), **options).table(**table_args).render(fmt) == expected


def test_options_can_change_without_reading_again(study: StudyAnalysis, uri: str) -> None:
    changed = study.with_options(test="per-seed", correction="holm")
    assert changed.results is study.results and changed.options.test == "per-seed"
    assert str(changed.table()) == str(harness.load_study(STUDY, tracking_uri=uri, test="per-seed",
                                                         correction="holm").table())
    assert str(study.table(metric="map")) == str(study.with_options(metric=("AP",)).table())
    assert study.analyse().test == "crossed" and changed.analyse().test == "per-seed"


@pytest.mark.slow
def test_power_is_the_commands_output(study: StudyAnalysis, study_dir: Path, uri: str, run_cli: Cli) -> None:
    assert str(study.power()) == _ok(run_cli, "power", "--experiment", STUDY, "--tracking-uri", uri)
    flags = ["--format", "json", "--metric", "map", "--alpha", "0.1", "--power", "0.9", "--seeds", "4", "8",
             "--queries", "50", "--effect", "0.05"]
    expected = _ok(run_cli, "power", "--experiment", STUDY, "--tracking-uri", uri, *flags)
    power = study.power(metric="map", alpha=0.1, power=0.9, seeds=(4, 8), queries=50, effect=0.05)
    assert power.to_json() == power.render("json") == expected
    csv_path = study_dir / "results.csv"
    assert str(harness.compare(csv_path).power()) == _ok(run_cli, "power", "--from", str(csv_path))
    # the options' metric is the power analysis' too, as --metric is both commands'
    assert str(study.with_options(metric="map").power()) == str(study.power(metric="map")) != str(study.power())


def test_the_tracking_uri_defaults_as_the_commands_do(study: StudyAnalysis, uri: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./mlruns here
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert harness.load_study(STUDY).table().to_csv() == study.table().to_csv()
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    with pytest.raises(HarnessError) as exc:
        harness.load_study(STUDY)
    assert _one_line(exc).startswith(f"no MLflow store at {tmp_path.resolve() / 'mlruns' / 'mlflow.db'}")


@pytest.mark.slow
def test_runs_are_the_long_format_and_round_trip(study: StudyAnalysis, tmp_path: Path) -> None:
    runs = study.runs()
    assert list(runs.columns) == ["config", "seed", "metric", "value", "query"]
    per_run = runs[runs["query"].isna()]
    res = study.results
    assert len(per_run) == len(res.configs) * len(res.seeds) * len(res.metrics) == 18
    assert len(runs) - len(per_run) == 18 * 12
    for row in per_run.itertuples():
        assert row.value == res.value(row.config, row.seed, row.metric)
    # the mean of a run's per-query rows is its per-run value
    means = runs.dropna(subset=["query"]).groupby(["config", "seed", "metric"], sort=False)["value"].mean()
    assert means.to_numpy() == pytest.approx(per_run.set_index(["config", "seed", "metric"])["value"].loc[
        means.index].to_numpy(), abs=1e-12)
    path = tmp_path / "runs.csv"
    runs.to_csv(path, index=False)
    back = harness.compare(path)
    assert (back.results.baseline, back.results.configs, back.results.seeds) == (res.baseline, res.configs,
                                                                                  res.seeds)
    # The store's study holds a FAILED seed run, so its tables open with an INCOMPLETE note; the
    # CSV holds the same values and no such record.
    assert res.phase_note.startswith("INCOMPLETE study:")
    import dataclasses
    plain = dataclasses.replace(study, results=dataclasses.replace(res, phase_note="", incomplete=""))
    for fmt in FORMATS:
        assert back.table().render(fmt) == plain.table().render(fmt)
    assert str(harness.compare(runs).table(form="configs")) == str(plain.table(form="configs"))
    # the power analysis names its source (and the store's, that the study is incomplete); the rest is the same
    assert str(study.power()).split("\n", 3)[2].startswith("INCOMPLETE study:")
    assert str(back.power()).split("\n", 1)[1] == str(plain.power()).split("\n", 1)[1]
    assert str(back.power()).startswith(f"**Power: {md_escape_text(str(path))}**")


@pytest.mark.slow
def test_a_dataframe_is_read_as_its_csv(study_dir: Path, tmp_path: Path) -> None:
    csv_path = study_dir / "results.csv"
    frame = pd.read_csv(csv_path)
    for flags, options, table_args in OPTIONS:
        for fmt in FORMATS:
            assert harness.compare(frame, **options).table(**table_args).render(fmt) == \
                harness.compare(csv_path, **options).table(**table_args).render(fmt), (flags, fmt)
    per_run = write_long_csv(tmp_path / "per_run.csv", synthetic_records(), per_query=False)
    from_frame = harness.compare(pd.read_csv(per_run), baseline="same")
    assert from_frame.table().to_csv() == harness.compare(per_run, baseline="same").table().to_csv()
    assert from_frame.results.baseline == "same" and from_frame.analyse().test == "across-seeds"


def test_the_repr_says_what_is_held(study: StudyAnalysis, study_dir: Path) -> None:
    assert repr(study) == (
        f"StudyAnalysis(source=\"MLflow experiment '{STUDY}'\", baseline='baseline (no CL)', "
        "configs=('baseline (no CL)', 'root_2 + BERT_pred', 'anti-curriculum'), seeds=('1', '2', '3'), "
        "metrics=('map', 'mrr'), queries=12, incomplete=True, test='auto', correction='holm')")  # a FAILED run
    other = harness.compare(study_dir / "results.csv", metric="map", test="wilcoxon", levels=(0.1,))
    assert repr(other).endswith("queries=40, metric=('map',), test='wilcoxon', correction='holm', "
                                "levels=(0.1,))")


def test_bad_input_is_one_line_naming_what_is_wrong(study_dir: Path, uri: str, tmp_path: Path) -> None:
    with pytest.raises(DataError) as exc:
        harness.load_study("nope", tracking_uri=uri)
    assert f"unknown MLflow experiment 'nope' at {uri}; experiments there: " in _one_line(exc)
    assert STUDY in str(exc.value)
    with pytest.raises(DataError) as exc:
        harness.load_study(STUDY, tracking_uri=f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}")
    assert "no MLflow store at" in _one_line(exc)
    cols = tmp_path / "cols.csv"
    cols.write_text("config,run,metric,value\na,1,map,0.5\n")
    with pytest.raises(DataError) as exc:
        harness.compare(cols)
    assert _one_line(exc).startswith(f"{cols}:1: missing column(s) seed; a long results CSV has columns")
    frame = pd.read_csv(study_dir / "results.csv")
    with pytest.raises(DataError) as exc:
        harness.compare(frame.drop(columns=["seed"]))
    assert _one_line(exc).startswith("DataFrame: missing column(s) seed; a long results DataFrame has")
    with pytest.raises(DataError) as exc:  # pandas keeps both; a dict of the row would keep one
        harness.compare(pd.concat([frame, frame[["value"]]], axis=1))
    assert _one_line(exc) == "DataFrame: column(s) value given more than once in the header; keep one of each"
    bad = frame.astype({"value": object})
    bad.loc[7, "value"] = "high"
    with pytest.raises(DataError) as exc:
        harness.compare(bad)
    assert _one_line(exc) == "DataFrame row 7: value 'high' is not a number"
    with pytest.raises(DataError) as exc:
        harness.compare(frame.assign(config=frame["config"].where(frame.index != 3)))
    assert _one_line(exc) == "DataFrame row 3: config, seed and metric must be non-empty"
    with pytest.raises(DataError) as exc:
        harness.compare(tmp_path / "absent.csv")
    assert _one_line(exc) == f"{tmp_path / 'absent.csv'}: no such file"
    with pytest.raises(ConfigError) as exc:
        harness.compare([("a", 1, "map", 0.5)])  # type: ignore[arg-type]
    assert "expected the path of a long results CSV or a pandas DataFrame, got list" in _one_line(exc)


def test_bad_options_are_refused_before_the_source_is_read(study: StudyAnalysis, tmp_path: Path) -> None:
    absent = tmp_path / "absent.csv"
    for options, message in [({"test": "t-test"}, "test: unknown name 't-test'"),
                             ({"correction": "sidak"}, "sidak"),
                             ({"family": "all"}, "family: unknown name 'all'; valid: table, metric"),
                             ({"levels": (0.01, 0.05)}, "levels must be strictly decreasing"),
                             # a value of the wrong type: the option's one line, never numpy's or Python's error
                             ({"levels": "0.05"}, "levels must be a significance level or a sequence of them"),
                             ({"seed": -1}, "seed must be an integer >= 0, got -1"),
                             ({"seed": 1.5}, "seed must be an integer >= 0, got 1.5"),
                             ({"resamples": "10"}, "resamples must be an integer in [1, 1000000], got '10'"),
                             ({"metric": 5}, "metric must be a metric name or a sequence of names, got 5")]:
        with pytest.raises(ConfigError) as exc:
            harness.compare(absent, **options)
        assert message in _one_line(exc)
    with pytest.raises(ConfigError) as exc:
        study.with_options(metric="bleu")
    assert _one_line(exc).startswith("unknown metric 'bleu' in MLflow experiment 'quickstart'; valid: map, mrr")
    for call, message in [(lambda: study.table().render("docx"), "docx"),
                          (lambda: study.table(form="rows"), "form: unknown name 'rows'; valid: auto, seeds, configs, summary"),
                          (lambda: study.table(decimals=11), "decimals must be an integer in [0, 10]"),
                          (lambda: study.power(alpha=5), "alpha must be in (0, 1), got 5"),
                          (lambda: study.table(decimals=2.5), "decimals must be an integer in [0, 10], got 2.5"),
                          (lambda: study.power(seeds="5"), "seeds must be a seed count or a sequence of them"),
                          (lambda: study.power(queries=10.5), "queries must be an integer >= 2, got 10.5"),
                          (lambda: study.with_options(foo=1), "table option: unknown name 'foo'; valid: metric, "),
                          (lambda: harness.load_study("quickstart", tracking_uri=5),
                           "tracking_uri must be a tracking URI"),
                          (lambda: study.power().render("yaml"), "format: unknown name 'yaml'; valid: md, json")]:
        with pytest.raises(ConfigError) as exc:
            call()
        assert message in _one_line(exc)


def test_one_level_and_one_seed_count_are_taken_as_one_number(study: StudyAnalysis, uri: str) -> None:
    """``levels=0.05`` is ``(0.05,)`` and ``power(seeds=10)`` is ``seeds=(10,)``; a store given as a
    path (a ``Path``) is refused with the URI to write."""
    assert study.with_options(levels=0.05).options.levels == (0.05,)
    assert study.power(seeds=10).to_json() == study.power(seeds=(10,)).to_json()
    db = Path(uri.removeprefix("sqlite:///"))
    with pytest.raises(HarnessError) as exc:
        harness.load_study(STUDY, tracking_uri=db)
    assert f"is a file: for an SQLite store write sqlite:///{db.resolve()}" in _one_line(exc)


@pytest.mark.slow
def test_the_names_are_shown_lazily() -> None:
    """`import harness` imports no MLflow, torch, Ray or pandas; nor does reading harness.compare or
    harness.load_study, which import only the evaluation layer."""
    code = ("import sys\nimport harness\n"
            "before = sorted(m for m in ('torch', 'ray', 'mlflow', 'pandas', 'scipy') if m in sys.modules)\n"
            "harness.compare, harness.load_study\n"
            "after = sorted(m for m in ('torch', 'ray', 'mlflow', 'pandas') if m in sys.modules)\n"
            "print(before, after, harness.__file__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=ROOT).stdout
    assert out.strip() == f"[] [] {ROOT / 'harness' / '__init__.py'}"
    assert {"compare", "load_study"} <= set(harness.__all__) == set(dir(harness))
    assert harness.compare is analysis_module.compare
    assert harness.load_study is analysis_module.load_study


def test_docstring_examples() -> None:
    assert doctest.testmod(analysis_module).failed == 0


@pytest.mark.slow
def test_the_python_api_page_runs_as_doctests() -> None:
    """docs/python-api.md's examples (its ```python blocks of >>> lines, in order, sharing one
    namespace) hold as written."""
    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
              if b.startswith(">>> ")]
    assert len(blocks) >= 4 and any("harness.compare(" in b for b in blocks)
    test = doctest.DocTestParser().get_doctest("\n".join(blocks), {}, "docs/python-api.md",
                                               str(ROOT / "docs" / "python-api.md"), 0)
    assert len(test.examples) > 20
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_load_study_and_compare_take_every_table_option() -> None:
    """docs/python-api.md: both take the options of `harness table` (TableOptions) by name."""
    import dataclasses
    import inspect

    import pandas as pd

    from harness.analysis import TableOptions

    names = {f.name for f in dataclasses.fields(TableOptions)}
    for fn in (harness.load_study, harness.compare):
        assert names <= set(inspect.signature(fn).parameters), (fn.__name__, names)
    frame = pd.DataFrame({"config": ["bm25", "bert"], "seed": [1, 1], "metric": "map", "value": [0.3, 0.4]})
    assert harness.compare(frame, one_seed_test="query").options.one_seed_test == "query"
