"""The embedded data set: utterances, candidates, leakage, determinism, splits and pool errors;
the context protocol (the response protocol and training samplers: test_protocols.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.config import DataConfig
from harness.data import _negatives as neg
from harness.data._bm25 import tokenize
from harness.data._chitchat import (
    Bm25,
    Corpus,
    build_splits,
    build_train,
    merge_utterances,
    read_conversations,
    read_corpus,
    sampling_requests,
)
from harness.errors import ConfigError, DataError
from harness.records import Splits


def _queries(splits: Splits):
    return [q for name in ("train", "dev", "test") for q in splits.split(name)]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def test_merge_utterances_joins_consecutive_messages_of_one_sender() -> None:
    groups = [[{"text": "hi", "sender": "a"}, {"text": " there ", "sender": "a"}],
              [{"text": "  ", "sender": "b"}],            # blank: dropped, does not split "a"
              [{"text": "how are you", "sender": "a"}],
              [{"text": "fine", "sender": "b"}, {"text": "thanks", "sender": "b"}]]
    assert merge_utterances(groups) == ("hi there how are you", "fine thanks")


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["small_splits", "small_context"])
def test_candidates_positive_first_negatives_from_other_conversations(
        fixture: str, request: pytest.FixtureRequest) -> None:
    queries = _queries(request.getfixturevalue(fixture))
    assert len({q.group for q in queries}) == 12
    for q in queries:
        conv, turn = q.qid[1:].split("t")
        assert q.group == f"c{conv}"
        assert 1 <= len(q.context) <= 10
        pos, *negs = q.candidates
        assert pos.label == 1 and pos.doc_id == f"c{conv}u{turn}" and pos.score is not None
        assert len(negs) == 9 and all(c.label == 0 for c in negs)
        assert not any(c.doc_id.startswith(f"c{conv}u") for c in negs)
        scores = [c.score for c in negs]
        assert all(s is not None for s in scores) and scores == sorted(scores, reverse=True)
        texts = [_norm(c.text) for c in q.candidates]
        assert len(set(texts)) == len(texts) and all(texts)


@pytest.mark.slow
def test_context_protocol_reproduces_the_candidates_built_before_protocols(
        small_context: Splits) -> None:
    # sha256 of the 12-conversation build of the bm25 sampler before data.protocol existed
    # (commit 55b904c): every split's qids, candidate ids, labels and scores, in order.
    blob = json.dumps([[q.qid, [[c.doc_id, c.label, c.score] for c in q.candidates]]
                       for q in _queries(small_context)])
    assert hashlib.sha256(blob.encode()).hexdigest() == (
        "7d03d9fb4e9f3e4156fcff057459e3d803586e656787235146f3ab4120a100ee")


@pytest.mark.slow
def test_negatives_are_the_true_bm25_top_hits(small_context: Splits, indexed: tuple[Corpus, Bm25]) -> None:
    corpus, bm25 = indexed
    convs = corpus.conversations  # as read_conversations reads the file
    texts = [u for c in convs for u in c.utterances]
    ids = [f"c{c.index}u{i}" for c in convs for i in range(len(c.utterances))]
    # The session's index of these texts (built once for the builds that take it): BM25Index over
    # each text's tokens, in this order, the full ranking below is taken from.
    assert tuple(texts) == corpus.texts
    index = bm25.get()
    assert index.size == len(texts)
    for q in small_context.train[:3] + small_context.test[-2:]:
        scores = index.scores(tokenize(" ".join(q.context)))
        assert q.candidates[0].score == scores[ids.index(q.candidates[0].doc_id)]
        seen, expected = {_norm(q.candidates[0].text)}, []
        for pos in np.lexsort((np.arange(len(texts)), -scores)):  # score desc, position asc
            key = _norm(texts[pos])
            if ids[pos].startswith(q.group + "u") or not key or key in seen:
                continue
            seen.add(key)
            expected.append((ids[pos], float(scores[pos])))
            if len(expected) == 9:
                break
        assert [(c.doc_id, c.score) for c in q.candidates[1:]] == expected


def test_top_k_matches_a_full_sort_with_ties() -> None:
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(50, 3000))
        row = rng.integers(0, 6 if trial % 2 else 1000, size=n).astype(np.float64)
        row[rng.integers(0, n, size=n // 10)] = -np.inf
        keys = rng.integers(-1, n // 3, size=n)
        banned, k = int(keys[0]), int(rng.integers(1, 12))
        order = np.lexsort((np.arange(n), -row))  # score desc, position asc
        expected = neg._pick(order[np.isfinite(row[order])], keys, banned, k)
        assert neg._top_k(row, keys, banned, k) == expected


def test_ranked_is_a_stable_sort_by_descending_score() -> None:
    """The window's radix sort orders positions exactly as numpy's stable sort by descending score
    (ties keep position order): many ties, zeros, subnormal and huge scores, sizes from 0 to
    beyond one radix digit (2,048)."""
    from harness.data._kernels import ranked

    rng = np.random.default_rng(3)
    special = np.array([0.0, 5e-324, 2.5e-310, 1e-300, 1e300, np.finfo(np.float64).max])
    for trial in range(40):
        n = int(rng.integers(0, 5000)) if trial > 1 else trial
        values = (rng.integers(0, 8 if trial % 2 else 10**6, size=n) / 7).astype(np.float64)
        values[rng.integers(0, max(n, 1), size=n // 20)] = rng.choice(special, size=n // 20)
        positions = np.sort(rng.choice(10 * n + 1, size=n, replace=False)).astype(np.int64)
        expected = positions[np.argsort(-values, kind="stable")]
        assert np.array_equal(ranked(positions, values), expected)


def test_usable_hits_match_a_full_sort_with_ties() -> None:
    """The response window from a sampled prefix of the read-only row equals walking the whole
    ranking (score desc, position asc), hits only, outside the excluded range, each text once.
    Equal texts score alike, as under BM25 (same tokens); texts repeat inside and outside the
    excluded range, so a text first seen inside it is taken at its first position after it."""
    rng = np.random.default_rng(1)
    for trial in range(60):
        n = int(rng.integers(50, 5000))
        keys = rng.integers(-1, max(2, n // (2 + trial % 5)), size=n)
        by_key = rng.integers(0, 4 if trial % 2 else 1000, size=keys.max() + 2).astype(np.float64) / 7
        row = np.where(keys == -1, rng.integers(0, 5, size=n) / 7, by_key[keys])
        row.flags.writeable = False
        start = int(rng.integers(0, n - 10))
        exclude = range(start, start + int(rng.integers(0, 40)))
        banned, want = int(keys[start]), int(rng.integers(1, 400))
        order = np.lexsort((np.arange(n), -row))
        outside = [p for p in order.tolist() if row[p] > 0 and p not in exclude]
        expected = neg._pick(np.array(outside, dtype=np.int64), keys, banned, want)
        assert neg._usable_hits(row, neg.Texts(keys), banned, want, exclude).tolist() == expected


@pytest.mark.slow
def test_build_is_deterministic_and_seed_changes_split(chitchat_path: Path, small_splits: Splits,
                                                        one_worker_build: Splits,
                                                        indexed: tuple[Corpus, Bm25]) -> None:
    assert one_worker_build == small_splits
    corpus, bm25 = indexed
    other = build_splits(DataConfig(conversations=12, split_seed=14, protocol="context"),
                         path=chitchat_path, fingerprint="other", corpus=corpus, bm25=bm25)
    groups = [{q.group for q in s.split("test")} | {q.group for q in s.split("dev")}
              for s in (small_splits, other)]
    assert groups[0] != groups[1]


@pytest.mark.slow
def test_splits_share_no_conversation(small_splits: Splits) -> None:
    groups = {name: {q.group for q in small_splits.split(name)} for name in ("train", "dev", "test")}
    assert all(groups.values())
    assert not groups["train"] & groups["dev"]
    assert not groups["train"] & groups["test"]
    assert not groups["dev"] & groups["test"]


def test_negatives_beyond_the_pool_are_refused(tiny_chitchat: Path) -> None:
    # 12 distinct utterances: 11 besides a positive, but only 9 outside its own conversation.
    with pytest.raises(ConfigError, match=r"data.negatives must be <= 11 .*got 12"):
        build_splits(DataConfig(negatives=12), path=tiny_chitchat, fingerprint="x")
    too_many = r"data.negatives=10 exceeds .* query c\d+t\d: only 9 "
    for protocol in ("response", "context"):
        with pytest.raises(DataError, match=too_many):
            build_splits(DataConfig(negatives=10, protocol=protocol), path=tiny_chitchat, fingerprint="x")
    with pytest.raises(DataError, match=too_many):
        build_train(DataConfig(negatives=10), "random", path=tiny_chitchat)
    for protocol in ("response", "context"):
        ok = build_splits(DataConfig(negatives=9, protocol=protocol), path=tiny_chitchat, fingerprint="x")
        assert all(len(q.candidates) == 10 for q in _queries(ok))


def test_too_few_conversations_and_bad_files(tmp_path: Path,
                                             write_chitchat: Callable[..., Path]) -> None:
    two = write_chitchat(tmp_path / "two.json", [[("a", "x"), ("b", "y")]] * 2)
    with pytest.raises(DataError, match="need at least 3"):
        build_splits(DataConfig(), path=two, fingerprint="x")
    bad = tmp_path / "bad.json"
    bad.write_text('{"c": {"messages": [\n[}', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.json:2: invalid JSON"):
        read_conversations(bad)
    with pytest.raises(DataError, match="no such file"):
        read_conversations(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match=r"data.conversations must be <= 4"):
        build_splits(DataConfig(conversations=5), path=write_chitchat(
            tmp_path / "four.json", [[("a", f"x{i}"), ("b", f"y{i}")] for i in range(4)]),
            fingerprint="x")


def test_a_repeated_key_is_refused_not_the_first_conversation_dropped(tmp_path: Path,
                                                                     write_chitchat: Callable[..., Path]) -> None:
    """json keeps the last of a repeated key: a conversation under an id given twice vanished from
    the splits without a word (10 train queries where 15 were written)."""
    text = write_chitchat(tmp_path / "ok.json", [[("a", f"x{i}"), ("b", f"y{i}")] for i in range(4)]).read_text()
    conversations = json.loads(text)
    first, second = list(conversations)[:2]
    repeated = tmp_path / "repeated.json"
    repeated.write_text(text.replace(f'"{second}"', f'"{first}"', 1), encoding="utf-8")
    with pytest.raises(DataError, match=rf"repeated.json: conversation id '{first}' appears twice in one object"):
        read_conversations(repeated)
    message = tmp_path / "message.json"
    message.write_text('{"c": {"messages": [[{"sender": "a", "text": "x", "text": "y"}]]}}', encoding="utf-8")
    with pytest.raises(DataError, match=r"message.json: key 'text' appears twice in one object"):
        read_conversations(message)
    assert len(read_conversations(tmp_path / "ok.json")) == 4


@pytest.fixture(scope="module")
def one_worker_build(chitchat_path: Path, indexed: tuple[Corpus, Bm25]) -> Splits:
    corpus, bm25 = indexed
    return build_splits(DataConfig(conversations=12, split_seed=13), path=chitchat_path,
                        fingerprint="small", workers=1, corpus=corpus, bm25=bm25)


@pytest.mark.slow
@pytest.mark.parametrize("fork", [True, False], ids=["forked-processes", "threads"])
def test_two_workers_build_what_one_builds(one_worker_build: Splits, chitchat_path: Path,
                                           indexed: tuple[Corpus, Bm25],
                                           monkeypatch: pytest.MonkeyPatch, fork: bool) -> None:
    """Sampling on two forked processes (the default where forking is safe) or on two threads
    (where it is not: Ray running in the process) gives the one-worker build, query for query."""
    monkeypatch.setattr(neg, "_can_fork", lambda: fork)
    corpus, bm25 = indexed
    two = build_splits(DataConfig(conversations=12, split_seed=13), path=chitchat_path,
                       fingerprint="small", workers=2, corpus=corpus, bm25=bm25)
    assert two == one_worker_build


@pytest.mark.slow
@pytest.mark.parametrize("depth", [1000, 3])
def test_response_chunks_sample_what_sample_one_samples(indexed: tuple[Corpus, Bm25], wordy_chitchat: Path,
                                                        depth: int) -> None:
    """The build's per-chunk path of the response protocol (compiled candidate scoring, the draws
    between the kernels) gives each query exactly ``sample_one``'s negatives and scores: on real
    conversations across the corpus, and on a corpus where a response matches nothing else
    (its window is empty, so the sampler goes on down the ranking)."""
    wordy = read_corpus(wordy_chitchat)
    for corpus, bm25, conversations in ((*indexed, range(0, 4000, 97)), (wordy, Bm25(wordy), range(12))):
        cfg = DataConfig(depth=depth, negatives=4)
        requests = sampling_requests(cfg, corpus, conversations)
        index, texts = bm25.get(), neg.Texts(corpus.keys)
        expected = [neg.sample_one("response", index, texts, r, 4, depth=depth) for r in requests]
        assert neg._run_chunk(("response", index, texts, 4, depth), requests) == expected
    assert any(len(neg._usable_hits(index.span_row(range(r.positive, r.positive + 1)), texts,
                                    int(texts.keys[r.positive]), 4, r.exclude)) < 4 for r in requests)


def test_a_studys_data_variants_read_and_index_the_corpus_once(wordy_chitchat: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """harness.data.load.sharing_corpora (a study's preparation): the builds of two training samplers
    open the chitchat-format file once, and build what they build apart; after it, each opens it."""
    import harness.data._chitchat as chitchat
    from harness.data.load import load_splits, sharing_corpora

    opened: list[Path] = []
    real = chitchat.open_corpus

    def counting(path: Path, progress=None):  # type: ignore[no-untyped-def]
        opened.append(path)
        return real(path, progress)

    monkeypatch.setattr(chitchat, "open_corpus", counting)
    cfg = DataConfig(path=str(wordy_chitchat), negatives=4, split_seed=3)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "shared"))
    with sharing_corpora():
        shared = [load_splits(cfg, train_sampler=s) for s in ("bm25", "random")]
    assert len(opened) == 1 and chitchat._SHARED is None  # released at the end
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "apart"))
    apart = [load_splits(cfg, train_sampler=s) for s in ("bm25", "random")]
    assert len(opened) == 3 and shared == apart
