"""MSDialog/MANtIS TSV and TREC-style readers: records from fixtures, and errors naming FILE:LINE."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import DataConfig
from harness.data._readers import read_msdialog, read_trec
from harness.data.load import load_splits
from harness.errors import DataError
from harness.records import Candidate, Query

TRAIN_TSV = (
    "1\thow do I reset outlook\tdid you try safe mode\tyes that worked\n"
    "0\thow do I reset outlook\tdid you try safe mode\tupdate your drivers\n"
    "0\thow do I reset outlook\tdid you try safe mode\treboot twice\n"
    "\n"
    "1\tmy excel crashes\topen it in safe mode\n"
    "0\tmy excel crashes\tcheck the fan\n"
)
SMALL_TSV = "1\tq\tr\n0\tq\tn\n"


def _msdialog(tmp_path: Path, train: str = TRAIN_TSV, dev_name: str = "valid.tsv") -> Path:
    d = tmp_path / "msd"
    d.mkdir(parents=True, exist_ok=True)
    (d / "train.tsv").write_text(train, encoding="utf-8")
    (d / dev_name).write_text(SMALL_TSV, encoding="utf-8")
    (d / "test.tsv").write_text(SMALL_TSV + SMALL_TSV, encoding="utf-8")
    return d


def test_msdialog_records(tmp_path: Path) -> None:
    splits = read_msdialog(_msdialog(tmp_path))
    assert splits.train == (
        Query(qid="train-0", group="train-0",
              context=("how do I reset outlook", "did you try safe mode"),
              candidates=(Candidate("train-0-0", "yes that worked", 1),
                          Candidate("train-0-1", "update your drivers", 0),
                          Candidate("train-0-2", "reboot twice", 0))),
        Query(qid="train-1", group="train-1", context=("my excel crashes",),
              candidates=(Candidate("train-1-0", "open it in safe mode", 1),
                          Candidate("train-1-1", "check the fan", 0))),
    )
    assert [q.qid for q in splits.test] == ["test-0", "test-1"]
    assert len(splits.fingerprint) == 64
    assert read_msdialog(_msdialog(tmp_path / "b", dev_name="dev.tsv")).dev == splits.dev


@pytest.mark.parametrize(("line3", "message"), [
    ("0\thow do I reset outlook", (r"train.tsv:3: expected label, context utterance\(s\) and "
     r"response separated by tabs \(3 or more columns\), got 2 column\(s\)")),
    ("x\thow do I reset outlook\tdid you try safe mode\tr", (r"train.tsv:3: the label \(column 1\) "
     r"must be an integer, got 'x'")),
    ("2\thow do I reset outlook\tdid you try safe mode\tr", r"train.tsv:3: the label .* must be 0 or 1"),
    ("0\thow do I reset outlook\tsomething else\tr", (r"train.tsv:3: the context differs from that of "
     r"its group's positive at line 1")),
])
def test_msdialog_errors_name_the_line(tmp_path: Path, line3: str, message: str) -> None:
    lines = TRAIN_TSV.splitlines()
    lines[2] = line3
    with pytest.raises(DataError, match=message):
        read_msdialog(_msdialog(tmp_path, train="\n".join(lines) + "\n"))


def test_msdialog_group_must_start_with_a_positive_and_files_must_exist(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"train.tsv:1: a group of candidates must start with its "
                                        r"positive \(label 1\) line"):
        read_msdialog(_msdialog(tmp_path, train="0\tq\tr\n1\tq\tr\n"))
    d = _msdialog(tmp_path / "m")
    (d / "valid.tsv").unlink()
    with pytest.raises(DataError, match=r"missing valid.tsv or dev.tsv"):
        read_msdialog(d)
    with pytest.raises(DataError, match="no such directory"):
        read_msdialog(tmp_path / "absent")


DOCS = "d1\tthe cat sat\nd2\ta dog ran\nd3\tbirds fly\nd4\tfish swim\n"
FILES = {
    "train.queries.tsv": "q1\tcats\nq2\tdogs\nq9\tnever retrieved\n",
    "train.qrels": "q1 0 d1 2\nq1 0 d2 0\nq2 0 d2 1\n",
    "train.run": "q1 Q0 d2 2 3.5 bm25\nq1 Q0 d1 1 7.25 bm25\nq1 Q0 d3 3 1 bm25\nq2 Q0 d2 1 4 bm25\n",
    "dev.queries.tsv": "q3\tbirds\n",
    "dev.qrels": "q3 0 d3 1\n",
    "dev.run": "q3 Q0 d3 1 2.0 t\nq3 Q0 d4 2 1.0 t\n",
    "test.queries.tsv": "q4\tfish\n",
    "test.qrels": "q4 0 d4 1\n",
    "test.run": "q4 Q0 d4 1 9 t\n",
}


def _trec(tmp_path: Path, **overrides: str) -> Path:
    d = tmp_path / "trec"
    d.mkdir(parents=True, exist_ok=True)
    (d / "docs.tsv").write_text(overrides.pop("docs.tsv", DOCS), encoding="utf-8")
    for name, text in {**FILES, **overrides}.items():
        (d / name).write_text(text, encoding="utf-8")
    return d


def test_trec_records(tmp_path: Path) -> None:
    splits = read_trec(_trec(tmp_path))
    assert splits.train == (
        Query(qid="q1", group="q1", context=("cats",), candidates=(
            Candidate("d1", "the cat sat", 1, 7.25), Candidate("d2", "a dog ran", 0, 3.5),
            Candidate("d3", "birds fly", 0, 1.0))),
        Query(qid="q2", group="q2", context=("dogs",), candidates=(Candidate("d2", "a dog ran", 1, 4.0),)),
    )
    assert [c.label for c in splits.dev[0].candidates] == [1, 0]
    assert splits.test[0].candidates == (Candidate("d4", "fish swim", 1, 9.0),)
    loaded = load_splits(DataConfig(source="trec", path=str(_trec(tmp_path)), max_train_queries=1))
    assert len(loaded.train) == 1 and loaded.dev == splits.dev


@pytest.mark.parametrize(("name", "text", "message"), [
    ("docs.tsv", "d1\tthe cat sat\nd2 a dog ran\n", (r"docs.tsv:2: expected 2 tab-separated columns "
     r"\(docid, text\), got 1")),
    ("docs.tsv", "d1\tthe cat sat\nd2\ta dog ran\nd1\tagain\nd3\tx\nd4\ty\n",
     r"docs.tsv:3: duplicate docid 'd1' \(first at line 1\)"),
    ("docs.tsv", "d1\tthe cat sat\nd2\ta dog ran\nd3\tbirds fly\n", r"dev.run:2: unknown docid 'd4'"),
    ("train.queries.tsv", "q1\tcats\nq1\tagain\n", r"train.queries.tsv:2: duplicate qid 'q1'"),
    ("train.qrels", "q1 0 d1 2\nq1 0 d2\n", r"train.qrels:2: expected 4 columns"),
    ("train.qrels", "q1 0 d1 2\nq1 0 d2 high\n", r"train.qrels:2: rel \(column 4\) must be an integer"),
    # a 5000-digit grade: "must be an integer" of an integer, all 5000 digits echoed
    ("train.qrels", "q1 0 d1 2\nq1 0 d2 " + "1" * 5000 + "\n",
     r"train.qrels:2: rel \(column 4\) must be an integer of at most 18 digits, got '1111111111.{0,80}' \(5000 digits\)$"),
    ("train.qrels", "q1 0 d1 2\nq7 0 d2 1\n", r"train.qrels:2: unknown qid 'q7'"),
    ("train.qrels", "q1 0 d1 2\nq1 0 d8 1\n", r"train.qrels:2: unknown docid 'd8'"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 3.5\n", r"train.run:2: expected 6 columns"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 second 3.5 t\n", (r"train.run:2: rank \(column 4\) must "
     r"be an integer, got 'second'")),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 nan t\n", (r"train.run:2: score \(column 5\) must be "
     r"a finite number")),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d1 2 3 t\n", r"train.run:2: duplicate document 'd1'"),
    ("test.queries.tsv", "q4\tfish\nq1\tcats\n", r"test.queries.tsv:2: qid 'q1' is also in the train"),
])
def test_trec_errors_name_the_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        read_trec(_trec(tmp_path, **{name: text}))


def test_trec_missing_files(tmp_path: Path) -> None:
    d = _trec(tmp_path)
    (d / "dev.qrels").rename(d / "valid.qrels")
    assert read_trec(d).dev[0].qid == "q3"  # valid is the dev split's other name
    (d / "test.run").unlink()
    with pytest.raises(DataError, match=r"missing test.run$"):
        read_trec(d)
    (d / "docs.tsv").unlink()
    with pytest.raises(DataError, match="missing docs.tsv"):
        read_trec(d)


def test_trec_empty_id(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"train.queries.tsv:2: empty qid$"):
        read_trec(_trec(tmp_path, **{"train.queries.tsv": "q1\tcats\n \tblank\n"}))


@pytest.mark.parametrize(("setting", "says"), [
    ("weighting.heuristic=recip", "weighting.heuristic=recip ranks each context's candidates by their first-stage"),
    ("smoothing.method=WSLS", "smoothing.method=WSLS reads the negative sampler's scores"),
])
def test_a_method_that_reads_scores_is_refused_on_data_without_them(tmp_path: Path, capsys, setting: str,
                                                                     says: str) -> None:
    """MSDialog's files carry no first-stage scores (docs/data.md): a weighting heuristic weighed
    every instance alike and trained the baseline's model (its test MAP equal to it), WSLS kept every
    negative's hard label, both exit 0 as if a method ran. Refused before any run is recorded; with
    scores the check passes."""
    from harness.cli import main
    from harness.config import TrialConfig
    from harness.training import check_scored

    d = _msdialog(tmp_path)
    rc = main(["train", "--no-mlflow", "--set", "data.source=msdialog", "--set", f"data.path={d}",
               "--set", "model.name=tiny", "--set", "train.steps=2", "--set", "train.batch_size=2", "--set", setting])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and says in err[-1] and err[-1].startswith("harness: error: "), err
    cfg = TrialConfig.from_flat({setting.split("=")[0]: setting.split("=")[1]})
    scored = Query(qid="q", context=("u",), candidates=(Candidate("p", "r", 1, 3.0), Candidate("n", "s", 0, 1.0)))
    check_scored([scored], cfg)
