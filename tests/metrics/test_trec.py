"""TREC run files and qrels: ir_measures (pytrec_eval underneath) on the written files gives exactly
the harness's per-query values, ties included; the files read back; bad input fails in one line."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import ir_measures
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.errors import DataError
from harness.metrics.measures import MEASURES, evaluate
from harness.metrics.trec import (
    format_qrels,
    format_run,
    qrels_artifacts,
    ranked_lines,
    read_qrels,
    read_run,
    run_file_artifacts,
    run_tag,
    write_qrels,
    write_run,
)
from tests.metrics.test_metrics import QRELS, RUN


def _ir_measures(qrels_file: str | io.StringIO, run_file: str | io.StringIO) -> dict[str, dict[str, float]]:
    """Per-query values {harness metric: {qid: value}} that ir_measures computes from the files."""
    names = {m: k for k, m in MEASURES.items()}
    out: dict[str, dict[str, float]] = {k: {} for k in MEASURES}
    for r in ir_measures.iter_calc(list(MEASURES.values()), ir_measures.read_trec_qrels(qrels_file),
                                   ir_measures.read_trec_run(run_file)):
        out[names[r.measure]][r.query_id] = r.value
    return out


def test_tied_fixture_reproduced_exactly_from_files(tmp_path: Path) -> None:
    run_path = write_run(tmp_path / "run.trec", RUN, QRELS, "fixture.seed1")
    qrels_path = write_qrels(tmp_path / "fixture.qrels", QRELS)
    harness = evaluate(QRELS, RUN).per_query
    files = _ir_measures(str(qrels_path), str(run_path))
    for metric in MEASURES:
        for qid in harness[metric]:
            if qid in RUN:  # the harness also scores the query absent from the run (0, as trec_eval -c)
                assert files[metric][qid] == harness[metric][qid], (metric, qid)
    # The fixture's ties matter: the raw scores (tied) give other values under trec_eval's own rule.
    raw = "".join(f"{q} Q0 {d} 0 {s!r} raw\n" for q, docs in RUN.items() for d, s in docs.items())
    naive = _ir_measures(io.StringIO(qrels_path.read_text()), io.StringIO(raw))
    assert naive["map"]["all_tied"] != harness["map"]["all_tied"]
    assert naive["ndcg_10"]["graded"] != harness["ndcg_10"]["graded"]


def test_run_file_lines(tmp_path: Path) -> None:
    text = format_run(RUN, QRELS, "t")
    tie = [line.split() for line in text.splitlines() if line.startswith("tie ")]
    # the harness's order: c (0.9), then the tie a/b with the non-relevant b first, then d
    assert [(r[2], r[3]) for r in tie] == [("c", "1"), ("b", "2"), ("a", "3"), ("d", "4")]
    assert all(r[1] == "Q0" and r[5] == "t" and len(r) == 6 for r in tie)
    scores = {r[2]: float(r[4]) for r in tie}
    assert scores["c"] == np.float32(0.9) and scores["b"] == 0.5 and scores["d"] == np.float32(0.1)
    assert scores["a"] == np.nextafter(np.float32(0.5), np.float32(0))  # one float32 step below b
    # strictly decreasing in float32 within every query; the run's query order is kept
    for qid in RUN:
        column = [np.float32(line.split()[4]) for line in text.splitlines() if line.split()[0] == qid]
        assert all(a > b for a, b in itertools.pairwise(column)), qid
    # queries in the qrels' order (ir_measures averages in file order: metrics.mean_of), then the rest
    backwards = dict(reversed(list(RUN.items())))
    text = format_run(backwards, QRELS, "t")
    assert list(dict.fromkeys(line.split()[0] for line in text.splitlines())) == \
        [q for q in QRELS if q in RUN] + ["unjudged_query"]
    back = read_run(write_run(tmp_path / "r.trec", RUN, QRELS, "t"))
    assert {q: set(d) for q, d in back.items()} == {q: set(d) for q, d in RUN.items()}
    assert read_qrels(write_qrels(tmp_path / "q.qrels", QRELS)) == QRELS
    assert format_qrels({"q1": {"a": 1, "b": 0}}) == "q1 0 a 1\nq1 0 b 0\n"


def test_model_scores_in_float32_are_kept_exactly(tmp_path: Path) -> None:
    g = np.random.default_rng(3)
    scores = g.normal(size=50).astype(np.float32)
    run = {"q": {f"d{i}": float(s) for i, s in enumerate(scores)}}
    qrels = {"q": {f"d{i}": int(i % 7 == 0) for i in range(50)}}
    written = {d: s for _, d, _, s in ranked_lines(run, qrels)}
    assert all(written[f"d{i}"] == scores[i] for i in range(50))  # no tie: every score as it was
    back = read_run(write_run(tmp_path / "r.trec", run, qrels, "t"))["q"]
    assert {d: np.float32(v) for d, v in back.items()} == written  # read back to the same float32


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from([0.0, 0.25, 1.0, 1.0 + 1e-9, 1.0 + 1e-7, -2.0]),
                                   st.integers(0, 2)), min_size=1, max_size=12),
                min_size=1, max_size=5))
def test_any_ties_reproduced_exactly(queries: list[list[tuple[float, int]]]) -> None:
    """Scores drawn from a handful of values (exact ties, and doubles closer than one float32 step,
    which pytrec_eval reads as ties), graded labels: every per-query value matches."""
    qrels = {f"q{j}": {f"d{i}": label for i, (_, label) in enumerate(docs)} for j, docs in enumerate(queries)}
    run = {f"q{j}": {f"d{i}": score for i, (score, _) in enumerate(docs)} for j, docs in enumerate(queries)}
    harness = evaluate(qrels, run).per_query
    files = _ir_measures(io.StringIO(format_qrels(qrels)), io.StringIO(format_run(run, qrels, "t")))
    for metric in MEASURES:
        for qid, value in harness[metric].items():
            assert files[metric].get(qid, 0.0) == value, (metric, qid)


def test_artifact_folders(tmp_path: Path) -> None:
    runs = {"dev": {"q": {"a": 1.0, "b": 1.0}}, "test": RUN}
    qrels = {"dev": {"q": {"a": 1, "b": 0}}, "test": QRELS}
    written = run_file_artifacts(tmp_path, runs=runs, qrels=qrels, tag=run_tag("root 2", 7))
    assert written == [tmp_path / "runs" / "dev.trec", tmp_path / "runs" / "test.trec"]
    assert (tmp_path / "runs" / "dev.trec").read_text() == "q Q0 b 1 1.0 root_2.seed7\nq Q0 a 2 0.99999994 root_2.seed7\n"
    assert qrels_artifacts(tmp_path, qrels) == [tmp_path / "qrels" / "dev.qrels", tmp_path / "qrels" / "test.qrels"]
    assert read_qrels(tmp_path / "qrels" / "test.qrels") == QRELS


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: run_file_artifacts(p, runs={"train": RUN}, qrels={"train": QRELS}, tag="t"),
     "runs: unknown split 'train'; valid: dev, test"),
    (lambda p: run_file_artifacts(p, runs={"test": RUN}, qrels={"dev": QRELS}, tag="t"),
     "no qrels for split 'test'"),
    (lambda p: qrels_artifacts(p, {}), "qrels: no split given"),
    (lambda p: format_run({"q 1": {"a": 1.0}}, {}, "t"), "query id 'q 1' cannot be a TREC field"),
    (lambda p: format_run({"q": {"a": 1.0}}, {}, "my tag"), "run tag 'my tag' cannot be a TREC field"),
    (lambda p: format_run({"q": {"": 1.0}}, {}, "t"), "document id of query 'q' '' cannot be"),
    (lambda p: format_run({"q": {"a": float("nan")}}, {}, "t"), "score of document 'a' of query 'q' is nan"),
    (lambda p: format_run({"q": {"a": 1e300}}, {}, "t"), "not a finite single-precision number"),
])
def test_write_errors(tmp_path: Path, call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        call(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("text", "reader", "message"), [
    ("q Q0 a 1 0.5\n", read_run, "r.txt:1: expected 6 columns (qid Q0 docno rank score tag), found 5"),
    ("q Q0 a 1 0.5 t\n\nq Q0 a 2 0.4 t\n", read_run, "r.txt:3: document 'a' appears twice for query 'q'"),
    ("q Q0 a 1 high t\n", read_run, "r.txt:1: rank '1' or score 'high' is not a number"),
    ("q Q0 a 1 inf t\n", read_run, "r.txt:1: score 'inf' is not finite"),
    ("q 0 a yes\n", read_qrels, "r.txt:1: label 'yes' is not an integer"),
    ("q 0 a\n", read_qrels, "r.txt:1: expected 4 columns (qid iteration docno label), found 3"),
])
def test_read_errors(tmp_path: Path, text: str, reader, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "r.txt"
    path.write_text(text)
    with pytest.raises(DataError) as err:
        reader(path)
    assert str(err.value) == f"{tmp_path}/{message}"
    with pytest.raises(DataError, match="no such file"):
        reader(tmp_path / "absent.trec")
    path.write_bytes(b"q 0 \xff 1\n")
    with pytest.raises(DataError, match="not UTF-8"):
        reader(path)


def test_ties_at_zero_step_through_normal_numbers_only() -> None:
    run = {"q": {f"d{i}": 0.0 for i in range(4)} | {"tiny": 1e-41, "neg": -1e-41}}
    qrels = {"q": {"d3": 1}}
    written = [s for *_, s in ranked_lines(run, qrels)]
    tiny = np.finfo(np.float32).tiny
    assert all(s == 0 or abs(s) >= tiny for s in written)  # no subnormal
    assert all(a > b for a, b in itertools.pairwise(written))
    assert [d for _, d, _, _ in ranked_lines(run, qrels)] == ["tiny", "d0", "d1", "d2", "d3", "neg"]
    files = _ir_measures(io.StringIO(format_qrels(qrels)), io.StringIO(format_run(run, qrels, "t")))
    assert files["mrr"]["q"] == evaluate(qrels, run).per_query["mrr"]["q"] == 1 / 5
