"""data.source=irds: a local data set registered in ir_datasets (tests/data/fixtures/irds, no
download), read into Splits whose queries, qrels and candidates are what ir_datasets iterates;
trained and evaluated end to end with ``harness train``; one-line errors for an unknown id and for
a set that needs a download with no network."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import subprocess
import sys
from pathlib import Path

import ir_datasets
import pytest

from harness.cli import main
from harness.config import DataConfig, TrialConfig
from harness.data._irds import read_irds, register_local
from harness.data.load import load_splits
from harness.errors import ConfigError
from harness.study.validate import check_data

REGISTER = str(Path(__file__).parent / "fixtures" / "irds" / "register.py")
IDS = "harness-fixture/train,harness-fixture/dev,harness-fixture/test"
ROOT = Path(__file__).resolve().parents[2]


def _cfg(**kw: object) -> DataConfig:
    return DataConfig(**{"source": "irds", "irds_id": IDS, "irds_register": REGISTER, **kw})  # type: ignore[arg-type]


def _expected(dataset_id: str, depth: int = 1000) -> dict[str, tuple[str, list[tuple[str, str, int, float]]]]:
    """{qid: (text, [(doc_id, doc text, label, score)] best first)} straight from ir_datasets."""
    ds = ir_datasets.load(dataset_id)
    qrels = ds.qrels_dict()
    docs = {d.doc_id: d.text for d in ds.docs_iter()}
    run: dict[str, list[tuple[str, float]]] = {}
    for sd in ds.scoreddocs_iter():
        run.setdefault(sd.query_id, []).append((sd.doc_id, sd.score))
    out = {}
    for q in ds.queries_iter():
        if q.query_id in run:
            ranked = sorted(run[q.query_id], key=lambda p: p[1], reverse=True)[:depth]
            out[q.query_id] = (q.text, [(d, docs[d], int(qrels.get(q.query_id, {}).get(d, 0) > 0), s)
                                        for d, s in ranked])
    return out


def _as_dict(queries: tuple) -> dict[str, tuple[str, list[tuple[str, str, int, float]]]]:
    return {q.qid: (q.context[0], [(c.doc_id, c.text, c.label, c.score) for c in q.candidates])
            for q in queries}


def test_qrels_and_candidates_equal_what_ir_datasets_iterates() -> None:
    splits = read_irds(_cfg())
    for name in ("train", "dev", "test"):
        assert _as_dict(splits.split(name)) == _expected(f"harness-fixture/{name}"), name
        assert [q.qid for q in splits.split(name)] == sorted(q.qid for q in splits.split(name))
        assert all(q.group == q.qid and len(q.context) == 1 for q in splits.split(name))
    # What the fixture holds (tests/data/fixtures/irds): 25 train queries with a run (q37 has
    # qrels but no run and is left out), 8 candidates each, two of them judged relevant (the third
    # relevant document is not retrieved), scores descending.
    assert (len(splits.train), len(splits.dev), len(splits.test)) == (25, 5, 6)
    assert "q37" not in {q.qid for q in splits.train}
    for q in splits.train + splits.dev + splits.test:
        assert len(q.candidates) == 8 and len(q.positives) == 2
        scores = [c.score for c in q.candidates]
        assert scores == sorted(scores, reverse=True)
    # A tie keeps the run file's order (q04: two documents share a score).
    q04 = next(q for q in splits.train if q.qid == "q04")
    run = [line.split()[2] for line in (Path(REGISTER).parent / "train.run").read_text().splitlines()
           if line.startswith("q04 ")]
    tied = [c.doc_id for c in q04.candidates if [x.score for x in q04.candidates].count(c.score) > 1]
    assert len(tied) == 2 and tied == sorted(tied, key=run.index)


def test_fingerprints_and_depth() -> None:
    a, b = read_irds(_cfg()), load_splits(_cfg())
    assert a.fingerprint == b.fingerprint and a.evaluation == b.evaluation
    top3 = read_irds(_cfg(depth=3))
    assert top3.evaluation != a.evaluation
    assert _as_dict(top3.dev) == _expected("harness-fixture/dev", depth=3)
    assert all(len(q.candidates) == 3 for q in top3.test)


def test_one_id_with_the_split_rule() -> None:
    cfg = _cfg(irds_id="harness-fixture/all")
    splits = read_irds(cfg)
    qids = {name: [q.qid for q in splits.split(name)] for name in ("train", "dev", "test")}
    assert [len(v) for v in qids.values()] == [28, 4, 4]  # 36 queries with a run, 10% dev and test
    assert sorted(q for v in qids.values() for q in v) == sorted(_expected("harness-fixture/all"))
    whole = _expected("harness-fixture/all")
    for name in ("train", "dev", "test"):
        assert _as_dict(splits.split(name)) == {q: whole[q] for q in qids[name]}
    assert read_irds(cfg).split("test") == splits.test
    other = read_irds(dataclasses.replace(cfg, split_seed=14))
    assert [q.qid for q in other.test] != qids["test"] and other.fingerprint != splits.fingerprint


def test_irds_trains_only_on_its_own_candidates() -> None:
    with pytest.raises(ConfigError, match=r"^train.sampler must be dataset for data.source=irds \(its "
                       r"first-stage run \(scoreddocs\) brings the candidates\), got 'random'$"):
        TrialConfig.from_flat({"data.source": "irds", "data.irds_id": "x", "train.sampler": "random"})
    with pytest.raises(ConfigError, match=r"^data.irds_id must be set for data.source=irds"):
        DataConfig(source="irds")


def test_unknown_id_is_one_line_naming_close_ids(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["data", "build", "--source", "irds", "--irds-id", "harness-fixture/tran",
               "--irds-register", REGISTER])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("harness: error: data.irds_id: unknown ir_datasets id 'harness-fixture/tran' "
                          "(did you mean harness-fixture/train")
    register_local(REGISTER)
    with pytest.raises(ConfigError, match=r"unknown ir_datasets id 'msmarco-pasage/dev/small' \(did you "
                       r"mean msmarco-passage/dev/small"):
        check_data(DataConfig(source="irds", irds_id="msmarco-pasage/dev/small"))


@pytest.mark.parametrize("body, why", [("import sys\nsys.exit('boom')\n", "SystemExit: boom"),
                                       ("raise RuntimeError('no corpus here')\n", "RuntimeError: no corpus here")])
def test_a_register_file_that_fails_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str,
                                                why: str) -> None:
    """The register file is the user's code: an exception in it is one line naming the file; a
    sys.exit() in it ended the command with its message and no harness line."""
    register = tmp_path / "register.py"
    register.write_text(body)
    rc = main(["data", "build", "--source", "irds", "--irds-id", "x/y", "--irds-register", str(register)])
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"harness: error: data.irds_register: {register} failed: {why}"]


@pytest.mark.slow
def test_a_set_that_needs_a_download_says_so_in_one_line(tmp_path: Path) -> None:
    """A real id with an empty ir_datasets home: its files are not here, and every connection is
    refused (proxies pointed at a closed local port), whatever network this machine has."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("no_proxy", "all_proxy")}
    env.update(IR_DATASETS_HOME=str(tmp_path / "irds-home"), HTTPS_PROXY="http://127.0.0.1:9",
               HTTP_PROXY="http://127.0.0.1:9", https_proxy="http://127.0.0.1:9",
               http_proxy="http://127.0.0.1:9", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "data", "build", "--source", "irds",
                           "--irds-id", "msmarco-passage/dev/small"],
                          check=False, capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("harness: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr and "[INFO]" not in proc.stderr, proc.stderr
    assert errors[0].startswith("harness: error: data.irds_id=msmarco-passage/dev/small: its queries need "
                                "a download of https://")
    assert "the network is not reachable" in errors[0] and str(tmp_path / "irds-home") in errors[0]


@pytest.mark.slow  # ~50 s here, most of it MLflow's SQLite store
def test_harness_train_on_the_irds_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    sets = {"data.source": "irds", "data.irds_id": IDS, "data.irds_register": REGISTER,
            "model.name": "tiny", "model.max_length": 32, "train.steps": 4, "train.batch_size": 8,
            "train.eval_every": 2, "train.device": "cpu", "train.warmup": 0.0, "train.bf16": False}
    argv = ["train", "--seed", "1", "--tracking-uri", uri, "--experiment", "irds"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("test (best dev step ")

    from harness.tracking import conventions as C
    from harness.tracking.store import TrackingStore

    store = TrackingStore(uri)
    exp_id = store.client.get_experiment_by_name("irds").experiment_id
    (run,) = store.client.search_runs([exp_id], filter_string=f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")
    expected = read_irds(_cfg())
    assert run.info.status == "FINISHED"
    assert run.data.tags[C.TAG_EVAL_FINGERPRINT] == expected.evaluation
    assert run.data.params["data.source"] == "irds" and run.data.params["data.irds_id"] == IDS
    rows = list(csv.DictReader(io.StringIO(store.download_text(run.info.run_id, C.PER_QUERY_ARTIFACT))))
    assert {r[C.PER_QUERY_COLUMNS[0]] for r in rows} == {q.qid for q in expected.test}
    assert 0.0 <= run.data.metrics[f"{C.TEST_PREFIX}map"] <= 1.0
