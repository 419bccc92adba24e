"""Scoring every candidate of a split with a ranker and computing per-query metrics."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from harness.model.collate import PairCollator, TokenizedQueries
from harness.records import Query, qrels_of

if TYPE_CHECKING:
    from harness.metrics.measures import QueryMetrics


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A host batch on ``device``. To CUDA the tensors go through pinned memory with
    ``non_blocking`` copies, so the host does not wait for the GPU; elsewhere a plain ``to``."""
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: (v if v.is_pinned() else v.pin_memory()).to(device, non_blocking=True)
            for k, v in batch.items()}


def score_candidates(model: torch.nn.Module, collator: PairCollator, queries: Sequence[Query],
                     tokens: TokenizedQueries, *, batch_size: int, device: torch.device | str,
                     autocast: bool, exits: bool = False) -> list[np.ndarray]:
    """Relevance scores of every candidate, per query: the one scorer of plain and cascade models.

    ``exits`` false: ``model.score`` (the ranking head), one (n_q,) array per query; true: every
    exit of a cascade model (``model.exit_scores``), one (E, n_q) matrix per query from one pass.
    Every pair of the split is sorted by length (longest first) and cut into batches of
    ``batch_size``, so that dynamic padding wastes little; the scores are scattered back to their
    queries. A pair's score never depends on its batch-mates (padding is masked), so this equals
    scoring each query alone (tests/model/test_scoring.py). It runs under ``torch.inference_mode``
    with bf16 autocast when ``autocast``; the scores stay on the device until the last batch and
    come back in one copy (on CUDA no batch waits for the previous one)."""
    device = torch.device(device)
    pairs = [(qi, ci) for qi, q in enumerate(queries) for ci in range(len(q.candidates))]
    lengths = np.array([len(tokens.contexts[qi]) + len(tokens.candidates[qi][ci]) for qi, ci in pairs])
    order = np.argsort(-lengths, kind="stable")
    lead = (len(model.exits),) if exits else ()
    if not pairs:
        return [np.zeros((*lead, 0), dtype=np.float64) for _ in queries]
    was_training = model.training
    model.eval()
    parts: list[torch.Tensor] = []
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chosen = [pairs[i] for i in order[start:start + batch_size]]
                batch = collator.collate(((tokens.contexts[qi], tokens.candidates[qi][ci]) for qi, ci in chosen),
                                         packing=True)
                batch = to_device(batch, device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    parts.append((model.exit_scores(batch) if exits else model.score(batch)).float())
            scores = torch.cat(parts, dim=-1).cpu().numpy()
    finally:
        model.train(was_training)
    # Pairs are numbered query by query, so query q's candidates are one slice of ``flat``.
    flat = np.empty((*lead, len(pairs)), dtype=np.float64)
    flat[..., order] = scores
    bounds = np.cumsum([0] + [len(q.candidates) for q in queries])
    return [flat[..., a:b].copy() for a, b in itertools.pairwise(bounds)]


def run_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """The run {qid: {doc_id: score}} of per-query candidate scores (``score_candidates``' output):
    what the metrics are computed from, and what a TREC run file (evaluation/trec.py) is written from."""
    return {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
            for q, sc in zip(queries, scores, strict=True)}


def metrics_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> QueryMetrics:
    # Imported here: training and scoring alone need no ir-measures (a GPU machine that only
    # measures speed may not have it; benchmarks/device.py).
    from harness.metrics.measures import evaluate

    return evaluate(qrels_of(queries), run_of(queries, scores))
