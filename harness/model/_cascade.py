"""The Cascade Transformer ranker (Soldaini & Moschitti 2020, Sections 4.3-4.3.2, 5.2).

One encoder with a partial classifier C_rho(i) after each exit layer rho(i). Each classifier scores
the mean of its layer's token encodings over the real (unpadded) tokens of the pair::

    y_rho(i) = C_rho(i)( (1/m) sum_l h_rho(i),l ),   relevance = y[1] - y[0]

(the paper's Sec. 4.3 averages "all encodings in H_rho(i)"; its formula's index starts at 1, we
keep [CLS] and [SEP] in the mean, as the text says). C is a 3-layer feed-forward network with the
encoder's hidden size, tanh and dropout (Sec. 5.2), and one output logit, the relevance score,
like ``CrossEncoder`` (a two-class head with the non-relevant logit fixed at 0).

Exits: 1-based layers, the last one the final layer; default ``default_exits(depth)``:
4,6,8,10,12 on 12 layers (the paper), 2,3,4,5,6 on the 6-layer packaged MiniLM, 2,3,4 on ``tiny``.

Training (Sec. 4.3.1): every mini-batch trains ONE exit, drawn uniformly from the step's ``rng``
(the trainer seeds it from (seed, step), independent of the data order); only the layers up to that
exit run, and its loss back-propagates down to the embeddings.

Inference: ``score`` is the final exit (the full model); ``exit_scores`` gives every exit in one
pass; ``cascade`` runs one query's candidates through the drop rule, sending only the survivors
(and their partial encodings, trimmed of padding no survivor needs) through the next layers.
A candidate's score never depends on its batch-mates: attention masks padding out, and the mean
pools real tokens only.

>>> from harness.config import ModelConfig
>>> from harness.model.encoder import load_encoder
>>> ranker = CascadeRanker(load_encoder(ModelConfig(name="tiny"), seed=0), alpha=(0.5,))
>>> ranker.exits, ranker.plan.entering(10)  # ranker.cascade(batch) scores 10, then 5, then 3
((2, 3, 4), (10, 5, 3))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.errors import ConfigError
from harness.model import _layers as layers
from harness.model._cascade_rank import CascadeOutcome, cascade_rank, keep_top
from harness.model.cascade_cost import CascadePlan, Rounding

Batch = dict[str, torch.Tensor]


class ExitHead(nn.Module):
    """C_rho(i): dropout -> dense(h, h) -> tanh -> dropout -> dense(h, h) -> tanh -> dropout -> dense(h, 1)."""

    def __init__(self, hidden: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Dropout(dropout), nn.Linear(hidden, 1),
        )

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.net(pooled).squeeze(-1)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class CascadeResult:
    """One query through the live cascade: ``exit_scores`` (E, n) with NaN where a candidate had
    been dropped before that exit; ``outcome`` the final ranking scores (see ``cascade_rank``)."""

    exit_scores: np.ndarray
    outcome: CascadeOutcome

    @property
    def scores(self) -> np.ndarray:
        return self.outcome.scores


class CascadeRanker(nn.Module):
    def __init__(self, encoder: Any, *, exits: Sequence[int] | None = None,
                 alpha: Sequence[float] = (0.0,), dropout: float | None = None,
                 rounding: Rounding = "floor") -> None:
        super().__init__()
        if not layers.is_bert_like(encoder):
            raise ConfigError(f"cascade.enabled needs a BERT-like encoder (embeddings + encoder.layer), "
                              f"got {type(encoder).__name__}")
        if getattr(encoder, "pooler", None) is not None:
            encoder.pooler = None  # the exits pool by the mean; BERT's [CLS] pooler would be dead weight
        self.encoder = encoder
        self.plan = CascadePlan.build(num_layers=len(encoder.encoder.layer), exits=exits, alpha=alpha,
                                      rounding=rounding)
        hidden = int(encoder.config.hidden_size)
        p = float(encoder.config.hidden_dropout_prob if dropout is None else dropout)
        self.heads = nn.ModuleList(ExitHead(hidden, p) for _ in self.plan.exits)
        layers.use_fast_dropout(self)

    @property
    def num_layers(self) -> int:
        return self.plan.num_layers

    @property
    def exits(self) -> tuple[int, ...]:
        return self.plan.exits

    # -- the encoder, layer by layer --------------------------------------------------------------

    def embed(self, batch: Batch) -> torch.Tensor:
        """H_0 = E(X)."""
        return layers.embed(self.encoder, batch)

    def run_layers(self, hidden: torch.Tensor, attention_mask: torch.Tensor, start: int,
                   stop: int, packing: layers.Packing | None = None) -> torch.Tensor:
        """H_stop from H_start (0-based layer counts): layers start+1 .. stop (``packing``: that
        of ``attention_mask``, when known)."""
        return layers.run_layers(self.encoder, hidden, attention_mask, start, stop, packing)

    def layer_states(self, batch: Batch) -> list[torch.Tensor]:
        """H_0 .. H_n, as ``output_hidden_states`` of the full encoder (for checks)."""
        h = self.embed(batch)
        states = [h]
        packing = layers.Packing.of(batch)
        for i in range(self.num_layers):
            h = self.run_layers(h, batch["attention_mask"], i, i + 1, packing)
            states.append(h)
        return states

    def exit_logits(self, hidden: torch.Tensor, attention_mask: torch.Tensor, i: int) -> torch.Tensor:
        """(B,) logits (relevance scores) of exit ``i`` (0-based) from the mean of H_rho(i) over
        real tokens."""
        # Pooling and the head in float32, also under bf16 autocast (bf16 scores would tie).
        with torch.autocast(hidden.device.type, enabled=False):
            hidden = hidden.float()
            m = attention_mask.to(hidden.dtype).unsqueeze(-1)
            pooled = (hidden * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
            return self.heads[i](pooled)  # type: ignore[no-any-return]

    # -- the module protocol ------------------------------------------------------------------------

    def logits_at(self, batch: Batch, i: int) -> torch.Tensor:
        """(B,) logits of exit ``i`` (0-based), running only layers 1 .. rho(i)."""
        h = self.run_layers(self.embed(batch), batch["attention_mask"], 0, self.exits[i],
                            layers.Packing.of(batch))
        return self.exit_logits(h, batch["attention_mask"], i)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.logits_at(batch, len(self.exits) - 1)

    def train_scores(self, batch: Batch, rng: np.random.Generator) -> torch.Tensor:
        """Multi-task training (Sec. 4.3.1): logits of one exit drawn uniformly from ``rng``."""
        return self.logits_at(batch, int(rng.integers(len(self.exits))))

    def score(self, batch: Batch) -> torch.Tensor:
        """(B,) final-exit (full model) relevance scores."""
        return self(batch).float()  # type: ignore[no-any-return]

    def exit_scores(self, batch: Batch) -> torch.Tensor:
        """(E, B) relevance scores of every exit, in one pass through the encoder."""
        mask = batch["attention_mask"]
        h, start, rows = self.embed(batch), 0, []
        packing = layers.Packing.of(batch)
        for i, stop in enumerate(self.exits):
            h = self.run_layers(h, mask, start, stop, packing)
            rows.append(self.exit_logits(h, mask, i).float())
            start = stop
        return torch.stack(rows)

    @torch.no_grad()
    def cascade(self, batch: Batch, plan: CascadePlan | None = None) -> CascadeResult:
        """Cascade inference over ONE query's candidates (Sec. 4.3.2): after exit i, drop
        ``plan.drops(i, k)`` of the lowest-scored and run only the survivors' partial encodings
        through the next layers. ``plan`` defaults to the model's; it must have the model's
        depth and exits."""
        plan = plan or self.plan
        if plan.exits != self.exits or plan.num_layers != self.num_layers:
            raise ConfigError(f"cascade.exits of the plan ({list(plan.exits)}) differ from the model's "
                              f"({list(self.exits)})")
        mask = batch["attention_mask"]
        n = int(mask.shape[0])
        out = np.full((len(self.exits), n), np.nan)
        active = np.arange(n)
        h, start = self.embed(batch), 0
        for i, stop in enumerate(self.exits):
            h = self.run_layers(h, mask, start, stop)
            scores = self.exit_logits(h, mask, i).float().cpu().numpy().astype(np.float64)
            out[i, active] = scores
            start = stop
            d = plan.drops(i, len(active))
            if d == 0:
                continue
            keep = keep_top(scores, len(active) - d)
            active = active[keep]
            idx = torch.as_tensor(keep, device=h.device)
            width = int(mask[idx].sum(dim=0).nonzero().max()) + 1  # padding no survivor needs goes
            h, mask = h[idx, :width], mask[idx, :width]
        return CascadeResult(out, cascade_rank(out, plan))
