"""Metrics identical by construction, found from the data: two metrics whose per-query values are
equal in every run of a study (with one relevant document per query, AP = RR = RR@10 whenever the
positive is in the top 10, and P@1 = R-Prec) measure one thing. A table shows each group once, with
a note, and its family counts the comparison once: three copies of one test under Holm cost power
and test nothing more (docs/statistics.md, "Identical metrics").

Only per-query values decide: two per-run means can agree by chance, per-query vectors over every
run cannot. A metric without per-query values is never grouped.

>>> from harness.results.stored import RunRecord, StudyResults
>>> runs = [RunRecord(config=c, seed="1", per_query={"map": {"q1": v, "q2": 1.0},
...                                                   "mrr": {"q1": v, "q2": 1.0},
...                                                   "ndcg": {"q1": v / 2, "q2": 1.0}})
...         for c, v in (("base", 0.5), ("new", 1.0))]
>>> identical_groups(StudyResults.build(runs), ("map", "mrr", "ndcg"))
(('map', 'mrr'), ('ndcg',))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from harness.results.stored import StudyResults


def identical_groups(results: StudyResults, metrics: Sequence[str],
                     lower: Callable[[str], bool] = lambda m: False) -> tuple[tuple[str, ...], ...]:
    """``metrics`` grouped by equal per-query values in every run, each group in ``metrics``' order
    and the groups by their first member: its first member is the one a table shows. A metric that
    is ``lower`` (lower when the ranker is better: ``AnalysisOptions.lower``) never shares a group
    with one that is not: the same values are then opposite verdicts."""
    groups: list[list[str]] = []
    vectors: list[np.ndarray | None] = []
    for metric in metrics:
        vector = _all_values(results, metric)
        for group, other in zip(groups, vectors, strict=True):
            if vector is not None and other is not None and lower(metric) == lower(group[0]) \
                    and np.array_equal(vector, other):
                group.append(metric)
                break
        else:
            groups.append([metric])
            vectors.append(vector)
    return tuple(tuple(g) for g in groups)


def _all_values(results: StudyResults, metric: str) -> np.ndarray | None:
    """Every run's per-query values of ``metric`` in one vector (runs in a fixed order), or None
    without per-query values."""
    if not results.has_per_query(metric):
        return None
    return np.concatenate([results.query_values(config, seed, metric)
                           for config, seed in sorted(results.runs)])
