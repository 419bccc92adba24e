"""BM25 for negative sampling and the sigma_BM25 difficulty: tokenisation and an Okapi index.

Tokenisation (``tokenize``): the text is lowercased and split into the maximal runs of Unicode word
characters (regex ``\\w+``: letters, digits, underscore); punctuation and whitespace separate tokens
and are dropped. ``tokenize("Don't PANIC, it's 42!") == ["don", "t", "panic", "it", "s", "42"]``.

Scoring (``BM25Index``): Okapi BM25 exactly as ``rank_bm25.BM25Okapi`` computes it, with the
parameters Penha & Hauff (ECIR 2020, section 4) use for sigma_BM25 (k1 = 1.5, b = 0.75,
epsilon = 0.25)::

    score(q, d) = sum_{t in q} idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = log((N - n(t) + 0.5) / (n(t) + 0.5)), floored at epsilon * mean(idf) where negative

The sum runs over the query's tokens with repetition (a token twice in the query counts twice).

Equality with rank_bm25: bitwise (float64, ``np.array_equal``, no tolerance), for full rows and for
the scores of a few documents alike; tests/data/test_bm25.py proves both on chitchat utterances
against the pure-Python rank_bm25. The statistics (avgdl, idf with its epsilon floor) are computed
with rank_bm25's operations in its order (``_idf``). Each weight ``w(d, t)`` is computed once with
rank_bm25's float64 operations in its order (``idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * |d| /
avgdl)))``), and a document's score adds them left to right in query order from 0.0, exactly as
rank_bm25's ``score += ...`` loop does; a query token absent from the document adds 0.0 there,
which changes no sum, so leaving it out is exact. Full rows (``scores``, ``span_row``: the
sampler's rankings) and the scores of a few documents (``batch_scores``, ``span_scores``: every
candidate's first-stage score) are compiled loops (``harness.data._kernels``, numba) over an
inverted index by term and by document respectively. Rankings (ties, the top-``depth`` cut)
therefore match rank_bm25's to the last bit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from types import ModuleType
from typing import NamedTuple

import numpy as np

from harness.errors import DataError

K1 = 1.5
B = 0.75
EPSILON = 0.25

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lowercased ``\\w+`` tokens of ``text`` (see the module docstring)."""
    return _TOKEN.findall(text.lower())


_BLOCK = 16384  # documents per block of a full row: its scores and g1 stay in the core's cache


class Documents(NamedTuple):
    """The index by document, as the compiled kernels read it: document ``d``'s (term id, weight)
    pairs are ``terms[indptr[d]:indptr[d + 1]]`` and ``weights[...]`` (by term id), and its token
    ids in order ``tokens[token_ptr[d]:token_ptr[d + 1]]``."""

    tokens: np.ndarray
    token_ptr: np.ndarray
    indptr: np.ndarray
    terms: np.ndarray
    weights: np.ndarray


def _by_term_and_block(terms: np.ndarray, rows: np.ndarray, n_terms: int,
                       n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointers ``[t, k]`` and in-block offsets of the (term, document) pairs sorted by term,
    then document (``Postings``), and that order (indices into the pairs)."""
    order = np.lexsort((rows, terms))
    terms, rows = terms[order], rows[order]
    n_blocks = max(1, -(-n_docs // _BLOCK))
    block = rows // _BLOCK
    counts = np.bincount(terms * n_blocks + block, minlength=n_terms * n_blocks)
    ptr = np.zeros((n_terms, n_blocks + 1), dtype=np.int64)
    ends = np.cumsum(counts).reshape(n_terms, n_blocks)
    ptr[:, 1:] = ends
    ptr[1:, 0] = ends[:-1, -1]
    return ptr, (rows - block * _BLOCK).astype(np.uint16), order


def _idf(doc_freqs: list[int], n_docs: int, epsilon: float) -> list[float]:
    """rank_bm25's ``BM25Okapi._calc_idf`` for the terms' document frequencies in its order:
    ``log(N - n + 0.5) - log(n + 0.5)``, their sum taken left to right, negative ones replaced
    by ``epsilon`` times the mean (``math.log``, as rank_bm25 uses)."""
    values = [math.log(n_docs - n + 0.5) - math.log(n + 0.5) for n in doc_freqs]
    total = 0.0
    for v in values:  # not sum(): from Python 3.12 it compensates, which rank_bm25's += does not
        total += v
    floor = epsilon * (total / len(values)) if values else 0.0
    return [floor if v < 0 else v for v in values]


def _kernels() -> ModuleType:
    """The compiled kernels, imported on first use (numba takes a moment to import)."""
    from harness.data import _kernels as kernels

    return kernels


class BM25Index:
    """Okapi BM25 over a fixed corpus of tokenised documents, addressed by position 0..N-1.

    The weights ``w(d, t) = idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| /
    avgdl))``, each computed with rank_bm25's float64 operations, are indexed twice: by term and
    block of documents (``postings``) for full rows (``scores``, ``span_row``: a fraction of a
    millisecond over the full chitchat corpus), and by document for ``batch_scores`` and ``span_scores`` (a few
    documents: microseconds). Both add a document's weights in query order starting from 0.0, as
    rank_bm25 does (a term absent from the document adds 0.0, which changes nothing), so their
    scores equal each other's and rank_bm25's bit for bit.

    >>> index = BM25Index([tokenize("a cat"), tokenize("a dog"), tokenize("birds fly")])
    >>> int(index.scores(tokenize("cat")).argmax())
    0
    >>> index.batch_scores(tokenize("a dog"), [1, 0, 2]).tolist() == index.scores(tokenize("a dog"))[[1, 0, 2]].tolist()
    True
    """

    def __init__(self, corpus: Sequence[Sequence[str]], *, k1: float = K1, b: float = B,
                 epsilon: float = EPSILON) -> None:
        if len(corpus) == 0:
            raise DataError("cannot build a BM25 index over an empty corpus")
        docs = [list(doc) for doc in corpus]
        self.size = len(docs)
        self._build_inverted(docs, k1, b, epsilon)

    def _build_inverted(self, docs: list[list[str]], k1: float, b: float, epsilon: float) -> None:
        """rank_bm25's statistics; per document its (term id, weight) pairs by term id (CSR
        ``_indptr``, ``_terms``, ``_weights``) and its token ids in order (``_token_ptr``,
        ``_tokens``); ``postings``."""
        vocab: dict[str, int] = {}
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for doc in docs for t in doc),
                          dtype=np.int64)
        lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        n_terms = max(len(vocab), 1)
        pairs, counts = np.unique(np.repeat(np.arange(len(docs)), lengths) * n_terms + ids,
                                  return_counts=True)
        rows, terms = np.divmod(pairs, n_terms)
        freq = counts.astype(np.float64)
        # rank_bm25's avgdl (num_doc / corpus_size, Python ints) and k1 (1 - b + b |d| / avgdl)
        avgdl = int(lengths.sum()) / len(docs)
        norm = k1 * (1 - b + b * lengths / avgdl)
        k1p = k1 + 1
        # vocab holds the terms in order of first occurrence, the order of rank_bm25's nd
        idf = _idf(np.bincount(terms, minlength=len(vocab)).tolist(), len(docs), epsilon)
        # rank_bm25: (idf.get(q) or 0) * (q_freq * (k1 + 1) / (q_freq + k1 * (1 - b + b |d| / avgdl)))
        term_idf = np.array([v or 0 for v in idf], dtype=np.float64)
        weights = term_idf[terms] * (freq * k1p / (freq + norm[rows]))
        self._vocab = vocab
        self._tokens = ids.astype(np.int32)  # every document's token ids, in order
        self._token_ptr = np.concatenate([[0], np.cumsum(lengths)])
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(docs)))])
        self._terms = terms.astype(np.int32)
        self._weights = weights
        # Per document k1 + 1 over (1 + k1 (1 - b + b |d| / avgdl)): a once-occurring term's
        # weight is its idf times this, with rank_bm25's operations (f = 1.0: f * (k1 + 1) is k1 + 1).
        once = counts == 1
        g1 = 1.0 * k1p / (1.0 + norm)
        assert np.array_equal(term_idf[terms[once]] * g1[rows[once]], weights[once])
        once_ptr, once_offset, _ = _by_term_and_block(terms[once], rows[once], n_terms, len(docs))
        more_ptr, more_offset, more_order = _by_term_and_block(terms[~once], rows[~once], n_terms,
                                                               len(docs))
        from harness.data._kernels import Postings  # numba takes a moment to import: on first use

        self.postings = Postings(_BLOCK, once_ptr, once_offset,
                                 term_idf if term_idf.size else np.zeros(n_terms), g1,
                                 more_ptr, more_offset, weights[~once][more_order])

    def documents(self) -> Documents:
        """The index by document (``Documents``), for kernels that score chosen documents."""
        return Documents(self._tokens, self._token_ptr, self._indptr, self._terms, self._weights)

    def scores(self, query: Sequence[str], out: np.ndarray | None = None) -> np.ndarray:
        """BM25 score of every document for the tokenised ``query`` (float64, length N), written
        into ``out`` where given (``span_row`` says more)."""
        return self._row(self._query(query), out)

    def span_row(self, span: range, out: np.ndarray | None = None) -> np.ndarray:
        """``scores`` with the query the documents at positions ``span`` (a step-1 range), their
        tokens concatenated (no token is looked up again), written into ``out`` where given: a
        float64 array of length N that a caller scoring many queries reuses (its pages are then
        touched once)."""
        return self._row(self.span_tokens(span), out)

    def span_row_sampled(self, span: range, out: np.ndarray, stride: int, sample: np.ndarray) -> int:
        """``span_row`` into ``out``, and the positive scores among ``out[::stride]`` written to
        ``sample`` in position order (taken from each block of the row while it is in the cache,
        ``kernels.score_row_sampled``); returns their number."""
        self._check_out(out)
        if sample.size < -(-self.size // stride) or sample.dtype != np.float64:
            raise ValueError(f"sample must be a float64 array of at least {-(-self.size // stride)} values")
        return _kernels().score_row_sampled(self.span_tokens(span), self.postings, out, stride, sample)

    def _row(self, query: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        if out is None:
            out = np.empty(self.size)
        self._check_out(out)
        _kernels().score_row(query, self.postings, out)
        return out

    def _check_out(self, out: np.ndarray) -> None:
        if out.shape != (self.size,) or out.dtype != np.float64:
            raise ValueError(f"out must be a float64 array of shape ({self.size},)")

    def _query(self, query: Sequence[str]) -> np.ndarray:
        """The token ids of the query's known tokens, in order (unknown ones add 0.0: left out)."""
        vocab = self._vocab
        return np.array([vocab[t] for t in query if t in vocab], dtype=np.int32)

    def span_tokens(self, span: range) -> np.ndarray:
        """The token ids of the documents at positions ``span`` (a step-1 range), concatenated."""
        if span.step != 1 or (len(span) and not 0 <= span.start < span.stop <= self.size):
            raise IndexError(f"span {span} is not a range of document positions in [0, {self.size})")
        if not len(span):
            return self._tokens[:0]
        return self._tokens[self._token_ptr[span.start]:self._token_ptr[span.stop]]

    def _sum(self, docs: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Scores of ``docs`` for the query's token ids, each document's weights added per query
        token left to right from 0.0 (``kernels.score_docs``)."""
        return _kernels().score_docs(query, docs, self._indptr, self._terms, self._weights)

    def batch_scores(self, query: Sequence[str], doc_ids: Sequence[int]) -> np.ndarray:
        """BM25 scores of the documents at positions ``doc_ids`` only, equal to ``scores()[doc_ids]``
        bit for bit (the class docstring); for a few documents tens of microseconds where a full
        row costs milliseconds."""
        return self._sum(self._positions(doc_ids), self._query(query))

    def span_scores(self, span: range, doc_ids: Sequence[int]) -> np.ndarray:
        """``batch_scores`` with the query the corpus documents at positions ``span`` (a step-1
        range), their tokens concatenated: no token is looked up again."""
        return self._sum(self._positions(doc_ids), self.span_tokens(span))

    def _positions(self, doc_ids: Sequence[int]) -> np.ndarray:
        docs = np.asarray(doc_ids, dtype=np.int64).reshape(-1)
        if docs.size and (docs.min() < 0 or docs.max() >= self.size):
            raise IndexError(f"document position out of range [0, {self.size})")
        return docs
