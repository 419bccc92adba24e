"""On-disk cache of built splits, keyed by a content fingerprint.

fingerprint = sha256 over (the sha256 of every source file's bytes, every ``DataConfig`` field that
changes what a build produces (``BUILD_FIELDS``; ``depth`` only under the response protocol, the
one that reads it), ``BUILD_VERSION``). The path of the source is not part of it, its content is;
``max_*_queries`` caps are not either, since they are applied after the cache
(``harness.data.load``). Bump ``BUILD_VERSION`` whenever the build's output changes for the same
inputs (tokeniser, BM25 parameters, id scheme, filtering, sampling...).

Two kinds of file: the base build (every split's candidates by ``data.protocol``), keyed by that
fingerprint; and, per training-negatives method other than the protocol's, the train split alone
(``train_fingerprint``: sha256 of the base fingerprint and the method), so switching
``train.sampler`` never rebuilds the evaluation set.

Location: ``DataConfig.cache_dir``, else ``$HARNESS_CACHE``, else ``~/.cache/harness``, always made
absolute (trials run in their own working directories); files live in its ``data/`` folder.

Format (``harness-splits/3``, files named ``*.splits``): data only, never code, so a file that a
shared cache folder holds cannot run anything as it loads. Per split, numpy columns (ids into one
string table that holds each distinct text once, labels, scores), stored as raw little-endian arrays
behind a JSON header; the string table is a JSON list. The file::

    harness-splits/3\n
    <sha256 hex of everything after this line>\n
    <header JSON>\n<the arrays' bytes, in the header's order>

The checksum is checked before anything else is read: a file that is not in this format (a pickle
from an older version, or planted), or whose bytes changed since they were written (an edit in place,
a torn copy), is not loaded; one warning line names it and the build runs again, replacing it. The
checksum finds changes, not a forger who rewrites it too: what such a file can do is bring wrong
data, never run code, and keeping a cache folder that others may write is the user's choice.
Loading reads the arrays' bytes as they are (``np.frombuffer``) and parses only the header and the
string table, so a load costs little beside the build it saves (benchmarks/results/data_build.md
times builds). Files are written to a temporary name in the same folder and moved into place with
``os.replace``, so a parallel process sees the whole file or none.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from math import isnan
from pathlib import Path
from typing import Any

import numpy as np

from harness.cachedir import cache_home
from harness.data._progress import Progress
from harness.data.config import DataConfig
from harness.records import Candidate, Query, Splits

BUILD_VERSION = 2  # 2: data.protocol (response by default), data.depth; context-BM25 scores everywhere
BUILD_FIELDS = ("source", "context_turns", "negatives", "protocol", "depth", "split_seed",
                "conversations", "dev_fraction", "test_fraction")
_FORMAT = "harness-splits/2"  # the payload's tag (encode, pack, decode)
MAGIC = b"harness-splits/3\n"  # the file's first line
SUFFIX = ".splits"
_DTYPES = {"score": "<f8"}  # every other column is "<i4"


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_fields(cfg: DataConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that change what a build of the embedded set produces."""
    fields = {k: getattr(cfg, k) for k in BUILD_FIELDS}
    if cfg.protocol != "response":  # only the response protocol reads the depth
        del fields["depth"]
    return fields


def fingerprint(fields: Mapping[str, Any], source_digests: Iterable[str]) -> str:
    """sha256 (hex) over ``BUILD_VERSION``, the build's ``fields`` and its sources' digests.

    >>> len(fingerprint({"source": "chitchat"}, ["ab12"]))
    64
    """
    blob = json.dumps({"version": BUILD_VERSION, "sources": list(source_digests),
                       "config": dict(fields)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def train_fingerprint(base: str, method: str) -> str:
    """The fingerprint of the data whose train split has negatives by ``method`` and whose dev
    and test are those of the base build ``base``.

    >>> train_fingerprint("ab", "random") != train_fingerprint("ab", "context")
    True
    """
    blob = json.dumps({"base": base, "train_negatives": method}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def cache_root(cfg: DataConfig) -> Path:
    """The absolute cache folder for ``cfg`` (see the module docstring)."""
    return cache_home(cfg.cache_dir)


def cache_file(cfg: DataConfig, fp: str) -> Path:
    """The file of the base build with fingerprint ``fp``."""
    return cache_root(cfg) / "data" / f"{cfg.source}-{fp}{SUFFIX}"


def train_cache_file(cfg: DataConfig, base: str, method: str) -> Path:
    """The file of the train split with negatives by ``method`` over the base build ``base``."""
    return cache_root(cfg) / "data" / f"{cfg.source}-{base}-train-{method}{SUFFIX}"


Payload = tuple[Any, ...]  # (_FORMAT, fingerprint, string table, (train, dev, test) columns)
STRING_COLUMNS = ("qid", "group", "context", "doc", "text")  # ids into the string table
COLUMNS = ("qid", "group", "n_context", "context", "n_candidates", "doc", "text", "label", "score")


def encode(splits: Splits) -> Payload:
    """Column arrays per split over one string table that holds each distinct string once, in the
    order of its first use (per split: qids, groups, contexts, doc ids, texts); a None score is
    stored as NaN (a real score is always finite)."""
    table: dict[str, int] = {}
    ref = table.setdefault

    def columns(queries: tuple[Query, ...]) -> dict[str, np.ndarray]:
        cands = [c for q in queries for c in q.candidates]
        return {
            "qid": np.array([ref(q.qid, len(table)) for q in queries], dtype=np.int32),
            "group": np.array([ref(q.group, len(table)) for q in queries], dtype=np.int32),
            "n_context": np.array([len(q.context) for q in queries], dtype=np.int32),
            "context": np.array([ref(u, len(table)) for q in queries for u in q.context], dtype=np.int32),
            "n_candidates": np.array([len(q.candidates) for q in queries], dtype=np.int32),
            "doc": np.array([ref(c.doc_id, len(table)) for c in cands], dtype=np.int32),
            "text": np.array([ref(c.text, len(table)) for c in cands], dtype=np.int32),
            "label": np.array([c.label for c in cands], dtype=np.int32),
            "score": np.array([np.nan if c.score is None else c.score for c in cands], dtype=np.float64),
        }

    parts = tuple(columns(splits.split(name)) for name in ("train", "dev", "test"))
    return (_FORMAT, splits.fingerprint, list(table), parts)


def pack(fp: str, strings: Sequence[str], parts: Sequence[Mapping[str, np.ndarray]]) -> Payload:
    """The payload ``encode`` makes, from columns already in arrays: ``parts`` (train, dev, test)
    hold ``COLUMNS``, the ``STRING_COLUMNS`` as indices into ``strings`` (distinct strings, any
    order). The table keeps the strings used, in the order of their first use, as ``encode`` does,
    so both write the same bytes for the same queries."""
    used = np.concatenate([np.asarray(part[name], dtype=np.int64).ravel()
                           for part in parts for name in STRING_COLUMNS])
    first = np.full(len(strings), used.size, dtype=np.int64)  # each string's first use
    np.minimum.at(first, used, np.arange(used.size))
    order = np.flatnonzero(first < used.size)
    order = order[np.argsort(first[order])]
    rank = np.zeros(len(strings), dtype=np.int32)
    rank[order] = np.arange(order.size, dtype=np.int32)
    dtypes = {"score": np.float64}
    columns = tuple({name: np.ascontiguousarray(rank[part[name]] if name in STRING_COLUMNS else part[name],
                                                dtype=dtypes.get(name, np.int32))
                     for name in COLUMNS} for part in parts)
    return (_FORMAT, fp, [strings[i] for i in order.tolist()], columns)


def decode(payload: Payload) -> Splits:
    """The splits of a payload (``encode``'s inverse)."""
    fmt, fp, strings, parts = payload
    if fmt != _FORMAT:
        raise ValueError(f"format {fmt!r}")
    at = strings.__getitem__

    def queries(col: dict[str, np.ndarray]) -> tuple[Query, ...]:
        scores = col["score"].tolist()
        if np.isnan(col["score"]).any():  # a source without first-stage scores
            scores = [None if isnan(s) else s for s in scores]
        cands = list(map(Candidate, map(at, col["doc"].tolist()), map(at, col["text"].tolist()),
                         col["label"].tolist(), scores))
        context = list(map(at, col["context"].tolist()))
        c_end = np.cumsum(col["n_context"]).tolist()
        k_end = np.cumsum(col["n_candidates"]).tolist()
        c_start, k_start = [0, *c_end][:-1], [0, *k_end][:-1]
        return tuple(Query(at(q), tuple(context[a:b]), tuple(cands[c:d]), at(g))
                     for q, g, a, b, c, d in zip(col["qid"].tolist(), col["group"].tolist(),
                                                 c_start, c_end, k_start, k_end, strict=True))

    train, dev, test = (queries(part) for part in parts)
    return Splits(train=train, dev=dev, test=test, fingerprint=fp)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block: reading or building a data set makes
    millions of small acyclic objects (freed by reference counting anyway), and the collector's
    passes over them would double the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def serialize(payload: Payload) -> bytes:
    """The bytes of a cache file holding ``payload`` (the module docstring's format)."""
    fmt, fp, strings, parts = payload
    if fmt != _FORMAT:
        raise ValueError(f"format {fmt!r}")
    blobs: list[bytes] = []
    offset = 0

    def add(blob: bytes) -> list[int]:
        nonlocal offset
        blobs.append(blob)
        offset += len(blob)
        return [offset - len(blob), len(blob)]

    table = add(json.dumps(list(strings), ensure_ascii=False).encode())
    columns = [{name: [_DTYPES.get(name, "<i4"), *add(np.ascontiguousarray(
        part[name], dtype=_DTYPES.get(name, "<i4")).tobytes())] for name in COLUMNS} for part in parts]
    header = json.dumps({"fingerprint": fp, "strings": table, "parts": columns}, sort_keys=True)
    body = header.encode() + b"\n" + b"".join(blobs)
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def deserialize(blob: bytes) -> Payload:
    """The payload of a cache file's bytes; ``CacheRefused`` (with why) when they are not one."""
    if not blob.startswith(MAGIC):
        raise CacheRefused(f"is not a harness data cache file (its first line is not "
                           f"{MAGIC.decode().strip()}: a file of an older version, or not the harness's)")
    digest, _, body = blob[len(MAGIC):].partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise CacheRefused("does not match its checksum (changed since it was written: edited, "
                           "truncated or damaged)")
    try:
        text, _, data = body.partition(b"\n")
        header = json.loads(text)
        fp, (start, size) = str(header["fingerprint"]), header["strings"]
        strings = json.loads(data[start:start + size])
        parts = tuple({name: _array(data, *part[name], expected=_DTYPES.get(name, "<i4"))
                       for name in COLUMNS} for part in header["parts"])
        if not isinstance(strings, list) or len(parts) != 3:
            raise ValueError("not three splits over a string table")
    except (ValueError, TypeError, KeyError) as exc:
        raise CacheRefused(f"has a checksum but no readable content ({type(exc).__name__}: {exc})") from None
    return (_FORMAT, fp, strings, parts)


def _array(data: bytes, dtype: str, start: int, size: int, *, expected: str) -> np.ndarray:
    if dtype != expected or start < 0 or start + size > len(data) or size % np.dtype(dtype).itemsize:
        raise ValueError(f"column {dtype} at {start}+{size} does not fit")
    return np.frombuffer(data, dtype=dtype, count=size // np.dtype(dtype).itemsize, offset=start)


class CacheRefused(ValueError):
    """A cache file that is not loaded, and why (``load`` warns with it and builds again)."""


def load(path: Path, fp: str, progress: Progress | None = None) -> Splits | None:
    """The cached splits at ``path`` if present, in the cache format, unchanged since written
    (checksum) and built for ``fp``; else None. A file there that is refused is named in one
    warning line; it is never loaded, and the caller's build replaces it."""
    if not path.is_file():
        return None
    try:
        with paused_gc():
            payload = deserialize(path.read_bytes())
            try:
                splits = decode(payload)
            except (ValueError, TypeError, IndexError) as exc:  # ids outside the string table ...
                raise CacheRefused(f"has a checksum but inconsistent content ({type(exc).__name__}: "
                                   f"{exc})") from None
    except (OSError, CacheRefused) as exc:
        why = exc if isinstance(exc, CacheRefused) else f"cannot be read ({exc.strerror or exc})"
        if progress:
            progress(f"warning: data cache file {path} {why}; not loaded, building the data again")
        return None
    # A file named for another fingerprint (renamed or copied by hand) is not this build.
    return splits if splits.fingerprint == fp else None


@contextmanager
def building(path: Path, progress: Progress | None = None, what: str = "it") -> Iterator[None]:
    """Hold the build lock of cache file ``path`` for the block (an advisory lock on a file in the
    folder beside its own, ``data.locks/`` for ``data/``, which holds cache files only), so that
    processes building one data set at once (two studies, two test workers) build it once: the
    second waits, then loads what the first stored. Where no lock can be taken
    (a cache folder that cannot be written, a system without flock) the block runs unlocked."""
    try:
        import fcntl

        locks = path.parent.with_name(f"{path.parent.name}.locks")
        locks.mkdir(parents=True, exist_ok=True)
        fh = open(locks / f"{path.name}.lock", "a")  # noqa: SIM115 (held for the block)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                progress(f"waiting for another process building {what}")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        except OSError:  # a file system without locks
            pass
        yield
    finally:
        fh.close()  # releases the lock


def store(path: Path, data: Splits | Payload, progress: Progress | None = None) -> bool:
    """Write ``data`` (splits, or their ``encode``/``pack`` payload) to ``path`` atomically; on an
    OS error report it and return False (the build is still usable, only not cached)."""
    payload = encode(data) if isinstance(data, Splits) else data
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(serialize(payload))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; reading os.umask would race other threads
        os.replace(tmp, path)
        tmp = None
        return True
    except OSError as exc:
        if progress:
            progress(f"warning: could not write the data cache {path}: {exc}")
        return False
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
