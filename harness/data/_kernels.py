"""Compiled inner loops of the BM25 scorer and the response sampler (numba, ``nogil``).

Each kernel does what a few lines of numpy would, in one pass and without temporaries (the numpy
form is given with each). tests/data/test_bm25.py checks the scores against rank_bm25 bit for bit,
and tests/data/test_chitchat.py the response window against a full sort of the row.
Numba compiles a kernel on its first call and caches the machine code next to this file
(``cache=True``), so only the first build on a machine pays the compilation (seconds of CPU, in two
background processes while the corpus is read: ``harness.data._negatives.prewarm``).
The kernels release the GIL, so the sampler's threads run them in parallel.

Floating point: ``score_row`` and ``score_docs`` add a document's weights one query token at a time,
left to right, starting from 0.0, which is rank_bm25's order of operations (``harness.data._bm25``).
A token absent from a document adds nothing there; rank_bm25 adds ``idf * 0.0``, a zero, which
leaves every sum unchanged, so the results are bitwise rank_bm25's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit


class Postings(NamedTuple):
    """The index by term and block of documents, for full rows (``score_row``).

    A term's postings in block ``k`` (documents ``k * block`` to ``(k + 1) * block - 1``) are
    ``once_ptr[t, k]:once_ptr[t, k + 1]`` (documents where it occurs once; offset in the block,
    weight ``idf[t] * g1[doc]``) and ``more_ptr[t, k]:more_ptr[t, k + 1]`` (the others, with their
    weight): 2 bytes per posting for nine in ten postings instead of 12."""

    block: int
    once_ptr: np.ndarray
    once_offset: np.ndarray
    idf: np.ndarray
    g1: np.ndarray
    more_ptr: np.ndarray
    more_offset: np.ndarray
    more_weight: np.ndarray


@njit(cache=True, nogil=True)
def _score_block(query: np.ndarray, postings: Postings, k: int, out: np.ndarray) -> None:
    """``out`` (the block's length) = the query's scores of block ``k``'s documents."""
    base = k * postings.block
    g1 = postings.g1[base:base + out.size]
    out[:] = 0.0
    for i in range(query.size):
        t = query[i]
        idf = postings.idf[t]
        for s in range(postings.once_ptr[t, k], postings.once_ptr[t, k + 1]):
            d = postings.once_offset[s]
            out[d] += idf * g1[d]
        for s in range(postings.more_ptr[t, k], postings.more_ptr[t, k + 1]):
            out[postings.more_offset[s]] += postings.more_weight[s]


@njit(cache=True, nogil=True)
def score_row(query: np.ndarray, postings: Postings, out: np.ndarray) -> None:
    """``out`` = the query's (token ids) score of every document, a block at a time: for each
    token of ``query`` in order, plus its weight in every document that has it."""
    for k in range(postings.once_ptr.shape[1] - 1):
        base = k * postings.block
        _score_block(query, postings, k, out[base:min(base + postings.block, out.size)])


@njit(cache=True, nogil=True)
def score_row_sampled(query: np.ndarray, postings: Postings, out: np.ndarray, stride: int,
                      sample: np.ndarray) -> int:
    """``score_row``, and ``strided_hits(out, stride, sample)`` taken from each block of the row
    while it is still in the core's cache; returns their number."""
    count = 0
    for k in range(postings.once_ptr.shape[1] - 1):
        base = k * postings.block
        stop = min(base + postings.block, out.size)
        _score_block(query, postings, k, out[base:stop])
        count = _strided_hits_in(out, base, stop, stride, sample, count)
    return count


@njit(cache=True, nogil=True)
def strided_hits(row: np.ndarray, stride: int, sample: np.ndarray) -> int:
    """Writes the positive scores among ``row[::stride]`` to ``sample`` in position order; returns
    their number (``v = row[::stride]; v[v > 0]`` in numpy)."""
    return _strided_hits_in(row, 0, row.size, stride, sample, np.int64(0))


@njit(cache=True, nogil=True)
def _strided_hits_in(row: np.ndarray, start: int, stop: int, stride: int, sample: np.ndarray,
                     count: int) -> int:
    """``strided_hits`` over the positions ``[start, stop)`` only, appended to ``sample`` from
    ``count``; returns the new count."""
    for p in range(-(-start // stride) * stride, stop, stride):
        if row[p] > 0:
            sample[count] = row[p]
            count += 1
    return count


@njit(cache=True, nogil=True)
def _argsort_small(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` by insertion: a query's few tokens (and a smaller
    compiled kernel than numba's merge sort)."""
    order = np.arange(values.size)
    for i in range(1, values.size):
        o = order[i]
        v = values[o]
        j = i
        while j > 0 and values[order[j - 1]] > v:
            order[j] = order[j - 1]
            j -= 1
        order[j] = o
    return order


@njit(cache=True, nogil=True)
def score_docs(query: np.ndarray, docs: np.ndarray, indptr: np.ndarray, terms: np.ndarray,
               weights: np.ndarray) -> np.ndarray:
    """The query's score of each of ``docs``: from 0.0, per token id of ``query`` in order, plus
    the document's weight of that term (its ``terms[indptr[d]:indptr[d + 1]]``, ascending), nothing
    where it lacks the term. The query's distinct terms are sorted once; each document's terms are
    merged with them into a weight per distinct term, which the query's tokens then add in order."""
    order = _argsort_small(query)
    distinct = np.empty(query.size, dtype=query.dtype)  # the query's terms, ascending, once each
    slot = np.empty(query.size, dtype=np.int64)  # a query token's index in ``distinct``
    m = 0
    for i in range(query.size):
        t = query[order[i]]
        if m == 0 or distinct[m - 1] != t:
            distinct[m] = t
            m += 1
        slot[order[i]] = m - 1
    weight = np.empty(m)
    present = np.zeros(m, dtype=np.uint8)
    out = np.zeros(docs.size)
    for i in range(docs.size):
        present[:] = 0
        a = indptr[docs[i]]
        stop = indptr[docs[i] + 1]
        b = 0
        while a < stop and b < m:
            if terms[a] < distinct[b]:
                a += 1
            elif terms[a] > distinct[b]:
                b += 1
            else:
                weight[b] = weights[a]
                present[b] = 1
                a += 1
                b += 1
        total = 0.0
        for j in range(query.size):
            if present[slot[j]]:
                total += weight[slot[j]]
        out[i] = total
    return out


@njit(cache=True, nogil=True)
def _kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest of ``values`` (1-based; ``np.partition(values, values.size - k)[values.size
    - k]``), reordering ``values`` in place: a quickselect."""
    lo = 0
    hi = values.size - 1
    target = k - 1  # its index in descending order
    while lo < hi:
        pivot = values[(lo + hi) >> 1]
        i = lo
        j = hi
        while i <= j:
            while values[i] > pivot:
                i += 1
            while values[j] < pivot:
                j -= 1
            if i <= j:
                values[i], values[j] = values[j], values[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            break
    return values[target]


@njit(cache=True, nogil=True)
def _usable_where(row: np.ndarray, first: np.ndarray, banned_at: int, start: int, stop: int,
                  moved: np.ndarray, cut: float, equal: bool, out: np.ndarray, values: np.ndarray,
                  mask: np.ndarray) -> int:
    """Writes to ``out`` the ascending positions ``p`` with ``row[p] > cut`` (``== cut`` where
    ``equal``) that are a text's first position (``first``), not ``banned_at`` and outside
    ``[start, stop)``, merged with the ``moved`` positions (ascending, none of them among those)
    that compare alike, and their scores to ``values``; returns their number. In numpy::

        found = np.flatnonzero((row == cut if equal else row > cut) & first)
        found = found[(found != banned_at) & ((found < start) | (found >= stop))]
        out = np.sort(np.concatenate([found, moved[row[moved] == cut if equal else row[moved] > cut]]))
        values = row[out]

    The comparison fills ``mask`` (a byte per position, a multiple of 8 long) in one vectorised
    loop; only its non-zero 8-byte words are looked at again."""
    size = row.size
    flags = first.view(np.uint8)
    if equal:  # vectorised: bytes, not booleans
        for p in range(size):
            mask[p] = np.uint8(row[p] == cut) & flags[p]
    else:
        for p in range(size):
            mask[p] = np.uint8(row[p] > cut) & flags[p]
    for p in range(size, mask.size):
        mask[p] = 0
    words = mask.view(np.uint64)
    n = np.int64(0)  # typed, not the literal 0: one compiled _moved_before, not one per literal
    i = np.int64(0)  # next of moved
    for w in range(words.size):
        if words[w] == 0:
            continue
        for p in range(8 * w, 8 * w + 8):
            if mask[p] and p != banned_at and (p < start or p >= stop):
                i, n = _moved_before(row, moved, i, p, cut, equal, out, values, n)
                out[n] = p
                values[n] = row[p]
                n += 1
    return _moved_before(row, moved, i, size, cut, equal, out, values, n)[1]


@njit(cache=True, nogil=True)
def _moved_before(row: np.ndarray, moved: np.ndarray, i: int, limit: int, cut: float,
                  equal: bool, out: np.ndarray, values: np.ndarray, n: int) -> tuple[int, int]:
    """``_usable_where``'s merge: appends to ``out``/``values`` (from ``n``) the ``moved``
    positions from ``i`` below ``limit`` that compare true against ``cut``; returns the next
    ``i`` and ``n``."""
    while i < moved.size and moved[i] < limit:
        m = moved[i]
        i += 1
        if (row[m] == cut) if equal else (row[m] > cut):
            out[n] = m
            values[n] = row[m]
            n += 1
    return i, n


_DIGIT = 11  # bits per pass of ``ranked``'s radix sort: six passes over 64-bit keys


@njit(cache=True, nogil=True)
def ranked(positions: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``positions`` (ascending) by descending ``values`` (their scores: non-negative, never -0.0
    or NaN, as the window's hits are), ties in position order:
    ``positions[np.argsort(-values, kind="stable")]`` in numpy.

    A least-significant-digit radix sort, which is stable, on the complement of each score's bits
    (a non-negative float64's bits, read as an unsigned integer, ascend with its value): a few
    branch-free passes where a comparison sort mispredicts a branch per comparison (the times of
    both on real queries' windows are in benchmarks/results/data_build.md). A digit that every key
    shares is skipped."""
    n = positions.size
    mask = np.uint64((1 << _DIGIT) - 1)
    passes = -(-64 // _DIGIT)
    src_k = np.empty(n, dtype=np.uint64)
    src_p = np.empty(n, dtype=np.int64)
    bits = values.view(np.uint64)
    for i in range(n):
        src_k[i] = ~bits[i]
        src_p[i] = positions[i]
    dst_k = np.empty(n, dtype=np.uint64)
    dst_p = np.empty(n, dtype=np.int64)
    counts = np.zeros((passes, 1 << _DIGIT), dtype=np.int64)
    for i in range(n):
        for j in range(passes):
            counts[j, (src_k[i] >> np.uint64(_DIGIT * j)) & mask] += 1
    for j in range(passes):
        shift = np.uint64(_DIGIT * j)
        if n == 0 or counts[j, (src_k[0] >> shift) & mask] == n:
            continue
        total = 0
        for d in range(1 << _DIGIT):  # counts -> first output slot of each digit
            c = counts[j, d]
            counts[j, d] = total
            total += c
        for i in range(n):
            d = (src_k[i] >> shift) & mask
            o = counts[j, d]
            counts[j, d] = o + 1
            dst_k[o] = src_k[i]
            dst_p[o] = src_p[i]
        src_k, dst_k = dst_k, src_k
        src_p, dst_p = dst_p, src_p
    return src_p


@njit(cache=True, nogil=True)
def usable_hits(row: np.ndarray, hits: np.ndarray, first: np.ndarray, banned_at: int, start: int,
                stop: int, moved: np.ndarray, n: int, stride: int, positions: np.ndarray,
                values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``harness.data._negatives._usable_hits``: the first ``n`` usable hits of ``row`` in rank
    order, found as its docstring says (``_usable_where`` is one of its passes); ``hits``: the
    positive scores of ``row[::stride]`` (``strided_hits``; reordered here); ``banned_at``: the
    positive's text's first position (-1: none). Work arrays: ``positions`` (int64) and
    ``values`` (float64), twice the row's length; ``mask``: bytes, the row's length rounded up to 8."""
    size = row.size
    count = hits.size
    expected = (n + n // 8) // stride + 1
    wanted = expected + 2 * int(expected ** 0.5) + 4
    while True:
        threshold = 0.0
        if count > wanted:
            threshold = _kth_largest(hits, wanted)
        h = _usable_where(row, first, banned_at, start, stop, moved, threshold, np.bool_(False),
                          positions[:size], values[:size], mask)
        if threshold <= 0 or h >= n:
            return _first(ranked(positions[:h], values[:h]), n, positions[size:size])
        t = _usable_where(row, first, banned_at, start, stop, moved, threshold, np.bool_(True),
                          positions[size:], values[size:], mask)
        if h + t >= n:
            return _first(ranked(positions[:h], values[:h]), n, positions[size:size + n - h])
        wanted *= 4


@njit(cache=True, nogil=True)
def moved(first: np.ndarray, following: np.ndarray, keys: np.ndarray, start: int, stop: int,
          banned: int) -> np.ndarray:
    """``negatives.Texts.moved``: the first positions at or after ``stop`` of the texts (key not
    ``banned``) whose first position (``first``) lies in ``[start, stop)``, ascending; ``following``
    is each position's text's next position (-1 at its last)."""
    out = np.empty(stop - start, dtype=np.int64)
    n = 0
    for p in range(start, stop):
        if first[p] and following[p] >= 0 and keys[p] != banned:
            nxt = following[p]
            while 0 <= nxt < stop:
                nxt = following[nxt]
            if nxt >= 0:
                j = n  # insert in order: a conversation's few texts
                while j > 0 and out[j - 1] > nxt:
                    out[j] = out[j - 1]
                    j -= 1
                out[j] = nxt
                n += 1
    return out[:n].copy()


@njit(cache=True, nogil=True)
def candidate_scores(tokens: np.ndarray, token_ptr: np.ndarray, context_start: np.ndarray,
                     context_stop: np.ndarray, positives: np.ndarray, chosen: np.ndarray,
                     indptr: np.ndarray, terms: np.ndarray, weights: np.ndarray,
                     negatives: np.ndarray, scores: np.ndarray) -> None:
    """For each query ``q`` of a batch: the first-stage scores (``score_docs`` with the query the
    tokens of the documents ``context_start[q]:context_stop[q]``, concatenated) of its positive
    and of its ``chosen[q]`` negatives; writes the negatives best first (ties by position) to
    ``negatives[q]`` and the scores to ``scores[q]``: the positive's, then the negatives' in that
    order. In Python: ``sorted(chosen, key=lambda p: (-score[p], p))``."""
    k = chosen.shape[1]
    docs = np.empty(k + 1, dtype=np.int64)
    for q in range(positives.size):
        query = tokens[token_ptr[context_start[q]]:token_ptr[context_stop[q]]]
        docs[0] = positives[q]
        for i in range(k):
            docs[i + 1] = chosen[q, i]
        values = score_docs(query, docs, indptr, terms, weights)
        scores[q, 0] = values[0]
        for i in range(k):  # insertion sort of k negatives: best score first, then position
            p = docs[i + 1]
            v = values[i + 1]
            j = i
            while j > 0 and (scores[q, j] < v or (scores[q, j] == v and negatives[q, j - 1] > p)):
                negatives[q, j] = negatives[q, j - 1]
                scores[q, j + 1] = scores[q, j]
                j -= 1
            negatives[q, j] = p
            scores[q, j + 1] = v


@njit(cache=True, nogil=True)
def _first(ranking: np.ndarray, n: int, then: np.ndarray) -> np.ndarray:
    """The first ``n`` of ``ranking`` followed by ``then``, in a new array
    (``np.concatenate((ranking[:n], then))``)."""
    m = min(n, ranking.size)
    out = np.empty(m + then.size, dtype=np.int64)
    for i in range(m):
        out[i] = ranking[i]
    for i in range(then.size):
        out[m + i] = then[i]
    return out
