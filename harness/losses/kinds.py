"""The training losses as properties: what an instance is and whether the loss takes label
smoothing's soft targets. The loop asks the properties, config validation and messages read the
table (harness.losses.losses holds the math).

    >>> LOSSES["pairwise"]
    Loss(name='pairwise', pairwise=True, soft_targets=False)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Loss:
    name: str
    pairwise: bool      # instances are (positive, negative) pairs; else one candidate and its label
    soft_targets: bool  # takes soft targets (label smoothing); else hard labels only


LOSSES = MappingProxyType({loss.name: loss for loss in (
    Loss("pointwise", pairwise=False, soft_targets=True),   # cross-entropy on (soft) labels
    Loss("pointwise_mse", pairwise=False, soft_targets=False),  # squared error on the label
    Loss("pairwise", pairwise=True, soft_targets=False),    # softmax over [positive, negative]
)})
