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

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from harness.data.bm25 import BM25Index
from harness.data.progress import Progress, Ticker
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


def _first_usable(docs: np.ndarray, keys: np.ndarray, banned: int, n: int) -> np.ndarray:
    """Indices into ``docs`` (a ranking) of its first ``n`` usable documents: a non-empty text
    other than the ``banned`` one, each text at its first (best-ranked) position only."""
    text = keys[docs]
    ok = np.flatnonzero((text != EMPTY) & (text != banned))
    first = np.sort(np.unique(text[ok], return_index=True)[1])
    return ok[first[:n]]


def context_negatives(context_row: np.ndarray, keys: np.ndarray, req: Request, k: int) -> list[int]:
    """The top-``k`` BM25 hits of the context (``context_row``: its scores over the corpus)."""
    return _top_k(_outside(context_row, req), keys, int(keys[req.positive]), k)


def _usable_hits(row: np.ndarray, keys: np.ndarray, banned: int, n: int,
                 exclude: range) -> np.ndarray:
    """The first ``n`` usable hits of the full score ``row`` (read-only) in rank order: score > 0,
    outside ``exclude``, a non-empty text other than the ``banned`` one, each text at its
    best-ranked position only (``_first_usable``).

    Ranks a prefix of the ranking only: every position scoring at least the ``w``-th largest of a
    strided sample of the row (``w`` a few standard deviations above the share of ``n`` the sample
    stands for), so the prefix is a superset of the ranking's top positions, ties included. One
    holding ``n`` usable hits holds the first ``n`` of the whole ranking; else the sample's cut is
    lowered (``w`` times 4) and finally every hit is ranked."""
    sample = row[::_STRIDE]
    expected = (n + n // 4) // _STRIDE + 1
    wanted = expected + 4 * int(expected ** 0.5) + 8
    while True:
        threshold = 0.0
        if sample.size > wanted:
            threshold = float(np.partition(sample, sample.size - wanted)[sample.size - wanted])
        prefix = np.flatnonzero(row >= threshold) if threshold > 0 else np.flatnonzero(row > 0)
        if len(exclude):
            prefix = prefix[(prefix < exclude.start) | (prefix >= exclude.stop)]
        ranked = _ranked(row, prefix)
        first = _first_usable(ranked, keys, banned, n)
        if first.size >= n or threshold <= 0:
            return ranked[first]
        wanted *= 4


def response_negatives(response_row: np.ndarray, keys: np.ndarray, req: Request, k: int,
                       depth: int, rng: np.random.Generator) -> list[int]:
    """``k`` negatives drawn uniformly from the top ``depth`` usable hits of the response
    (``response_row``: BM25 of the positive's tokens over the corpus, read-only) outside the
    query's conversation. A window shorter than ``k`` (``depth < k``, or fewer hits) is taken
    whole and the sampler continues down the ranking: the next hits in rank order, then the
    documents at score 0 (one tie) shuffled."""
    banned = int(keys[req.positive])
    window = _usable_hits(response_row, keys, banned, max(depth, k), req.exclude)
    drawn = np.sort(rng.choice(window.size, size=min(k, window.size), replace=False))
    chosen: list[int] = window[drawn].tolist()
    if len(chosen) < k:
        _pick(rng.permutation(np.flatnonzero(_outside(response_row, req) == 0)), keys, banned, k,
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


def sample_one(method: str, index: BM25Index, tokens: Sequence[list[str]], keys: np.ndarray,
               req: Request, k: int, *, depth: int = 1000) -> Sampled:
    """The negatives of one query by ``method`` and every candidate's first-stage score.

    ``context`` and ``response`` rank the full score row of the context / the positive; every
    candidate is then scored alone for the context (``BM25Index.span_scores``, equal to the full
    row's entries bit for bit).
    Joining the context with spaces and tokenising gives the same query, since a space never joins
    two tokens."""
    if method not in METHODS:
        raise ValueError(f"unknown negative sampling method {method!r}; valid: {', '.join(METHODS)}")
    if method == "context":
        chosen = context_negatives(index.scores([tok for pos in req.context for tok in tokens[pos]]),
                                   keys, req, k)
    elif method == "response":
        chosen = response_negatives(index.scores(tokens[req.positive]), keys, req, k, depth,
                                    _rng(req, method))
    else:
        chosen = random_negatives(keys, req, k, _rng(req, method))
    if len(chosen) < k:
        raise _exhausted(req, k, len(chosen))
    docs = [req.positive, *chosen]
    values = index.span_scores(req.context, docs)
    score = {p: float(v) for p, v in zip(docs, values, strict=True)}
    best_first = sorted(chosen, key=lambda p: (-score[p], p))
    return Sampled(negatives=tuple(best_first), scores=tuple(score[p] for p in best_first),
                   positive_score=score[req.positive])


def default_workers() -> int:
    """Threads for BM25 scoring: the CPUs this process may use (rank_bm25_rs drops the GIL)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def sample(method: str, index: BM25Index, tokens: Sequence[list[str]], keys: np.ndarray,
           requests: Sequence[Request], k: int, *, depth: int = 1000,
           progress: Progress | None = None, workers: int | None = None) -> list[Sampled]:
    """``sample_one`` for every request, on ``workers`` threads, in request order (the result
    does not depend on ``workers``)."""
    chunks = [requests[i:i + _CHUNK] for i in range(0, len(requests), _CHUNK)]
    ticker = Ticker(progress, f"{method} negatives", total=len(requests))

    def run(chunk: Sequence[Request]) -> list[Sampled]:
        return [sample_one(method, index, tokens, keys, req, k, depth=depth) for req in chunk]

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
