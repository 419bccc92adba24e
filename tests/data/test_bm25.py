"""BM25Index gives exactly rank_bm25's scores on real chitchat utterances: full rows (compiled, a
block of documents at a time) and the scores of a few documents (batch_scores, span_scores), bit
for bit, against the pure-Python rank_bm25."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rank_bm25

from harness.data import _bm25 as bm25
from harness.data._bm25 import EPSILON, K1, B, BM25Index, tokenize
from harness.data._chitchat import read_conversations
from harness.errors import DataError


@pytest.fixture(scope="module")
def sample(chitchat_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """~400 utterances of real conversations as documents; contexts of others as queries."""
    convs = [c for c in read_conversations(chitchat_path) if len(c.utterances) >= 8]
    docs = [tokenize(u) for c in convs[:20] for u in c.utterances][:400]
    queries = [tokenize(" ".join(c.utterances[:5])) for c in convs[20:26]]
    queries.append(tokenize("hi hi how are you you you"))  # repeated terms count per occurrence
    queries.append(["zzz-not-a-word"])  # no match anywhere
    return docs, queries


def test_tokenize_lowercases_word_runs() -> None:
    assert tokenize("Don't PANIC, it's 42!") == ["don", "t", "panic", "it", "s", "42"]
    assert tokenize("  ...  ") == []


@pytest.mark.slow
def test_scores_exactly_equal_rank_bm25(sample: tuple[list[list[str]], list[list[str]]]) -> None:
    docs, queries = sample
    assert len(docs) >= 300
    reference = rank_bm25.BM25Okapi(docs, k1=K1, b=B, epsilon=EPSILON)
    assert type(reference).__module__ == "rank_bm25"  # the pure-Python original, not the drop-in
    index = BM25Index(docs)
    for query in queries:
        ours, theirs = index.scores(query), reference.get_scores(query)
        assert ours.dtype == np.float64
        assert np.array_equal(ours, theirs)
    assert (K1, B, EPSILON) == (1.5, 0.75, 0.25)


def test_rows_over_many_blocks_exactly_equal_rank_bm25(
        sample: tuple[list[list[str]], list[list[str]]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 64 documents (the corpus spans 7, the last one short): the same rows, and the
    statistics (idf with its epsilon floor, avgdl) are rank_bm25's."""
    docs, queries = sample
    monkeypatch.setattr(bm25, "_BLOCK", 64)
    index = BM25Index(docs)
    assert index.postings.once_ptr.shape[1] - 1 == -(-len(docs) // 64) > 2
    assert len(docs) % 64
    reference = rank_bm25.BM25Okapi(docs, k1=K1, b=B, epsilon=EPSILON)
    assert any(v < 0 for v in (np.log(len(docs) - n + 0.5) - np.log(n + 0.5)
                               for n in np.bincount(index._terms)))  # the floor is exercised
    for query in queries:
        assert np.array_equal(index.scores(query), reference.get_scores(query))
        out = np.full(len(docs), np.nan)
        assert index.scores(query, out) is out and np.array_equal(out, reference.get_scores(query))


@pytest.mark.slow
def test_sampled_row_is_the_row_and_its_strided_hits(
        sample: tuple[list[list[str]], list[list[str]]], monkeypatch: pytest.MonkeyPatch) -> None:
    """``span_row_sampled`` (the response sampler's row) writes the same row as ``span_row`` and
    samples it while scoring: the positive scores among ``row[::stride]``, in position order,
    also where blocks (64 documents) are not a multiple of the stride (5)."""
    docs, _ = sample
    monkeypatch.setattr(bm25, "_BLOCK", 64)
    index = BM25Index(docs)
    for span in (range(1), range(12, 15), range(100, 101), range(390, 400), range(7, 7)):
        for stride in (1, 5, 32):
            out, hits = np.full(len(docs), np.nan), np.full(-(-len(docs) // stride), np.nan)
            count = index.span_row_sampled(span, out, stride, hits)
            row = index.span_row(span)
            assert np.array_equal(out, row)
            strided = row[::stride]
            assert np.array_equal(hits[:count], strided[strided > 0])
            assert (count > 0) == (len(span) > 0)
    with pytest.raises(ValueError, match="sample"):
        index.span_row_sampled(range(3), np.empty(len(docs)), 5, np.empty(3))


def test_batch_scores_exactly_equal_rank_bm25(sample: tuple[list[list[str]], list[list[str]]]) -> None:
    docs, queries = sample
    reference = rank_bm25.BM25Okapi(docs, k1=K1, b=B, epsilon=EPSILON)
    index = BM25Index(docs)
    ids = [0, 7, 42, 199, 311, len(docs) - 1, 7]
    for query in queries:
        ours = index.batch_scores(query, ids)
        assert np.array_equal(ours, np.asarray(reference.get_batch_scores(query, ids)))
        assert np.array_equal(ours, index.scores(query)[ids])


def test_span_scores_exactly_equal_rank_bm25(sample: tuple[list[list[str]], list[list[str]]]) -> None:
    """A span of corpus documents as the query (a context): their tokens concatenated, repeated
    terms counted per occurrence, in order; bit-identical to rank_bm25 (np.array_equal on
    float64, no tolerance)."""
    docs, _ = sample
    reference = rank_bm25.BM25Okapi(docs, k1=K1, b=B, epsilon=EPSILON)
    index = BM25Index(docs)
    ids = [0, 3, 42, 150, 151, 399, 3]
    for span in (range(10), range(40, 45), range(100, 101), range(390, 400), range(7, 7)):
        query = [tok for pos in span for tok in docs[pos]]
        ours = index.span_scores(span, ids)
        assert ours.dtype == np.float64
        assert np.array_equal(ours, np.asarray(reference.get_batch_scores(query, ids)))
        assert np.array_equal(ours, index.batch_scores(query, ids))
    with pytest.raises(IndexError):
        index.span_scores(range(395, 401), ids)


def test_best_match_and_errors() -> None:
    index = BM25Index([tokenize("a cat sat"), tokenize("a dog ran"), tokenize("birds fly high")])
    assert int(np.argmax(index.scores(tokenize("the dog")))) == 1
    with pytest.raises(IndexError):
        index.batch_scores(["dog"], [3])
    with pytest.raises(DataError, match="empty corpus"):
        BM25Index([])
