"""Evaluating a Cascade Transformer (Soldaini & Moschitti 2020, Table 3 and Figure 2).

From one pass that stores every exit's scores per query (``score_exits``: a list of (E, n_q)
matrices, one per query), everything else is computed without running the model again:
- ``exit_metrics``: each exit as a ranker of its own (Table 3 rows "4 layers CT" .. "Full CT");
- ``cascade_metrics``: the cascade under one plan (drop ratios): metrics and relative cost;
- ``sweep`` over ``alpha_grid``: the paper's Figure 2 grid (alpha_p1..alpha_p{N-1} in
  {0.1, .., 0.6}), each point a (relative cost, metrics) pair;
- ``cascade_report``: Table 3 for one model, as rows and markdown.
This is exact, not an approximation: a candidate's exit scores do not depend on its batch-mates,
so the live cascade (``CascadeRanker.cascade``, ``run_cascade`` here) ranks as the replay does.

Relative cost over a query set = sum_q layer_passes(n_q) / (depth * sum_q n_q), i.e. every
candidate-layer pass counted once (cascade_cost's per-batch cost when all queries have n candidates).

Only ``score_exits`` and ``run_cascade`` need torch (imported inside them); the rest is pure.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.errors import DataError
from harness.metrics.measures import QueryMetrics, evaluate
from harness.model._cascade_rank import cascade_rank
from harness.model.cascade_cost import CascadePlan
from harness.records import Query, qrels_of

if TYPE_CHECKING:
    from harness.model.collate import PairCollator, TokenizedQueries

FIGURE2_VALUES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


def _run(queries: Sequence[Query], scores: Sequence[np.ndarray]) -> dict[str, dict[str, float]]:
    return {q.qid: {c.doc_id: float(s) for c, s in zip(q.candidates, sc, strict=True)}
            for q, sc in zip(queries, scores, strict=True)}


def _check(queries: Sequence[Query], matrices: Sequence[np.ndarray], n_exits: int) -> None:
    if len(queries) != len(matrices):
        raise DataError(f"cascade evaluation: {len(queries)} queries but {len(matrices)} score matrices")
    for q, m in zip(queries, matrices, strict=True):
        if np.shape(m) != (n_exits, len(q.candidates)):
            raise DataError(f"cascade evaluation: query {q.qid!r} needs exit scores of shape "
                            f"({n_exits}, {len(q.candidates)}), got {np.shape(m)}")


def exit_metrics(queries: Sequence[Query], matrices: Sequence[np.ndarray], exits: Sequence[int],
                 metrics: Sequence[str] | None = None) -> dict[int, QueryMetrics]:
    """Per-query metrics of each exit used alone, keyed by its layer (alpha = 0 at that depth)."""
    _check(queries, matrices, len(exits))
    qrels = qrels_of(queries)
    return {layer: evaluate(qrels, _run(queries, [m[i] for m in matrices]), metrics)
            for i, layer in enumerate(exits)}


@dataclass(frozen=True)
class CascadeEval:
    """The cascade under ``plan`` on a query set: metrics and relative cost (1.0 = full model)."""

    plan: CascadePlan
    metrics: QueryMetrics
    relative_cost: float

    @property
    def alphas(self) -> tuple[float, ...]:
        return self.plan.alphas


def cascade_scores(matrices: Sequence[np.ndarray], plan: CascadePlan) -> list[np.ndarray]:
    """The cascade's ranking scores per query (``cascade_rank`` over each exit-score matrix)."""
    return [cascade_rank(m, plan).scores for m in matrices]


def relative_cost(sizes: Sequence[int], plan: CascadePlan) -> float:
    """sum_q layer_passes(n_q) / (depth * sum_q n_q) over queries with ``sizes`` candidates."""
    sizes = [int(n) for n in sizes if n > 0]
    if not sizes:
        raise DataError("cascade evaluation: no query has candidates")
    return sum(plan.layer_passes(n) for n in sizes) / (plan.num_layers * sum(sizes))


def cascade_metrics(queries: Sequence[Query], matrices: Sequence[np.ndarray], plan: CascadePlan,
                    metrics: Sequence[str] | None = None) -> CascadeEval:
    """Metrics and cost of the cascade under ``plan``, replayed from stored exit scores."""
    _check(queries, matrices, len(plan.exits))
    m = evaluate(qrels_of(queries), _run(queries, cascade_scores(matrices, plan)), metrics)
    return CascadeEval(plan, m, relative_cost([len(q.candidates) for q in queries], plan))


def alpha_grid(n_exits: int, values: Sequence[float] = FIGURE2_VALUES) -> list[tuple[float, ...]]:
    """Every per-exit alpha setting with alpha_i in ``values`` for the N-1 exits before the last
    (the last exit's alpha drops nothing; it is 0). Figure 2: 6 values ^ 4 exits = 1296 settings.

    >>> alpha_grid(3, (0.1, 0.2))
    [(0.1, 0.1, 0.0), (0.1, 0.2, 0.0), (0.2, 0.1, 0.0), (0.2, 0.2, 0.0)]
    """
    return [(*combo, 0.0) for combo in itertools.product(values, repeat=max(0, n_exits - 1))]


def sweep(queries: Sequence[Query], matrices: Sequence[np.ndarray], plan: CascadePlan,
          grid: Sequence[Sequence[float]], metrics: Sequence[str] | None = None) -> list[CascadeEval]:
    """``cascade_metrics`` for every alpha setting of ``grid`` on ``plan``'s depth and exits,
    from the stored exit scores alone (the model is not run again)."""
    return [cascade_metrics(queries, matrices, plan.with_alpha(alphas), metrics) for alphas in grid]


@dataclass(frozen=True)
class ReportRow:
    """A Table 3 row: ``name`` ("4 layers CT", "Full CT (12 layers)"), alphas (None for an exit
    alone), metric means and the relative cost per batch."""

    name: str
    alphas: tuple[float, ...] | None
    means: Mapping[str, float]
    relative_cost: float


def cascade_report(queries: Sequence[Query], matrices: Sequence[np.ndarray], plan: CascadePlan,
                   settings: Sequence[Sequence[float]] = ((0.3,), (0.4,), (0.5,)),
                   metrics: Sequence[str] | None = None) -> list[ReportRow]:
    """Table 3 for one cascade model: each exit alone (cost rho(i)/n), then the full model with
    each alpha setting of ``settings`` (``config.alpha_count_problem``: 1, N - 1 or N values)."""
    rows = []
    last = plan.exits[-1]
    for layer, m in exit_metrics(queries, matrices, plan.exits, metrics).items():
        name = f"Full CT ({layer} layers)" if layer == last else f"{layer} layers CT"
        rows.append(ReportRow(name, None, dict(m.means), layer / plan.num_layers))
    for alphas in settings:
        ev = cascade_metrics(queries, matrices, plan.with_alpha(alphas), metrics)
        rows.append(ReportRow(f"Full CT ({last} layers)", ev.alphas, dict(ev.metrics.means), ev.relative_cost))
    return rows


def report_markdown(rows: Sequence[ReportRow]) -> str:
    """Rows as a markdown table: metrics x 100, cost reduction per batch in percent."""
    names = list(rows[0].means) if rows else []
    head = "| model | alpha | " + " | ".join(names) + " | cost reduction |"
    lines = [head, "|" + "---|" * (len(names) + 3)]
    for r in rows:
        alpha = "0.0" if r.alphas is None else _alpha_text(r.alphas)
        vals = " | ".join(f"{100 * r.means[k]:.1f}" for k in names)
        reduction = round(100 * (1 - r.relative_cost))
        lines.append(f"| {r.name} | {alpha} | {vals} | {f'-{reduction}%' if reduction else '0%'} |")
    return "\n".join(lines)


def _alpha_text(alphas: tuple[float, ...]) -> str:
    head = alphas[:-1] or alphas
    return f"{head[0]:g}" if len(set(head)) == 1 else ",".join(f"{a:g}" for a in head)


# -- running the model (torch imported here only) -----------------------------------------------------

def score_exits(model: Any, collator: PairCollator, queries: Sequence[Query], tokens: TokenizedQueries,
                *, batch_size: int, device: Any, autocast: bool = False) -> list[np.ndarray]:
    """Every exit's scores for every candidate: one (E, n_q) matrix per query, from one pass
    (harness.model.scoring.score_candidates with ``exits=True``)."""
    from harness.model.scoring import score_candidates

    return score_candidates(model, collator, queries, tokens, batch_size=batch_size, device=device,
                            autocast=autocast, exits=True)


def run_cascade(model: Any, collator: PairCollator, queries: Sequence[Query], tokens: TokenizedQueries,
                plan: CascadePlan, *, device: Any, autocast: bool = False) -> list[np.ndarray]:
    """Live cascade inference, one batch per query (its candidates); returns the ranking scores."""
    import torch

    was_training = model.training
    model.eval()
    out = []
    try:
        for qi, q in enumerate(queries):
            if not q.candidates:
                out.append(np.zeros(0))
                continue
            batch = collator.collate((tokens.contexts[qi], c) for c in tokens.candidates[qi])
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
                out.append(model.cascade(batch, plan).scores)
    finally:
        model.train(was_training)
    return out
