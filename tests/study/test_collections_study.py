"""A study over two collections on real local Ray and real MLflow (tiny model): its trials run in
one Tune run with the collection in each configuration, the driver is killed mid-study and
resumed, every config and seed run carries its collection (tag and param), and the table's cells
equal a hand computation from the exported per-query values of each collection, the combined
verdict the independent implementation (statsmodels' meta-analysis / scipy's t-test)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from harness.cli import main
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

COLLECTIONS = [
    {"name": "talk-a", "data": {"conversations": 30, "split_seed": 13}},
    {"name": "talk-b", "data": {"conversations": 30, "split_seed": 29}},
]
STUDY = {"configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2}},
         "seeds": [1, 2], "collections": COLLECTIONS, "concurrency": 1}


def test_spec_expands_every_configuration_over_the_collections(tmp_path: Path) -> None:
    spec = load_spec(write_study(tmp_path, "multi", **STUDY))
    assert spec.collections == ("talk-a", "talk-b")
    pairs = [(nc.name, nc.role, nc.config.data.collection) for nc in spec.fixed_configs()]
    assert pairs == [("baseline", "baseline", "talk-a"), ("ls", "candidate", "talk-a"),
                     ("baseline", "baseline", "talk-b"), ("ls", "candidate", "talk-b")]
    ids = {nc.config.config_id() for nc in spec.fixed_configs()}
    assert len(ids) == 4
    assert [nc.name for nc in spec.collection_configs("talk-b")] == ["baseline", "ls"]


@pytest.mark.heavy
def test_two_collections_killed_resumed_and_tabulated(tmp_path: Path, ray_root: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.study.hooked_run import main as hooked_run

    root = tmp_path
    path = write_study(root, "multi", **STUDY)
    spec = load_spec(path)
    held = next(f"{nc.config.config_id()}-seed2" for nc in spec.collection_configs("talk-a") if nc.name == "ls")
    gate, log = root / "go", root / "trials.log"
    uri = f"sqlite:///{root / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HARNESS_LEASE_TIMEOUT_S": "5"}
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "--hold", str(gate), held, "run", str(path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.time() + 900
        while time.time() < deadline:
            if log.exists() and f"{held} start" in log.read_text():
                time.sleep(2)
                break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "driver ended"
            time.sleep(0.2)
        else:
            raise AssertionError(f"trial {held} did not start")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Ray, mid-study
        proc.wait()
    before = log.read_text().splitlines()
    finished_before = {ln.split()[0] for ln in before if " end " in ln}
    assert held not in finished_before
    gate.touch()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("HARNESS_LEASE_TIMEOUT_S", "5")
    assert hooked_run(cmd[3:] + ["--resume"]) == 0
    after = log.read_text().splitlines()[len(before):]
    # no finished trial trained again; the held one finished
    assert not {ln.split()[0] for ln in after if " start " in ln} & finished_before, after
    assert any(ln.startswith(f"{held} end ") for ln in after)

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("multi")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    trials = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    configs = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG]
    assert len(trials) == 8 and len({r.data.tags[C.TAG_TRIAL_KEY] for r in trials}) == 8
    assert len(configs) == 4
    for r in [*trials, *configs]:  # the collection: a tag and a param on every config and seed run
        assert r.data.tags[C.TAG_COLLECTION] == r.data.params[C.COLLECTION_PARAM] in ("talk-a", "talk-b")
    # one evaluation fingerprint per collection
    prints: dict[str, set[str]] = {}
    for r in trials:
        prints.setdefault(r.data.tags[C.TAG_COLLECTION], set()).add(r.data.tags[C.TAG_EVAL_FINGERPRINT])
    assert all(len(v) == 1 for v in prints.values()) and prints["talk-a"] != prints["talk-b"]
    study_run = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    arts = {a.path for a in client.list_artifacts(study_run.info.run_id, "tables")}
    assert "tables/collections-configs.md" in arts and "tables/collections-seeds.tex" in arts

    # the reference MAPs of each collection's test queries, named by collection
    assert {k for k in study_run.data.metrics if k.startswith("reference_")} == {
        f"reference_{c}.{kind}_map" for c in ("talk-a", "talk-b") for kind in ("random", "bm25")}
    # harness report writes the page the study logged (the whole table over the collections).
    capsys.readouterr()
    assert main(["report", "--experiment", "multi", "--tracking-uri", uri, "--to", str(root / "r.html"),
                 "--metric", "map"]) == 2  # no dev curves to pick a metric for
    assert "the report of a study over several collections (talk-a, talk-b) is its whole table" in capsys.readouterr().err
    assert main(["report", "--experiment", "multi", "--tracking-uri", uri, "--to", str(root / "r.html")]) == 0
    logged = Path(client.download_artifacts(study_run.info.run_id, "report.html", str(root / "logged")))
    assert (root / "r.html").read_text() == logged.read_text()
    assert 'scope="colgroup">talk-a</th>' in logged.read_text()

    # The table, from the exported per-query values of each collection, by hand.
    capsys.readouterr()
    assert main(["table", "--experiment", "multi", "--tracking-uri", uri, "--format", "csv", "--metric", "map"]) == 0
    table = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert main(["runs", "export", "--experiment", "multi", "--tracking-uri", uri, "--to", str(root / "export")]) == 0
    assert "of 8 seed run(s)" in capsys.readouterr().out  # 2 collections x 2 configurations x 2 seeds
    per_query = _exported_ap(root / "export")
    diffs = {}
    for collection in ("talk-a", "talk-b"):
        base = np.array([per_query[(collection, "baseline", s)] for s in ("1", "2")])  # seeds x queries
        ls = np.array([per_query[(collection, "ls", s)] for s in ("1", "2")])
        for config, values in (("baseline", base), ("ls", ls)):
            cell = next(r for r in table if r["collection"] == collection and r["row"] == config)
            assert float(cell["value"]) == pytest.approx(values.mean(), abs=1e-6)
            assert float(cell["sd"]) == pytest.approx(values.mean(axis=1).std(ddof=1), abs=1e-6)
        diffs[collection] = (ls - base).mean()
    comb = next(r for r in table if r["collection"] == "combined" and r["row"] == "ls")
    y = [diffs["talk-a"], diffs["talk-b"]]
    assert float(comb["mean_diff"]) == pytest.approx(np.mean(y), abs=1e-6)
    assert float(comb["p_value"]) == pytest.approx(stats.ttest_1samp(y, 0.0).pvalue, rel=1e-3)
    assert comb["comparisons"] == "3"  # 2 collections + 1 combined verdict, one metric


def _exported_ap(folder: Path) -> dict[tuple[str, str, str], list[float]]:
    """(collection, config, seed) -> AP per test query (in query order), recomputed by ir_measures
    from the exported run files and qrels of each collection."""
    import ir_measures

    out = {}
    for coll_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        qrels = list(ir_measures.read_trec_qrels(str(coll_dir / "qrels" / "test.qrels")))
        for run_file in sorted((coll_dir / "runs" / "test").glob("*.trec")):
            config, seed = run_file.stem.rsplit(".seed", 1)
            run = list(ir_measures.read_trec_run(str(run_file)))
            values = {m.query_id: m.value for m in ir_measures.iter_calc([ir_measures.AP], qrels, run)}
            out[(coll_dir.name, config, seed)] = [values[q] for q in sorted(values)]
    return out


@pytest.mark.slow
def test_validate_prints_the_plan_per_collection_and_names_one_that_does_not_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan needs each collection's data: validate builds what the cache lacks (the whole
    chitchat set of a shipped study: twelve minutes, once without a line), saying so on stderr
    once a load takes longer than a second (here at once); what the cache holds loads quietly."""
    from harness.study import validate

    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))  # an empty cache: both collections build
    path = write_study(tmp_path, "multi", **STUDY)
    with monkeypatch.context() as slow:
        slow.setattr(validate, "SLOW_LOAD_S", 0.0)
        assert main(["validate", str(path), "--no-model"]) == 0
    out, err = capsys.readouterr()
    for name in ("talk-a", "talk-b"):
        assert f"harness validate: {name}: 30 conversations" in err, err
    assert main(["validate", str(path), "--no-model"]) == 0  # from the cache: no progress
    out, err = capsys.readouterr()
    assert err == "", err
    assert "collections: 2 (talk-a, talk-b); every configuration on each, in one Tune run" in out
    for name in ("talk-a", "talk-b"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{name}: data.source chitchat"))
        assert "test queries" in line and "evaluation fingerprint" in line and "2 configurations x 2 seeds = 4 trials" in line
    broken = write_study(tmp_path, "broken", **{**STUDY, "collections": [
        COLLECTIONS[0], {"name": "missing", "data": {"source": "msdialog", "path": str(tmp_path / "nowhere")}}]})
    assert main(["validate", str(broken), "--no-model"]) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "collection 'missing'" in err and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    ({"collections": [COLLECTIONS[0], {**COLLECTIONS[1], "name": "talk-a"}]}, "duplicate collection name 'talk-a'"),
    # names become folder and file names: unique where case is not
    ({"collections": [COLLECTIONS[0], {**COLLECTIONS[1], "name": "Talk-A"}]},
     "duplicate collection name 'Talk-A' (names differ by more than case)"),
    ({"collections": [{"name": "a", "data": {"collection": "b"}}]}, "give it as name"),
    ({"collections": [{"name": "a", "set": {}}]}, "unknown keys ['set']"),
    ({"collections": [COLLECTIONS[0], {"name": "b"}]}, "collections[1].data must be a mapping of the data.* keys"),
    # one collection's data twice would count as two independent collections in the combined verdict
    ({"collections": [COLLECTIONS[0], {**COLLECTIONS[0], "name": "again"}]},
     "collections 'talk-a' and 'again' have the same data"),
    ({"data": {"collection": "x"}}, "data.collection is a collection's name, which the collections list gives"),
])
def test_bad_collections_are_refused_in_one_line(tmp_path: Path, extra: dict, message: str) -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_spec(write_study(tmp_path, "bad", **{**STUDY, **extra}))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_override_cannot_change_which_data_a_collection_is(tmp_path: Path) -> None:
    """--set (and smoke) apply to every configuration: over collections, one of data.source,
    data.path, data.irds_id would train one collection's data under another's name."""
    from harness.errors import ConfigError
    from harness.study.validate import load

    path = write_study(tmp_path, "multi", **STUDY)
    for key in ("data.source=cranfield", "data.path=/tmp"):
        with pytest.raises(ConfigError, match=f"{key.split('=')[0]} cannot be overridden in a study over "
                                              r"collections \(talk-a, talk-b\)"):
            load(path, smoke=False, assign=[key])
    with pytest.raises(ConfigError, match="data.collection is a collection's name, which the study file's "
                                          "collections list gives; it cannot be overridden"):
        load(path, smoke=False, assign=["data.collection=x"])
    # the collections differ by their split seeds: one seed for both makes them one collection twice
    with pytest.raises(ConfigError, match="collections 'talk-a' and 'talk-b' have the same data once the "
                                          "override of data.split_seed applies"):
        load(path, smoke=False, assign=["data.split_seed=13"])
    spec = load(path, smoke=False, assign=["data.max_test_queries=5"])  # a size: every collection's
    assert {nc.config.data.max_test_queries for nc in spec.fixed_configs()} == {5}


@pytest.mark.parametrize("extra, key, message", [
    ({"seeds": [1]}, "seeds",
     "seeds must be a list of at least 2 seeds in a study over collections (talk-a, talk-b), got [1]"),
    ({"confirm": {"top": 1, "seeds": 1}}, "confirm",
     "confirm.seeds must be at least 2 in a study over collections (talk-a, talk-b), got 1"),
], ids=["seeds", "confirm.seeds"])
def test_one_seed_over_several_collections_is_refused_before_anything_runs(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]], extra: dict, key: str, message: str) -> None:
    """The table over collections refuses one-seed results; validate, run and submit refuse such a
    study up front, in one line naming the file and the key's line, and run makes nothing (no Tune
    storage, no MLflow store) before refusing."""
    path = write_study(tmp_path, "one-seed", **{**STUDY, **extra})
    line = 1 + next(i for i, text in enumerate(path.read_text().splitlines()) if text.startswith(f"{key}:"))
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    for argv in (["validate", str(path), "--no-model"], ["run", str(path), "--tracking-uri", uri],
                 ["submit", str(path), "--address", "http://127.0.0.1:1"]):
        rc, out, err = run_cli(*argv)
        assert rc != 0 and out == "", argv
        assert err.startswith(f"harness: error: {path}:{line}: {message}; "), (argv, err)
        assert "\n" not in err.strip() and "Traceback" not in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "store").exists()


@pytest.mark.heavy  # the shipped study's 8 trials on real Ray: over a minute on 2 cores
def test_the_demo_study_runs_at_its_smoke_budget_and_ends_with_the_table_of_both_collections(
        ray_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`make demo-collections` runs search_spaces/quickstart_collections.yaml; at its smoke budget
    (the tiny model, 6 steps) it runs through real Ray and MLflow and ends, as the demo does, with
    one table over chitchat and Cranfield: a column group each and the combined verdict."""
    study = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart_collections.yaml"
    monkeypatch.chdir(tmp_path)  # its storage_path (runs) goes here, not into the repository
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["run", str(study), "--smoke", "--tracking-uri", uri]) == 0
    printed = capsys.readouterr()
    text = printed.out + printed.err
    assert "| configuration | chitchat: MAP |" in text and "| cranfield: MAP |" in text, text[-3000:]
    assert "combined" in text and "the table over 2 collections logged to study run" in text
    # each progress line names its collection (the baseline's two dev means read as one name's)
    assert "[config] baseline on chitchat: dev map" in text and "[config] baseline on cranfield: dev map" in text
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("quickstart-collections").experiment_id],
                              max_results=100)
    trials = [r.data.tags[C.TAG_COLLECTION] for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    spec = load_spec(study)
    # every configuration (one per collection) x the seeds, on each collection
    each = len(spec.fixed_configs()) * len(spec.seeds) // len(spec.collections)
    assert sorted(trials) == ["chitchat"] * each + ["cranfield"] * each


def test_progress_lines_name_the_collection_of_a_trial() -> None:
    """`[config] baseline: dev map 0.3183` and `... 0.2761` followed each other in `make
    demo-collections`, one per collection under one name; a one-collection study's lines are as
    they were."""
    from harness.driver._callback import _label
    from harness.study.protocol import TrialTicket

    spec = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart_collections.yaml")
    labels = {_label(TrialTicket.of(nc.name, nc.role, nc.config, 1))
              for nc in spec.fixed_configs()}
    assert labels == {"baseline on chitchat", "baseline on cranfield", "wsls-0.2 on chitchat", "wsls-0.2 on cranfield"}
    one = load_spec(Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml").baseline
    assert _label(TrialTicket.of(one.name, one.role, one.config, 1)) == "baseline"


def test_the_progress_summary_takes_the_best_dev_value_of_each_collection() -> None:
    """The summary's `best dev map 0.4100` was the best over every finished trial, chitchat's and
    Cranfield's together, one number from two scales; over collections it is each one's best."""
    from harness.driver._callback import best_dev

    values = [("chitchat", 0.41), ("cranfield", 0.30), ("chitchat", 0.38), ("cranfield", 0.33)]
    assert best_dev(values, "map", "max") == ", best dev map 0.4100 on chitchat, 0.3300 on cranfield"
    assert best_dev(values, "loss", "min") == ", best dev loss 0.3800 on chitchat, 0.3000 on cranfield"
    assert best_dev([("", 0.2), ("", 0.25)], "map", "max") == ", best dev map 0.2500"
    assert best_dev([], "map", "max") == ""
