"""Evaluation protocols (response, context) and training samplers: what the negatives are, their
first-stage scores, seeds, the evaluation set's independence of training knobs, config errors."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import rank_bm25

from harness.config import DataConfig, TrialConfig
from harness.curriculum.heuristics import candidate_scores, recip
from harness.data._bm25 import EPSILON, K1, B, tokenize
from harness.data._chitchat import build_splits, build_train, read_conversations
from harness.data.load import load_splits
from harness.errors import ConfigError
from harness.records import Query, Splits


def _queries(splits: Splits) -> list[Query]:
    return [q for name in ("train", "dev", "test") for q in splits.split(name)]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class Reference:
    """rank_bm25 (the pure-Python original) over every utterance of a chitchat-format file."""

    def __init__(self, path: Path) -> None:
        convs = read_conversations(path)
        self.texts = [u for c in convs for u in c.utterances]
        self.ids = [f"c{c.index}u{i}" for c in convs for i in range(len(c.utterances))]
        self.bm25 = rank_bm25.BM25Okapi([tokenize(t) for t in self.texts], k1=K1, b=B, epsilon=EPSILON)
        assert type(self.bm25).__module__ == "rank_bm25"

    def scores(self, text: str) -> np.ndarray:
        return np.asarray(self.bm25.get_scores(tokenize(text)))

    def usable_hits(self, q: Query) -> list[str]:
        """The response protocol's ranking, independently: documents sharing a term with the
        positive, outside its conversation, score desc then position, each new text once."""
        positive = q.candidates[0]
        scores = self.scores(positive.text)
        seen, out = {_norm(positive.text)}, []
        for i in sorted(range(len(self.texts)), key=lambda i: (-scores[i], i)):
            key = _norm(self.texts[i])
            if scores[i] > 0 and not self.ids[i].startswith(q.group + "u") and key and key not in seen:
                seen.add(key)
                out.append(self.ids[i])
        return out


def _negatives(splits: Splits) -> dict[str, list[str]]:
    return {q.qid: [c.doc_id for c in q.negatives] for q in _queries(splits)}


def test_response_negatives_come_from_the_top_depth_hits_of_the_response(wordy_chitchat: Path) -> None:
    ref = Reference(wordy_chitchat)
    exact = build_splits(DataConfig(negatives=3, depth=3), path=wordy_chitchat, fingerprint="x")
    drawn = build_splits(DataConfig(negatives=3, depth=8), path=wordy_chitchat, fingerprint="x")
    short = build_splits(DataConfig(negatives=3, depth=1), path=wordy_chitchat, fingerprint="x")
    differs = 0
    for q_exact, q_drawn, q_short in zip(_queries(exact), _queries(drawn), _queries(short), strict=True):
        hits = ref.usable_hits(q_drawn)
        if len(hits) < 8:
            continue
        assert q_exact.candidates[0] == q_drawn.candidates[0]
        # depth = k: the window is taken whole; depth < k: whole, then on down the ranking
        assert {c.doc_id for c in q_exact.negatives} == set(hits[:3])
        assert {c.doc_id for c in q_short.negatives} == set(hits[:3])
        assert {c.doc_id for c in q_drawn.negatives} <= set(hits[:8])
        differs += {c.doc_id for c in q_drawn.negatives} != set(hits[:3])
    assert differs >= 10  # sampled from the window, not its top


def test_response_negatives_skip_the_conversation_duplicates_and_fall_back(wordy_chitchat: Path) -> None:
    splits = build_splits(DataConfig(negatives=4, depth=6), path=wordy_chitchat, fingerprint="x")
    queries = {q.qid: q for q in _queries(splits)}
    for q in queries.values():
        assert not any(c.doc_id.startswith(q.group + "u") for c in q.negatives)
        texts = [_norm(c.text) for c in q.candidates]
        assert len(set(texts)) == len(texts) and all(texts)
    # c0t1 repeats an utterance of conversation 1: that copy is the positive's duplicate
    assert queries["c0t1"].candidates[0].text in Reference(wordy_chitchat).texts[5:10]
    # "qwerty zxcv" shares no term with any utterance: no hits, drawn from the rest (score 0)
    assert len(queries["c0t3"].negatives) == 4


def test_response_protocol_is_seeded(wordy_chitchat: Path) -> None:
    cfg = DataConfig(negatives=3, depth=10)
    first = build_splits(cfg, path=wordy_chitchat, fingerprint="x")
    assert build_splits(cfg, path=wordy_chitchat, fingerprint="x") == first
    other = build_splits(dataclasses.replace(cfg, split_seed=14), path=wordy_chitchat, fingerprint="x")
    a, b = _negatives(first), _negatives(other)
    assert a.keys() == b.keys() and sum(a[k] != b[k] for k in a) >= 10


@pytest.mark.parametrize("method", ["protocol-response", "protocol-context", "response", "context",
                                    "random"])
def test_every_candidate_scores_bm25_of_the_context(wordy_chitchat: Path, method: str) -> None:
    cfg = DataConfig(negatives=4, depth=6)
    if method.startswith("protocol-"):
        queries = _queries(build_splits(dataclasses.replace(cfg, protocol=method.split("-")[1]),
                                        path=wordy_chitchat, fingerprint="x"))
    else:
        queries = list(build_train(cfg, method, path=wordy_chitchat))
    ref = Reference(wordy_chitchat)
    for q in queries:
        row = ref.scores(" ".join(q.context))  # joined with spaces = the tokens concatenated
        assert [c.score for c in q.candidates] == [row[ref.ids.index(c.doc_id)] for c in q.candidates]
        negs = [c.score for c in q.negatives]
        assert negs == sorted(negs, reverse=True)


def test_random_training_negatives_are_seeded(wordy_chitchat: Path) -> None:
    cfg = DataConfig(negatives=3)
    first = build_train(cfg, "random", path=wordy_chitchat)
    assert build_train(cfg, "random", path=wordy_chitchat) == first
    base = build_splits(cfg, path=wordy_chitchat, fingerprint="x").train
    assert [q.qid for q in first] == [q.qid for q in base]
    assert [q.candidates[0] for q in first] == [q.candidates[0] for q in base]
    assert [q.negatives for q in first] != [q.negatives for q in base]


def test_a_training_sampler_leaves_the_evaluation_set_alone(tmp_path: Path, wordy_chitchat: Path) -> None:
    cfg = DataConfig(path=str(wordy_chitchat), negatives=3, depth=6, cache_dir=str(tmp_path))
    base = load_splits(cfg)
    assert load_splits(cfg, train_sampler="response") == base  # the protocol itself: no rebuild
    for sampler in ("bm25", "random"):
        messages: list[str] = []
        other = load_splits(cfg, train_sampler=sampler, progress=messages.append)
        assert any(m.startswith("loaded the data set") for m in messages)  # not rebuilt
        assert any(m.startswith("built the train split") for m in messages)
        assert (other.dev, other.test, other.evaluation) == (base.dev, base.test, base.evaluation)
        assert [q.qid for q in other.train] == [q.qid for q in base.train]
        assert other.train != base.train and other.fingerprint != base.fingerprint
        messages.clear()
        assert load_splits(cfg, train_sampler=sampler, progress=messages.append) == other
        assert sum(m.startswith("loaded ") for m in messages) == 2
    context = dataclasses.replace(cfg, protocol="context")
    assert load_splits(context, train_sampler="bm25") == load_splits(context)
    assert load_splits(context).evaluation != base.evaluation


def test_caps_change_the_evaluation_set_only_through_dev_and_test(tmp_path: Path,
                                                                  wordy_chitchat: Path) -> None:
    cfg = DataConfig(path=str(wordy_chitchat), negatives=3, depth=6, cache_dir=str(tmp_path))
    base = load_splits(cfg)
    train_cap = load_splits(dataclasses.replace(cfg, max_train_queries=5), train_sampler="random")
    assert len(train_cap.train) == 5 and train_cap.evaluation == base.evaluation
    assert train_cap.fingerprint != base.fingerprint
    same_queries = load_splits(dataclasses.replace(cfg, max_train_queries=5))
    assert [q.qid for q in same_queries.train] == [q.qid for q in train_cap.train]
    for key in ("max_dev_queries", "max_test_queries"):
        capped = load_splits(dataclasses.replace(cfg, **{key: 1}))
        assert capped.evaluation != base.evaluation, key


@pytest.mark.parametrize(("flat", "message"), [
    ({"data.protocol": "bm25"}, "data.protocol must be one of response, context, got 'bm25'"),
    ({"data.depth": 0}, "data.depth must be >= 1, got 0"),
    ({"train.sampler": "tfidf"}, ("train.sampler must be one of dataset, response, bm25, random, "
                                  "got 'tfidf'")),
    ({"data.sampler": "random"}, ("data.sampler moved to train.sampler (it picks the training "
                                  "negatives only; dev and test follow data.protocol)")),
    ({"data.source": "msdialog", "data.path": "/x", "train.sampler": "random"},
     ("train.sampler must be dataset for data.source=msdialog (its files bring their own "
      "candidates and no corpus to sample from), got 'random'")),
])
def test_bad_values_give_one_line_naming_the_key(flat: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        TrialConfig.from_flat(flat)
    assert str(info.value) == message and "\n" not in message


def test_readers_refuse_a_training_sampler(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^train.sampler must be dataset for data.source=trec"):
        load_splits(DataConfig(source="trec", path=str(tmp_path)), train_sampler="bm25")


def test_the_positive_is_not_last_by_construction(tmp_path: Path,
                                                  write_chitchat: Callable[..., Path]) -> None:
    """MacAvaney's recip of the positive where the context shares words with the response: under
    the context protocol the negatives are the context's top hits, so the positive ranks below all
    three (h = 1/4); under the response protocol they are the response's, and it ranks first."""
    pairs = [("do you like green tea", "yes green tea every morning"),
             ("do you like green beans", "not really"), ("do you like iced tea", "sometimes"),
             ("do you like green parks", "they are fine"), ("yes every morning", "good habit"),
             ("every morning yes indeed", "wow"), ("morning yes every day", "same here"),
             ("the weather is nice", "sunny all week"), ("my cat sleeps a lot", "cats do that"),
             ("what is your job", "i teach math"), ("any plans tonight", "watching a film")]
    path = write_chitchat(tmp_path / "tea.json", [[("a", c), ("b", r)] for c, r in pairs])
    values = {}
    for protocol in ("response", "context"):
        cfg = DataConfig(negatives=3, depth=3, protocol=protocol)
        q = next(q for q in _queries(build_splits(cfg, path=path, fingerprint="x")) if q.qid == "c0t1")
        values[protocol] = float(recip(candidate_scores(q), [c.doc_id for c in q.candidates])[0])
    assert values == {"response": 1.0, "context": 0.25}
