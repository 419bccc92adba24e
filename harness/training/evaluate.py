"""Scoring every candidate of a split with a ranker and computing per-query metrics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from harness.data.records import Query, qrels_of
from harness.evaluation.metrics import QueryMetrics, evaluate
from harness.training.collate import PairCollator, TokenizedQueries


@torch.no_grad()
def score_queries(model: torch.nn.Module, collator: PairCollator, queries: Sequence[Query],
                  tokens: TokenizedQueries, *, batch_size: int, device: torch.device,
                  autocast: bool) -> list[np.ndarray]:
    """Relevance scores of every candidate, per query. Pairs are batched by length so that dynamic
    padding wastes little; a pair's score never depends on its batch-mates (padding is masked)."""
    pairs = [(qi, ci) for qi, q in enumerate(queries) for ci in range(len(q.candidates))]
    lengths = np.array([len(tokens.contexts[qi]) + len(tokens.candidates[qi][ci]) for qi, ci in pairs])
    order = np.argsort(-lengths, kind="stable")
    out = [np.zeros(len(q.candidates), dtype=np.float64) for q in queries]
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            chosen = [pairs[i] for i in order[start:start + batch_size]]
            batch = collator.collate((tokens.contexts[qi], tokens.candidates[qi][ci]) for qi, ci in chosen)
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                scores = model.score(batch).float().cpu().numpy()
            for (qi, ci), s in zip(chosen, scores, strict=True):
                out[qi][ci] = float(s)
    finally:
        model.train(was_training)
    return out


def run_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    """The run {qid: {doc_id: score}} of per-query candidate scores (``score_queries``' output):
    what the metrics are computed from, and what a TREC run file (evaluation/trec.py) is written from."""
    return {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
            for q, sc in zip(queries, scores, strict=True)}


def metrics_of(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> QueryMetrics:
    return evaluate(qrels_of(queries), run_of(queries, scores))
