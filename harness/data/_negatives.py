"""Negative samplers over a corpus of utterances, and the first-stage score of every candidate.

The pool of a query is every corpus document outside ``exclude`` (the query's own conversation,
a contiguous range of positions), minus documents with empty text and minus duplicates: a
document whose normalised text (lowercased, whitespace collapsed; ``text_keys``) equals the
positive's or an already chosen negative's is skipped, so no negative repeats another or the
positive. A ranking orders documents by descending BM25 score, ties by ascending corpus position.

Methods (``METHODS``; ``k`` negatives per query):

- ``response`` (MSDialog/MANtIS, Yang et al. 2018, as used by Penha & Hauff 2020): BM25 with the
  true response (the positive) as the query over the pool; the negatives are drawn uniformly,
  without replacement, from its top ``depth`` hits, counting usable documents only (each distinct
  text once, at its best rank) and only hits, i.e. documents sharing a term with the response
  (score > 0), as a search engine returns them. Where the window holds fewer than ``k`` (``depth``
  below ``k``, or few hits) it is taken whole and the sampler continues down the ranking: the next
  hits in rank order, then the non-matching documents (one tie at score 0) in a shuffled order.
- ``context`` (NS_BM25 of Penha & Hauff 2021): the top ``k`` BM25 hits of the context.
- ``random`` (NS_random): drawn uniformly from the pool.

Every candidate, the positive included, carries the same first-stage score whatever the method:
BM25 of the context (its utterances' tokens, concatenated) against that candidate, so sigma_BM25,
the difficulty heuristics and WSLS's weak labels read one ranker. The negatives are listed by that
score, best first (ties by corpus position); for ``context`` this is the order they were found in.

The seeded methods draw from ``numpy.random.default_rng([seed[0], stream, *seed[1:]])`` with the
request's ``seed`` (split_seed, conversation, turn) and one stream per method (``STREAMS``), so a
query's negatives depend on nothing else (not on the subset, the order or the thread).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from harness.data._bm25 import BM25Index
from harness.data._progress import Progress, Ticker
from harness.errors import DataError

EMPTY = -1  # key of a document with empty text: never a negative
METHODS = ("response", "context", "random")
STREAMS = {"random": 7, "response": 8}  # seed streams (7: the random sampler's since v1)
_STRIDE = 32  # sampling stride of the threshold estimate in _top_k
_CHUNK = 256  # queries per worker task


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """One int per text, equal for texts that are the same after lowercasing and collapsing
    whitespace; ``EMPTY`` for blank texts. ``text_keys(["Hi", "hi ", ""]) -> [0, 0, -1]``."""
    ids: dict[str, int] = {}
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):
        norm = " ".join(text.lower().split())
        out[i] = ids.setdefault(norm, len(ids)) if norm else EMPTY
    return out


def pool_size(keys: np.ndarray) -> int:
    """Distinct non-empty texts in the corpus: no query can have more negatives than this - 1."""
    return int(np.unique(keys[keys != EMPTY]).size)


class Texts:
    """The corpus' text keys (``text_keys``) and, per position, whether it is its text's first
    position (``first``) and its text's next position (``following``, -1 at the last).

    Equal texts have equal tokens, so they score alike under any BM25 query and tie; ties rank by
    position, so a text's best-ranked position in a ranking is its first position outside the
    query's conversation: the positions flagged ``first`` outside it, and the ``moved`` ones.

    >>> t = Texts(np.array([0, 1, 0, -1, 1, 2]))
    >>> t.first.tolist()
    [True, True, False, False, False, True]
    >>> t.first_of(1), t.moved(range(0, 2), banned=2).tolist()
    (1, [2, 4])
    """

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = np.asarray(keys, dtype=np.int64)
        order = np.argsort(self.keys, kind="stable")  # by key, then by position
        same = self.keys[order[1:]] == self.keys[order[:-1]]  # order[i + 1] repeats order[i]'s text
        self.first = np.ones(self.keys.size, dtype=bool)
        self.first[order[1:][same]] = False
        self.first &= self.keys != EMPTY
        self.following = np.full(self.keys.size, -1, dtype=np.int64)
        self.following[order[:-1][same]] = order[1:][same]
        self.first_at = np.full(int(self.keys.max(initial=EMPTY)) + 1, -1, dtype=np.int64)
        self.first_at[self.keys[self.first]] = np.flatnonzero(self.first)

    def first_of(self, key: int) -> int:
        """The first position of the text ``key`` (-1 for ``EMPTY``)."""
        return int(self.first_at[key]) if key != EMPTY else -1

    def moved(self, exclude: range, banned: int) -> np.ndarray:
        """The first positions after ``exclude`` of the texts (not ``banned``) whose first position
        lies in ``exclude``, ascending: those texts' best-ranked positions when ``exclude`` is out
        (compiled: ``kernels.moved``)."""
        from harness.data._kernels import moved

        if exclude.step != 1 or not 0 <= exclude.start <= exclude.stop <= self.keys.size:
            raise IndexError(f"exclude {exclude} is not a range of positions in [0, {self.keys.size}]")
        return moved(self.first, self.following, self.keys, exclude.start, exclude.stop, banned)


@dataclass(frozen=True, slots=True)
class Request:
    """One query to sample for: the corpus positions of its context (their tokens, concatenated,
    are the first-stage BM25 query), the positive's position, the positions its negatives must not
    come from (``exclude``, which contains the positive) and the seed of the seeded methods."""

    qid: str
    context: range
    positive: int
    exclude: range
    seed: tuple[int, ...] = (0,)


@dataclass(frozen=True, slots=True)
class Sampled:
    """Chosen negatives (corpus positions, best first by ``scores``), their first-stage scores
    and the positive's."""

    negatives: tuple[int, ...]
    scores: tuple[float, ...]
    positive_score: float


def _exhausted(req: Request, k: int, found: int) -> DataError:
    return DataError(f"data.negatives={k} exceeds the negative pool of query {req.qid}: only "
                     f"{found} distinct non-empty utterances outside its conversation")


def _pick(order: np.ndarray, keys: np.ndarray, banned: int, k: int,
          chosen: list[int] | None = None) -> list[int]:
    """Walk ``order`` appending positions with a new non-empty key to ``chosen`` until it has ``k``;
    ``banned`` (the positive's key) and the keys already in ``chosen`` count as seen."""
    chosen = [] if chosen is None else chosen
    if len(chosen) >= k:
        return chosen
    seen = {banned, *(int(keys[p]) for p in chosen)}
    for pos in order.tolist():
        key = int(keys[pos])
        if key == EMPTY or key in seen:
            continue
        seen.add(key)
        chosen.append(pos)
        if len(chosen) == k:
            break
    return chosen


def _ranked(row: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``positions`` (ascending) by descending score; a stable sort keeps position order in ties."""
    return positions[np.argsort(-row[positions], kind="stable")]


def _top_k(row: np.ndarray, keys: np.ndarray, banned: int, k: int) -> list[int]:
    """The first ``k`` filtered positions of ``row`` in (score desc, position asc) order.

    Avoids sorting the whole corpus: the ``m``-th largest value of a strided sample is a lower
    bound of the ``m``-th largest of the row, so every position scoring >= it is a superset of the
    row's top ``m``, ties included. If filtering leaves fewer than ``k`` there, sort everything.
    """
    m = 3 * k + 16
    sample = row[::_STRIDE]
    if sample.size > m:
        threshold = np.partition(sample, sample.size - m)[sample.size - m]
        if np.isfinite(threshold):
            chosen = _pick(_ranked(row, np.flatnonzero(row >= threshold)), keys, banned, k)
            if len(chosen) == k:
                return chosen
    return _pick(_ranked(row, np.flatnonzero(np.isfinite(row))), keys, banned, k)


def _rng(req: Request, method: str) -> np.random.Generator:
    return np.random.default_rng([req.seed[0], STREAMS[method], *req.seed[1:]])


def _outside(row: np.ndarray, req: Request) -> np.ndarray:
    """A writable copy of ``row`` with the excluded positions at -inf."""
    out = np.array(row, dtype=np.float64)
    out[req.exclude.start:req.exclude.stop] = -np.inf
    return out


def context_negatives(context_row: np.ndarray, keys: np.ndarray, req: Request, k: int) -> list[int]:
    """The top-``k`` BM25 hits of the context (``context_row``: its scores over the corpus)."""
    return _top_k(_outside(context_row, req), keys, int(keys[req.positive]), k)


class Scratch:
    """Work arrays for the queries of one worker over a corpus of ``size`` documents, reused from
    query to query (a fresh megabyte per query would cost page faults): a score row, its strided
    sample, positions and their scores, and a byte mask."""

    def __init__(self, size: int) -> None:
        self.row = np.empty(size)
        self.hits = np.empty(-(-size // _STRIDE))
        self.positions = np.empty(2 * size, dtype=np.int64)
        self.values = np.empty(2 * size)
        self.mask = np.empty(-(-size // 8) * 8, dtype=np.uint8)


def _usable_hits(row: np.ndarray, texts: Texts, banned: int, n: int, exclude: range,
                 scratch: Scratch | None = None, hits: np.ndarray | None = None) -> np.ndarray:
    """The first ``n`` usable hits of the full score ``row`` (read-only) in rank order: score > 0,
    outside ``exclude``, a non-empty text other than the ``banned`` one, each text at its
    best-ranked position only. Equal texts score alike (same tokens), so a text's best-ranked
    position is its first one outside ``exclude`` (``Texts``): no duplicate needs ranking.

    Looks at a prefix of the ranking only: every position scoring at least the ``w``-th largest
    of a strided sample of the row (``w`` a few standard deviations above the share of ``n`` the
    sample stands for), so the prefix is a superset of the ranking's top positions, ties included.
    Only the usable positions scoring above that cut are sorted; those tied at it follow in
    position order (ties rank by position), as many as needed. A prefix without ``n`` usable hits
    lowers the sample's cut (``w`` times 4), and finally every hit is ranked. ``hits``: that
    sample, the positive scores among ``row[::_STRIDE]``, where the caller took it while scoring
    the row (it is reordered). Compiled (``kernels.usable_hits``)."""
    from harness.data._kernels import strided_hits, usable_hits

    scratch = scratch or Scratch(row.size)
    if hits is None:
        hits = scratch.hits[:strided_hits(row, _STRIDE, scratch.hits)]
    return usable_hits(row, hits, texts.first, texts.first_of(banned), exclude.start, exclude.stop,
                       texts.moved(exclude, banned), n, _STRIDE, scratch.positions, scratch.values,
                       scratch.mask)


def response_negatives(index: BM25Index, texts: Texts, req: Request, k: int, depth: int,
                       rng: np.random.Generator, scratch: Scratch | None = None) -> list[int]:
    """``k`` negatives drawn uniformly from the top ``depth`` usable hits of the response
    (BM25 of the positive's tokens over the corpus) outside the query's conversation. A window
    shorter than ``k`` (``depth < k``, or fewer hits) is taken whole and the sampler continues
    down the ranking: the next hits in rank order, then the documents at score 0 (one tie)
    shuffled."""
    scratch = scratch or Scratch(index.size)
    count = index.span_row_sampled(range(req.positive, req.positive + 1), scratch.row, _STRIDE,
                                   scratch.hits)
    row = scratch.row
    banned = int(texts.keys[req.positive])
    window = _usable_hits(row, texts, banned, max(depth, k), req.exclude, scratch,
                          hits=scratch.hits[:count])
    drawn = np.sort(rng.choice(window.size, size=min(k, window.size), replace=False))
    chosen: list[int] = window[drawn].tolist()
    if len(chosen) < k:
        _pick(rng.permutation(np.flatnonzero(_outside(row, req) == 0)), texts.keys, banned, k,
              chosen)
    return chosen


def random_negatives(keys: np.ndarray, req: Request, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` negatives drawn uniformly without repetition from the pool of ``req``."""
    n = keys.size
    span = req.exclude.stop - req.exclude.start
    chosen: list[int] = []
    seen = {int(keys[req.positive])}
    for _ in range(20 * k + 100):  # rejection sampling; the pool is almost always large
        if len(chosen) == k or n - span <= 0:
            break
        pos = int(rng.integers(n - span))
        pos += span if pos >= req.exclude.start else 0
        key = int(keys[pos])
        if key != EMPTY and key not in seen:
            seen.add(key)
            chosen.append(pos)
    if len(chosen) < k:  # small or duplicate-heavy pool: walk a shuffle of all of it
        outside = np.concatenate([np.arange(req.exclude.start), np.arange(req.exclude.stop, n)])
        _pick(rng.permutation(outside), keys, int(keys[req.positive]), k, chosen)
    return chosen


def sample_one(method: str, index: BM25Index, texts: Texts, req: Request, k: int, *,
               depth: int = 1000, scratch: Scratch | None = None) -> Sampled:
    """The negatives of one query by ``method`` and every candidate's first-stage score.

    ``context`` and ``response`` rank the full score row of the context / the positive
    (``BM25Index.span_row``; ``scratch``: work arrays reused from query to query);
    every candidate is then scored alone for the context (``BM25Index.span_scores``, equal to the
    full row's entries bit for bit)."""
    if method not in METHODS:
        raise ValueError(f"unknown negative sampling method {method!r}; valid: {', '.join(METHODS)}")
    row = scratch.row if scratch else None
    if method == "context":
        chosen = context_negatives(index.span_row(req.context, row), texts.keys, req, k)
    elif method == "response":
        chosen = response_negatives(index, texts, req, k, depth, _rng(req, method), scratch)
    else:
        chosen = random_negatives(texts.keys, req, k, _rng(req, method))
    if len(chosen) < k:
        raise _exhausted(req, k, len(chosen))
    docs = [req.positive, *chosen]
    values = index.span_scores(req.context, docs)
    score = {p: float(v) for p, v in zip(docs, values, strict=True)}
    best_first = sorted(chosen, key=lambda p: (-score[p], p))
    return Sampled(negatives=tuple(best_first), scores=tuple(score[p] for p in best_first),
                   positive_score=score[req.positive])


def default_workers() -> int:
    """Workers for sampling: the CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _can_fork() -> bool:
    """Whether sampling may fork worker processes: the platform forks, and no Ray runs in this
    process (its gRPC threads must not be forked)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    ray = sys.modules.get("ray")
    return ray is None or not ray.is_initialized()


_Job = tuple[str, BM25Index, Texts, int, int]
_JOB: _Job | None = None  # a forked worker's sampling job (inherited, never pickled)


def _set_job(parent: int, *job: object) -> None:
    """A forked worker's start: take the job, and die with the process that forked it."""
    global _JOB
    _JOB = job  # type: ignore[assignment]
    _die_with(parent)


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when its parent dies (Linux's PR_SET_PDEATHSIG), so a
    build killed with SIGKILL leaves no worker behind (they would wait for work forever)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl outside Linux
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _run_job(chunk: Sequence[Request]) -> list[Sampled]:
    assert _JOB is not None
    return _run_chunk(_JOB, chunk)


def sample(method: str, index: BM25Index, keys: np.ndarray, requests: Sequence[Request], k: int,
           *, depth: int = 1000, progress: Progress | None = None, workers: int | None = None) -> list[Sampled]:
    """``sample_one`` for every request, in request order, on ``workers`` forked processes where
    forking is safe (``_can_fork``; they inherit the index), else on as many threads (the compiled
    kernels drop the GIL). The result does not depend on ``workers``."""
    chunks = [requests[i:i + _CHUNK] for i in range(0, len(requests), _CHUNK)]
    ticker = Ticker(progress, f"{method} negatives", total=len(requests))
    job = (method, index, Texts(keys), k, depth)
    out: list[Sampled] = []
    n_workers = min(workers or default_workers(), len(chunks))
    warm()  # compiled (or loaded from numba's cache, or awaited: prewarm) once, here
    if n_workers <= 1:
        for chunk in chunks:
            out += _run_chunk(job, chunk)
            ticker.advance(len(chunk))
        return out
    if _can_fork():
        pool: Executor = ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context("fork"),
                                             initializer=_set_job, initargs=(os.getpid(), *job))
        run: Callable[[Sequence[Request]], list[Sampled]] = _run_job
    else:
        pool = ThreadPoolExecutor(n_workers)
        run = partial(_run_chunk, job)
    with pool:
        for chunk, result in zip(chunks, pool.map(run, chunks), strict=True):
            out += result
            ticker.advance(len(chunk))
    return out


def _run_chunk(job: _Job, chunk: Sequence[Request]) -> list[Sampled]:
    method, index, texts, k, depth = job
    scratch = Scratch(index.size)
    if method == "response":
        return _response_chunk(index, texts, chunk, k, depth, scratch)
    return [sample_one(method, index, texts, req, k, depth=depth, scratch=scratch) for req in chunk]


def _candidate_scores(index: BM25Index, context_start: np.ndarray, context_stop: np.ndarray,
                      positives: np.ndarray, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query (arrays of int64 positions, ``chosen``: a row of negatives each), its negatives
    best first and the scores: the positive's, then theirs (``kernels.candidate_scores``)."""
    from harness.data._kernels import candidate_scores

    negatives = np.empty_like(chosen)
    scores = np.empty((chosen.shape[0], chosen.shape[1] + 1))
    docs = index.documents()
    candidate_scores(docs.tokens, docs.token_ptr, context_start, context_stop, positives, chosen,
                     docs.indptr, docs.terms, docs.weights, negatives, scores)
    return negatives, scores


def _response_chunk(index: BM25Index, texts: Texts, chunk: Sequence[Request], k: int, depth: int,
                    scratch: Scratch) -> list[Sampled]:
    """``sample_one("response", ...)`` of each request of ``chunk``, equal to it (tests/data/
    test_chitchat.py): each query's negatives by ``response_negatives``, then every candidate of
    the chunk scored and ordered in one compiled call (``kernels.candidate_scores``) instead of
    a kernel call, a dict and a sort per query."""
    # the positions the candidate kernel reads, which does not check bounds: checked here
    spans = np.array([(r.context.start, r.context.stop, r.positive) for r in chunk],
                     dtype=np.int64).reshape(-1, 3).T.copy()
    if spans.size and (spans.min() < 0 or spans.max() > index.size or (spans[2] == index.size).any()
                       or (spans[0] > spans[1]).any()):
        raise IndexError(f"a request's context or positive is outside the corpus' positions [0, {index.size})")
    chosen = np.empty((len(chunk), k), dtype=np.int64)
    for i, req in enumerate(chunk):
        found = response_negatives(index, texts, req, k, depth, _rng(req, "response"), scratch)
        if len(found) < k:
            raise _exhausted(req, k, len(found))
        chosen[i] = found
    negatives, scores = _candidate_scores(index, spans[0], spans[1], spans[2], chosen)
    return [Sampled(negatives=tuple(ns), scores=tuple(ss[1:]), positive_score=ss[0])
            for ns, ss in zip(negatives.tolist(), scores.tolist(), strict=True)]


# --- compiling the kernels once per machine ------------------------------------------------


_SHARES = ("window", "scores")  # what each background process of ``prewarm`` compiles
_COMPILING: list[subprocess.Popen[bytes]] = []  # those processes, until ``warm`` waits for them


def warm(share: str | None = None) -> None:
    """Compile (or load from numba's cache) the kernels for the argument types the index and the
    sampler pass, by the calls they make, so that processes forked afterwards inherit them instead
    of compiling each. First waits for ``prewarm``'s processes, whose work it then loads from the
    cache. ``share``: only the window's kernels (``usable_hits``, ``moved``) or only the scorers'
    (``score_row``, ``score_row_sampled``, ``score_docs``, ``candidate_scores``); by default every
    kernel a build calls (``strided_hits``, for callers without a sampled row, compiles on first use)."""
    while _COMPILING:
        child = _COMPILING.pop()
        try:
            child.wait(timeout=600)
        except subprocess.TimeoutExpired:  # stuck: compile here instead
            child.kill()
            child.wait()
    index = BM25Index([["a", "b"], ["b"], ["c", "b"], ["a"]])
    texts = Texts(np.arange(4))
    req = Request(qid="q", context=range(1), positive=1, exclude=range(2))
    if share is None:
        for method in ("response", "context"):
            sample_one(method, index, texts, req, 1, depth=1, scratch=Scratch(index.size))
        _run_chunk(("response", index, texts, 1, 1), [req])
    elif share == "window":  # usable_hits (the longest to compile) and moved
        scratch = Scratch(index.size)
        scratch.row[:] = 0.0
        _usable_hits(scratch.row, texts, 1, 1, req.exclude, scratch, hits=scratch.hits[:0])
    elif share == "scores":  # the rest
        scratch = Scratch(index.size)
        index.span_row(range(1), scratch.row)
        index.span_row_sampled(range(1), scratch.row, _STRIDE, scratch.hits)
        sample_one("context", index, texts, req, 1, scratch=scratch)
        one = np.zeros(1, dtype=np.int64)
        _candidate_scores(index, one, one + 1, one + 1, np.zeros((1, 1), dtype=np.int64))
    else:
        raise ValueError(f"unknown share {share!r}; valid: {', '.join(_SHARES)}")


def _cached() -> bool:
    """Whether numba's on-disk cache holds every kernel (an index file each; a stale one is
    recompiled on first call), or this process compiled them already."""
    from harness.data._kernels import (
        candidate_scores,
        moved,
        score_docs,
        score_row,
        score_row_sampled,
        usable_hits,
    )

    if usable_hits.signatures and candidate_scores.signatures:
        return True
    try:
        return all(os.path.exists(kernel._cache._cache_file._index_path)
                   for kernel in (score_row, score_row_sampled, score_docs, usable_hits, moved, candidate_scores))
    except AttributeError:  # numba's cache layout changed: assume it is there
        return True


def prewarm() -> None:
    """Where numba's cache lacks the kernels (a first build on a machine), compile them in two
    background processes, a share each (``warm(share)``), which write numba's cache while this
    process reads and indexes the corpus; ``warm`` then waits and loads them. The compilation
    (seconds per share; benchmarks/results/data_build.md) otherwise holds up the sampling."""
    if _COMPILING or _cached():
        return
    root = str(Path(__file__).resolve().parents[2])  # the folder this harness package is in
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    for share in _SHARES:
        code = f"from harness.data._negatives import warm; warm({share!r})"
        try:
            _COMPILING.append(subprocess.Popen([sys.executable, "-c", code], env=env, cwd=root,
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        except OSError:  # no interpreter to start: ``warm`` compiles here, as before
            return
