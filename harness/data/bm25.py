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
The index is ``rank_bm25_rs.BM25Okapi``, a Rust drop-in whose scores are bit-identical to
rank_bm25's (tests/data/test_bm25.py proves it on chitchat utterances) and ~400x faster.
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


class BM25Index:
    """Okapi BM25 over a fixed corpus of tokenised documents, addressed by position 0..N-1.

    >>> index = BM25Index([tokenize("a cat"), tokenize("a dog"), tokenize("birds fly")])
    >>> int(index.scores(tokenize("cat")).argmax())
    0
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
        # For batch_scores: rank_bm25's statistics, read once (the Rust object converts them to
        # Python on every access).
        self._k1 = k1
        self._idf: dict[str, float] = dict(self._bm25.idf)
        doc_len = np.asarray(self._bm25.doc_len)
        # k1 (1 - b + b |d| / avgdl) per document, evaluated as rank_bm25 evaluates it.
        self._norm: list[float] = (k1 * (1 - b + b * doc_len / self._bm25.avgdl)).tolist()
        self._tf: list[dict[str, int]] = list(self._bm25.doc_freqs)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every document for the tokenised ``query`` (float64, length N, read-only)."""
        return self._bm25.get_scores(list(query))  # type: ignore[no-any-return]

    def batch_scores(self, query: Sequence[str], doc_ids: Sequence[int]) -> np.ndarray:
        """BM25 scores of the documents at positions ``doc_ids`` only, equal to ``scores()[doc_ids]``
        bit for bit: rank_bm25's get_batch_scores, operation for operation, in float64. For a few
        documents this costs tens of microseconds where a full row (or the Rust batch call, which
        converts the corpus' document lengths on every call) costs milliseconds."""
        ids = [int(i) for i in doc_ids]
        if any(not 0 <= i < self.size for i in ids):
            raise IndexError(f"document position out of range [0, {self.size})")
        # Per document, the terms in query order: a query token absent from the document adds
        # idf * 0.0 = +-0.0, which leaves the sum unchanged, so it is skipped.
        k1p = self._k1 + 1
        out = np.empty(len(ids))
        for j, i in enumerate(ids):
            tf, norm, total = self._tf[i], self._norm[i], 0.0
            for q in query:
                f = tf.get(q)
                if f:
                    total += (self._idf.get(q) or 0) * (f * k1p / (f + norm))
            out[j] = total
        return out
