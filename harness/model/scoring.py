"""Scoring every candidate of a split with a ranker and computing per-query metrics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from harness.evaluation.metrics import QueryMetrics, evaluate
from harness.model.collate import PairCollator, TokenizedQueries
from harness.records import Query, qrels_of


@torch.no_grad()
def score_candidates(model: torch.nn.Module, collator: PairCollator, queries: Sequence[Query],
                     tokens: TokenizedQueries, *, batch_size: int, device: torch.device | str,
                     autocast: bool, exits: bool = False) -> list[np.ndarray]:
    """Relevance scores of every candidate, per query: the one scorer of plain and cascade models.

    ``exits`` false: ``model.score`` (the ranking head), one (n_q,) array per query; true: every
    exit of a cascade model (``model.exit_scores``), one (E, n_q) matrix per query from one pass.
    Pairs are batched across queries by length so that dynamic padding wastes little; a pair's
    score never depends on its batch-mates (padding is masked)."""
    device = torch.device(device)
    pairs = [(qi, ci) for qi, q in enumerate(queries) for ci in range(len(q.candidates))]
    lengths = np.array([len(tokens.contexts[qi]) + len(tokens.candidates[qi][ci]) for qi, ci in pairs])
    order = np.argsort(-lengths, kind="stable")
    lead = (len(model.exits),) if exits else ()
    out = [np.zeros((*lead, len(q.candidates)), dtype=np.float64) for q in queries]
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chosen = [pairs[i] for i in order[start:start + batch_size]]
            batch = collator.collate((tokens.contexts[qi], tokens.candidates[qi][ci]) for qi, ci in chosen)
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                scores = (model.exit_scores(batch) if exits else model.score(batch)).float().cpu().numpy()
            for j, (qi, ci) in enumerate(chosen):
                out[qi][..., ci] = scores[..., j]
    finally:
        model.train(was_training)
    return out


def run_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """The run {qid: {doc_id: score}} of per-query candidate scores (``score_candidates``' output):
    what the metrics are computed from, and what a TREC run file (evaluation/trec.py) is written from."""
    return {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
            for q, sc in zip(queries, scores, strict=True)}


def metrics_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> QueryMetrics:
    return evaluate(qrels_of(queries), run_of(queries, scores))
