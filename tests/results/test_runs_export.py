"""`harness runs export` on a real MLflow SQLite store written through the harness's own writer
(TrackingStore) with the run-file and qrels artifacts of evaluation/trec.py: ir_measures on the
exported files gives exactly the test metrics MLflow holds for every seed run, tied scores included."""

from __future__ import annotations

import csv
import tempfile
from collections.abc import Callable
from pathlib import Path

import ir_measures
import numpy as np
import pytest

from harness.metrics.measures import MEASURES, evaluate
from harness.metrics.trec import qrels_artifacts, run_file_artifacts, run_tag
from harness.records import Query, qrels_of
from harness.tracking import conventions as C
from tests.conftest import toy_splits

pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]
STUDY = "trec-study"
CONFIGS = {"model": "model (float32 scores)", "tied": "tied scores"}
SEEDS = (1, 2, 3)
SHOWN = ("map", "mrr_10", "ndcg_10", "p_1")  # AP, RR@10, nDCG@10, P@1
INCOMPLETE = ("harness: warning: INCOMPLETE study: 1 of 7 seed runs did not finish (FAILED); this table holds only "
              "the finished seed runs (`harness run STUDY --resume` finishes it).\n")


def _scores(queries: tuple[Query, ...], config: str, seed: int) -> dict[str, dict[str, float]]:
    """A run: float32 model-like scores, or scores from {0, 1} that tie relevant with non-relevant
    documents in most queries."""
    g = np.random.default_rng([seed, len(config)])
    run = {}
    for q in queries:
        labels = np.array([c.label for c in q.candidates])
        if config == "tied":
            s = (g.random(len(labels)) < 0.5 + 0.3 * labels).astype(np.float32)
        else:
            s = (g.normal(size=len(labels)) + 1.2 * labels).astype(np.float32)
        run[q.qid] = {c.doc_id: float(v) for c, v in zip(q.candidates, s, strict=True)}
    return run


def _log_study(uri: str, *, with_run_files: bool = True) -> dict[str, dict[str, float]]:
    """A small finished study as the driver would record it; returns {run_id: test metrics}."""
    from harness.tracking.store import TrackingStore

    splits = toy_splits(n_train=2, n_dev=16, n_test=40, n_cands=6)
    qrels = {"dev": qrels_of(splits.dev), "test": qrels_of(splits.test)}
    store = TrackingStore(uri)
    exp = store.experiment(STUDY)
    study = store.start_run(exp, STUDY, {C.TAG_KIND: C.KIND_STUDY, C.TAG_STUDY: STUDY})
    with tempfile.TemporaryDirectory() as tmp:
        qrels_artifacts(tmp, qrels)
        store.client.log_artifacts(study, tmp)
    logged = {}
    for config, name in CONFIGS.items():
        role = C.ROLE_BASELINE if config == "model" else C.ROLE_CANDIDATE
        parent = store.start_run(exp, name, {C.TAG_KIND: C.KIND_CONFIG, C.TAG_CONFIG_ID: f"id-{config}",
                                             C.TAG_ROLE: role}, parent=study)
        for seed in SEEDS:
            run_id = store.start_run(exp, f"{name} seed {seed}", {
                C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: f"id-{config}", C.TAG_SEED: str(seed),
                C.TAG_ROLE: role}, parent=parent)
            runs = {split: _scores(splits.split(split), config, seed + 10 * (split == "dev"))
                    for split in ("dev", "test")}
            test = evaluate(qrels["test"], runs["test"])
            store.log_metrics(run_id, {f"{C.TEST_PREFIX}{k}": v for k, v in test.means.items()})
            store.log_per_query(run_id, test.per_query)
            if with_run_files or seed != 2:
                with tempfile.TemporaryDirectory() as tmp:
                    run_file_artifacts(tmp, runs=runs, qrels=qrels, tag=run_tag(name, seed))
                    store.client.log_artifacts(run_id, tmp)
            store.end_run(run_id)
            logged[run_id] = store.client.get_run(run_id).data.metrics
        store.end_run(parent)
    failed = store.start_run(exp, "crashed", {C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: "id-model",
                                              C.TAG_SEED: "9"})
    store.end_run(failed, "FAILED")  # not exported
    store.end_run(study)
    return logged


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict[str, float]]]:
    uri = f"sqlite:///{(tmp_path_factory.mktemp('mlruns') / 'mlflow.db').resolve()}"
    return uri, _log_study(uri)


def test_export_reproduces_mlflow_test_metrics(study, tmp_path: Path, run_cli: Cli) -> None:
    uri, logged = study
    rc, out, err = run_cli("runs", "export", "--tracking-uri", uri, "--to", str(tmp_path))  # the only study
    # the store holds a FAILED seed run: the export is written, and says the study is incomplete (3)
    assert rc == 3, err
    assert out.strip() == (f"exported 12 run file(s) of 6 seed run(s), {6 * 40 * len(MEASURES)} per-query "
                           f"value(s) in per_query.csv and 2 qrels file(s) of experiment {STUDY!r} to "
                           f"{tmp_path}") and err == INCOMPLETE
    manifest = list(csv.DictReader((tmp_path / "manifest.csv").open()))
    assert {r["run_id"] for r in manifest} == set(logged)
    assert sorted(p.name for p in (tmp_path / "runs" / "test").iterdir()) == [
        "model__float32_scores_.seed1.trec", "model__float32_scores_.seed2.trec",
        "model__float32_scores_.seed3.trec", "tied_scores.seed1.trec", "tied_scores.seed2.trec",
        "tied_scores.seed3.trec"]
    measures = [MEASURES[k] for k in SHOWN]
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "qrels" / "test.qrels")))
    tied_queries = 0
    for row in (r for r in manifest if r["split"] == "test"):
        path = tmp_path / row["file"]
        lines = [line.split() for line in path.read_text().splitlines()]
        assert {line[5] for line in lines} == {run_tag(CONFIGS[row["config_id"][3:]], row["seed"])}
        run = list(ir_measures.read_trec_run(str(path)))
        aggregate = ir_measures.calc_aggregate(measures, qrels, run)
        for key, measure in zip(SHOWN, measures, strict=True):
            assert aggregate[measure] == logged[row["run_id"]][f"{C.TEST_PREFIX}{key}"], (row, key)
        if row["config_id"] == "id-tied":
            tied_queries += sum(len({d.score for d in run if d.query_id == q}) < 6
                                for q in {d.query_id for d in run})
    assert tied_queries == 0  # in the files no score ties any more ...
    # ... though the tied runs logged were full of ties, a relevant document tied with a
    # non-relevant one in most queries (test_trec: under trec_eval's own tie rule such ties change values)
    splits = toy_splits(n_train=2, n_dev=16, n_test=40, n_cands=6)
    for seed in SEEDS:
        raw = _scores(splits.test, "tied", seed)
        rel_tied = sum(any(c.label == 0 and raw[q.qid][c.doc_id] == raw[q.qid][q.positives[0].doc_id]
                           for c in q.candidates) for q in splits.test)
        assert rel_tied > len(splits.test) / 2
    assert (tmp_path / "qrels" / "dev.qrels").read_text().count("\n") == 16 * 6


@pytest.mark.slow
def test_export_writes_per_query_values(study, tmp_path: Path, run_cli: Cli) -> None:
    """per_query.csv: one row per (configuration, seed, query, metric); each value is ir_measures'
    on the exported run file and qrels (an implementation of its own), the harness key and
    ir-measures name side by side; read back by `harness table --from`, it gives the numbers of
    `harness table --experiment`."""
    uri, logged = study
    rc, _, err = run_cli("runs", "export", "--tracking-uri", uri, "--to", str(tmp_path))
    assert rc == 3 and err == INCOMPLETE, err
    with (tmp_path / "per_query.csv").open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == ("config", "seed", "metric", "value", "query", "measure",
                                                 "split", "config_id", "run_id")
        rows = list(reader)
    keys = {(r["config"], r["seed"], r["query"], r["metric"]) for r in rows}
    assert len(keys) == len(rows) == 2 * len(SEEDS) * 40 * len(MEASURES)
    assert {r["run_id"] for r in rows} == set(logged) and {r["split"] for r in rows} == {"test"}
    assert all(MEASURES[r["metric"]] == ir_measures.parse_measure(r["measure"]) for r in rows)
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "qrels" / "test.qrels")))
    manifest = {(r["run_id"], r["split"]): r["file"] for r in csv.DictReader((tmp_path / "manifest.csv").open())}
    for run_id in logged:
        mine = [r for r in rows if r["run_id"] == run_id]
        run = list(ir_measures.read_trec_run(str(tmp_path / manifest[(run_id, "test")])))
        theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(
            [MEASURES[k] for k in sorted({r["metric"] for r in mine})], qrels, run)}
        assert {(r["query"], r["measure"]): float(r["value"]) for r in mine} == pytest.approx(theirs, abs=1e-12)
        for key in SHOWN:  # the mean of a run's per-query values is its MLflow test metric
            values = [float(r["value"]) for r in mine if r["metric"] == key]
            assert np.mean(values) == pytest.approx(logged[run_id][f"{C.TEST_PREFIX}{key}"], abs=1e-12)
    tables = []
    for source in (("--experiment", STUDY, "--tracking-uri", uri), ("--from", str(tmp_path / "per_query.csv"))):
        rc, out, err = run_cli("table", *source, "--format", "csv", "--form", "configs", "--metric", *SHOWN)
        # the store holds a FAILED seed run: its table says the study is incomplete (exit 3)
        assert rc == (3 if source[0] == "--experiment" else 0), err
        tables.append([row[1:16] for row in csv.reader(out.splitlines()[1:])])  # row .. comparisons
    # one relevant document per query: MAP = MRR@10, shown once (harness.stats.identical)
    assert len(tables[0]) == len(tables[1]) == 2 * (len(SHOWN) - 1)
    assert tables[0][0][1] == "MAP = MRR@10"
    # the same numbers to the last bit: a run's value is the mean of its per-query values either way
    # (MLflow's logged mean is ir_measures' own sum, 1e-16 off)
    assert tables[0] == tables[1]


def test_export_skips_seed_runs_without_files_and_errors(tmp_path: Path, run_cli: Cli) -> None:
    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    _log_study(uri, with_run_files=False)
    rc, out, err = run_cli("runs", "export", "--experiment", STUDY, "--tracking-uri", uri,
                           "--to", str(tmp_path / "out"))
    assert rc == 3 and err.endswith(INCOMPLETE)
    notes = [line for line in err.splitlines() if "mlflow.store.db.utils" not in line  # store creation
             and not line.startswith("harness: warning: INCOMPLETE")]
    assert len(notes) == 2 and all(n.startswith("harness: note: seed run ") and "seed 2) has no run "
                                   "files; skipped" in n for n in notes)
    assert "exported 8 run file(s) of 4 seed run(s)" in out
    # the per-query values do not need run files: all 6 seed runs are in per_query.csv
    per_query = list(csv.DictReader((tmp_path / "out" / "per_query.csv").open()))
    assert len({r["run_id"] for r in per_query}) == 6 and len(per_query) == 6 * 40 * len(MEASURES)

    def error(*argv: str) -> str:
        rc, out, err = run_cli("runs", "export", *argv)
        lines = err.strip().splitlines()
        assert rc != 0 and out == "" and len(lines) == 1 and lines[0].startswith("harness: error: "), err
        return lines[0]

    assert "unknown MLflow experiment 'nope'" in error("--experiment", "nope", "--tracking-uri", uri,
                                                       "--to", str(tmp_path / "x"))
    missing = tmp_path / "none" / "mlflow.db"
    assert f"no MLflow store at {missing}" in error("--tracking-uri", f"sqlite:///{missing}", "--to", "x")
    (tmp_path / "file").write_text("")
    assert "exists and is not a folder" in error("--tracking-uri", uri, "--to", str(tmp_path / "file"))
    # a second study in the store: the experiment must be named
    from harness.tracking.store import TrackingStore

    store = TrackingStore(uri)
    other = store.start_run(store.experiment("other"), "other", {C.TAG_KIND: C.KIND_STUDY})
    assert f"holds 2 studies (other, {STUDY}); name one with --experiment" in error(
        "--tracking-uri", uri, "--to", str(tmp_path / "y"))
    # a malformed run file fails the export, naming the run and the artifact
    seed = store.start_run(store.experiment("other"), "s", {C.TAG_KIND: C.KIND_TRIAL, C.TAG_ROLE: C.ROLE_BASELINE,
                                                             C.TAG_CONFIG_ID: "c", C.TAG_SEED: "1"},
                           parent=other)
    store.log_text(seed, "q Q0 d 1 0.5\n", "runs/test.trec")
    store.end_run(seed)
    msg = error("--experiment", "other", "--tracking-uri", uri, "--to", str(tmp_path / "z"))
    assert msg.endswith(f"seed run {seed} runs/test.trec:1: expected 6 columns (qid Q0 docno rank "
                        f"score tag), found 5"), msg



def test_the_summary_counts_each_seed_run_once_per_collection() -> None:
    """A seed run has a file per split; a study over collections repeats file names in each
    collection's folder: 4 files there are 2 seed runs (it said 1)."""
    from harness.results.trec_export import Export

    many = Export(folder=Path("x"), experiment="e", run_files=[
        f"{c}/runs/{split}/baseline.seed1.trec" for c in ("talk-a", "talk-b") for split in ("dev", "test")])
    assert many.summary().startswith("exported 4 run file(s) of 2 seed run(s)")
    one = Export(folder=Path("x"), experiment="e", run_files=[
        f"runs/{split}/{stem}.trec" for split in ("dev", "test") for stem in ("baseline.seed1", "ls.seed1")])
    assert one.summary().startswith("exported 4 run file(s) of 2 seed run(s)")


def _log_files(uri: str, study: str, collections: tuple[str, ...] = ("",)) -> None:
    """Run files for every finished seed run of ``study``, and per collection a qrels file that
    names its collection (qrels/<collection>/test.qrels, as the driver logs them)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    for run in client.search_runs([exp.experiment_id]):
        kind = run.data.tags.get(C.TAG_KIND)
        if kind == C.KIND_TRIAL and run.info.status == "FINISHED":
            client.log_text(run.info.run_id, "".join(f"q{i:03d} Q0 d{j} {j + 1} {1.0 - 0.1 * j} t\n"
                                                      for i in range(8) for j in range(3)), "runs/test.trec")
        if kind == C.KIND_STUDY:
            for name in collections:
                sub = f"qrels/{name}" if name else "qrels"
                judged = f"d{collections.index(name)}"  # each collection's own relevant document
                client.log_text(run.info.run_id, "".join(f"q{i:03d} 0 {judged} 1\n" for i in range(8)),
                                f"{sub}/test.qrels")


def test_the_export_reads_back_with_the_studys_baseline_and_names(tmp_path: Path, run_cli: Cli) -> None:
    """per_query.csv lists the baseline's rows first, so `harness table --from` takes the study's
    baseline (it takes the first configuration), not the one whose label sorts first; a label
    that starts like a spreadsheet formula is written guarded ('=...) and read back as itself."""
    from tests.synthetic import synthetic_records, write_study_records

    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    names = {"base": "wsls-bm25", "better": "=cmd()", "same": "'=quoted", "worse": "albert"}
    write_study_records(uri, "order", synthetic_records(queries=8), names, failed=False)
    _log_files(uri, "order")
    rc, _, err = run_cli("runs", "export", "--tracking-uri", uri, "--to", str(tmp_path / "out"))
    assert rc == 0, err
    text = (tmp_path / "out" / "per_query.csv").read_text()
    assert text.splitlines()[1].startswith("wsls-bm25,") and "\n'=cmd()," in text and "\n''=quoted," in text
    tables = {}
    for source in (("--experiment", "order", "--tracking-uri", uri),
                   ("--from", str(tmp_path / "out" / "per_query.csv"))):
        rc, out, err = run_cli("table", *source, "--format", "csv", "--form", "configs")
        assert rc == 0, err
        tables[source[0]] = [row[:3] for row in csv.reader(out.splitlines()[1:])]
    assert tables["--from"] == tables["--experiment"]
    from harness.results.longcsv import read_long_csv

    results = read_long_csv(tmp_path / "out" / "per_query.csv")
    assert results.baseline == "wsls-bm25" and set(results.configs) == set(names.values())


def test_collections_whose_folder_names_clash_get_folders_of_their_own(tmp_path: Path, run_cli: Cli) -> None:
    """`c&1` and `c_1` both make the folder c_1: each gets a folder of its own (a hash of its name
    appended), so neither's qrels or run files overwrite the other's."""
    from tests.synthetic import synthetic_records, write_collections_records

    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    names = ("c&1", "c_1", "plain")
    write_collections_records(uri, "clash", {n: synthetic_records(queries=8, effects={"base": 0.0, "cl": 0.05})
                                             for n in names}, {"base": "base", "cl": "cl"}, failed=False)
    _log_files(uri, "clash", names)
    out = tmp_path / "out"
    rc, _, err = run_cli("runs", "export", "--tracking-uri", uri, "--to", str(out))
    assert rc == 0, err
    manifest = list(csv.DictReader((out / "manifest.csv").open(newline="")))
    assert len(manifest) == 3 * 2 * 3 and len({r["file"] for r in manifest}) == len(manifest)
    folders = {r["collection"]: r["file"].split("/")[0] for r in manifest}
    assert len(set(folders.values())) == 3 and folders["plain"] == "plain"
    assert all(folders[n].startswith("c_1-") for n in ("c&1", "c_1"))
    for i, name in enumerate(names):  # each collection's own qrels (_log_files: its relevant document d<i>)
        assert (out / folders[name] / "qrels" / "test.qrels").read_text().startswith(f"q000 0 d{i} 1\n")
    assert sorted(p.name for p in out.iterdir()) == sorted([*folders.values(), "manifest.csv", "per_query.csv"])
