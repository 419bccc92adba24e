"""A real MLflow round trip: a small study written by the conventions into a sqlite store, read back
by `harness table --experiment`; and the reader's errors."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.errors import HarnessError
from harness.present.render import md_escape
from harness.present.report import study_report
from harness.results.mlflow_reader import default_tracking_uri, read_experiment
from harness.stats.crossed import crossed_test
from harness.tracking import conventions as C
from tests.synthetic import log_seed_results, synthetic_records

mlflow = pytest.importorskip("mlflow")

STUDY = "tiny-study"
NAMES = {"base": "baseline (no CL)", "better": "root_2 + BERT_pred", "worse": "anti-curriculum"}


def _write_study(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    root = Path(uri[len("sqlite:///"):]).parent / "artifacts"
    exp = client.create_experiment(STUDY, artifact_location=root.as_uri())
    client.create_experiment("empty-study", artifact_location=(root / "empty").as_uri())
    study = client.create_run(exp, run_name=STUDY, tags={C.TAG_KIND: C.KIND_STUDY, C.TAG_STUDY: STUDY})
    records = synthetic_records(queries=12, seeds=(1, 2, 3),
                                effects={"base": 0.0, "better": 0.06, "worse": -0.08})
    config_runs = {}
    for config, name in NAMES.items():
        role = C.ROLE_BASELINE if config == "base" else C.ROLE_CANDIDATE
        run = client.create_run(exp, run_name=name, tags={
            C.TAG_KIND: C.KIND_CONFIG, C.TAG_CONFIG_ID: f"id-{config}", C.TAG_ROLE: role,
            "mlflow.parentRunId": study.info.run_id})
        config_runs[config] = run.info.run_id
    for rec in records:
        role = C.ROLE_BASELINE if rec.config == "base" else C.ROLE_CANDIDATE
        run = client.create_run(exp, run_name=f"{rec.config}-seed{rec.seed}", tags={
            C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: f"id-{rec.config}", C.TAG_SEED: rec.seed,
            C.TAG_ROLE: role, "mlflow.parentRunId": config_runs[rec.config]})
        rid = run.info.run_id
        log_seed_results(client, rid, rec)
        for metric in rec.per_query:
            client.log_metric(rid, f"{C.DEV_PREFIX}{metric}", 0.5, step=10)
        client.set_terminated(rid)
    failed = client.create_run(exp, tags={C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: "id-better",
                                          C.TAG_SEED: "1", "mlflow.parentRunId": config_runs["better"]})
    client.set_terminated(failed.info.run_id, status="FAILED")  # not counted
    return records


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list]:
    db = tmp_path_factory.mktemp("mlruns") / "mlflow.db"
    uri = f"sqlite:///{db.resolve()}"
    assert uri.startswith("sqlite:////")
    return uri, _write_study(uri)


@pytest.mark.slow
def test_table_from_experiment(store: tuple[str, list], run_cli: Callable[..., tuple[int, str, str]]) -> None:
    uri, records = store
    rc, out, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", uri, "--format", "csv",
                           "--metric", "map")
    # The store's study holds a FAILED seed run and a study run left RUNNING: the table is written,
    # marked INCOMPLETE, and the command exits 3 (docs/reliability.md)
    assert rc == 3 and "INCOMPLETE study" in err, err
    cells = {(r["row"], r["column"]): r for r in csv.DictReader(io.StringIO(out))}
    columns = list(dict.fromkeys(r["column"] for r in csv.DictReader(io.StringIO(out))))
    assert columns == [NAMES["base"], NAMES["better"], NAMES["worse"]]  # baseline first, study order
    for rec in records:
        expected = np.mean(list(rec.per_query["map"].values()))
        assert float(cells[(rec.seed, NAMES[rec.config])]["value"]) == pytest.approx(expected)
    assert cells[("AVG", NAMES["better"])]["direction"] == "better"
    assert cells[("AVG", NAMES["better"])]["marker"] == "\u2021"
    assert cells[("AVG", NAMES["worse"])]["direction"] == "worse"
    assert cells[("AVG", NAMES["base"])]["test"] == "crossed"
    # The crossed test on the matrices read back equals the one on the records written.
    matrix = {c: np.array([list(r.per_query["map"].values()) for r in records if r.config == c])
              for c in NAMES}
    ref = crossed_test(matrix["worse"], matrix["base"])
    assert float(cells[("AVG", NAMES["worse"])]["p_value"]) == pytest.approx(ref.p_value, rel=1e-9)


@pytest.mark.slow
def test_report_from_experiment(store: tuple[str, list]) -> None:
    uri, _ = store
    results = read_experiment(STUDY, tracking_uri=uri)
    assert results.baseline == NAMES["base"] and results.seeds == ("1", "2", "3")
    assert results.metrics == ("map", "mrr") and len(results.qids or ()) == 12
    assert results.config_ids[NAMES["better"]] == "id-better"
    report = study_report(results, formats=("md",))
    better = report.outcomes[NAMES["better"]]
    assert better.config_id == "id-better" and better.role == C.ROLE_CANDIDATE
    assert better.metrics["map_delta"] > 0 and better.metrics["map_p"] < 0.01
    assert better.tags[f"{C.TAG_MARKER_PREFIX}map"] == "\u2021"
    assert "map_delta" not in report.outcomes[NAMES["base"]].metrics


@pytest.mark.slow
def test_power_from_experiment(store: tuple[str, list], run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """`harness power --experiment` reads the store as `harness table` does; its components are those
    of the records written."""
    uri, records = store
    rc, out, err = run_cli("power", "--experiment", STUDY, "--tracking-uri", uri, "--metric", "map",
                           "--format", "json", "--effect", "0.05")
    # the study holds a FAILED seed run: the analysis is written and exits 3, as the table does
    assert rc == 3 and err.startswith("harness: warning: INCOMPLETE study: ") and len(err.splitlines()) == 1, err
    data = json.loads(out)
    assert data["source"] == f"MLflow experiment {STUDY!r}" and data["baseline"] == NAMES["base"]
    assert (data["seeds"], data["queries"]) == (3, 12)
    worse = next(c for c in data["comparisons"] if c["config"] == NAMES["worse"])
    matrix = {c: np.array([list(r.per_query["map"].values()) for r in records if r.config == c])
              for c in NAMES}
    comps = crossed_test(matrix["worse"], matrix["base"]).components
    assert worse["components"] == pytest.approx({"seed": comps.seed, "query": comps.query,
                                                 "residual": comps.resid})
    assert [r["seeds"] for r in worse["mde"]] == [3, 5, 10, 20]
    rc, out, _ = run_cli("power", "--experiment", STUDY, "--tracking-uri", uri)
    assert rc == 3 and f"**{md_escape(NAMES['better'])} vs {md_escape(NAMES['base'])}, MRR**" in out
    assert "| 3 (this study) | 12 |" in out
    rc, _, err = run_cli("power", "--experiment", "nope", "--tracking-uri", uri)
    assert rc == 2 and "unknown MLflow experiment 'nope'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_reader_keeps_only_the_named_configurations(store: tuple[str, list]) -> None:
    """A study file edited between runs: its report reads only the configurations it names now."""
    uri, _ = store
    results = read_experiment(STUDY, tracking_uri=uri, config_ids={"id-base", "id-worse"})
    assert set(results.config_ids.values()) == {"id-base", "id-worse"}
    assert results.baseline == NAMES["base"]
    report = study_report(results, formats=("md",))
    assert set(report.outcomes) == {NAMES["base"], NAMES["worse"]}
    with pytest.raises(HarnessError, match="no finished seed runs"):
        read_experiment(STUDY, tracking_uri=uri, config_ids={"id-gone"})


def test_reader_errors(store: tuple[str, list], tmp_path: Path,
                       run_cli: Callable[..., tuple[int, str, str]]) -> None:
    uri, _ = store
    rc, _, err = run_cli("table", "--experiment", "nope", "--tracking-uri", uri)
    assert rc != 0 and "unknown MLflow experiment 'nope'" in err and STUDY in err and "empty-study" in err
    rc, _, err = run_cli("table", "--experiment", "empty-study", "--tracking-uri", uri)
    assert rc != 0 and "has no finished seed runs" in err
    missing = f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"
    rc, _, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", missing)
    assert rc != 0 and "no MLflow store at" in err
    assert not (tmp_path / "none").exists()
    rc, _, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", uri, "--metric", "bleu")
    assert rc != 0 and "unknown metric 'bleu'" in err and "valid: map, mrr" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow  # a store of its own: seconds
@pytest.mark.parametrize("edit, message", [
    # NaN parsed as a number, and the table's test refused it naming no run
    (lambda rows: rows[1].__setitem__(2, "nan"), "value 'nan' of query 'q000' is not a finite number"),
    # the later row silently replaced the earlier
    (lambda rows: rows.append(rows[1]), "query 'q000' of map again (first on line 2)"),
])
def test_a_per_query_artifact_s_bad_row_is_named_with_its_run_and_line(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]], edit, message) -> None:
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    _write_study(uri)
    artifact = min((tmp_path / "artifacts").rglob(C.PER_QUERY_ARTIFACT))
    run_id = artifact.parents[2].name
    rows = list(csv.reader(artifact.read_text().splitlines()))
    assert rows[1][:2] == ["q000", "map"]
    edit(rows)
    artifact.write_text("".join(",".join(r) + "\n" for r in rows))
    rc, _, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", uri)
    line = len(rows) if "again" in message else 2
    assert rc == 2 and err.strip().splitlines() == [
        f"harness: error: MLflow experiment {STUDY!r}: run {run_id} {C.PER_QUERY_ARTIFACT}:{line}: {message}"], err


def test_default_tracking_uri(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_tracking_uri() == f"sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db"
    assert default_tracking_uri().startswith("sqlite:////")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    assert default_tracking_uri() == "http://localhost:5000"


@pytest.mark.slow
def test_an_interrupted_study_tabulates_what_it_can_pair_and_names_what_is_left_out(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """Ctrl-C while a candidate's last seed trained (its seed run KILLED, the study run KILLED):
    the table is written, marked INCOMPLETE, exit 3, with every configuration that has all of the
    baseline's seeds; the one still missing a seed is left out and named (docs/reliability.md)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    records = _write_study(uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(STUDY).experiment_id
    seed3 = client.search_runs([exp], f"tags.`{C.TAG_CONFIG_ID}` = 'id-worse' and tags.`{C.TAG_SEED}` = '3'")
    [killed] = [r for r in seed3 if r.info.status == "FINISHED"]
    client.set_terminated(killed.info.run_id, status="KILLED")
    [study] = client.search_runs([exp], f"tags.`{C.TAG_KIND}` = '{C.KIND_STUDY}'")
    client.set_terminated(study.info.run_id, status="KILLED")
    rc, out, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", uri, "--format", "csv",
                           "--metric", "map")
    assert rc == 3 and "INCOMPLETE study: its study run was interrupted (KILLED)" in err, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(dict.fromkeys(r["column"] for r in rows)) == [NAMES["base"], NAMES["better"]]
    assert {r["row"] for r in rows} >= {"1", "2", "3", "AVG"}
    rc, md, err = run_cli("table", "--experiment", STUDY, "--tracking-uri", uri, "--metric", "map")
    assert rc == 3 and f"Left out until it is resumed: {NAMES['worse']} (seed 3 not finished)." in md
    # the pairs kept are the finished study's: the same crossed test of better against the baseline
    matrix = {c: np.array([list(r.per_query["map"].values()) for r in records if r.config == c]) for c in NAMES}
    ref = crossed_test(matrix["better"], matrix["base"])
    avg = next(r for r in rows if r["row"] == "AVG" and r["column"] == NAMES["better"])
    assert float(avg["p_value"]) == pytest.approx(ref.p_value, rel=1e-9)


@pytest.mark.slow
def test_an_interrupted_confirmation_names_what_it_leaves_out_too(tmp_path: Path) -> None:
    """The left-out sentence survives the confirmatory note, and a configuration none of whose seed
    runs finished is named as well (not silently absent); a note's own full stop is not doubled."""
    from mlflow.tracking import MlflowClient

    from harness.present.render import render
    from harness.present.table import build_tables
    from harness.stats.significance import analyse

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _write_study(uri)
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(STUDY).experiment_id
    for run in client.search_runs([exp], f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'"):
        client.set_tag(run.info.run_id, C.TAG_PHASE, C.PHASE_CONFIRMATION)
    for run in client.search_runs([exp], f"tags.`{C.TAG_CONFIG_ID}` = 'id-worse'"):
        client.set_terminated(run.info.run_id, status="KILLED")
    [study] = client.search_runs([exp], f"tags.`{C.TAG_KIND}` = '{C.KIND_STUDY}'")
    client.set_terminated(study.info.run_id, status="KILLED")
    res = read_experiment(STUDY, tracking_uri=uri)
    assert res.configs == (NAMES["base"], NAMES["better"]) and res.phase == "confirmatory"
    assert res.phase_note.startswith("Confirmatory: ")
    assert res.phase_note.endswith(f"Left out until it is resumed: {NAMES['worse']} (no seed run finished).")
    text = render(build_tables(analyse(res), "seeds"), "md")
    assert "(no seed run finished). " in text and ".. " not in text


@pytest.mark.slow
def test_the_report_of_an_unfinished_study_says_so_and_exits_3(
        store: tuple[str, list], tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """As `harness table` (above): the store's study has a FAILED seed run and its study run still
    RUNNING, so the page's decisions carry the INCOMPLETE sentence, the warning is printed and the
    exit is 3 (it was a clean page and 0: found in review)."""
    uri, _ = store
    page = tmp_path / "report.html"
    rc, _, err = run_cli("report", "--experiment", STUDY, "--tracking-uri", uri, "--to", str(page))
    assert rc == 3 and "harness: warning: INCOMPLETE study" in err, err
    assert "INCOMPLETE study" in page.read_text(encoding="utf-8")
