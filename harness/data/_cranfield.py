"""Cranfield (``data.source: cranfield``): a preset over the TREC-style reader.

The shipped files (``harness/data/cranfield/``, gzip: ``cran.all.1400``, ``cran.qry``, ``cranqrel``
as the University of Glasgow IR group distributes them; docs/data.md, "Cranfield") are written out
as a TREC-style directory in a temporary folder, which ``harness.data._readers.read_trec`` then
reads, so every check and the fingerprint are the ``trec`` source's own:

- documents (``docs.tsv``): ``.I`` number -> title and abstract (``.T`` then ``.W``, as ir_datasets'
  ``default_text``), whitespace runs joined by one space;
- queries: numbered 1..225 in file order (the qrels number them so, not by their ``.I``), split by
  query into train/dev/test with ``split_groups`` (``data.split_seed``, ``data.dev_fraction``,
  ``data.test_fraction``), each query its own group;
- qrels: ``cranqrel``'s codes as they are (1-4 on Cleverdon's scale, and -1); the trec reader's
  rule (rel > 0) makes codes 1-4 relevant and -1 or unjudged not;
- run (the candidates): the top ``data.depth`` documents of the project's BM25
  (``harness.data._bm25``, k1 = 1.5, b = 0.75, over title and abstract) with a score > 0, best
  first, ties by document number.

>>> from harness.data.config import DataConfig
>>> splits = load_cranfield(DataConfig(source="cranfield", depth=20))
>>> sum(len(splits.split(s)) for s in ("train", "dev", "test")), len(splits.dev[0].candidates)
(225, 20)
"""

from __future__ import annotations

import gzip
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.data._progress import Progress
from harness.data._splits import SPLIT_NAMES, split_groups
from harness.data.config import DataConfig
from harness.errors import DataError
from harness.records import Splits

FILES = ("cran.all.1400.gz", "cran.qry.gz", "cranqrel.gz")
RUN_TAG = "bm25"


def shipped_dir() -> Path:
    """The folder of the shipped, gzip-compressed files."""
    return Path(__file__).resolve().parent / "cranfield"


@dataclass(frozen=True, slots=True)
class Collection:
    """The parsed collection: documents and queries in file order, qrels as given."""

    docs: tuple[tuple[str, str], ...]        # (docid, title and abstract)
    queries: tuple[tuple[str, str], ...]     # (qid 1..225, text)
    qrels: tuple[tuple[str, str, int], ...]  # (qid, docid, code)


def _read(name: str) -> list[str]:
    path = shipped_dir() / name
    try:
        with gzip.open(path, "rt", encoding="ascii") as fh:
            return fh.read().splitlines()
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the shipped Cranfield file ({exc}); reinstall harness") from None


def _records(lines: list[str]) -> Iterator[dict[str, str]]:
    """The ``.I`` records of a Cranfield file: {field letter: text}, the id under ``I``."""
    record: dict[str, list[str]] | None = None
    field = "I"
    for line in lines:
        if line.startswith(".I "):
            if record is not None:
                yield {k: " ".join(" ".join(v).split()) for k, v in record.items()}
            record, field = {"I": [line[3:]]}, "I"
        elif record is None:
            continue
        elif line.rstrip() in (".T", ".A", ".B", ".W"):
            field = line[1]
            record.setdefault(field, [])
        else:
            record.setdefault(field, []).append(line)
    if record is not None:
        yield {k: " ".join(" ".join(v).split()) for k, v in record.items()}


def read_collection() -> Collection:
    """The shipped files, parsed (see the module docstring)."""
    docs = tuple((r["I"], f"{r.get('T', '')} {r.get('W', '')}".strip())
                 for r in _records(_read(FILES[0])))
    queries = tuple((str(n), r.get("W", "")) for n, r in enumerate(_records(_read(FILES[1])), start=1))
    qrels = []
    for n, line in enumerate(_read(FILES[2]), start=1):
        cols = line.split()
        if len(cols) != 3:
            raise DataError(f"{shipped_dir() / FILES[2]}:{n}: expected 3 columns (qid docid code)")
        qrels.append((cols[0], cols[1], int(cols[2])))
    return Collection(docs=docs, queries=queries, qrels=tuple(qrels))


def bm25_run(collection: Collection, depth: int) -> dict[str, list[tuple[str, float]]]:
    """{qid: [(docid, score)]}: each query's top ``depth`` documents with a BM25 score > 0, best
    first, ties by position in the collection (a stable sort)."""
    from harness.data._bm25 import BM25Index, tokenize

    index = BM25Index([tokenize(text) for _, text in collection.docs])
    run = {}
    for qid, text in collection.queries:
        scores = index.scores(tokenize(text))
        order = np.argsort(-scores, kind="stable")[:depth]
        run[qid] = [(collection.docs[i][0], float(scores[i])) for i in order if scores[i] > 0]
    return run


def write_trec(collection: Collection, cfg: DataConfig, directory: Path) -> None:
    """The TREC-style files of ``read_trec`` for ``cfg``'s split and depth, into ``directory``."""
    parts = split_groups(range(len(collection.queries)), dev_fraction=cfg.dev_fraction,
                         test_fraction=cfg.test_fraction, seed=cfg.split_seed)
    run = bm25_run(collection, cfg.depth)
    (directory / "docs.tsv").write_text("".join(f"{d}\t{t}\n" for d, t in collection.docs))
    for split in SPLIT_NAMES:
        qids = [collection.queries[i] for i in getattr(parts, split)]
        chosen = {qid for qid, _ in qids}
        (directory / f"{split}.queries.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in qids))
        (directory / f"{split}.qrels").write_text("".join(
            f"{q} 0 {d} {code}\n" for q, d, code in collection.qrels if q in chosen))
        (directory / f"{split}.run").write_text("".join(
            f"{q} Q0 {d} {rank} {score!r} {RUN_TAG}\n"
            for q, _ in qids for rank, (d, score) in enumerate(run[q], start=1)))


def load_cranfield(cfg: DataConfig, progress: Progress | None = None) -> Splits:
    """Train/dev/test of the shipped Cranfield collection for ``cfg`` (module docstring)."""
    from harness.data._readers import read_trec

    if progress:
        progress(f"building Cranfield (BM25 top {cfg.depth}, split seed {cfg.split_seed})")
    collection = read_collection()
    with tempfile.TemporaryDirectory(prefix="harness-cranfield-") as tmp:
        write_trec(collection, cfg, Path(tmp))
        return read_trec(Path(tmp))
