"""Readers for external data: MSDialog/MANtIS TSV and TREC-style files, giving ``Splits``.

MSDialog/MANtIS (``read_msdialog``): a directory with ``train.tsv``, ``valid.tsv`` (or ``dev.tsv``)
and ``test.tsv``. Each line is ``label \\t utterance_1 \\t ... \\t utterance_k \\t response``; a group
of candidate lines for one context starts at its positive (label 1) line and runs to the next
positive; every line of a group repeats the context. Query ids are ``{split}-{n}`` (n counts the
groups of the file from 0), candidate ids ``{qid}-{j}`` (j = 0 for the positive), group = qid.
There are no first-stage scores (``Candidate.score`` is None): the BM25 reference MAP,
sigma_BM25, the difficulty heuristics and WSLS have no ranking to read.

TREC-style (``read_trec``): a directory with ``docs.tsv`` (``docid \\t text``) and, per split
(train, dev or valid, test), ``{split}.queries.tsv`` (``qid \\t text``), ``{split}.qrels``
(``qid 0 docid rel``) and ``{split}.run`` (``qid Q0 docid rank score tag``). A query's candidates
are its run's documents in rank order, their run scores in ``Candidate.score`` (the first stage);
the label is 1 where the qrels give rel > 0, else 0 (unjudged included). The context is the query
text alone; group = qid. Queries without run lines are left out.

A split left without a query (an empty queries file, or no run lines for its queries) is refused.

Contexts and candidates are taken as the files give them (``data.context_turns``, ``negatives``,
``protocol`` and ``depth`` shape the embedded set only; ``train.sampler`` must be ``dataset``).
A UTF-8 byte-order mark at the start of a file (spreadsheet programs write one) is dropped.
Numbers (labels, ranks, grades, scores) are plain ASCII decimals (``_NUMBER``).
Every problem raises ``DataError`` naming ``FILE:LINE`` and what is wrong, on one line.
``fingerprint`` of the result: sha256 of the format, ``BUILD_VERSION`` and the files' bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.data.cache import file_digest, fingerprint
from harness.errors import DataError, shown
from harness.records import Candidate, Query, Splits

SPLITS = ("train", "dev", "test")
_DEV_NAMES = ("valid", "dev")
# Numbers as the files' formats write them, ASCII digits only: int() and float() also read "1_0"
# (Python's digit separator) and full-width or other scripts' digits ("１０"), which no TREC tool
# writes. The long-CSV reader's rule (harness.results.longcsv.NUMBER), kept here rather than
# imported: that import would load the results package and ir_measures with every data read.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its line break) of the non-blank lines of ``path``; a
    UTF-8 byte-order mark (as spreadsheet programs write one) is not part of the first line."""
    try:
        with open(path, "rb") as fh:  # decoded line by line, so an error names its line
            for n, raw in enumerate(fh, start=1):
                if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as exc:
                    raise DataError(f"{path}:{n}: not UTF-8 text (byte {exc.start + 1} of the line: "
                                    f"{exc.reason}); save it as UTF-8") from None
                if line.strip():
                    yield n, line
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _directory(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise DataError(f"{path}: no such directory (data.path of a {what} data set)")
    return path


def _split_file(directory: Path, split: str, pattern: str) -> Path:
    """The file of ``split`` (``pattern`` formats the split's name); dev may be named valid."""
    names = _DEV_NAMES if split == "dev" else (split,)
    for name in names:
        candidate = directory / pattern.format(name)
        if candidate.is_file():
            return candidate
    wanted = " or ".join(pattern.format(n) for n in names)
    raise DataError(f"{directory}: missing {wanted}")


def _plain(text: str) -> str:
    """What a refusal of ``text`` adds where it has digits ("1_0", "１０"; Python would read both):
    why it is refused all the same."""
    return "; write plain ASCII digits (0-9), without separators" if any(ch.isdigit() for ch in text) else ""


def _int(text: str, where: str, what: str) -> int:
    """``text`` as an int of at most 18 ASCII digits (a relevance grade, a rank); else one line with
    the text abbreviated (a 5000-digit value was called no integer and echoed whole)."""
    if not _INTEGER.fullmatch(text.strip()):
        raise DataError(f"{where}: {what} must be an integer, got {shown(text)}{_plain(text)}")
    digits = text.strip().lstrip("+-")
    if len(digits) > 18:
        raise DataError(f"{where}: {what} must be an integer of at most 18 digits, got {shown(text)} "
                        f"({len(digits)} digits)")
    return int(text)


# --- MSDialog / MANtIS ------------------------------------------------------------------------


def read_msdialog_file(path: Path, split: str) -> tuple[Query, ...]:
    """The queries of one MSDialog/MANtIS TSV file (see the module docstring)."""
    groups: list[tuple[int, tuple[str, ...], list[tuple[str, int]]]] = []
    for n, line in _lines(path):
        where = f"{path}:{n}"
        cols = line.split("\t")
        if len(cols) < 3:
            raise DataError(f"{where}: expected label, context utterance(s) and response separated "
                            f"by tabs (3 or more columns), got {len(cols)} column(s)")
        label = _int(cols[0], where, "the label (column 1)")
        if label not in (0, 1):
            raise DataError(f"{where}: the label (column 1) must be 0 or 1, got {label}")
        context, response = tuple(cols[1:-1]), cols[-1]
        if label == 1:
            groups.append((n, context, [(response, 1)]))
            continue
        if not groups:
            raise DataError(f"{where}: a group of candidates must start with its positive "
                            f"(label 1) line; this label-0 line comes before any positive")
        start, group_context, candidates = groups[-1]
        if context != group_context:
            raise DataError(f"{where}: the context differs from that of its group's positive "
                            f"at line {start}")
        candidates.append((response, 0))
    if not groups:
        raise DataError(f"{path}: no candidate lines")
    queries = []
    for i, (_, context, candidates) in enumerate(groups):
        qid = f"{split}-{i}"
        queries.append(Query(qid=qid, context=context, group=qid, candidates=tuple(
            Candidate(doc_id=f"{qid}-{j}", text=text, label=label)
            for j, (text, label) in enumerate(candidates))))
    return tuple(queries)


def read_msdialog(directory: Path) -> Splits:
    """Train/dev/test of an MSDialog/MANtIS directory."""
    directory = _directory(Path(directory), "msdialog")
    files = {split: _split_file(directory, split, "{}.tsv") for split in SPLITS}
    parts = {split: read_msdialog_file(path, split) for split, path in files.items()}
    fp = fingerprint({"source": "msdialog"}, [file_digest(files[s]) for s in SPLITS])
    return Splits(train=parts["train"], dev=parts["dev"], test=parts["test"], fingerprint=fp)


# --- TREC-style -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RunLine:
    where: str
    docid: str
    rank: int
    score: float


def _id_and_text(line: str, where: str, what: str) -> tuple[str, str]:
    cols = line.split("\t")
    if len(cols) != 2:
        raise DataError(f"{where}: expected 2 tab-separated columns ({what}, text), "
                        f"got {len(cols)} column(s)")
    if not cols[0].strip():
        raise DataError(f"{where}: empty {what}")
    return cols[0].strip(), cols[1]


def _read_pairs(path: Path, what: str) -> dict[str, tuple[str, int]]:
    """``id \\t text`` lines -> {id: (text, line number)}, refusing duplicates."""
    out: dict[str, tuple[str, int]] = {}
    for n, line in _lines(path):
        key, text = _id_and_text(line, f"{path}:{n}", what)
        if key in out:
            raise DataError(f"{path}:{n}: duplicate {what} {key!r} (first at line {out[key][1]})")
        out[key] = (text, n)
    return out


def _read_qrels(path: Path, qids: dict[str, tuple[str, int]]) -> dict[tuple[str, str], tuple[int, str]]:
    """{(qid, docid): (rel, FILE:LINE)}."""
    out: dict[tuple[str, str], tuple[int, str]] = {}
    for n, line in _lines(path):
        where = f"{path}:{n}"
        cols = line.split()
        if len(cols) != 4:
            raise DataError(f"{where}: expected 4 columns (qid 0 docid rel), got {len(cols)}")
        qid, _, docid, rel = cols
        if qid not in qids:
            raise DataError(f"{where}: unknown qid {qid!r} (not in the split's queries file)")
        if (qid, docid) in out:
            raise DataError(f"{where}: duplicate judgement of {docid!r} for query {qid!r}")
        out[(qid, docid)] = (_int(rel, where, "rel (column 4)"), where)
    return out


def _read_run(path: Path, qids: dict[str, tuple[str, int]]) -> dict[str, list[_RunLine]]:
    out: dict[str, list[_RunLine]] = {}
    seen: set[tuple[str, str]] = set()
    for n, line in _lines(path):
        where = f"{path}:{n}"
        cols = line.split()
        if len(cols) != 6:
            raise DataError(f"{where}: expected 6 columns (qid Q0 docid rank score tag), got {len(cols)}")
        qid, _, docid, rank, score, _ = cols
        if qid not in qids:
            raise DataError(f"{where}: unknown qid {qid!r} (not in the split's queries file)")
        if (qid, docid) in seen:
            raise DataError(f"{where}: duplicate document {docid!r} for query {qid!r}")
        seen.add((qid, docid))
        decimal = _NUMBER.fullmatch(score) is not None
        value = float(score) if decimal else math.nan
        if not math.isfinite(value):  # "nan", "inf", "1e999"; "1_0.5" and "１０.5" are no decimals
            raise DataError(f"{where}: score (column 5) must be a finite number, got "
                            f"{shown(score)}{'' if decimal else _plain(score)}")
        out.setdefault(qid, []).append(_RunLine(where, docid, _int(rank, where, "rank (column 4)"), value))
    return out


def _read_docs(path: Path, wanted: dict[str, str]) -> dict[str, str]:
    """Texts of the ``wanted`` docids ({docid: first FILE:LINE referring to it}); only those are kept,
    so a large collection costs the memory of the documents the runs name."""
    texts: dict[str, str] = {}
    first: dict[str, int] = {}
    for n, line in _lines(path):
        docid, text = _id_and_text(line, f"{path}:{n}", "docid")
        if docid in wanted:
            if docid in first:
                raise DataError(f"{path}:{n}: duplicate docid {docid!r} (first at line {first[docid]})")
            first[docid] = n
            texts[docid] = text
    for docid, where in wanted.items():
        if docid not in texts:
            raise DataError(f"{where}: unknown docid {docid!r} (not in {path.name})")
    return texts


def read_trec(directory: Path) -> Splits:
    """Train/dev/test of a TREC-style directory (see the module docstring)."""
    directory = _directory(Path(directory), "trec")
    docs_path = directory / "docs.tsv"
    if docs_path.is_dir():
        raise DataError(f"{docs_path}: is a directory; a trec source needs the file docs.tsv")
    if not docs_path.is_file():
        raise DataError(f"{directory}: missing docs.tsv")
    files = {split: tuple(_split_file(directory, split, p)
                          for p in ("{}.queries.tsv", "{}.qrels", "{}.run")) for split in SPLITS}
    parsed = {}
    wanted: dict[str, str] = {}
    owner: dict[str, str] = {}
    for split, (queries_path, qrels_path, run_path) in files.items():
        queries = _read_pairs(queries_path, "qid")
        for qid, (_, n) in queries.items():
            if qid in owner:
                raise DataError(f"{queries_path}:{n}: qid {qid!r} is also in the {owner[qid]} split")
            owner[qid] = split
        qrels = _read_qrels(qrels_path, queries)
        run = _read_run(run_path, queries)
        for (_, docid), (_, where) in qrels.items():
            wanted.setdefault(docid, where)
        for lines in run.values():
            for rl in lines:
                wanted.setdefault(rl.docid, rl.where)
        parsed[split] = (queries, qrels, run)
    texts = _read_docs(docs_path, wanted)

    parts = {}
    for split, (queries, qrels, run) in parsed.items():
        queries_path, _, run_path = files[split]
        # A split without a query would pass loading and fail in every trial instead.
        if not queries:
            raise DataError(f"{queries_path}: no queries; the {split} split must hold at least one")
        if not any(qid in run for qid in queries):
            raise DataError(f"{run_path}: no run lines for any of the {len(queries)} queries of "
                            f"{queries_path.name}; the {split} split would be empty")
        out = []
        for qid, (text, _) in queries.items():
            if qid not in run:
                continue
            ranked = sorted(run[qid], key=lambda rl: rl.rank)  # stable: file order within a rank
            out.append(Query(qid=qid, context=(text,), group=qid, candidates=tuple(
                Candidate(doc_id=rl.docid, text=texts[rl.docid], score=rl.score,
                          label=int(qrels.get((qid, rl.docid), (0, ""))[0] > 0))
                for rl in ranked)))
        parts[split] = tuple(out)
    digests = [file_digest(docs_path)] + [file_digest(p) for s in SPLITS for p in files[s]]
    fp = fingerprint({"source": "trec"}, digests)
    return Splits(train=parts["train"], dev=parts["dev"], test=parts["test"], fingerprint=fp)
