"""Losses, pure math: soft targets for label smoothing (LS, T-LS, WSLS, T-WSLS; Penha & Hauff
2021) and pointwise and pairwise ranking losses that take per-sample weights.
"""

from __future__ import annotations

from harness._face import face

__all__ = [
    "LOSSES",
    "SMOOTHING_METHODS",
    "pairwise_loss",
    "pointwise_loss",
    "ranking_loss",
    "smoothing_method",
    "soft_targets",
    "squared_error_loss",
]

__getattr__, __dir__ = face(__name__, {
    "LOSSES": "kinds",
    "pairwise_loss": "losses",
    "pointwise_loss": "losses",
    "ranking_loss": "losses",
    "squared_error_loss": "losses",
    "smoothing_method": "smoothing",
    "SMOOTHING_METHODS": "smoothing",
    "soft_targets": "targets",
})
