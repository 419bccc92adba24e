"""CrossEncoder: running only [CLS] through the last layer is the same function as reading [CLS]
off the full encoder (values and gradients, padded batches), and other encoders fall back to it;
its parameters are those of BertForSequenceClassification (num_labels=1), the pooler the checkpoint's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from harness.config import ModelConfig
from harness.model._layers import first_token_state, is_bert_like
from harness.model._ranker import CrossEncoder
from harness.model.collate import PairCollator
from harness.model.encoder import load_encoder, load_tokenizer


def padded_batch(n: int = 9, seed: int = 0) -> dict[str, torch.Tensor]:
    """Pairs of very different lengths, so most rows carry padding."""
    rng = np.random.default_rng(seed)
    pairs = [(rng.integers(1000, 5000, rng.integers(2, 30)), rng.integers(1000, 5000, rng.integers(1, 40)))
             for _ in range(n)]
    batch = PairCollator(load_tokenizer(ModelConfig(name="tiny")), 64).collate(pairs)
    assert (batch["attention_mask"] == 0).any()
    return batch


def full_cls(encoder: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return encoder(**batch).last_hidden_state[:, 0]


@pytest.mark.parametrize("name", ["tiny", "packaged"])
def test_first_token_state_equals_the_full_encoder(name: str) -> None:
    encoder = load_encoder(ModelConfig(name=name), seed=3).eval()
    assert is_bert_like(encoder)
    batch = padded_batch()
    with torch.no_grad():
        ours, ref = first_token_state(encoder, batch), full_cls(encoder, batch)
    assert ours.shape == ref.shape == (9, encoder.config.hidden_size)
    torch.testing.assert_close(ours, ref, rtol=0, atol=2e-5)


def test_gradients_equal_the_full_encoder_without_dropout() -> None:
    encoder = load_encoder(ModelConfig(name="tiny"), seed=1)
    for module in encoder.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    ours, ref = CrossEncoder(encoder, dropout=0.0).train(), None
    ref = copy.deepcopy(ours)
    batch = padded_batch(seed=4)
    target = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1, 1], dtype=torch.float32)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    bce(ours(batch), target).backward()
    bce(ref.head(full_cls(ref.encoder, batch)), target).backward()
    grads = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_attention_dropout_acts_in_training_only() -> None:
    encoder = load_encoder(ModelConfig(name="tiny"), seed=2)
    batch = padded_batch(seed=5)
    encoder.train()
    torch.manual_seed(0)
    a = first_token_state(encoder, batch)
    torch.manual_seed(1)
    b = first_token_state(encoder, batch)
    assert not torch.allclose(a, b)
    encoder.eval()
    torch.testing.assert_close(first_token_state(encoder, batch), first_token_state(encoder, batch),
                               rtol=0, atol=0)


def test_other_encoders_use_the_full_forward() -> None:
    class Wrapped(torch.nn.Module):
        """An encoder without BERT's layer layout: the generic path must be taken."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.config = inner.config

        def forward(self, **kw: torch.Tensor):  # type: ignore[no-untyped-def]
            return self.inner(**kw)

    inner = load_encoder(ModelConfig(name="tiny"), seed=0).eval()
    wrapped = Wrapped(inner)
    assert not is_bert_like(wrapped)
    batch = padded_batch(seed=6)
    with torch.no_grad():
        torch.testing.assert_close(first_token_state(wrapped, batch), full_cls(inner, batch), rtol=0, atol=0)


@pytest.mark.parametrize("kind", ["plain", "cascade"])
def test_scores_under_bf16_autocast_keep_float32_resolution(kind):
    """The head runs in float32 under autocast: close candidates do not round to tied scores."""
    from harness.model._cascade import CascadeRanker

    enc = load_encoder(ModelConfig(name="tiny"), seed=0)
    model = (CrossEncoder(enc) if kind == "plain" else CascadeRanker(enc)).eval()
    head = model.classifier if kind == "plain" else model.heads[-1].net[-1]
    collator = PairCollator(load_tokenizer(ModelConfig(name="tiny")), 64)
    rng = np.random.default_rng(0)
    batch = collator.collate([(rng.integers(1000, 20000, size=20), rng.integers(1000, 20000, size=10))
                              for _ in range(32)])
    with torch.no_grad():
        head.weight.mul_(1e-2)  # logits near 0.01 apart by ~1e-4, as early in training
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scores = model.score(batch)
    assert scores.dtype == torch.float32
    assert len(set(scores.tolist())) == 32


def test_state_dict_keys_are_bert_for_sequence_classification() -> None:
    from transformers import BertConfig, BertForSequenceClassification

    ours = CrossEncoder(load_encoder(ModelConfig(name="tiny"), seed=0))
    config = BertConfig.from_dict({**ours.encoder.config.to_dict(), "num_labels": 1})
    assert set(ours.state_dict()) == set(BertForSequenceClassification(config).state_dict())


def test_pooler_comes_from_the_checkpoint() -> None:
    from safetensors import safe_open

    from harness.model.encoder import packaged_model_path

    encoder = load_encoder(ModelConfig(name="packaged"), seed=0)
    with safe_open(str(packaged_model_path() / "model.safetensors"), "pt") as f:
        torch.testing.assert_close(encoder.pooler.dense.weight, f.get_tensor("pooler.dense.weight"))


def test_a_half_precision_checkpoint_loads_as_float32(tmp_path) -> None:
    """The trainer keeps float32 master weights (bf16 is autocast's); a checkpoint stored in fp16
    (as benchmarks/staged.py stores the packaged encoder) loads with its values, in float32."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    half = BertModel(BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32)).half()
    half.save_pretrained(tmp_path)
    encoder = load_encoder(ModelConfig(name=str(tmp_path)), seed=0)
    assert {p.dtype for p in encoder.parameters()} == {torch.float32}
    torch.testing.assert_close(encoder.pooler.dense.weight, half.pooler.dense.weight.float())
