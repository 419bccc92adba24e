"""Per-instance training signals the loop applies at step s: loss weights (curriculum by loss
weighting, MacAvaney et al. 2020) and soft targets (label smoothing, Penha & Hauff 2021).

The math lives in harness.curriculum (difficulty heuristics, W(t, i)) and harness.losses (targets);
this module gathers each instance's inputs once, resolves step units (weighting.m, smoothing.switch
may be fractions of train.steps) and evaluates the schedules at a step.
"""

from __future__ import annotations

import numpy as np

from harness.config import TrialConfig, resolve_steps
from harness.curriculum.heuristics import query_difficulty
from harness.curriculum.weights import curriculum_weight
from harness.losses.targets import soft_targets, weak_scores
from harness.training._instances import Instances, check_scored
from harness.training.tokenized import PreparedData


class TrainingSignals:
    def __init__(self, cfg: TrialConfig, data: PreparedData, instances: Instances, total_steps: int) -> None:
        self.cfg = cfg
        self.instances = instances
        queries = data.splits.train
        check_scored(queries, cfg)  # a heuristic or WSLS with no scores to read would do nothing
        self.m = resolve_steps(cfg.weighting.m, total_steps)
        self.switch = resolve_steps(cfg.smoothing.switch, total_steps)
        self.difficulty: np.ndarray | None = None
        if cfg.weighting.enabled:
            per_query = {}
            d = np.empty(len(instances))
            for i, (q, cands) in enumerate(zip(instances.query, instances.cand, strict=True)):
                qd = per_query.get(q) or per_query.setdefault(q, query_difficulty(queries[q], cfg.weighting.heuristic))
                d[i] = qd.pair(int(cands[0]), int(cands[1])) if instances.pairwise else qd.pointwise[cands[0]]
            self.difficulty = d
        self.weak: np.ndarray | None = None
        if cfg.smoothing.kind.needs_weak_scores:
            # Random negatives were not ranked by the sampler: weak label 0, one-hot, as the authors'
            # current RandomNegativeSampler gives them (their BM25 score still feeds the heuristics).
            if cfg.train.sampler == "random":
                self.weak = np.zeros(len(instances))
            else:
                per_q = {q: weak_scores(queries[q]) for q in np.unique(instances.query)}
                self.weak = np.array([per_q[q][c[0]] for q, c in zip(instances.query, instances.cand,
                                                                      strict=True)])

    def resolved(self) -> dict[str, float]:
        out = {}
        if self.cfg.weighting.enabled:
            out["weighting.m_steps"] = float(self.m)
        if self.cfg.smoothing.kind.two_stage:
            out["smoothing.switch_steps"] = float(self.switch)
        return out

    def weights(self, idx: np.ndarray, step: int) -> np.ndarray | None:
        """W(t, i) per instance of the batch, or None when the loss is unweighted."""
        if self.difficulty is None:
            return None
        w = self.cfg.weighting
        return curriculum_weight(self.difficulty[idx], step, m=self.m, anti=w.anti, iteration=w.iteration)

    def targets(self, idx: np.ndarray, step: int) -> np.ndarray:
        """(B, 2) targets: hard labels, or LS/WSLS soft targets at this step."""
        sm = self.cfg.smoothing
        weak = None if self.weak is None else self.weak[idx]
        return soft_targets(self.instances.label[idx], weak, method=sm.method, epsilon=sm.epsilon,
                            step=step, switch_step=self.switch)
