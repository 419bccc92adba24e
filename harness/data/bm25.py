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
the scores of a few documents alike; tests/data/test_bm25.py proves both on chitchat utterances.
Full rows (``scores``) come from ``rank_bm25_rs.BM25Okapi``, a Rust drop-in (~400x faster than
rank_bm25). The scores of a few documents (``batch_scores``, ``span_scores``: every candidate's
first-stage score) come from a numpy inverted index: each weight ``w(d, t)`` is computed once with
rank_bm25's float64 operations in its order (``idf * (f * (k1 + 1) / (f + k1 * (1 - b + b * |d| /
avgdl)))``), and a document's score adds them left to right in query order from 0.0 (a sequential
``np.cumsum``, never a pairwise sum) exactly as rank_bm25's ``score += ...`` loop does; a query
token absent from the document adds 0.0 there, which changes no sum, so leaving it out is exact.
Rankings (ties, the top-``depth`` cut) therefore match rank_bm25's to the last bit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from harness.errors import DataError

K1 = 1.5
B = 0.75
EPSILON = 0.25

_TOKEN = re.compile(r"\w+")


def tokenize(text: str) -> list[str]:
    """Lowercased ``\\w+`` tokens of ``text`` (see the module docstring)."""
    return _TOKEN.findall(text.lower())


def _terms_of(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A query's token ids as its distinct term ids (ascending) and, per token, the index of its
    term among them (``np.unique(ids, return_inverse=True)``, by a sort: queries are short)."""
    order = np.argsort(ids, kind="stable")
    ranked = ids[order]
    new = np.empty(ranked.size, dtype=bool)
    new[:1] = True
    np.not_equal(ranked[1:], ranked[:-1], out=new[1:])
    index = np.empty(ranked.size, dtype=np.int64)
    index[order] = np.cumsum(new) - 1
    return ranked[new], index


class BM25Index:
    """Okapi BM25 over a fixed corpus of tokenised documents, addressed by position 0..N-1.

    Besides rank_bm25_rs' full rows (``scores``), an inverted index of the weights
    ``w(d, t) = idf(t) * f(t, d) * (k1 + 1) / (f(t, d) + k1 * (1 - b + b * |d| / avgdl))``, each
    computed with rank_bm25's float64 operations, serves ``batch_scores`` and ``span_scores`` (a
    few documents: tens of microseconds where a full row costs a millisecond). Both add a
    document's weights in query order starting from 0.0, as rank_bm25 does (a term absent from the
    document adds 0.0, which changes nothing), so their scores equal ``scores()`` bit for bit.

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
        try:
            from rank_bm25_rs import BM25Okapi
        except ModuleNotFoundError:
            raise DataError("BM25 needs rank-bm25-rs: pip install rank-bm25-rs") from None
        # The Rust path takes an exact list of lists of str; anything else falls back to Python.
        docs = [list(doc) for doc in corpus]
        self._bm25 = BM25Okapi(docs, k1=k1, b=b, epsilon=epsilon)
        self.size = len(docs)
        # rank_bm25's statistics, read once (the Rust object converts them on every access).
        idf: dict[str, float] = dict(self._bm25.idf)
        doc_len = np.asarray(self._bm25.doc_len)
        # k1 (1 - b + b |d| / avgdl) per document, evaluated as rank_bm25 evaluates it.
        norm = k1 * (1 - b + b * doc_len / self._bm25.avgdl)
        self._build_inverted(docs, idf, norm, k1 + 1)

    def _build_inverted(self, docs: list[list[str]], idf: dict[str, float], norm: np.ndarray,
                        k1p: float) -> None:
        """Per document its (term id, weight) pairs by term id (CSR ``_indptr``, ``_terms``,
        ``_weights``) and its token ids in order (``_token_ptr``, ``_tokens``)."""
        vocab: dict[str, int] = {}
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for doc in docs for t in doc),
                          dtype=np.int64)
        lengths = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        n_terms = max(len(vocab), 1)
        pairs, counts = np.unique(np.repeat(np.arange(len(docs)), lengths) * n_terms + ids,
                                  return_counts=True)
        rows, terms = np.divmod(pairs, n_terms)
        freq = counts.astype(np.float64)
        # rank_bm25: (idf.get(q) or 0) * (q_freq * (k1 + 1) / (q_freq + k1 * (1 - b + b |d| / avgdl)))
        term_idf = np.array([idf.get(t) or 0 for t in vocab], dtype=np.float64)
        weights = term_idf[terms] * (freq * k1p / (freq + norm[rows]))
        self._vocab = vocab
        self._tokens = ids.astype(np.int32)  # every document's token ids, in order
        self._token_ptr = np.concatenate([[0], np.cumsum(lengths)])
        self._indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(docs)))])
        self._terms = terms.astype(np.int32)
        self._weights = weights

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the tokenised ``query`` (float64, length N, read-only)."""
        return self._bm25.get_scores(list(query))  # type: ignore[no-any-return]

    def _query(self, query: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """``_terms_of`` the query's known tokens (unknown ones add 0.0: left out)."""
        vocab = self._vocab
        return _terms_of(np.array([vocab[t] for t in query if t in vocab], dtype=np.int64))

    def _sum(self, docs: np.ndarray, terms: np.ndarray, order: np.ndarray) -> np.ndarray:
        """Scores of ``docs`` for the query (``_terms_of``'s ``terms`` and ``order``): each document's
        weights gathered per query token and added left to right (``np.cumsum`` is sequential)."""
        if not order.size or not docs.size:
            return np.zeros(docs.size)
        starts = self._indptr[docs]
        lengths = self._indptr[docs + 1] - starts
        # the entries of every document in docs, and the row (index into docs) of each
        offsets = np.cumsum(lengths) - lengths
        entry = np.arange(int(offsets[-1] + lengths[-1])) + np.repeat(starts - offsets, lengths)
        row = np.repeat(np.arange(docs.size), lengths)
        term = self._terms[entry]
        col = np.minimum(np.searchsorted(terms, term), terms.size - 1)
        hit = terms[col] == term
        table = np.zeros((docs.size, terms.size))
        table[row[hit], col[hit]] = self._weights[entry[hit]]
        return np.cumsum(table[:, order], axis=1)[:, -1]

    def batch_scores(self, query: Sequence[str], doc_ids: Sequence[int]) -> np.ndarray:
        """BM25 scores of the documents at positions ``doc_ids`` only, equal to ``scores()[doc_ids]``
        bit for bit (the class docstring); for a few documents tens of microseconds where a full
        row costs milliseconds."""
        return self._sum(self._positions(doc_ids), *self._query(query))

    def span_scores(self, span: range, doc_ids: Sequence[int]) -> np.ndarray:
        """``batch_scores`` with the query the corpus documents at positions ``span`` (a step-1
        range), their tokens concatenated: no token is looked up again."""
        if span.step != 1 or (len(span) and not 0 <= span.start < span.stop <= self.size):
            raise IndexError(f"span {span} is not a range of document positions in [0, {self.size})")
        ids = self._tokens[self._token_ptr[span.start]:self._token_ptr[span.stop]] if len(span) else []
        return self._sum(self._positions(doc_ids), *_terms_of(np.asarray(ids, dtype=np.int64)))

    def _positions(self, doc_ids: Sequence[int]) -> np.ndarray:
        docs = np.asarray(doc_ids, dtype=np.int64).reshape(-1)
        if docs.size and (docs.min() < 0 or docs.max() >= self.size):
            raise IndexError(f"document position out of range [0, {self.size})")
        return docs
