"""The training loop: knows nothing of Ray or MLflow; it yields metric records.

Each optimizer step draws one batch from the pacing-aware sampler (uniform over the available
prefix of the difficulty-sorted instances; with baseline pacing, over all instances), computes the
loss with per-sample weights and (soft) targets, and steps AdamW with linear warmup/decay. Every
``train.eval_every`` steps (and at the last step) the dev split is evaluated; the weights best on
``train.select_metric`` (a study sets it to its objective metric) are kept and, at the end,
evaluated on test. The final record also carries the run of that checkpoint on dev and test (every
candidate's score, ``FinalRecord.runs``), from which evaluation/trec.py writes TREC run files.

Determinism and exact resume: the batch of step s and the dropout noise of step s are functions of
(seed, s) only, so a run resumed from the checkpoint written after step s continues exactly as the
uninterrupted run would (same final metrics on the same hardware).

No host synchronisation inside a CUDA step: the step's inputs (the collated batch with its
unpadding indices, computed on the host by the collator, the sample weights and targets) are built
on the host, in pinned memory, by a background thread while the GPU runs the previous step (batch
s + 1 depends only on (seed, s + 1), so building it early changes nothing), and copied with
``non_blocking``; the loss is summed on the device and read back only when a ``StepRecord`` is
yielded (every ``log_every`` steps) and at evaluations. On CPU the inputs are built inline (a
thread would only compete with the step for the same cores).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.config import TrialConfig, resolve_steps
from harness.curriculum.sampler import PacedSampler, order_by_score
from harness.errors import ConfigError
from harness.model.checkpoint import read_checkpoint
from harness.model.collate import PairCollator
from harness.model.factory import build_model
from harness.model.scoring import metrics_of, run_of, score_candidates, to_device
from harness.training._compile import WIDTH_MULTIPLE, CompiledModel, use_compile
from harness.training._instances import trial_instances
from harness.training._precision import use_bf16
from harness.training._signals import TrainingSignals
from harness.training.tokenized import PreparedData

CHECKPOINT_FILE = "trainer.pt"


@dataclass(frozen=True)
class StepRecord:
    step: int
    loss: float
    lr: float
    pairs_per_s: float
    available: int


@dataclass(frozen=True)
class EvalRecord:
    step: int
    metrics: dict[str, float]
    is_best: bool
    best_step: int
    best_value: float


@dataclass(frozen=True)
class FinalRecord:
    best_step: int
    dev: dict[str, float]
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]]
    resolved: dict[str, float] = field(default_factory=dict)
    # Cascade models only: dev cascade_map / cascade_cost at the configured alphas (usable as search
    # objectives), and on test every exit alone (test_exit<L>_<m>) and the cascade (test_cascade_<m>).
    cascade: dict[str, float] = field(default_factory=dict)
    # The best-dev checkpoint's run per split, {"dev"|"test": {qid: {doc_id: score}}}: the scores the
    # dev and test metrics above were computed from (trec.run_file_artifacts writes them as files).
    runs: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)


Record = StepRecord | EvalRecord | FinalRecord


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def step_seed(seed: int, step: int) -> int:
    return (seed * 1_000_003 + step * 7_919 + 17) % (2**63 - 1)


@dataclass(frozen=True)
class StepInputs:
    """What step s feeds the model, built on the host (``Trainer.step_inputs``): the sampled
    instances ``idx``, the collated ``batch`` (positives, then the negatives of pairwise training),
    the per-sample ``weights`` (None: unweighted) and, for pointwise training, the ``targets``."""

    idx: np.ndarray
    batch: dict[str, torch.Tensor]
    weights: torch.Tensor | None
    targets: torch.Tensor | None


class Trainer:
    def __init__(self, cfg: TrialConfig, data: PreparedData, *, log_every: int = 10) -> None:
        self.cfg = cfg
        self.data = data
        self.log_every = log_every
        self.device = pick_device(cfg.train.device)
        from harness.model.encoder import load_tokenizer

        self.collator = PairCollator(load_tokenizer(cfg.model), cfg.model.max_length)
        seed = cfg.train.seed
        torch.manual_seed(seed)
        self.model = build_model(cfg, seed=seed).to(self.device)
        # bf16 autocast where it pays (harness.training._precision); recorded in resolved().
        self.autocast = use_bf16(cfg.train.bf16, self.device, self.model)
        # torch.compile where it pays (harness.training._compile); recorded in resolved(). Compiled
        # graphs have fixed shapes: bucketed widths, padded layout.
        self.compiled: CompiledModel | None = None
        self._step_loss: Any = None  # a plain ranker's forward and loss, compiled as one function
        if use_compile(cfg.train.compile, self.device):
            self.compiled = CompiledModel(self.model)
            self.collator.width_multiple, self.collator.dense = WIDTH_MULTIPLE, True
            if not hasattr(self.model, "exit_scores"):
                self._step_loss = self.compiled.step("step", self._plain_loss, self.device)
        train_q = data.splits.train
        self.instances = trial_instances(train_q, cfg.train)
        self.total_steps = cfg.train.steps
        self.signals = TrainingSignals(cfg, data, self.instances, self.total_steps)
        order = self._curriculum_order()
        cur = cfg.curriculum
        self.T = resolve_steps(cur.T, self.total_steps)
        self.sampler = PacedSampler(order=order, pacing=cur.pacing, delta=cur.delta, T=self.T,
                                     n=cur.n, batch_size=cfg.train.batch_size, seed=seed)
        self.optimizer = self._optimizer()
        warm = int(cfg.train.warmup * self.total_steps)
        total = self.total_steps

        def schedule(s: int) -> float:
            if s < warm:
                return (s + 1) / (warm + 1)
            return max(0.0, (total - s) / max(1, total - warm))

        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        self.step = 0
        self.best_value = -math.inf
        self.best_step = 0
        self.best_dev: dict[str, float] = {}
        self.best_state: dict[str, torch.Tensor] | None = None
        self.best_dev_run: dict[str, dict[str, float]] = {}  # the dev run of the best evaluation
        self.curve: list[tuple[int, dict[str, float]]] = []

    # -- setup ---------------------------------------------------------------------------------

    def _curriculum_order(self) -> np.ndarray:
        cur = self.cfg.curriculum
        if not cur.enabled:
            return np.arange(len(self.instances))
        from harness.curriculum.scoring import sorts_descending
        from harness.training.tokenized import score_key

        key = score_key(self.cfg)
        scores = self.data.scores.get(key)
        if scores is None:
            raise KeyError(f"difficulty scores {key} (curriculum.scoring={cur.scoring}) were not prepared")
        # One value per context; its instances share it (and stay in order among themselves).
        return order_by_score(scores[self.instances.query],
                              descending=sorts_descending(cur.scoring, cur.descending))

    def _optimizer(self) -> torch.optim.Optimizer:
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.ndim < 2 or "LayerNorm" in name or "norm" in name.lower() else decay).append(p)
        groups = [{"params": decay, "weight_decay": self.cfg.train.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        # The fused kernel (CPU and CUDA) updates every tensor in one pass instead of one kernel per
        # tensor: the same update rule, a much shorter optimizer step on a small encoder.
        fused = self.device.type in ("cpu", "cuda")
        return torch.optim.AdamW(groups, lr=self.cfg.train.lr, eps=self.cfg.train.adam_eps, fused=fused)

    def resolved(self) -> dict[str, float]:
        """Schedule knobs resolved to optimizer steps (docs/architecture.md, "Units"), whether the run
        computed in bf16 (``harness.training._precision``: 1.0 or 0.0) and whether its forward passes
        ran compiled (``harness.training._compile``: 1.0 or 0.0), for the records."""
        return {"curriculum.T_steps": float(self.T), **self.signals.resolved(),
                "train.bf16_effective": float(self.autocast),
                "train.compile_effective": float(self.compiled is not None and self.compiled.effective)}

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything a resume needs. When the best-dev weights are the current weights (the
        evaluation just improved: weights change only at optimizer steps, which advance ``step``),
        ``best_state`` is left out and ``best_is_model`` says so: a checkpoint then holds the
        weights once, not twice (a quarter of its bytes with AdamW's two moments)."""
        best_is_model = self.best_state is not None and self.best_step == self.step
        return {
            "step": self.step, "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "best_value": self.best_value, "best_step": self.best_step, "best_dev": self.best_dev,
            "best_state": None if best_is_model else self.best_state, "best_is_model": best_is_model,
            "best_dev_run": self.best_dev_run, "curve": self.curve,
            "config_id": self.cfg.config_id(), "seed": self.cfg.train.seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("config_id") != self.cfg.config_id() or state.get("seed") != self.cfg.train.seed:
            raise ConfigError(f"checkpoint belongs to another configuration or seed (configuration "
                              f"{state.get('config_id')} seed {state.get('seed')}; this run: "
                              f"{self.cfg.config_id()} seed {self.cfg.train.seed})")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step = int(state["step"])
        self.best_value, self.best_step = state["best_value"], state["best_step"]
        self.best_dev, self.best_state, self.curve = state["best_dev"], state["best_state"], state["curve"]
        if state.get("best_is_model"):  # optional: a checkpoint may lack it (then the model is not the best)
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in state["model"].items()}
        self.best_dev_run = state.get("best_dev_run", {})  # optional in a checkpoint

    def save(self, directory: str | Path) -> Path:
        """The resumable checkpoint (``state_dict``), written straight to a temporary file that
        then replaces ``trainer.pt`` (an in-memory buffer first cost a copy of every byte and most
        of the time; benchmarks/results/checkpoint.md)."""
        path = Path(directory) / CHECKPOINT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(self.state_dict(), tmp)
        tmp.replace(path)
        return path

    def save_best(self, directory: str | Path) -> Path:
        """The best-dev weights alone, in the checkpoint file's format (what `harness export`
        reads: ``best_state``, ``best_step``, ``config_id``, ``seed``); not a resumable state."""
        path = Path(directory) / CHECKPOINT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"best_state": self.best_state or self.model.state_dict(), "best_step": self.best_step,
                    "step": self.step, "config_id": self.cfg.config_id(), "seed": self.cfg.train.seed}, path)
        return path

    def restore(self, directory: str | Path) -> None:
        """Continue from the checkpoint in ``directory`` (read as plain data: harness.model.checkpoint)."""
        self.load_state_dict(read_checkpoint(Path(directory) / CHECKPOINT_FILE, map_location=self.device))

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> Iterator[Record]:
        """Train from the current step to the end, yielding records; ends with the test record."""
        cfg = self.cfg.train
        train_q = self.data.splits.train
        tok = self.data.train
        self.model.train()
        self.precompile()
        # On CUDA the next step's inputs are built by a background thread (the module docstring).
        pool = ThreadPoolExecutor(1, thread_name_prefix="harness-batches") if self.device.type == "cuda" else None
        ahead: tuple[int, Future[StepInputs]] | None = None
        t0, pairs, n_loss = time.perf_counter(), 0, 0
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        try:
            while self.step < self.total_steps:
                s = self.step
                if ahead is not None and ahead[0] == s:
                    inputs = ahead[1].result()
                else:
                    inputs = self.step_inputs(s, tok)
                if pool is not None and s + 1 < self.total_steps:
                    ahead = (s + 1, pool.submit(self.step_inputs, s + 1, tok))
                loss = self.train_step(inputs, train_q, tok)
                pairs += len(inputs.idx) * self.instances.cand.shape[1]
                loss_sum += loss.detach()  # in float64 on the device, as a Python float sum would be
                n_loss += 1
                if self.step % self.log_every == 0 or self.step == self.total_steps:
                    mean = float(loss_sum) / n_loss  # the one read-back between log points
                    dt = time.perf_counter() - t0
                    yield StepRecord(self.step, mean, self.scheduler.get_last_lr()[0],
                                     pairs / dt if dt > 0 else 0.0, self.sampler.available(s))
                    t0, pairs, n_loss = time.perf_counter(), 0, 0
                    loss_sum.zero_()
                if self.step % cfg.eval_every == 0 or self.step == self.total_steps:
                    yield self._evaluate_dev()
                    t0 = time.perf_counter()
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        yield self._test()

    def train_widths(self) -> list[int]:
        """Every padded width a training batch of this run can have (``PairCollator.widths``)."""
        inst, tok = self.instances, self.data.train
        cols = (0, 1) if inst.pairwise else (0,)
        return self.collator.widths((tok.contexts[q], tok.candidates[q][c]) for col in cols
                                    for q, c in zip(inst.query, inst.cand[:, col], strict=True))

    def precompile(self) -> int:
        """Compiles the training step (forward, loss, backward; CUDA graphs on CUDA) for every width
        a batch can have, before the first step, so that no compile falls inside training; returns
        how many widths. Each runs on step ``self.step``'s instances padded or cut to that width;
        the gradients are dropped, no weight or optimizer state changes, and every step seeds its
        own dropout, so training is as without it. Nothing to do when the step is not compiled."""
        if self._step_loss is None or self.compiled is None or not self.compiled.effective:
            return 0
        inputs = self.step_inputs(self.step, self.data.train)
        w, t = self._upload(inputs.weights), self._upload(inputs.targets)
        widths = self.train_widths()
        for width in widths:
            batch = to_device(self.collator.at_width(inputs.batch, width), self.device)
            # CUDA graphs are recorded on a shape's second call and replayed from its third
            for _ in range(3 if self.device.type == "cuda" else 1):
                self._step_loss(batch, w, t).backward()
        self.optimizer.zero_grad(set_to_none=True)
        return len(widths)

    def train_step(self, inputs: StepInputs, queries: Any, tok: Any) -> torch.Tensor:
        """One optimizer step, step ``self.step``, on ``inputs`` (``step_inputs(self.step, tok)``);
        returns the loss, on the device (reading it is what waits for the GPU)."""
        s = self.step
        torch.manual_seed(step_seed(self.cfg.train.seed, s))
        loss = self._loss(inputs.idx, s, queries, tok, inputs=inputs)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.train.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        self.step = s + 1
        return loss

    def step_inputs(self, step: int, tok: Any, idx: np.ndarray | None = None) -> StepInputs:
        """The host-side inputs of step ``step`` on the instances ``idx`` (default: the sampler's
        batch of that step, so a function of (seed, step) only); pinned on CUDA, for
        ``non_blocking`` copies."""
        inst = self.instances
        if idx is None:
            idx = self.sampler.batch(step)
        qs, cands = inst.query[idx], inst.cand[idx]
        pairs = [(tok.contexts[q], tok.candidates[q][c]) for q, c in zip(qs, cands[:, 0], strict=True)]
        if inst.pairwise:
            pairs += [(tok.contexts[q], tok.candidates[q][c]) for q, c in zip(qs, cands[:, 1], strict=True)]
        batch = self.collator.collate(pairs, packing=True)
        weights = self.signals.weights(idx, step)
        w = None if weights is None else torch.as_tensor(weights, dtype=torch.float32)
        t = None if inst.pairwise else torch.as_tensor(self.signals.targets(idx, step), dtype=torch.float32)
        if self.device.type == "cuda":
            batch = {k: v.pin_memory() for k, v in batch.items()}
            w = None if w is None else w.pin_memory()
            t = None if t is None else t.pin_memory()
        return StepInputs(idx, batch, w, t)

    def _upload(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.to(self.device, non_blocking=self.device.type == "cuda")

    def _loss(self, idx: np.ndarray, step: int, queries: Any, tok: Any, *,
              inputs: StepInputs | None = None) -> torch.Tensor:
        """The loss of step ``step`` on the instances ``idx`` (``inputs``: ``step_inputs(step, tok)``
        when already built; its ``idx`` is then ``idx``)."""
        if inputs is None:
            inputs = self.step_inputs(step, tok, idx)
        w = self._upload(inputs.weights)
        batch = to_device(inputs.batch, self.device)
        targets = self._upload(inputs.targets)
        if self._step_loss is not None:
            return self._step_loss(batch, w, targets)  # type: ignore[no-any-return]
        gen = np.random.default_rng([self.cfg.train.seed, step, 2])
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            rel = self.model.train_scores(batch, gen).float()
        return self._reduce(rel, w, targets)

    def _plain_loss(self, batch: dict[str, torch.Tensor], w: torch.Tensor | None,
                    targets: torch.Tensor | None) -> torch.Tensor:
        """A plain ranker's step loss from its uploaded inputs: what ``CompiledModel.step`` compiles
        (the forward and the loss in one graph per shape)."""
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
            rel = self.model(batch).float()
        return self._reduce(rel, w, targets)

    def _reduce(self, rel: torch.Tensor, w: torch.Tensor | None, targets: torch.Tensor | None) -> torch.Tensor:
        from harness.losses.losses import ranking_loss

        return ranking_loss(self.cfg.train.loss, rel, w, targets, reduction=self.cfg.weighting.reduction)

    def _scores(self, split: str) -> Any:
        queries = self.data.splits.split(split)
        return queries, score_candidates(self.model, self.collator, queries, self.data.tokens(split),
                                      batch_size=self.cfg.train.eval_batch_size, device=self.device,
                                      autocast=self.autocast)

    def _evaluate_dev(self) -> EvalRecord:
        queries, scores = self._scores("dev")
        means = metrics_of(queries, scores).means
        self.curve.append((self.step, means))
        value = means[self.cfg.train.select_metric]
        is_best = value > self.best_value
        if is_best:
            self.best_value, self.best_step, self.best_dev = value, self.step, dict(means)
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
            self.best_dev_run = run_of(queries, scores)
        return EvalRecord(self.step, means, is_best, self.best_step, self.best_value)

    def _test(self) -> FinalRecord:
        final = copy.deepcopy(self.model.state_dict()) if self.best_state is not None else None
        if self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        cascade: dict[str, float] = {}
        if hasattr(self.model, "exit_scores"):
            queries, scores, cascade = self._cascade_eval()
        else:
            queries, scores = self._scores("test")
        m = metrics_of(queries, scores)
        if final is not None:
            self.model.load_state_dict(final)
        runs = {**({"dev": dict(self.best_dev_run)} if self.best_dev_run else {}),
                "test": run_of(queries, scores)}
        return FinalRecord(self.best_step, dict(self.best_dev), dict(m.means),
                          {k: dict(v) for k, v in m.per_query.items()}, self.resolved(), cascade, runs)

    def _cascade_eval(self) -> tuple[Any, list[np.ndarray], dict[str, float]]:
        """One pass per split stores every exit's scores; exits alone, the cascade at the
        configured alphas and its cost are computed from them (Soldaini & Moschitti, Table 3).
        The final exit's scores are the model's test scores."""
        from harness.model.cascade_eval import cascade_metrics, exit_metrics, score_exits

        plan = self.model.plan
        out: dict[str, float] = {}
        test_queries: Any = ()
        test_mats: list[np.ndarray] = []
        for split in ("dev", "test"):
            queries = self.data.splits.split(split)
            mats = score_exits(self.model, self.collator, queries, self.data.tokens(split),
                               batch_size=self.cfg.train.eval_batch_size, device=self.device,
                               autocast=self.autocast)
            ce = cascade_metrics(queries, mats, plan)
            if split == "dev":
                out.update(cascade_map=ce.metrics.means["map"], cascade_cost=ce.relative_cost)
                continue
            for layer, qm in exit_metrics(queries, mats, plan.exits).items():
                out.update({f"test_exit{layer}_{k}": v for k, v in qm.means.items()})
            out.update({f"test_cascade_{k}": v for k, v in ce.metrics.means.items()})
            out["test_cascade_cost"] = ce.relative_cost
            test_queries, test_mats = queries, mats
        return test_queries, [m[-1] for m in test_mats], out
