"""Per-query ranking metrics through ``ir_measures``, with a deterministic, pessimistic tie rule.

Measures: one table, ``METRIC_TABLE``, from which every list of metric names is derived. Each row
names a measure three ways: the harness key (MLflow-safe, no "@"; the ``dev_``/``test_`` metric
suffix and ``harness.tracking.conventions.METRICS``), ir-measures' canonical name (what
``ir_measures``, trec_eval users and papers read), and the table label:

    key       ir-measures   label     higher is better
    map       AP            MAP       yes
    mrr       RR            MRR       yes
    mrr_10    RR@10         MRR@10    yes
    p_1       P@1           P@1       yes
    ndcg_10   nDCG@10       nDCG@10   yes
    rprec     Rprec         R-Prec    yes

P@1 equals R10@1 (Penha & Hauff) when each query has one positive among 10 candidates.
``metric_key`` accepts either name (``--metric AP`` and ``--metric map`` are one metric).

Tie rule (TIE_RULE). Among documents with equal scores the less relevant one is ranked first (for
binary labels: non-relevant before relevant), then by doc_id ascending. A model never gains from a
tie, and the ranking does not depend on the order the scores arrive in. The rule is applied here, by
replacing scores with strictly decreasing rank-based scores (n, n-1, ..., 1), so the evaluator never
sees a tie and its own tie-breaking (trec_eval: doc_id descending) plays no part.

Query set. Values are reported for every query of the qrels: a query absent from the run scores 0
on every measure (as ``trec_eval -c``), and so does a query without any relevant document (as in
trec_eval); run queries without judgements are ignored. A run document without a judgement counts
as non-relevant; a relevant document missing from the run still counts in AP's and R-Prec's R.

>>> m = evaluate({"q": {"a": 0, "b": 1}}, {"q": {"a": 0.5, "b": 0.5}})
>>> m.per_query["mrr"]["q"]   # tie: the relevant b goes second
0.5
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import ir_measures

from harness.errors import ConfigError, DataError

TIE_RULE = ("tied scores are ranked pessimistically (less relevant documents first, "
            "then doc_id ascending)")


@dataclass(frozen=True)
class MetricSpec:
    """One row of ``METRIC_TABLE`` (module docstring)."""

    key: str                       # the harness's MLflow-safe name
    measure: ir_measures.Measure   # the ir_measures measure that computes it
    label: str                     # the name a table shows by default
    higher_is_better: bool = True

    @property
    def canonical(self) -> str:
        """ir-measures' canonical name (``str(measure)``): AP, RR@10, nDCG@10 ..."""
        return str(self.measure)


METRIC_TABLE: tuple[MetricSpec, ...] = (
    MetricSpec("map", ir_measures.AP, "MAP"),
    MetricSpec("mrr", ir_measures.RR, "MRR"),
    MetricSpec("mrr_10", ir_measures.RR @ 10, "MRR@10"),
    MetricSpec("p_1", ir_measures.P @ 1, "P@1"),
    MetricSpec("ndcg_10", ir_measures.nDCG @ 10, "nDCG@10"),
    MetricSpec("rprec", ir_measures.Rprec, "R-Prec"),
)
# Derived views of the table.
METRIC_KEYS: tuple[str, ...] = tuple(m.key for m in METRIC_TABLE)
SPECS: Mapping[str, MetricSpec] = MappingProxyType({m.key: m for m in METRIC_TABLE})
MEASURES: Mapping[str, ir_measures.Measure] = MappingProxyType({m.key: m.measure for m in METRIC_TABLE})
# ir_measures' canonical names (as they may appear in a per-query file, a long CSV or --metric)
# -> harness keys.
IR_MEASURES_NAMES: Mapping[str, str] = MappingProxyType({m.canonical: m.key for m in METRIC_TABLE})
# How a table may name the harness's metrics (``label_of``): its label, ir-measures' name, the key.
NAME_STYLES = ("label", "ir-measures", "key")


def metric_key(name: str) -> str:
    """The harness key of ``name``, given as a key or as ir-measures' canonical name; any other
    name (a cost, a cascade metric) is returned as it is.

    >>> metric_key("RR@10"), metric_key("mrr_10"), metric_key("cascade_cost")
    ('mrr_10', 'mrr_10', 'cascade_cost')
    """
    return IR_MEASURES_NAMES.get(name, name)


def known_measure(name: str) -> bool:
    """Whether ``name`` is a harness metric key or an ir-measures measure (every one of them higher
    when the ranking is better); a cost, a loss or another program's metric is not.

    >>> known_measure("map"), known_measure("P@5"), known_measure("cascade_cost")
    (True, True, False)
    """
    if name in SPECS or name in IR_MEASURES_NAMES:
        return True
    try:
        ir_measures.parse_measure(name)
    except (NameError, SyntaxError, ValueError, TypeError, AttributeError, RecursionError):  # a name it lacks
        return False
    return True


# The harness's own metrics that are lower when the ranker is better: the cascade's relative cost
# (harness.training.loop's ``cascade_cost``, searched with mode min). A table marks a fall of these
# as better; any other name a table meets is taken as higher-is-better unless declared otherwise
# (``lower_is_better``'s ``declared``: `harness table --lower-better`).
COSTS: frozenset[str] = frozenset({"cascade_cost"})


def lower_is_better(name: str, declared: Iterable[str] = ()) -> bool:
    """Whether a fall of ``name`` is an improvement: one of the harness's costs (``COSTS``) or one of
    the names ``declared`` so; IR measures never are.

    >>> lower_is_better("cascade_cost"), lower_is_better("map"), lower_is_better("latency_ms", ["latency_ms"])
    (True, False, True)
    """
    return name in COSTS or name in declared


def canonical_name(key: str) -> str:
    """ir-measures' canonical name of a harness key; other names as they are."""
    spec = SPECS.get(key)
    return spec.canonical if spec else key


def label_of(key: str, style: str = "label") -> str:
    """The name a table shows for ``key`` in a NAME_STYLES style; other names as they are.

    >>> label_of("map"), label_of("map", "ir-measures"), label_of("map", "key")
    ('MAP', 'AP', 'map')
    """
    if style not in NAME_STYLES:
        raise ConfigError(f"metric names must be one of {', '.join(NAME_STYLES)}, got {style!r}")
    spec = SPECS.get(key)
    if spec is None or style == "key":
        return key
    return spec.label if style == "label" else spec.canonical

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class QueryMetrics:
    """Per-query values ``per_query[metric][qid]`` and their means over the qrels' queries.
    Plain dicts (not proxies) so the object pickles across Ray workers; treat it as read-only."""

    per_query: Mapping[str, Mapping[str, float]]
    means: Mapping[str, float]

    @property
    def qids(self) -> tuple[str, ...]:
        first = next(iter(self.per_query.values()), {})
        return tuple(first)

    def rows(self) -> list[tuple[str, str, float]]:
        """(qid, measure, value) rows, the layout of the per-query artifact (PER_QUERY_COLUMNS)."""
        return [(qid, metric, value) for metric, values in self.per_query.items()
                for qid, value in values.items()]


def rank_order(doc_ids: Sequence[str], scores: Sequence[float], labels: Sequence[int]) -> list[int]:
    """Indices of the documents in rank order under the tie rule: score descending, then label
    ascending (pessimistic), then doc_id ascending.

    >>> rank_order(["a", "b", "c"], [1.0, 2.0, 2.0], [0, 1, 0])
    [2, 1, 0]
    """
    for doc, score in zip(doc_ids, scores, strict=True):
        if math.isnan(score):
            raise DataError(f"score of document {doc!r} is NaN")
    return sorted(range(len(doc_ids)), key=lambda i: (-scores[i], labels[i], doc_ids[i]))


def tie_broken_scores(doc_ids: Sequence[str], scores: Sequence[float],
                      labels: Sequence[int]) -> dict[str, float]:
    """Strictly decreasing rank-based scores {doc_id: n - rank} (n for the top document)."""
    order = rank_order(doc_ids, scores, labels)
    n = len(order)
    return {doc_ids[i]: float(n - rank) for rank, i in enumerate(order)}


def evaluate(qrels: Qrels, run: Run, metrics: Sequence[str] | None = None) -> QueryMetrics:
    """Per-query metrics of ``run`` against ``qrels`` (module docstring: tie rule, query set)."""
    names = _metric_names(metrics)
    if not qrels:
        raise DataError("qrels are empty: no query to evaluate")
    ranked: dict[str, dict[str, float]] = {}
    for qid, doc_scores in run.items():
        judged = qrels.get(qid)
        if judged is None or not doc_scores:
            continue
        docs = list(doc_scores)
        ranked[str(qid)] = tie_broken_scores(
            [str(d) for d in docs], [float(doc_scores[d]) for d in docs],
            [int(judged.get(d, 0)) for d in docs])
    str_qrels = {str(q): {str(d): int(label) for d, label in docs.items()} for q, docs in qrels.items()}
    per_query: dict[str, dict[str, float]] = {name: dict.fromkeys(str_qrels, 0.0) for name in names}
    by_measure = {MEASURES[name]: name for name in names}
    if ranked:
        for result in ir_measures.iter_calc(list(by_measure), str_qrels, ranked):
            per_query[by_measure[result.measure]][result.query_id] = float(result.value)
    means = {name: mean_of(values.values()) for name, values in per_query.items()}
    return QueryMetrics(per_query=per_query, means=means)


def mean_of(values: Iterable[float]) -> float:
    """The mean as ir_measures aggregates (its MeanAgg): a plain left-to-right sum over the queries,
    divided by their count. Not ``np.mean`` (pairwise summation) nor ``math.fsum``: with this one,
    ir_measures on a run file that lists the queries in the qrels' order (trec.format_run) gives
    the very double the harness logs, not one a unit in the last place away."""
    total, count = 0.0, 0
    for v in values:
        total += float(v)
        count += 1
    if count == 0:
        raise DataError("no query values to average")
    return total / count


def evaluate_arrays(qids: Sequence[str], doc_ids: Sequence[str], labels: Sequence[int],
                    scores: Sequence[float], metrics: Sequence[str] | None = None) -> QueryMetrics:
    """``evaluate`` over parallel arrays, one element per (query, candidate), as a trainer holds
    them after scoring a split. A (qid, doc_id) pair may appear once."""
    n = len(qids)
    if not (len(doc_ids) == len(labels) == len(scores) == n):
        raise DataError(f"parallel arrays differ in length: qids {n}, doc_ids {len(doc_ids)}, "
                        f"labels {len(labels)}, scores {len(scores)}")
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for qid, doc, label, score in zip(qids, doc_ids, labels, scores, strict=True):
        q, d = str(qid), str(doc)
        if d in qrels.setdefault(q, {}):
            raise DataError(f"document {d!r} appears twice for query {q!r}")
        qrels[q][d] = int(label)
        run.setdefault(q, {})[d] = float(score)
    return evaluate(qrels, run, metrics)


def _metric_names(metrics: Sequence[str] | None) -> list[str]:
    if metrics is None:
        return list(MEASURES)
    keys = [metric_key(m) for m in metrics]
    unknown = [m for m, k in zip(metrics, keys, strict=True) if k not in MEASURES]
    if unknown:
        raise ConfigError(f"unknown metric {unknown[0]!r}; valid: {', '.join(MEASURES)} "
                          f"(or ir-measures' {', '.join(IR_MEASURES_NAMES)})")
    return list(dict.fromkeys(keys))
