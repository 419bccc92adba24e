"""ir_datasets as a data source (``data.source: irds``).

``data.irds_id`` names the data: three comma-separated ids are the train, dev and test sets; one id
is split by query into train/dev/test with ``split_groups`` (``data.split_seed``,
``data.dev_fraction``, ``data.test_fraction``; every query its own group). Each set must provide
queries, docs, qrels and scoreddocs (its first-stage run). A query's candidates are its
scoreddocs in descending score order (ties in the run's order), the top ``data.depth`` of them,
each with its score as the first-stage score (``Candidate.score``) and label 1 where the qrels
give relevance > 0, else 0 (unjudged included). The context is the query's text alone
(``default_text()``); group = qid. Queries without scoreddocs are left out; documents are read
for the candidates only.

Local data: ``data.irds_register`` names a Python module (``pkg.mod``) or a ``.py`` file that is
imported (once per process) before the ids are resolved; it registers its data sets with
``ir_datasets.registry.register(name, ir_datasets.Dataset(...))`` over local files, which
ir_datasets then reads without a download (docs/data.md, "ir_datasets").

Errors are one line each: an unknown id names close ids; a set that needs a download ir_datasets
cannot make (no network) says so, with the URL; a file ir_datasets cannot parse names the id and
what it was reading. ir_datasets' own log lines are held back while reading and passed to
``progress`` afterwards, so a failure prints the one line alone.

``fingerprint``: sha256 of the ids, the split rule (one id), ``data.depth`` and the content read
(query texts, candidate ids, texts, labels and scores), so it names exactly the data produced.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import logging
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from harness.data._progress import Progress
from harness.data._splits import SPLIT_NAMES, split_groups
from harness.data.cache import fingerprint
from harness.data.config import DataConfig
from harness.errors import ConfigError, DataError, HarnessError
from harness.records import Candidate, Query, Splits
from harness.suggest import did_you_mean

ENTITIES = ("queries", "docs", "qrels", "scoreddocs")
_CHATTER = ("download error", "Download failed")  # ir_datasets' retry lines


def _ir_datasets() -> ModuleType:
    try:
        import ir_datasets
    except ImportError:
        raise HarnessError("data.source=irds needs ir_datasets: pip install ir_datasets") from None
    return ir_datasets


def ids_of(cfg: DataConfig) -> tuple[str, ...]:
    """The ids of ``data.irds_id``: one, or train, dev and test."""
    if not cfg.irds_id:
        raise ConfigError("data.irds_id must be set for data.source=irds")
    return tuple(i.strip() for i in cfg.irds_id.split(","))


def register_local(spec: str | None) -> None:
    """Import ``data.irds_register`` (a module name or a .py file) once per process."""
    if not spec:
        return
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec).expanduser().resolve()
        name = "harness_irds_register_" + hashlib.sha256(str(path).encode()).hexdigest()[:16]
        if name in sys.modules:
            return
        if not path.is_file():
            raise DataError(f"data.irds_register: {path}: no such file")
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise DataError(f"data.irds_register: {path}: not a Python file")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        try:
            loader_spec.loader.exec_module(module)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- the user's module: any failure is bad input
            del sys.modules[name]  # a sys.exit() in it ended the command without a harness line
            raise DataError(f"data.irds_register: {path} failed: {_one_line(exc)}") from None
        return
    try:
        importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and spec.startswith(exc.name):
            raise DataError(f"data.irds_register: no module named {spec!r}") from None
        raise DataError(f"data.irds_register: {spec} failed: {_one_line(exc)}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- the user's module: any failure is bad input
        raise DataError(f"data.irds_register: {spec} failed: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text[:300]}"


def resolve(ir_datasets: ModuleType, dataset_id: str, register: str | None) -> Any:
    """The ir_datasets data set ``dataset_id``; an unknown id names the close ones."""
    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        hint = did_you_mean(dataset_id, ir_datasets.registry)
        local = "" if register else "; a local data set needs data.irds_register"
        raise ConfigError(f"data.irds_id: unknown ir_datasets id {dataset_id!r}{hint}{local}") from None


def check_irds(cfg: DataConfig) -> None:
    """``harness validate``'s check: the ids resolve and provide what the source reads (nothing is
    downloaded or read)."""
    ir_datasets = _ir_datasets()
    register_local(cfg.irds_register)
    for dataset_id in ids_of(cfg):
        _provides(resolve(ir_datasets, dataset_id, cfg.irds_register), dataset_id)


def _provides(ds: Any, dataset_id: str) -> None:
    lacking = [e for e in ENTITIES if not getattr(ds, f"has_{e}")()]
    if lacking:
        raise DataError(f"data.irds_id: ir_datasets set {dataset_id!r} has no {', '.join(lacking)}; "
                        f"the irds source reads its {', '.join(ENTITIES)} (scoreddocs: the first-stage "
                        f"run that gives the candidates)")


@contextmanager
def _held_log(ir_datasets: ModuleType, progress: Progress | None) -> Iterator[None]:
    """Hold ir_datasets' log records; pass them to ``progress`` only if the block succeeds."""
    logger = ir_datasets.log.easy().logger()
    records: list[logging.LogRecord] = []

    class Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    saved = logger.handlers[:]
    logger.handlers = [Hold()]
    try:
        yield
    finally:
        logger.handlers = saved
    if progress:
        for r in records:
            message = r.getMessage()
            if not message.startswith(_CHATTER):
                progress(f"ir_datasets: {message}")


def _download_error(exc: BaseException) -> tuple[str, str] | None:
    """(URL or '', why) of a download that failed, if ``exc`` is one; else None."""
    import requests  # an ir_datasets requirement

    if isinstance(exc, requests.exceptions.RequestException):
        request = getattr(exc, "request", None)
        offline = isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)
        why = "the network is not reachable" if offline else f"the download failed ({_one_line(exc)})"
        return str(getattr(request, "url", "") or ""), why
    if isinstance(exc, RuntimeError) and exc.args and exc.args[0] == "All download sources failed":
        for _, err in (exc.args[1] if len(exc.args) > 1 else []):
            found = _download_error(err)
            if found is not None:
                return found
        return "", f"the download failed ({_one_line(exc)})"
    return None


def _read(ir_datasets: ModuleType, dataset_id: str, entity: str, items: Callable[[], Iterable[Any]],
          progress: Progress | None) -> Iterator[Any]:
    """Iterate ``items()`` (ir_datasets' ``{entity}_iter``), one-line errors naming the id."""
    try:
        with _held_log(ir_datasets, progress):
            yield from items()
    except HarnessError:
        raise
    except FileNotFoundError as exc:
        raise DataError(f"data.irds_id={dataset_id}: ir_datasets needs a local file for its {entity} "
                        f"that is not there: {exc.filename or exc} (a data set obtained by hand, or "
                        f"a data.irds_register file that moved)") from None
    except Exception as exc:  # noqa: BLE001 -- ir_datasets' parsers raise plain errors on bad files
        failed = _download_error(exc)
        if failed is not None:
            from ir_datasets.util import home_path

            url, why = failed
            raise DataError(f"data.irds_id={dataset_id}: its {entity} need a download"
                            f"{f' of {url}' if url else ''} and {why}; download it where there is "
                            f"a network (ir_datasets home {home_path()}) or register a local copy "
                            f"(data.irds_register)") from None
        raise DataError(f"data.irds_id={dataset_id}: ir_datasets could not read its {entity}: "
                        f"{_one_line(exc)}") from None


def _text(item: Any) -> str:
    fn = getattr(item, "default_text", None)
    return str(fn() if callable(fn) else item.text)


def _queries_of(ir_datasets: ModuleType, dataset_id: str, ds: Any, depth: int,
                progress: Progress | None) -> tuple[list[tuple[str, str, list[tuple[str, float, int]]]],
                                                    set[str]]:
    """(qid, text, [(docid, score, label)] best first, at most ``depth``) of the queries with
    scoreddocs, in query order; and the doc ids they need."""
    texts: dict[str, str] = {}
    for q in _read(ir_datasets, dataset_id, "queries", ds.queries_iter, progress):
        if q.query_id in texts:
            raise DataError(f"data.irds_id={dataset_id}: duplicate query id {q.query_id!r} in its queries")
        texts[q.query_id] = _text(q)
    labels: dict[tuple[str, str], int] = {}
    for qrel in _read(ir_datasets, dataset_id, "qrels", ds.qrels_iter, progress):
        labels[(qrel.query_id, qrel.doc_id)] = int(int(qrel.relevance) > 0)
    run: dict[str, list[tuple[str, float]]] = {}
    seen: set[tuple[str, str]] = set()
    for sd in _read(ir_datasets, dataset_id, "scoreddocs", ds.scoreddocs_iter, progress):
        if sd.query_id not in texts:
            raise DataError(f"data.irds_id={dataset_id}: its scoreddocs rank documents for query "
                            f"{sd.query_id!r}, which is not in its queries")
        if (sd.query_id, sd.doc_id) in seen:
            raise DataError(f"data.irds_id={dataset_id}: its scoreddocs list document {sd.doc_id!r} "
                            f"twice for query {sd.query_id!r}")
        seen.add((sd.query_id, sd.doc_id))
        run.setdefault(sd.query_id, []).append((sd.doc_id, float(sd.score)))
    out = []
    wanted: set[str] = set()
    for qid, text in texts.items():
        if qid not in run:
            continue
        ranked = sorted(run[qid], key=lambda pair: -pair[1])[:depth]  # stable: run order in a tie
        out.append((qid, text, [(d, s, labels.get((qid, d), 0)) for d, s in ranked]))
        wanted.update(d for d, _ in ranked)
    if progress and len(out) < len(texts):
        progress(f"irds {dataset_id}: {len(texts) - len(out)} of {len(texts)} queries have no "
                 f"scoreddocs and are left out")
    return out, wanted


def _docs(ir_datasets: ModuleType, dataset_id: str, ds: Any, wanted: set[str],
          progress: Progress | None) -> dict[str, str]:
    """The texts of the ``wanted`` documents (the iteration stops once all are found)."""
    texts: dict[str, str] = {}
    if wanted:
        docs = _read(ir_datasets, dataset_id, "docs", ds.docs_iter, progress)
        try:
            for doc in docs:
                if doc.doc_id in wanted and doc.doc_id not in texts:
                    texts[doc.doc_id] = _text(doc)
                    if len(texts) == len(wanted):
                        break
        finally:
            docs.close()
    missing = sorted(wanted - texts.keys())
    if missing:
        raise DataError(f"data.irds_id={dataset_id}: its scoreddocs name {len(missing)} document(s) "
                        f"that are not in its docs, e.g. {', '.join(map(repr, missing[:3]))}")
    return texts


def read_irds(cfg: DataConfig, progress: Progress | None = None) -> Splits:
    """Train/dev/test of ``data.irds_id`` (see the module docstring)."""
    ir_datasets = _ir_datasets()
    register_local(cfg.irds_register)
    ids = ids_of(cfg)
    sets = [resolve(ir_datasets, i, cfg.irds_register) for i in ids]
    for dataset_id, ds in zip(ids, sets, strict=True):
        _provides(ds, dataset_id)
    if progress:
        progress(f"reading ir_datasets {', '.join(ids)}")
    parts: list[list[tuple[str, str, list[tuple[str, float, int]]]]] = []
    texts: dict[str, str] = {}
    owner: dict[str, str] = {}
    for dataset_id, ds in zip(ids, sets, strict=True):
        queries, wanted = _queries_of(ir_datasets, dataset_id, ds, cfg.depth, progress)
        for qid, _, _ in queries:
            if qid in owner:
                raise DataError(f"data.irds_id: query {qid!r} of {dataset_id!r} is also in "
                                f"{owner[qid]!r}; train, dev and test must not share queries")
            owner[qid] = dataset_id
        texts.update(_docs(ir_datasets, dataset_id, ds, wanted - texts.keys(), progress))
        parts.append(queries)

    def records(rows: list[tuple[str, str, list[tuple[str, float, int]]]]) -> tuple[Query, ...]:
        return tuple(Query(qid=qid, context=(text,), group=qid, candidates=tuple(
            Candidate(doc_id=d, text=texts[d], label=label, score=score) for d, score, label in cands))
            for qid, text, cands in rows)

    rule: dict[str, Any] = {"ids": list(ids), "depth": cfg.depth}
    if len(ids) == 1:
        rows = parts[0]
        try:
            chosen = split_groups(range(len(rows)), dev_fraction=cfg.dev_fraction,
                                  test_fraction=cfg.test_fraction, seed=cfg.split_seed)
        except ConfigError:
            raise DataError(f"data.irds_id={ids[0]}: {len(rows)} queries with scoreddocs cannot fill "
                            f"train, dev and test (data.dev_fraction, data.test_fraction); give "
                            f"train,dev,test ids or a larger set") from None
        split = {name: records([rows[i] for i in getattr(chosen, name)]) for name in SPLIT_NAMES}
        rule.update(split_seed=cfg.split_seed, dev_fraction=cfg.dev_fraction,
                    test_fraction=cfg.test_fraction)
    else:
        split = {name: records(rows) for name, rows in zip(SPLIT_NAMES, parts, strict=True)}
    content = hashlib.sha256()
    for name in SPLIT_NAMES:
        for q in split[name]:
            row = [name, q.qid, q.context[0], [[c.doc_id, c.text, c.label, c.score] for c in q.candidates]]
            content.update(json.dumps(row, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    fp = fingerprint({"source": "irds", **rule}, [content.hexdigest()])
    return Splits(train=split["train"], dev=split["dev"], test=split["test"], fingerprint=fp)
