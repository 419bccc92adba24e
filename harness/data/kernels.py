"""Compiled inner loops of the data build (numba, ``nogil``: the sampler's threads run them in
parallel). Each is exact: it returns what the plain numpy formulation in its docstring returns, bit
for bit and position for position (tests/data/test_chitchat.py and test_bm25.py check them against
full sorts and rank_bm25).

Compiled on first use and cached under numba's cache directory (``NUMBA_CACHE_DIR``, by default
next to this file's ``__pycache__``), so a build pays the compilation (about 2 s) once per machine.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1  # the key of an empty text (harness.data.negatives.EMPTY)


@njit(nogil=True, cache=True)
def _ranked_at_least(row: np.ndarray, threshold: float, ex_start: int, ex_stop: int,
                     buf: np.ndarray) -> np.ndarray:
    """Positions with ``row >= threshold`` (and > 0) outside [ex_start, ex_stop), by descending
    score, ties by ascending position (``buf``: scratch of the row's size).

    A stable LSD radix sort on the scores' bit patterns (for positive floats the bits order as the
    values do), complemented for descending order: exact, and positions, gathered ascending, stay
    ascending within a tie. Digits every element shares are skipped."""
    count = 0
    for p in range(row.size):
        v = row[p]
        if v >= threshold and v > 0.0 and (p < ex_start or p >= ex_stop):
            buf[count] = p
            count += 1
    pos = buf[:count].copy()
    key = np.empty(count, dtype=np.uint64)
    bits = row.view(np.uint64)
    for j in range(count):
        key[j] = ~bits[pos[j]]
    tmp_key = np.empty_like(key)
    tmp_pos = np.empty_like(pos)
    counts = np.empty(257, dtype=np.int64)
    for shift in range(0, 64, 8):
        counts[:] = 0
        for j in range(count):
            counts[((key[j] >> np.uint64(shift)) & np.uint64(255)) + 1] += 1
        if counts.max() == count:
            continue
        for d in range(256):
            counts[d + 1] += counts[d]
        for j in range(count):
            d = (key[j] >> np.uint64(shift)) & np.uint64(255)
            at = counts[d]
            tmp_key[at] = key[j]
            tmp_pos[at] = pos[j]
            counts[d] = at + 1
        key, tmp_key = tmp_key, key
        pos, tmp_pos = tmp_pos, pos
    return pos


@njit(nogil=True, cache=True)
def _usable(row: np.ndarray, keys: np.ndarray, banned: int, n: int, ex_start: int, ex_stop: int,
            stride: int, buf: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """``usable_hits`` with the caller's scratch: ``buf`` (the row's size) and ``seen`` (a flag per
    key, all False; left all False)."""
    sample = row[::stride].copy()
    expected = (n + n // 4) // stride + 1
    wanted = expected + 4 * int(expected ** 0.5) + 8
    out = np.empty(n, dtype=np.int64)
    while True:
        threshold = 0.0
        if sample.size > wanted:
            threshold = np.partition(sample, sample.size - wanted)[sample.size - wanted]
        ranked = _ranked_at_least(row, threshold, ex_start, ex_stop, buf)
        found = 0
        for p in ranked:
            key = keys[p]
            if key == EMPTY or key == banned or seen[key]:
                continue
            seen[key] = True
            out[found] = p
            found += 1
            if found == n:
                break
        for j in range(found):  # leave the flags as found
            seen[keys[out[j]]] = False
        if found == n or threshold <= 0.0:
            return out[:found]
        wanted *= 4


@njit(nogil=True, cache=True)
def usable_hits(row: np.ndarray, keys: np.ndarray, banned: int, n: int, ex_start: int, ex_stop: int,
                stride: int) -> np.ndarray:
    """The first ``n`` usable hits of the score ``row`` in rank order (score desc, position asc):
    score > 0, outside [ex_start, ex_stop), a key other than EMPTY and ``banned``, each key at its
    first (best-ranked) position only. Equal to walking the whole ranking.

    Ranks only the positions scoring at least a threshold: the ``wanted``-th largest of a strided
    sample of the row (a few standard deviations above the share of ``n`` the sample stands for).
    Every position left out scores below every one ranked, so if the ranked ones hold ``n`` usable
    hits they are the first ``n`` of the whole ranking; else the threshold is lowered (``wanted``
    times 4) and at last every hit is ranked."""
    seen = np.zeros(max(keys.max(), 0) + 1, dtype=np.bool_)
    return _usable(row, keys, banned, n, ex_start, ex_stop, stride, np.empty(row.size, dtype=np.int64), seen)


@njit(nogil=True, cache=True)
def response_window(ids: np.ndarray, post_ptr: np.ndarray, post_docs: np.ndarray,
                    post_weights: np.ndarray, acc: np.ndarray, keys: np.ndarray, banned: int, n: int,
                    ex_start: int, ex_stop: int, stride: int, buf: np.ndarray,
                    seen: np.ndarray) -> np.ndarray:
    """``usable_hits`` of the BM25 row of the query ``ids`` (term ids in query order, repeats
    kept), the row built in ``acc`` term at a time: each posting's weight added to its document's
    total in query order from 0.0, which is rank_bm25's ``score += ...`` (for a document without
    the term rank_bm25 adds 0.0, which changes nothing). ``acc``, ``buf`` (the corpus's size) and
    ``seen`` (a False flag per key) are the caller's scratch; the row is left in ``acc``."""
    acc[:] = 0.0
    for t in ids:
        for j in range(post_ptr[t], post_ptr[t + 1]):
            acc[post_docs[j]] += post_weights[j]
    return _usable(acc, keys, banned, n, ex_start, ex_stop, stride, buf, seen)


@njit(nogil=True, cache=True)
def ordered_sums(docs: np.ndarray, tokens: np.ndarray, indptr: np.ndarray, terms: np.ndarray,
                 weights: np.ndarray) -> np.ndarray:
    """BM25 of each document in ``docs`` for the query ``tokens`` (term ids, in query order, repeats
    kept): the document's weight of each token added left to right from 0.0, as rank_bm25 does
    (a token absent from the document adds 0.0 there: left out, which changes nothing). A
    document's (term, weight) pairs are ``terms``/``weights`` over ``indptr``, terms ascending."""
    out = np.zeros(docs.size)
    for i in range(docs.size):
        lo, hi = indptr[docs[i]], indptr[docs[i] + 1]
        total = 0.0
        for t in tokens:
            a, b = lo, hi
            while a < b:  # binary search of t among the document's terms
                mid = (a + b) // 2
                if terms[mid] < t:
                    a = mid + 1
                else:
                    b = mid
            if a < hi and terms[a] == t:
                total += weights[a]
        out[i] = total
    return out
