"""Host-side unpadding indices and length-sorted evaluation.

The collator's ``packed_index`` / ``first`` (numpy, from the lengths) equal what ``Packing`` finds
on the device from the mask; a model fed them scores exactly as without them, and in the padded
("dense", width-bucketed) layout of compiled runs to float32 rounding. ``score_candidates`` (every
pair of the split sorted by length, batched, scattered back) equals scoring each query's
candidates alone, in their own order, to 1e-5 in float32."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.config import ModelConfig
from harness.model._cascade import CascadeRanker
from harness.model._layers import Packing
from harness.model._ranker import CrossEncoder
from harness.model.collate import PairCollator
from harness.model.encoder import load_encoder, load_tokenizer
from harness.model.scoring import score_candidates
from tests.conftest import toy_splits


def _collator(**kw: object) -> PairCollator:
    return PairCollator(load_tokenizer(ModelConfig(name="tiny")), 64, **kw)  # type: ignore[arg-type]


def _pairs(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.integers(1000, 5000, rng.integers(0, 25)), rng.integers(1000, 5000, rng.integers(1, 30)))
            for _ in range(n)]


@pytest.fixture(scope="module", params=["plain", "cascade"])
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    torch.manual_seed(0)
    enc = load_encoder(ModelConfig(name="tiny"), seed=0)
    return (CrossEncoder(enc) if request.param == "plain" else CascadeRanker(enc)).eval()


def _outputs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model.exit_scores(batch) if hasattr(model, "exit_scores") else model.score(batch)


def test_host_packing_indices_equal_the_device_ones() -> None:
    batch = _collator().collate(_pairs(9), packing=True)
    ref = Packing(batch["attention_mask"])  # computed from the mask (nonzero, cumsum)
    assert not ref.dense
    assert torch.equal(batch["packed_index"], ref.index) and torch.equal(batch["first"], ref.first)
    assert not Packing.of(batch).dense
    # first[b] is the packed row of b * L: the index there is the row's position 0.
    width = batch["input_ids"].shape[1]
    assert torch.equal(batch["packed_index"][batch["first"]], torch.arange(9) * width)


def test_dense_collation_keeps_every_position_and_buckets_the_width() -> None:
    plain = _collator().collate(_pairs(5))
    dense = _collator(width_multiple=16, dense=True).collate(_pairs(5), packing=True)
    w, wd = plain["input_ids"].shape[1], dense["input_ids"].shape[1]
    assert wd % 16 == 0 and w <= wd < w + 16
    assert torch.equal(dense["input_ids"][:, :w], plain["input_ids"])
    assert (dense["attention_mask"][:, w:] == 0).all()
    assert torch.equal(dense["packed_index"], torch.arange(5 * wd))
    assert Packing.of(dense).dense
    # The bucket never goes past max_length (64), whatever the multiple.
    capped = _collator(width_multiple=48).collate([(np.arange(1000, 1040), np.arange(2000, 2010))])
    assert capped["input_ids"].shape[1] == 64


def test_model_scores_the_same_with_host_indices_and_in_the_dense_layout(model: torch.nn.Module) -> None:
    pairs = _pairs(11, seed=3)
    ref = _outputs(model, _collator().collate(pairs))
    host = _outputs(model, _collator().collate(pairs, packing=True))
    dense = _outputs(model, _collator(width_multiple=32, dense=True).collate(pairs, packing=True))
    assert torch.equal(host, ref)  # the same indices, the same ops
    torch.testing.assert_close(dense, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_length_sorted_scores_equal_each_query_alone(model: torch.nn.Module, batch_size: int) -> None:
    splits = toy_splits(n_train=1, n_dev=9, n_test=1, n_cands=6, seed=4)
    queries = splits.dev
    collator = _collator()
    tokens = collator.tokenize_queries(queries)
    exits = hasattr(model, "exit_scores")
    got = score_candidates(model, collator, queries, tokens, batch_size=batch_size, device="cpu",
                           autocast=False, exits=exits)
    assert model.training is False
    for qi, q in enumerate(queries):
        batch = collator.collate((tokens.contexts[qi], c) for c in tokens.candidates[qi])
        alone = _outputs(model, batch).double().numpy()
        assert got[qi].shape == alone.shape == ((len(model.exits),) if exits else ()) + (len(q.candidates),)
        np.testing.assert_allclose(got[qi], alone, rtol=0, atol=1e-5)



class _Counting:
    """A tokenizer that records the texts it is asked to read."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer, self.read = tokenizer, []

    def __getattr__(self, name: str) -> object:
        return getattr(self.tokenizer, name)

    def __call__(self, texts: list[str], **kw: object) -> object:
        self.read.extend(texts)
        return self.tokenizer(texts, **kw)


def test_a_shared_memo_gives_the_same_ids_and_reads_each_text_once() -> None:
    """A study's variants (harness.study.variants) share one memo per tokenizer: each gets the ids
    it would get alone, and a text an earlier variant read is not tokenised again."""
    from harness.model.collate import context_text
    from harness.training.tokenized import prepare_data

    first = toy_splits(n_train=30, n_dev=6, n_test=6, seed=1)
    # a second variant: the same queries, each training query's negatives those of the next query
    train = tuple(replace(q, candidates=(q.candidates[0], *first.train[(i + 1) % 30].candidates[1:]))
                  for i, q in enumerate(first.train))
    second = replace(first, train=train, fingerprint="other-negatives")
    model = ModelConfig(name="tiny")
    memo: dict[str, np.ndarray] = {}
    for splits in (first, second):
        shared, alone = prepare_data(splits, model, memo=memo), prepare_data(splits, model)
        for split in ("train", "dev", "test"):
            got, want = shared.tokens(split), alone.tokens(split)
            assert all(np.array_equal(a, b) for a, b in zip(got.contexts, want.contexts, strict=True))
            assert all(np.array_equal(a, b) for ga, wa in zip(got.candidates, want.candidates, strict=True)
                       for a, b in zip(ga, wa, strict=True))
    texts = {t for split in (first.train, first.dev, first.test) for q in split
             for t in (context_text(q.context), *(c.text for c in q.candidates))}
    assert set(memo) == texts
    tokenizer = _Counting(load_tokenizer(model))
    collator = PairCollator(tokenizer, 64)
    collator.tokenize_queries(second.train, memo)
    assert tokenizer.read == []  # every text read by the first variant
    new = toy_splits(n_train=3, seed=9).train
    collator.tokenize_queries(new, memo)
    assert sorted(tokenizer.read) == sorted({t for q in new for t in (context_text(q.context), *(c.text for c in q.candidates))})
