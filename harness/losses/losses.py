"""Pointwise and pairwise ranking losses with soft targets and per-sample weights (torch).

Pointwise (Penha & Hauff 2021, Section 2): soft-target cross-entropy over the two classes,
l_j = -sum_k q'(k|x_j) log p(k|x_j), p = softmax(logits). Pointwise squared error (MacAvaney et
al. 2020, eq. 1; OpenNIR's pointwise default ``mse``): l_j = (s_j - R(q, d_j))^2 with s_j the
label (1 relevant, 0 not) and R the ranker's score. Pairwise (MacAvaney et al. 2020, eq. 2, which
the text calls "softmax cross-entropy"): over [s(d+), s(d-)] with the positive as the target,
l_j = -log(exp(s+) / (exp(s+) + exp(s-))). (OpenNIR's pairwise default ``softmax`` minimises
1 - p(d+) instead; the harness follows the paper's words.)

Weights W_j (curriculum by loss weighting, eq. 4: L = W L(t)) combine with one of two reductions:

- ``"sample"`` (the paper): mean_j(W_j l_j), each sample's loss scaled by its own weight;
- ``"batch_mean"`` (OpenNIR's code): mean_j(W_j) * mean_j(l_j), the batch loss scaled by the mean
  weight, which is what the authors' trainers actually computed.

With weights None (or all exactly 1) and one-hot targets both reductions are bit-identical to
``torch.nn.functional.cross_entropy(logits, labels)``: the batch mean goes through
``F.nll_loss`` so its summation order is torch's own. Computation is in float32 (as autocast does
for cross_entropy).

    >>> import torch
    >>> logits = torch.tensor([[0.0, 2.0], [1.0, -1.0]])
    >>> hard = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    >>> torch.equal(pointwise_loss(logits, hard), torch.nn.functional.cross_entropy(
    ...     logits, torch.tensor([1, 0])))
    True
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

REDUCTIONS = ("sample", "batch_mean")


def _as_weights(weights: torch.Tensor | np.ndarray | None, like: torch.Tensor) -> torch.Tensor | None:
    if weights is None:
        return None
    w = torch.as_tensor(weights, dtype=like.dtype, device=like.device)
    if w.shape != like.shape[:1]:
        raise ValueError(f"weights must have shape ({like.shape[0]},), got {tuple(w.shape)}")
    return w


def _reduce(neg_loglik: torch.Tensor, weights: torch.Tensor | None, reduction: str) -> torch.Tensor:
    """Reduce per-sample log-likelihoods (B,) (= -l_j) to the weighted batch loss."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"weighting.reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if weights is not None and reduction == "sample":
        neg_loglik = weights * neg_loglik
    # nll_loss(mean) = -sum_j x_j / B with torch's summation order: bit-identical to cross_entropy.
    target = torch.zeros(neg_loglik.shape[0], dtype=torch.long, device=neg_loglik.device)
    loss = F.nll_loss(neg_loglik.unsqueeze(1), target)
    if weights is not None and reduction == "batch_mean":
        loss = weights.mean() * loss
    return loss


def _with_targets(values: torch.Tensor, targets: torch.Tensor | np.ndarray, ndim: int, shape: str,
                  name: str, targets_name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` in float32 and ``targets`` as a tensor like them, after checking that ``values``
    has ``ndim`` dimensions (``shape`` says which) and ``targets`` its shape."""
    values = values.float()
    if values.ndim != ndim:
        raise ValueError(f"{name} must be {shape}, got {tuple(values.shape)}")
    t = torch.as_tensor(targets, dtype=values.dtype, device=values.device)
    if t.shape != values.shape:
        raise ValueError(f"{targets_name} must have shape {tuple(values.shape)}, got {tuple(t.shape)}")
    return values, t


def pointwise_loss(logits: torch.Tensor, targets: torch.Tensor | np.ndarray,
                   weights: torch.Tensor | np.ndarray | None = None, reduction: str = "sample"
                   ) -> torch.Tensor:
    """Soft-target cross-entropy of ``logits`` (B, 2) against ``targets`` (B, 2) rows summing to 1
    (see harness.losses.targets.soft_targets), weighted by ``weights`` (B,) or unweighted."""
    logits, t = _with_targets(logits, targets, 2, "(batch, classes)", "logits", "targets")
    log_probs = F.log_softmax(logits, dim=1)
    return _reduce((t * log_probs).sum(dim=1), _as_weights(weights, logits), reduction)


def squared_error_loss(scores: torch.Tensor, labels: torch.Tensor | np.ndarray,
                       weights: torch.Tensor | np.ndarray | None = None, reduction: str = "sample"
                       ) -> torch.Tensor:
    """Squared error (s_j - R_j)^2 of ``scores`` R (B,) against ``labels`` s (B,), weighted by
    ``weights`` (B,) or unweighted; equals ``F.mse_loss(scores, labels)`` when unweighted.

    >>> squared_error_loss(torch.tensor([0.5, -1.0]), torch.tensor([1.0, 0.0])).item()
    0.625
    """
    scores, s = _with_targets(scores, labels, 1, "(batch,)", "scores", "labels")
    return _reduce(-(s - scores).square(), _as_weights(weights, scores), reduction)


def pairwise_loss(pos_scores: torch.Tensor, neg_scores: torch.Tensor,
                  weights: torch.Tensor | np.ndarray | None = None, reduction: str = "sample"
                  ) -> torch.Tensor:
    """Softmax cross-entropy over [pos, neg] per pair (positive = target), ``pos_scores`` and
    ``neg_scores`` (B,); equals ``F.cross_entropy(stack([pos, neg], 1), zeros)`` when unweighted."""
    pos_scores, neg_scores = pos_scores.float(), neg_scores.float()
    if pos_scores.ndim != 1 or pos_scores.shape != neg_scores.shape:
        raise ValueError(f"pos_scores and neg_scores must both be (batch,), got "
                         f"{tuple(pos_scores.shape)} and {tuple(neg_scores.shape)}")
    log_probs = F.log_softmax(torch.stack([pos_scores, neg_scores], dim=1), dim=1)
    return _reduce(log_probs[:, 0], _as_weights(weights, pos_scores), reduction)


def ranking_loss(loss: str, rel: torch.Tensor, weights: torch.Tensor | None, targets: torch.Tensor | None,
                 reduction: str = "sample") -> torch.Tensor:
    """The batch loss of ``train.loss`` = ``loss`` (harness.losses.kinds.LOSSES) from the ranker's
    scores ``rel`` (B,): for a pairwise loss the positives' scores, then the negatives'; otherwise
    one score per instance with ``targets`` (B, 2), the rows [q'(0|x), q'(1|x)] of
    harness.losses.targets.soft_targets (one-hot for the losses that take hard labels only). The
    one score s is the two-class head with the non-relevant logit at 0 (p(relevant) = sigmoid(s))
    under the cross-entropy losses; under pointwise_mse it regresses the label.
    What the single, compiled and fused trainers all call."""
    if targets is None:
        b = rel.shape[0] // 2
        return pairwise_loss(rel[:b], rel[b:], weights, reduction=reduction)
    if loss == "pointwise_mse":
        return squared_error_loss(rel, targets[:, 1], weights, reduction=reduction)
    logits = torch.stack([torch.zeros_like(rel), rel], dim=1)
    return pointwise_loss(logits, targets, weights, reduction=reduction)
