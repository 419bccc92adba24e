"""Negative samplers over a corpus of utterances: BM25 top hits (keeping their scores) and random.

The pool of a query is every corpus document outside ``exclude`` (the query's own conversation,
a contiguous range of positions), minus documents with empty text and minus duplicates: a hit
whose normalised text (lowercased, whitespace collapsed; ``text_keys``) equals the positive's or
an already chosen negative's is skipped, so no negative repeats another or the positive.

BM25 ranks the pool by descending score, ties broken by ascending corpus position, and keeps the
first ``k`` documents that survive the filters. The positive's score for the same query is kept
too (sigma_BM25 of Penha & Hauff 2020 is the population SD over all candidates' scores).
Random draws uniformly from the pool with the given Generator; it has no scores.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from harness.data.bm25 import BM25Index
from harness.data.progress import Progress, Ticker
from harness.errors import DataError

EMPTY = -1  # key of a document with empty text: never a negative
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


@dataclass(frozen=True, slots=True)
class Request:
    """One query to sample for: the corpus positions of its context (their tokens, concatenated,
    are the BM25 query), the positive's position and the positions its negatives must not come
    from (``exclude``, which contains the positive)."""

    qid: str
    context: range
    positive: int
    exclude: range


@dataclass(frozen=True, slots=True)
class Sampled:
    """Chosen negatives (corpus positions, best first), their BM25 scores and the positive's
    (``None`` for the random sampler)."""

    negatives: tuple[int, ...]
    scores: tuple[float, ...] | None
    positive_score: float | None


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


def bm25_negatives(index: BM25Index, tokens: Sequence[list[str]], keys: np.ndarray, req: Request,
                   k: int) -> Sampled:
    """The top-``k`` BM25 negatives of one query (see the module docstring); ``tokens`` are the
    corpus documents' tokens. Joining the context with spaces and tokenising gives the same query,
    since a space never joins two tokens."""
    query = [tok for pos in req.context for tok in tokens[pos]]
    row = np.array(index.scores(query), dtype=np.float64)  # writable copy
    positive_score = float(row[req.positive])
    row[req.exclude.start:req.exclude.stop] = -np.inf
    chosen = _top_k(row, keys, int(keys[req.positive]), k)
    if len(chosen) < k:
        raise _exhausted(req, k, len(chosen))
    return Sampled(negatives=tuple(chosen), scores=tuple(float(row[p]) for p in chosen),
                   positive_score=positive_score)


def random_negatives(keys: np.ndarray, req: Request, k: int, rng: np.random.Generator) -> Sampled:
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
    if len(chosen) < k:
        raise _exhausted(req, k, len(chosen))
    return Sampled(negatives=tuple(chosen), scores=None, positive_score=None)


def default_workers() -> int:
    """Threads for BM25 scoring: the CPUs this process may use (rank_bm25_rs drops the GIL)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def sample_bm25(index: BM25Index, tokens: Sequence[list[str]], keys: np.ndarray,
                requests: Sequence[Request], k: int, *,
                progress: Progress | None = None, workers: int | None = None) -> list[Sampled]:
    """``bm25_negatives`` for every request, on ``workers`` threads, in request order."""
    chunks = [requests[i:i + _CHUNK] for i in range(0, len(requests), _CHUNK)]
    ticker = Ticker(progress, "BM25 negatives", total=len(requests))

    def run(chunk: Sequence[Request]) -> list[Sampled]:
        return [bm25_negatives(index, tokens, keys, req, k) for req in chunk]

    out: list[Sampled] = []
    n_workers = workers or default_workers()
    if n_workers == 1 or len(chunks) <= 1:
        for chunk in chunks:
            out += run(chunk)
            ticker.advance(len(chunk))
        return out
    with ThreadPoolExecutor(max_workers=n_workers) as pool:
        for chunk, result in zip(chunks, pool.map(run, chunks), strict=True):
            out += result
            ticker.advance(len(chunk))
    return out
