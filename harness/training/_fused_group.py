"""The fused engine behind ``harness.training.fused.SeedGroup`` (that module's docstring).

The members stay ordinary ``Trainer`` objects (``Member``): their samplers, signals, best-dev state,
dev curves and evaluation code are the separate run's. The engine owns the stacked weights
(``harness.model.stacked.StackedCrossEncoder``), one AdamW over them and one schedule; a member's
model receives its replica's weights (``copy_out``) before it is evaluated or checkpointed, and a
member's checkpoint carries its slice of the optimizer state in the ordinary format.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from harness.errors import ConfigError
from harness.model.stacked import StackedCrossEncoder, unstackable
from harness.training.loop import Record, StepRecord, Trainer, step_seed

# Fusing pays on CUDA (one stream of large kernels instead of k of small ones). On CPU the k
# replicas' matrix products are as large either way, and the one measurement so far
# (benchmarks/results/fused.md, a heavily loaded machine) is inconclusive: CPU interleaves.
CPU_FUSES = False


def unfusable(trainer: Trainer) -> str | None:
    """Why this seed's model cannot be trained fused (None: it can)."""
    if trainer.cfg.cascade.enabled:
        return "cascade models train their seeds one after another, not fused"
    return unstackable(trainer.model)


def fused_pays(device: torch.device, k: int) -> bool:
    """Whether fusing k > 1 seeds is the default on ``device`` (benchmarks/results/fused.md)."""
    return k > 1 and (device.type == "cuda" or (device.type == "cpu" and CPU_FUSES))


class Member(Trainer):
    """One seed of a group: a ``Trainer`` whose weights and optimizer state live in the group's
    engine while it trains fused; its checkpoints are the ordinary ones of its seed."""

    engine: FusedEngine | None = None
    index = 0

    def state_dict(self) -> dict[str, Any]:
        if self.engine is None or self.engine.stale:
            return super().state_dict()
        self.engine.copy_out(self.index)
        state = super().state_dict()
        state["optimizer"] = self.engine.optimizer_state(self.index)
        state["scheduler"] = self.engine.scheduler.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.engine is not None:
            self.engine.stale = True

    def save_best(self, directory: Any) -> Any:
        if self.engine is not None and not self.engine.stale:
            self.engine.copy_out(self.index)
        return super().save_best(directory)


class FusedEngine:
    """Trains the members' replicas as one stacked model; ``run`` yields what each member's
    ``Trainer.run`` would."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        lead = members[0]
        self.k = len(members)
        self.device = lead.device
        self.autocast = lead.autocast
        self.model = StackedCrossEncoder([m.model for m in members]).to(self.device)
        decay, no_decay = [], []
        for name, p in lead.model.named_parameters():  # Trainer._optimizer's groups, in its order
            stacked = self.model.param(name)
            (no_decay if p.ndim < 2 or "LayerNorm" in name or "norm" in name.lower() else decay).append(stacked)
        self.params = decay + no_decay
        cfg = lead.cfg.train
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        fused = self.device.type in ("cpu", "cuda")
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, eps=cfg.adam_eps, fused=fused)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lead.scheduler.lr_lambdas[0])
        self.generators = [torch.Generator() for _ in members]
        self.step = lead.step
        self.stale = True
        for i, m in enumerate(members):
            m.engine, m.index = self, i

    # -- between the engine and its members ----------------------------------------------------

    def copy_out(self, i: int) -> None:
        """Member i's model gets its replica's current weights."""
        self.model.copy_out(i, self.members[i].model)

    def optimizer_state(self, i: int) -> dict[str, Any]:
        """Member i's slice of the AdamW state, as its own optimizer's ``state_dict()``."""
        full = self.optimizer.state_dict()
        state = {j: {key: (v[i].clone() if v.ndim > 0 else v.clone()) if torch.is_tensor(v) else v
                     for key, v in s.items()} for j, s in full["state"].items()}
        return {"state": state, "param_groups": full["param_groups"]}

    @torch.no_grad()
    def _load_members(self) -> None:
        """The stacked weights, optimizer state and schedule from the members (after a restore)."""
        steps = {m.step for m in self.members}
        if len(steps) > 1:
            raise ConfigError(f"fused seeds resume together: the members' checkpoints are at steps "
                              f"{sorted(steps)}")
        self.step = steps.pop()
        for i, m in enumerate(self.members):
            self.model.copy_in(i, m.model)
        own_groups = self.members[0].optimizer.state_dict()["param_groups"]
        for group, own in zip(self.optimizer.param_groups, own_groups, strict=True):
            group.update({key: v for key, v in own.items() if key != "params"})
        states = [m.optimizer.state_dict()["state"] for m in self.members]
        self.optimizer.state.clear()
        if any(states):
            if not all(states):
                raise ConfigError("fused seeds resume together: some members have optimizer state, some not")
            for j, p in enumerate(self.params):
                own = [s.get(j) for s in states]
                if own[0] is None:
                    continue
                self.optimizer.state[p] = {
                    "step": own[0]["step"].to(dtype=torch.float32, device=p.device).clone(),
                    "exp_avg": torch.stack([o["exp_avg"] for o in own]).to(p.device),
                    "exp_avg_sq": torch.stack([o["exp_avg_sq"] for o in own]).to(p.device)}
            for m in self.members:
                m.optimizer.state.clear()
        self.scheduler.load_state_dict(self.members[0].scheduler.state_dict())
        self.stale = False

    # -- the loop ------------------------------------------------------------------------------

    def _batches(self, idxs: list[np.ndarray], step: int) -> tuple[list[dict[str, torch.Tensor]], list[Any]]:
        """Each member's collated batch (host tensors) and loss inputs, as ``Trainer._loss`` builds them."""
        tok = self.members[0].data.train
        batches, extra = [], []
        for m, idx in zip(self.members, idxs, strict=True):
            inst = m.instances
            qs, cands = inst.query[idx], inst.cand[idx]
            cols = (0, 1) if inst.pairwise else (0,)
            pairs = [(tok.contexts[q], tok.candidates[q][c]) for col in cols
                     for q, c in zip(qs, cands[:, col], strict=True)]
            batches.append(m.collator.collate(pairs))  # on the host: the stacked model lays them out
            weights = m.signals.weights(idx, step)
            w = None if weights is None else torch.as_tensor(weights, dtype=torch.float32, device=self.device)
            targets = None if inst.pairwise else torch.as_tensor(
                m.signals.targets(idx, step), dtype=torch.float32, device=self.device)
            extra.append((len(idx), w, targets))
        return batches, extra

    def _losses(self, idxs: list[np.ndarray], step: int) -> torch.Tensor:
        from harness.losses.losses import pairwise_loss, pointwise_loss

        batches, extra = self._batches(idxs, step)
        reduction = self.members[0].cfg.weighting.reduction
        gens = self.generators if self.device.type == "cpu" else None
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            rel = self.model(batches, gens).float()
        losses = []
        for r, (b, w, targets) in enumerate(extra):
            if targets is None:
                losses.append(pairwise_loss(rel[r, :b], rel[r, b:], w, reduction=reduction))
            else:
                logits = torch.stack([torch.zeros_like(rel[r]), rel[r]], dim=1)
                losses.append(pointwise_loss(logits, targets, w, reduction=reduction))
        return torch.stack(losses)

    @torch.no_grad()
    def _clip(self, max_norm: float) -> None:
        """``clip_grad_norm_`` per replica: the norm over replica r's slice of every gradient."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(self.k, -1), 2, dim=1) for g in grads])
        total = torch.linalg.vector_norm(norms, 2, dim=0)
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(coef.view(self.k, *([1] * (g.ndim - 1))))

    def run(self) -> Iterator[tuple[int, Record]]:
        if self.stale:
            self._load_members()
        members, k = self.members, self.k
        lead = members[0]
        cfg = lead.cfg.train
        total = lead.total_steps
        width = lead.instances.cand.shape[1]
        self.model.train()
        t0, pairs, n_loss = time.perf_counter(), 0, 0
        loss_sum = torch.zeros(k, dtype=torch.float64, device=self.device)
        while self.step < total:
            s = self.step
            for g, m in zip(self.generators, members, strict=True):
                g.manual_seed(step_seed(m.cfg.train.seed, s))
            if self.device.type != "cpu":
                torch.manual_seed(step_seed(cfg.seed, s))
            idxs = [m.sampler.batch(s) for m in members]
            losses = self._losses(idxs, s)
            self.optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()
            self._clip(cfg.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.step = s + 1
            for m in members:
                m.step = self.step
            pairs += len(idxs[0]) * width
            loss_sum += losses.detach()
            n_loss += 1
            if self.step % lead.log_every == 0 or self.step == total:
                dt = time.perf_counter() - t0
                lr = self.scheduler.get_last_lr()[0]
                mean = (loss_sum / n_loss).tolist()
                for i, m in enumerate(members):
                    yield i, StepRecord(self.step, mean[i], lr, pairs / dt if dt > 0 else 0.0,
                                        m.sampler.available(s))
                t0, pairs, n_loss = time.perf_counter(), 0, 0
                loss_sum.zero_()
            if self.step % cfg.eval_every == 0 or self.step == total:
                for i, m in enumerate(members):
                    self.copy_out(i)
                    yield i, m._evaluate_dev()
                t0 = time.perf_counter()
        for i, m in enumerate(members):
            self.copy_out(i)
        for i, m in enumerate(members):
            yield i, m._test()
