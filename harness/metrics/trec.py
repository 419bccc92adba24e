"""TREC run files and qrels, written so that trec_eval and ir_measures reproduce the harness's numbers.

Run file: one line per (query, document), ``qid Q0 docno rank score tag``, queries in the qrels'
order (then any the qrels lack, in the run's), each query's documents in the harness's rank order (``metrics.rank_order``: score
descending, then the less relevant document first (the pessimistic tie rule), then doc_id
ascending), rank counted from 1. trec_eval and ir_measures ignore the rank column and sort by score,
breaking ties by docno, which is not the harness's order; and trec_eval (pytrec_eval, ir_measures'
default backend) holds a score in single precision, so doubles one float32 step apart tie there. So
the score column is made strictly decreasing in float32 down that order: each score is the model's
own rounded to float32 (the precision a model computes in), except that one not below the score
written just above it (a tie) becomes the next float32 below that one, a change of a few units in
the last place (no score is left subnormal: ties at 0 step to -1.1754944e-38, then on). Each is written as the shortest decimal that reads back to its float32; such
decimals are strictly decreasing as doubles too. Evaluating the file with trec_eval, pytrec_eval or
ir_measures therefore ranks every query exactly as the harness did, and gives the harness's
per-query values.

Qrels file: ``qid 0 docno label``, one line per judged document, non-relevant ones included (the
harness judges every candidate of a query).

Artifacts (docs/exchange.md, "TREC run files and qrels"): every seed run holds ``runs/dev.trec`` and
``runs/test.trec`` for its best-dev checkpoint (``run_file_artifacts``), tagged with its
configuration and seed (``run_tag``); the study run holds ``qrels/dev.qrels`` and
``qrels/test.qrels`` (``qrels_artifacts``). Both functions write into a local folder that the
caller logs as it is (``MlflowClient.log_artifacts(run_id, folder)``).

>>> print(format_run({"q": {"a": 0.5, "b": 0.5, "c": 0.9}}, {"q": {"a": 1, "b": 0}}, "t"), end="")
q Q0 c 1 0.9 t
q Q0 b 2 0.5 t
q Q0 a 3 0.49999997 t
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import DataError
from harness.metrics.measures import Qrels, Run, rank_order

SPLITS = ("dev", "test")
RUN_ARTIFACT = "runs/{split}.trec"      # on every seed run
QRELS_ARTIFACT = "qrels/{split}.qrels"  # on the study run
RUN_COLUMNS = ("qid", "Q0", "docno", "rank", "score", "tag")
QRELS_COLUMNS = ("qid", "iteration", "docno", "label")

_SPACE = re.compile(r"\s")
_F32_MAX = float(np.finfo(np.float32).max)
_F32_INF = np.float32(np.inf)
_F32_TINY = np.finfo(np.float32).tiny  # the smallest normal float32


def run_tag(config: str, seed: int | str) -> str:
    """The run tag of a seed run: ``<config>.seed<seed>``, whitespace replaced by ``_`` (a TREC
    field has none).

    >>> run_tag("baseline (no CL)", 3)
    'baseline_(no_CL).seed3'
    """
    return _SPACE.sub("_", f"{config}.seed{seed}")


def ranked_lines(run: Run, qrels: Qrels) -> list[tuple[str, str, int, np.float32]]:
    """(qid, docno, rank, score) in file order (module docstring): the harness's rank order, float32
    scores strictly decreasing within each query. Documents without a judgement count as
    non-relevant."""
    lines: list[tuple[str, str, int, np.float32]] = []
    # The qrels' query order first (ir_measures then averages in the harness's order: mean_of).
    order = [q for q in qrels if q in run] + [q for q in run if q not in qrels]
    for qid in order:
        doc_scores = run[qid]
        q = _field(qid, "query id")
        judged = qrels.get(qid, qrels.get(q, {}))
        docs = [_field(d, f"document id of query {q!r}") for d in doc_scores]
        if len(set(docs)) != len(docs):
            raise DataError(f"query {q!r} names a document twice")
        scores = []
        for d, s in zip(docs, doc_scores.values(), strict=True):
            score = float(s)
            if not (math.isfinite(score) and abs(score) <= _F32_MAX):
                raise DataError(f"score of document {d!r} of query {q!r} is {score}: not a finite "
                                f"single-precision number")
            scores.append(score)
        labels = [int(judged.get(d, 0)) for d in docs]
        previous = _F32_INF
        for rank, i in enumerate(rank_order(docs, scores, labels), start=1):
            own = _normal(np.float32(scores[i]))
            score = own if own < previous else _normal(np.nextafter(previous, -_F32_INF))
            if not np.isfinite(score):
                raise DataError(f"query {q!r}: too many tied scores at the bottom of the float32 range")
            lines.append((q, docs[i], rank, score))
            previous = score
    return lines


def format_run(run: Run, qrels: Qrels, tag: str) -> str:
    """The run file's text (module docstring)."""
    tag = _field(tag, "run tag")
    # str() of a float32 is its shortest round-trip decimal (format() would widen it to a double).
    return "".join(f"{q} Q0 {d} {rank} {score!s} {tag}\n"
                   for q, d, rank, score in ranked_lines(run, qrels))


def format_qrels(qrels: Qrels) -> str:
    """The qrels file's text: ``qid 0 docno label`` per judged document, in the order given."""
    out = []
    for qid, docs in qrels.items():
        q = _field(qid, "query id")
        for doc, label in docs.items():
            out.append(f"{q} 0 {_field(doc, f'document id of query {q!r}')} {int(label)}\n")
    return "".join(out)


def write_run(path: str | Path, run: Run, qrels: Qrels, tag: str) -> Path:
    return _write(Path(path), format_run(run, qrels, tag))


def write_qrels(path: str | Path, qrels: Qrels) -> Path:
    return _write(Path(path), format_qrels(qrels))


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """{qid: {docno: score}} of a 6-column run file; errors name the file and line."""
    out: dict[str, dict[str, float]] = {}
    for where, (qid, _, doc, rank, score, _tag) in _rows(Path(path), len(RUN_COLUMNS), RUN_COLUMNS):
        try:
            value = float(score)
            int(rank)
        except ValueError:
            raise DataError(f"{where}: rank {rank!r} or score {score!r} is not a number") from None
        if not math.isfinite(value):
            raise DataError(f"{where}: score {score!r} is not finite")
        if doc in out.setdefault(qid, {}):
            raise DataError(f"{where}: document {doc!r} appears twice for query {qid!r}")
        out[qid][doc] = value
    return out


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """{qid: {docno: label}} of a 4-column qrels file; errors name the file and line."""
    out: dict[str, dict[str, int]] = {}
    for where, (qid, _, doc, label) in _rows(Path(path), len(QRELS_COLUMNS), QRELS_COLUMNS):
        try:
            value = int(label)
        except ValueError:
            raise DataError(f"{where}: label {label!r} is not an integer") from None
        if doc in out.setdefault(qid, {}):
            raise DataError(f"{where}: document {doc!r} appears twice for query {qid!r}")
        out[qid][doc] = value
    return out


def run_file_artifacts(folder: str | Path, *, runs: Mapping[str, Run], qrels: Mapping[str, Qrels],
                       tag: str) -> list[Path]:
    """Write a seed run's run files under ``folder``: ``runs/<split>.trec`` for each split of
    ``runs`` (dev and test; the scores of every candidate under its best-dev checkpoint,
    ``FinalRecord.runs``), ranked with that split's ``qrels`` (needed for the tie rule), tagged
    ``tag`` (``run_tag(config, seed)``). Returns the files written."""
    _check_splits(runs, "runs")
    missing = [s for s in runs if s not in qrels]
    if missing:
        raise DataError(f"no qrels for split {missing[0]!r}: the tie rule needs the labels")
    return [write_run(Path(folder) / RUN_ARTIFACT.format(split=s), runs[s], qrels[s], tag) for s in runs]


def qrels_artifacts(folder: str | Path, qrels: Mapping[str, Qrels]) -> list[Path]:
    """Write a study's judgements under ``folder``: ``qrels/<split>.qrels`` for each split of
    ``qrels`` (dev and test: ``{split: qrels_of(splits.<split>)}``). Returns the files written."""
    _check_splits(qrels, "qrels")
    return [write_qrels(Path(folder) / QRELS_ARTIFACT.format(split=s), qrels[s]) for s in qrels]


def split_qrels(splits: Any) -> dict[str, Qrels]:
    """{dev, test: qrels} of a data set's splits (harness.records.Splits)."""
    from harness.records import qrels_of

    return {"dev": qrels_of(splits.dev), "test": qrels_of(splits.test)}


def _check_splits(by_split: Mapping[str, object], what: str) -> None:
    unknown = [s for s in by_split if s not in SPLITS]
    if unknown:
        raise DataError(f"{what}: unknown split {unknown[0]!r}; valid: {', '.join(SPLITS)}")
    if not by_split:
        raise DataError(f"{what}: no split given; valid: {', '.join(SPLITS)}")


def _normal(x: np.float32) -> np.float32:
    """``x``, with a subnormal float32 moved to the next normal number or zero below it (a reader
    built to flush subnormals to zero would otherwise see ties): weakly increasing, so order is kept."""
    if 0 < abs(x) < _F32_TINY:
        return np.float32(0.0) if x > 0 else -_F32_TINY
    return x


def _field(value: object, what: str) -> str:
    text = str(value)
    if not text or _SPACE.search(text):
        raise DataError(f"{what} {text!r} cannot be a TREC field (empty or with whitespace)")
    return text


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _rows(path: Path, width: int, columns: tuple[str, ...]) -> Iterator[tuple[str, list[str]]]:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    for line_no, line in enumerate(lines, start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != width:
            raise DataError(f"{path}:{line_no}: expected {width} columns ({' '.join(columns)}), "
                            f"found {len(parts)}")
        yield f"{path}:{line_no}", parts
