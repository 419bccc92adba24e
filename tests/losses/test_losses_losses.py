"""Pointwise and pairwise losses: bit-identical to F.cross_entropy without weights or smoothing
(m = 0, eps = 0), hand-computed weighted values for both reductions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.curriculum.weights import curriculum_weight
from harness.losses.losses import REDUCTIONS, pairwise_loss, pointwise_loss, ranking_loss, squared_error_loss
from harness.losses.targets import soft_targets

SIZES = [1, 2, 3, 16, 33, 257, 1000]


def batch(size: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(size, 2, generator=g) * 4
    labels = torch.randint(0, 2, (size,), generator=g).numpy()
    return logits, labels


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_m_zero_weighting_is_bit_identical_to_unweighted_cross_entropy(size: int, reduction: str) -> None:
    for seed in range(5):
        logits, labels = batch(size, seed)
        reference = F.cross_entropy(logits, torch.as_tensor(labels))
        hard = soft_targets(labels, None, method="none", epsilon=0.0, step=0, switch_step=0)
        difficulty = np.random.default_rng(seed).random(size)
        w = torch.as_tensor(curriculum_weight(difficulty, 123, m=0), dtype=torch.float32)
        assert torch.equal(pointwise_loss(logits, hard, None, reduction), reference)
        assert torch.equal(pointwise_loss(logits, hard, w, reduction), reference)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("method", ["LS", "T-LS", "WSLS", "T-WSLS"])
def test_epsilon_zero_is_bit_identical_to_hard_labels(size: int, method: str) -> None:
    logits, labels = batch(size, 7)
    weak = np.random.default_rng(0).uniform(0.01, 0.99, size)
    targets = soft_targets(labels, weak, method=method, epsilon=0.0, step=0, switch_step=10)
    assert torch.equal(pointwise_loss(logits, targets), F.cross_entropy(logits, torch.as_tensor(labels)))


def test_two_stage_after_the_switch_is_bit_identical_to_hard_labels() -> None:
    logits, labels = batch(64, 3)
    targets = soft_targets(labels, None, method="T-LS", epsilon=0.3, step=50, switch_step=50)
    assert torch.equal(pointwise_loss(logits, targets), F.cross_entropy(logits, torch.as_tensor(labels)))


@pytest.mark.parametrize("size", SIZES)
def test_pairwise_is_bit_identical_to_softmax_cross_entropy(size: int) -> None:
    g = torch.Generator().manual_seed(size)
    pos, neg = torch.randn(size, generator=g), torch.randn(size, generator=g)
    reference = F.cross_entropy(torch.stack([pos, neg], 1), torch.zeros(size, dtype=torch.long))
    for reduction in REDUCTIONS:
        assert torch.equal(pairwise_loss(pos, neg, None, reduction), reference)
        assert torch.equal(pairwise_loss(pos, neg, torch.ones(size), reduction), reference)


@pytest.mark.parametrize("size", SIZES)
def test_squared_error_is_mse_and_its_weights_are_eq_4(size: int) -> None:
    """MacAvaney et al.'s eq. 1, (s - R)^2, is torch's mse_loss unweighted; weighted, the paper's
    reduction is mean(W_j l_j) and OpenNIR's mean(W) mean(l)."""
    g = torch.Generator().manual_seed(size)
    scores, labels = torch.randn(size, generator=g), (torch.rand(size, generator=g) > 0.5).float()
    w = torch.rand(size, generator=g)
    l_j = (labels - scores) ** 2
    for reduction in REDUCTIONS:
        torch.testing.assert_close(squared_error_loss(scores, labels, None, reduction),
                                   F.mse_loss(scores, labels), rtol=1e-6, atol=0)
    torch.testing.assert_close(squared_error_loss(scores, labels, w, "sample"), (w * l_j).mean())
    torch.testing.assert_close(squared_error_loss(scores, labels, w, "batch_mean"), w.mean() * l_j.mean())


def test_the_trainers_loss_reads_the_loss_the_config_names() -> None:
    """ranking_loss: pointwise is the two-class head with the other logit at 0 (BCE with logits),
    pointwise_mse the score's squared error to the one-hot target's relevant column, pairwise the
    first half against the second."""
    rel, labels = torch.tensor([1.5, -0.5, 0.25, 2.0]), torch.tensor([1.0, 0.0, 0.0, 1.0])
    onehot = torch.stack([1 - labels, labels], dim=1)
    torch.testing.assert_close(ranking_loss("pointwise", rel, None, onehot),
                               F.binary_cross_entropy_with_logits(rel, labels))
    torch.testing.assert_close(ranking_loss("pointwise_mse", rel, None, onehot), F.mse_loss(rel, labels))
    torch.testing.assert_close(ranking_loss("pairwise", rel, None, None),
                               pairwise_loss(rel[:2], rel[2:]))


def test_soft_target_cross_entropy_hand_computed() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    targets = np.array([[0.9, 0.1], [0.5, 0.5]])
    # row 0: uniform prediction -> log 2; row 1: p = [3/4, 1/4] -> -(0.5 log .75 + 0.5 log .25)
    per_sample = [math.log(2), -(0.5 * math.log(0.75) + 0.5 * math.log(0.25))]
    assert pointwise_loss(logits, targets).item() == pytest.approx(np.mean(per_sample), rel=1e-6)


def test_weighted_reductions_hand_computed() -> None:
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    targets = np.array([[1.0, 0.0], [1.0, 0.0]])
    losses = np.array([math.log(2), -math.log(0.75)])
    w = np.array([0.2, 1.0])
    sample = pointwise_loss(logits, targets, w, "sample").item()
    batch_mean = pointwise_loss(logits, targets, w, "batch_mean").item()
    assert sample == pytest.approx(np.mean(w * losses), rel=1e-6)  # the paper: mean of W_j l_j
    assert batch_mean == pytest.approx(w.mean() * losses.mean(), rel=1e-6)  # OpenNIR's code
    pair = pairwise_loss(torch.tensor([0.0, math.log(3.0)]), torch.zeros(2), w, "sample").item()
    assert pair == pytest.approx(np.mean(w * losses), rel=1e-6)


def test_gradients_flow_and_weights_scale_them() -> None:
    logits = torch.tensor([[0.5, -0.5], [0.1, 0.3]], requires_grad=True)
    pointwise_loss(logits, np.array([[0.9, 0.1], [0.1, 0.9]]), torch.tensor([1.0, 0.0])).backward()
    assert logits.grad is not None
    assert logits.grad[0].abs().sum() > 0 and torch.equal(logits.grad[1], torch.zeros(2))


def test_bf16_logits_are_computed_in_float32() -> None:
    logits, labels = batch(16, 1)
    hard = soft_targets(labels, None, method="none", epsilon=0.0, step=0, switch_step=0)
    out = pointwise_loss(logits.bfloat16(), hard)
    assert out.dtype == torch.float32
    assert torch.equal(out, F.cross_entropy(logits.bfloat16().float(), torch.as_tensor(labels)))


def test_bad_shapes_and_reductions_are_refused() -> None:
    logits, labels = batch(4, 0)
    hard = soft_targets(labels, None, method="none", epsilon=0.0, step=0, switch_step=0)
    with pytest.raises(ValueError, match="targets"):
        pointwise_loss(logits, hard[:3])
    with pytest.raises(ValueError, match="weights"):
        pointwise_loss(logits, hard, torch.ones(3))
    with pytest.raises(ValueError, match="reduction"):
        pointwise_loss(logits, hard, None, "sum")
    with pytest.raises(ValueError, match="pos_scores"):
        pairwise_loss(torch.zeros(3), torch.zeros(4))
