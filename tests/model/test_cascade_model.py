"""CascadeRanker: layer-by-layer encoder equals the full encoder, multi-task exit sampling,
alpha = 0 equals the full model, survivors' scores equal running them alone, cascade training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.config import ModelConfig, TrialConfig
from harness.errors import ConfigError
from harness.model._cascade import CascadeRanker
from harness.model.collate import PairCollator
from harness.model.encoder import load_encoder, load_tokenizer


@pytest.fixture(scope="module")
def model() -> CascadeRanker:
    torch.manual_seed(0)
    return CascadeRanker(load_encoder(ModelConfig(name="tiny"), seed=0)).eval()


@pytest.fixture(scope="module")
def collator() -> PairCollator:
    return PairCollator(load_tokenizer(ModelConfig(name="tiny")), 64)


def pairs(n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Pairs of very different lengths, so batches carry a lot of padding."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(1000, 5000, rng.integers(2, 25)), rng.integers(1000, 5000, rng.integers(1, 35)))
            for _ in range(n)]


def test_default_exits_and_heads(model: CascadeRanker) -> None:
    assert model.exits == (2, 3, 4) and len(model.heads) == 3
    assert model.plan.num_layers == 4


def test_layer_by_layer_equals_the_full_encoder(model: CascadeRanker, collator: PairCollator) -> None:
    batch = collator.collate(pairs(9))
    with torch.no_grad():
        ours = model.layer_states(batch)
        ref = model.encoder(**batch, output_hidden_states=True).hidden_states
    assert len(ours) == len(ref) == 5
    real = batch["attention_mask"].bool()
    assert not real.all()
    torch.testing.assert_close(ours[0], ref[0], rtol=0, atol=0)
    for a, b in zip(ours[1:], ref[1:], strict=True):
        # Real tokens match; padding comes back as zeros (unpadded layers never compute it).
        torch.testing.assert_close(a[real], b[real], rtol=0, atol=1e-5)
        assert not a[~real].any()


def test_score_is_the_final_exit(model: CascadeRanker, collator: PairCollator) -> None:
    batch = collator.collate(pairs(7))
    with torch.no_grad():
        exits = model.exit_scores(batch)
        assert exits.shape == (3, 7)
        torch.testing.assert_close(exits[-1], model.score(batch), rtol=0, atol=0)
        for i in range(3):
            torch.testing.assert_close(model.logits_at(batch, i), exits[i], rtol=0, atol=1e-6)


def test_pooling_ignores_padding(model: CascadeRanker, collator: PairCollator) -> None:
    p = pairs(6, seed=3)
    with torch.no_grad():
        together = model.exit_scores(collator.collate(p))
        alone = torch.stack([model.exit_scores(collator.collate([x]))[:, 0] for x in p], dim=1)
    torch.testing.assert_close(together, alone, rtol=0, atol=1e-5)


def test_train_scores_samples_one_exit_uniformly_and_runs_only_up_to_it(
        model: CascadeRanker, collator: PairCollator) -> None:
    batch = collator.collate(pairs(4))
    ran: list[int] = []
    # Each layer's feed-forward block runs once per layer that runs.
    hooks = [layer.intermediate.register_forward_hook(lambda *_, i=i: ran.append(i))
             for i, layer in enumerate(model.encoder.encoder.layer)]
    try:
        deepest = []
        for step in range(120):
            ran.clear()
            rng = np.random.default_rng([7, step, 2])
            with torch.no_grad():
                model.train_scores(batch, rng)
            deepest.append(max(ran) + 1)
            assert ran == list(range(max(ran) + 1))
            expected = model.exits[np.random.default_rng([7, step, 2]).integers(3)]
            assert deepest[-1] == expected  # the same rng draws the same exit
    finally:
        for h in hooks:
            h.remove()
    counts = np.bincount(deepest, minlength=5)[[2, 3, 4]]
    assert counts.min() > 20 and counts.sum() == 120  # ~40 each


def test_gradients_reach_the_embeddings_from_every_exit(collator: PairCollator) -> None:
    m = CascadeRanker(load_encoder(ModelConfig(name="tiny"), seed=1))
    batch = collator.collate(pairs(4))
    for i in range(len(m.exits)):
        m.zero_grad()
        m.logits_at(batch, i).sum().backward()
        emb = m.encoder.embeddings.word_embeddings.weight.grad
        assert emb is not None and float(emb.abs().sum()) > 0
        assert m.heads[i].net[-1].weight.grad is not None
        assert all(h.net[-1].weight.grad is None for j, h in enumerate(m.heads) if j != i)
        deeper = m.encoder.encoder.layer[m.exits[i]:]
        assert all(p.grad is None or float(p.grad.abs().sum()) == 0 for layer in deeper
                   for p in layer.parameters())
        for h in m.heads:
            h.zero_grad(set_to_none=True)


def test_alpha_zero_cascade_is_exactly_the_full_model(model: CascadeRanker, collator: PairCollator) -> None:
    batch = collator.collate(pairs(30, seed=5))
    with torch.no_grad():
        full = model.score(batch).numpy().astype(np.float64)
    res = model.cascade(batch, model.plan.with_alpha((0.0,)))
    assert res.outcome.entering == (30, 30, 30)
    np.testing.assert_array_equal(res.exit_scores[-1], full)
    assert np.argsort(-res.scores, kind="stable").tolist() == np.argsort(-full, kind="stable").tolist()


@pytest.mark.parametrize("alpha", [(0.3,), (0.5,), (0.6, 0.2, 0.0)])
def test_survivors_score_as_if_run_alone(model: CascadeRanker, collator: PairCollator,
                                         alpha: tuple[float, ...]) -> None:
    p = pairs(40, seed=11)
    batch = collator.collate(p)
    plan = model.plan.with_alpha(alpha)
    res = model.cascade(batch, plan)
    assert res.outcome.entering == plan.entering(40)
    with torch.no_grad():
        full = model.exit_scores(batch).numpy()
    for i in range(3):
        reached = np.flatnonzero(res.outcome.exit_reached >= i)
        assert np.isnan(res.exit_scores[i]).sum() == 40 - len(reached)
        np.testing.assert_allclose(res.exit_scores[i, reached], full[i, reached], rtol=0, atol=1e-5)
        with torch.no_grad():
            alone = model.exit_scores(collator.collate([p[j] for j in reached])).numpy()
        np.testing.assert_allclose(res.exit_scores[i, reached], alone[i], rtol=0, atol=1e-5)
    # and the survivors are the top of the full model's scores at each exit
    for i in range(2):
        went_on = res.outcome.exit_reached > i
        stopped = res.outcome.exit_reached == i
        if stopped.any():
            assert full[i, went_on].min() >= full[i, stopped].max() - 1e-5


def test_plan_must_match_the_model(model: CascadeRanker, collator: PairCollator) -> None:
    from harness.model.cascade_cost import CascadePlan

    with pytest.raises(ConfigError, match="cascade.exits"):
        model.cascade(collator.collate(pairs(3)), CascadePlan.build(num_layers=4, exits=(1, 4)))


def test_exit_beyond_depth_via_config_fails_when_the_model_is_built() -> None:
    from harness.model.factory import build_model

    cfg = TrialConfig.from_flat({"model.name": "tiny", "cascade.enabled": True, "cascade.exits": "2,6"})
    with pytest.raises(ConfigError, match=r"cascade\.exits .*6 is beyond its depth"):
        build_model(cfg, seed=0)
    cfg = TrialConfig.from_flat({"model.name": "tiny", "cascade.enabled": True, "cascade.exits": [1, 4]})
    assert build_model(cfg, seed=0).exits == (1, 4)  # type: ignore[union-attr]
