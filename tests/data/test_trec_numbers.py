"""The TREC reader takes the numbers of its files as TREC tools write them, plain ASCII decimals:
Python's int() and float() also read "1_0" (a digit separator) and full-width digits ("１０"), which
the reader took as a rank of 10 or a grade of 1, where docs/data.md promises an error naming
FILE:LINE (and the long-CSV reader refuses them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.data._readers import read_trec
from harness.errors import DataError
from tests.data.test_readers import _trec

PLAIN = "; write plain ASCII digits (0-9), without separators"


@pytest.mark.parametrize(("name", "text", "message"), [
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 1_0 3.5 t\n", f"train.run:2: rank (column 4) must be an integer, got '1_0'{PLAIN}"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 １０ 3.5 t\n", f"train.run:2: rank (column 4) must be an integer, got '１０'{PLAIN}"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 1_0.5 t\n",
     f"train.run:2: score (column 5) must be a finite number, got '1_0.5'{PLAIN}"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 １０.5 t\n",
     f"train.run:2: score (column 5) must be a finite number, got '１０.5'{PLAIN}"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 0x1p3 t\n",
     f"train.run:2: score (column 5) must be a finite number, got '0x1p3'{PLAIN}"),
    ("train.run", "q1 Q0 d1 1 7 t\nq1 Q0 d2 2 infinity t\n",
     "train.run:2: score (column 5) must be a finite number, got 'infinity'"),
    ("train.qrels", "q1 0 d1 2\nq1 0 d2 １\n", f"train.qrels:2: rel (column 4) must be an integer, got '１'{PLAIN}"),
    ("train.qrels", "q1 0 d1 2\nq1 0 d2 ²\n", f"train.qrels:2: rel (column 4) must be an integer, got '²'{PLAIN}"),
])
def test_a_number_not_in_ascii_decimals_is_refused_naming_file_line_and_field(
        tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(DataError) as err:
        read_trec(_trec(tmp_path, **{name: text}))
    assert str(err.value) == f"{tmp_path / 'trec' / name}:{message[message.index(':') + 1:]}"


def test_plain_decimals_still_read(tmp_path: Path) -> None:
    splits = read_trec(_trec(tmp_path, **{"train.run": "q1 Q0 d1 +1 -7.5e0 t\nq1 Q0 d2 02 .5 t\nq2 Q0 d2 1 4. t\n",
                                          "train.qrels": "q1 0 d1 +2\nq1 0 d2 -1\nq2 0 d2 1\n"}))
    q1 = splits.train[0]
    assert [(c.doc_id, c.score, c.label) for c in q1.candidates] == [("d1", -7.5, 1), ("d2", 0.5, 0)]
    assert splits.train[1].candidates[0].score == 4.0


def test_data_stats_refuses_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _trec(tmp_path, **{"dev.run": "q3 Q0 d3 1 2.0 t\nq3 Q0 d4 2 1_0 t\n"})
    assert main(["data", "stats", "--source", "trec", "--path", str(d)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines()[-1] == (
        f"harness: error: {d / 'dev.run'}:2: score (column 5) must be a finite number, got '1_0'{PLAIN}")
    assert "Traceback" not in err
