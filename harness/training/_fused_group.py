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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from harness.errors import ConfigError
from harness.model.stacked import StackedBatch, StackedCrossEncoder, stack_batches, unstackable
from harness.training._compile import CompiledModel, use_compile
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
        # Compiled as the single trainer's model is (harness.training._compile): the step's forward
        # and losses, over the stacked batch's tensors, in the dense layout of bucketed widths
        # (the members' collators are already set up for it by Trainer).
        self.compiled: CompiledModel | None = None
        self._losses_fn: Any = self.losses
        if use_compile(lead.cfg.train.compile, self.device):
            self.compiled = CompiledModel(self, entries=("_losses_fn",))

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

    def step_inputs(self, step: int) -> FusedInputs:
        """Step ``step``'s inputs for every member, built on the host (``Trainer.step_inputs`` for
        each member's instances, then laid out for the stacked model; pinned on CUDA). A function of
        the members' (seed, step) only, so the run builds step s + 1's on a background thread while
        the device computes step s. Compiled, the members' pairs are collated together (one padded
        width, the dense layout: fixed shapes per width bucket); eager, each member's as its
        separate run collates them (its dropout masks then have its separate run's shapes)."""
        idxs = [m.sampler.batch(step) for m in self.members]
        batches = self._collate(idxs)
        stacked = stack_batches(batches, self.model.pad_id, dense=self.compiled is not None)
        inst = self.members[0].instances
        weights, targets = [], []
        for m, idx in zip(self.members, idxs, strict=True):
            w = m.signals.weights(idx, step)
            weights.append(None if w is None else torch.as_tensor(w, dtype=torch.float32))
            targets.append(None if inst.pairwise else torch.as_tensor(m.signals.targets(idx, step),
                                                                      dtype=torch.float32))
        if self.device.type == "cuda":
            stacked = stacked.pin()
            weights = [None if w is None else w.pin_memory() for w in weights]
            targets = [None if t is None else t.pin_memory() for t in targets]
        return FusedInputs(step, idxs, stacked, weights, targets)

    def _pairs(self, idxs: list[np.ndarray]) -> list[list[tuple[np.ndarray, np.ndarray]]]:
        tok = self.members[0].data.train
        cols = (0, 1) if self.members[0].instances.pairwise else (0,)
        out = []
        for m, idx in zip(self.members, idxs, strict=True):
            qs, cands = m.instances.query[idx], m.instances.cand[idx]
            out.append([(tok.contexts[q], tok.candidates[q][c]) for col in cols
                        for q, c in zip(qs, cands[:, col], strict=True)])
        return out

    def _collate(self, idxs: list[np.ndarray]) -> list[dict[str, torch.Tensor]]:
        per_member = self._pairs(idxs)
        if self.compiled is None:
            return [m.collator.collate(pairs) for m, pairs in zip(self.members, per_member, strict=True)]
        joint = self.members[0].collator.collate([p for pairs in per_member for p in pairs])
        n = len(per_member[0])
        return [{key: v[r * n:(r + 1) * n] for key, v in joint.items()} for r in range(self.k)]

    def precompile(self) -> int:
        """``Trainer.precompile`` for the fused step: every width a batch can have (any member's:
        they share their instances), compiled before the first step; returns how many."""
        if self.compiled is None or not self.compiled.effective:
            return 0
        inputs = self.step_inputs(self.step)
        lead = self.members[0]
        widths = lead.train_widths()
        weights, targets = self._upload(inputs.weights), self._upload(inputs.targets)
        batches = self._collate(inputs.idxs)
        for width in widths:
            wide = [lead.collator.at_width(b, width) for b in batches]
            stacked = stack_batches(wide, self.model.pad_id, dense=True).to(self.device)
            for _ in range(3 if self.device.type == "cuda" else 1):
                self._losses_fn(*stacked.tensors(), weights, targets).sum().backward()
        self.optimizer.zero_grad(set_to_none=True)
        return len(widths)

    def _upload(self, xs: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        nb = self.device.type == "cuda"
        return [None if x is None else x.to(self.device, non_blocking=nb) for x in xs]

    def losses(self, ids: torch.Tensor, types: torch.Tensor, positions: torch.Tensor, src: torch.Tensor,
               dest: torch.Tensor, first: torch.Tensor, keep: torch.Tensor,
               weights: list[torch.Tensor | None], targets: list[torch.Tensor | None]) -> torch.Tensor:
        """(k,) the members' losses of one step from its uploaded inputs, with the device's dropout:
        the function that is compiled (one graph per width bucket; no host read, no graph break:
        tests/training/test_fused_step.py compiles it with ``fullgraph=True``)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            rel = self.model.logits(ids, types, positions, src, dest, first, keep).float()
        return self._reduce(rel, weights, targets)

    def _reduce(self, rel: torch.Tensor, weights: list[torch.Tensor | None],
                targets: list[torch.Tensor | None]) -> torch.Tensor:
        from harness.losses.losses import ranking_loss

        cfg = self.members[0].cfg
        out = [ranking_loss(cfg.train.loss, rel[r], w, t, reduction=cfg.weighting.reduction)
               for r, (w, t) in enumerate(zip(weights, targets, strict=True))]
        return torch.stack(out)

    def _losses(self, inputs: FusedInputs) -> torch.Tensor:
        stacked = inputs.stacked.to(self.device)
        weights, targets = self._upload(inputs.weights), self._upload(inputs.targets)
        if self.device.type == "cpu" and self.compiled is None:
            # On CPU each replica's dropout masks are its separate run's (its own generator).
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                rel = self.model(stacked, self.generators).float()
            return self._reduce(rel, weights, targets)
        return self._losses_fn(*stacked.tensors(), weights, targets)  # type: ignore[no-any-return]

    @torch.no_grad()
    def clip(self, max_norm: float) -> None:
        """``clip_grad_norm_`` per replica, as foreach operations (a few kernel launches, not one
        or more per parameter): the norms of every replica's slice of every gradient in one
        ``_foreach_norm``, replica r's total norm over its slices, then its slices scaled in one
        ``_foreach_mul_`` per replica. No value is read back to the host."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return
        k = self.k
        slices = [g[r] for r in range(k) for g in grads]  # replica-major: replica r's P slices
        norms = torch.stack(torch._foreach_norm(slices, 2.0)).view(k, len(grads))
        total = torch.linalg.vector_norm(norms, 2, dim=1)
        coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
        for r in range(k):
            torch._foreach_mul_(slices[r * len(grads):(r + 1) * len(grads)], coef[r])

    def train_step(self, inputs: FusedInputs) -> torch.Tensor:
        """One optimizer step of every member, step ``self.step``, on ``inputs``
        (``step_inputs(self.step)``); returns the (k,) losses, on the device (not read here)."""
        s = self.step
        for g, m in zip(self.generators, self.members, strict=True):
            g.manual_seed(step_seed(m.cfg.train.seed, s))
        if self.device.type != "cpu":
            torch.manual_seed(step_seed(self.members[0].cfg.train.seed, s))
        losses = self._losses(inputs)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.clip(self.members[0].cfg.train.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step = s + 1
        for m in self.members:
            m.step = self.step
        return losses

    def run(self) -> Iterator[tuple[int, Record]]:
        if self.stale:
            self._load_members()
        members, k = self.members, self.k
        lead = members[0]
        cfg = lead.cfg.train
        total = lead.total_steps
        width = lead.instances.cand.shape[1]
        self.model.train()
        self.precompile()
        # On CUDA the next step's inputs are built by a background thread (``step_inputs``).
        pool = ThreadPoolExecutor(1, thread_name_prefix="harness-fused") if self.device.type == "cuda" else None
        ahead: tuple[int, Future[FusedInputs]] | None = None
        t0, pairs, n_loss = time.perf_counter(), 0, 0
        loss_sum = torch.zeros(k, dtype=torch.float64, device=self.device)
        try:
            while self.step < total:
                s = self.step
                inputs = ahead[1].result() if ahead is not None and ahead[0] == s else self.step_inputs(s)
                if pool is not None and s + 1 < total:
                    ahead = (s + 1, pool.submit(self.step_inputs, s + 1))
                losses = self.train_step(inputs)
                pairs += len(inputs.idxs[0]) * width
                loss_sum += losses.detach()
                n_loss += 1
                if self.step % lead.log_every == 0 or self.step == total:
                    mean = (loss_sum / n_loss).tolist()  # the one read-back between log points
                    dt = time.perf_counter() - t0
                    lr = self.scheduler.get_last_lr()[0]
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
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        for i, m in enumerate(members):
            self.copy_out(i)
        for i, m in enumerate(members):
            yield i, m._test()


@dataclass(frozen=True)
class FusedInputs:
    """What one fused step feeds the stacked model, built on the host (``FusedEngine.step_inputs``):
    each member's sampled instances, the stacked batch, and each member's sample weights (None:
    unweighted) and, for pointwise training, targets."""

    step: int
    idxs: list[np.ndarray]
    stacked: StackedBatch
    weights: list[torch.Tensor | None]
    targets: list[torch.Tensor | None]
