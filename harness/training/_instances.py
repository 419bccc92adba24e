"""Training instances (Penha & Hauff 2020: balanced relevant and non-relevant pairs).

Pointwise: for each training context, its positive(s) and ``k`` negatives (``k`` =
train.negatives_per_positive per positive), each one (context, candidate, label) instance.
Pairwise: one (context, positive, negative) instance per chosen negative. Which negatives are chosen
is fixed by the trial seed, so a baseline and a candidate with the same seed see the same instances.
Instances of one context are adjacent and contexts keep the split's order; the curriculum re-orders
them by context difficulty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.config import TrainConfig, TrialConfig
from harness.errors import ConfigError
from harness.losses.kinds import LOSSES
from harness.records import Query


@dataclass(frozen=True)
class Instances:
    query: np.ndarray   # (N,) index into the training queries
    cand: np.ndarray    # (N, 1) candidate index (pointwise) or (N, 2) positive, negative (pairwise)
    label: np.ndarray   # (N,) relevance label of cand[:, 0] (pairwise: always 1)

    def __len__(self) -> int:
        return len(self.query)

    @property
    def pairwise(self) -> bool:
        return self.cand.shape[1] == 2


def _too_few(q: Query, negatives_per_positive: int, positives: int, negatives: int) -> ConfigError:
    return ConfigError(f"train.negatives_per_positive={negatives_per_positive} needs "
                       f"{negatives_per_positive * positives} negatives but query {q.qid} has a pool of {negatives}")


def check_negatives(queries: Sequence[Query], *negatives_per_positive: int) -> None:
    """Raise ConfigError, as training would, if a training query has fewer negatives than
    ``negatives_per_positive`` times its positives (each value given, smallest first): a study
    checks its data this way, for its configurations' values, before any trial starts."""
    pools = [(q, pos, len(q.candidates) - pos) for q in queries
             if (pos := sum(c.label > 0 for c in q.candidates))]
    for n in sorted(set(negatives_per_positive)):
        for q, pos, neg in pools:
            if n * pos > neg:
                raise _too_few(q, n, pos, neg)


def check_scored(queries: Sequence[Query], *configs: TrialConfig) -> None:
    """Raise ConfigError where a configuration reads the candidates' first-stage (sampler) scores
    and the training data has none (MSDialog's files, say): a weighting heuristic would weigh every
    instance alike (the unweighted baseline), WSLS would give every negative a hard label."""
    if any(c.score is not None for q in queries for c in q.candidates):
        return
    for cfg in configs:
        if cfg.weighting.enabled:
            raise ConfigError(f"weighting.heuristic={cfg.weighting.heuristic} ranks each context's candidates by "
                              f"their first-stage scores, and the training data (data.source {cfg.data.source}) "
                              "has none: every instance would weigh alike, as without it; leave it out or use "
                              "data with scores", key="weighting.heuristic")
        if cfg.smoothing.enabled and cfg.smoothing.kind.needs_weak_scores and cfg.train.sampler != "random":
            raise ConfigError(f"smoothing.method={cfg.smoothing.method} reads the negative sampler's scores, and "
                              f"the training data (data.source {cfg.data.source}) has none: every negative "
                              "would keep its hard label; use train.sampler bm25, data with scores, or LS",
                              key="smoothing.method")


def build_instances(queries: Sequence[Query], *, negatives_per_positive: int, pairwise: bool,
                    rng: np.random.Generator) -> Instances:
    qs: list[int] = []
    cands: list[tuple[int, ...]] = []
    labels: list[int] = []
    for qi, q in enumerate(queries):
        pos = [i for i, c in enumerate(q.candidates) if c.label > 0]
        neg = [i for i, c in enumerate(q.candidates) if c.label <= 0]
        if not pos:
            continue
        k = negatives_per_positive * len(pos)
        if k > len(neg):
            raise _too_few(q, negatives_per_positive, len(pos), len(neg))
        chosen = sorted(rng.choice(len(neg), size=k, replace=False).tolist())
        negs = [neg[j] for j in chosen]
        if pairwise:
            for j, n in enumerate(negs):
                qs.append(qi)
                cands.append((pos[j // negatives_per_positive], n))
                labels.append(1)
        else:
            for p in pos:
                qs.append(qi)
                cands.append((p,))
                labels.append(1)
            for n in negs:
                qs.append(qi)
                cands.append((n,))
                labels.append(0)
    if not qs:
        raise ConfigError("the training split has no query with a relevant candidate")
    return Instances(np.asarray(qs, dtype=np.int64), np.asarray(cands, dtype=np.int64),
                     np.asarray(labels, dtype=np.int64))


def trial_instances(queries: Sequence[Query], train: TrainConfig) -> Instances:
    """The instances a trial with ``train`` (its seed, negatives per positive, loss) trains on:
    the one place that fixes which negatives a seed draws (generator seeded by [seed, 1])."""
    return build_instances(queries, negatives_per_positive=train.negatives_per_positive,
                           pairwise=LOSSES[train.loss].pairwise, rng=np.random.default_rng([train.seed, 1]))


def trained_candidates(instances: Instances, n_queries: int) -> list[list[int]]:
    """Per training query, the candidate indices its instances use (ascending): the positive(s)
    and the negatives the seed drew. Queries without instances get an empty list."""
    out: list[set[int]] = [set() for _ in range(n_queries)]
    for q, cands in zip(instances.query.tolist(), instances.cand.tolist(), strict=True):
        out[q].update(cands)
    return [sorted(c) for c in out]
