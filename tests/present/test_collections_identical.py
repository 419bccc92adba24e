"""Metrics identical on one collection but not on another (MAP = MRR where each query has one
relevant document, as on the embedded set, but not on Cranfield): the table over collections
shows both, tested apart on every collection, and merges only what is identical on all of them."""

from __future__ import annotations

import dataclasses

from harness.results.stored import StudyResults
from harness.stats.across import analyse_collections
from harness.stats.significance import analyse
from tests.synthetic import synthetic_records

EFFECTS = {"base": 0.0, "better": 0.05}


def _one_relevant(records):  # type: ignore[no-untyped-def]
    """MRR := MAP and P@1 := MAP in every run (one relevant document per query: AP = RR)."""
    return [dataclasses.replace(r, per_query={"map": r.per_query["map"], "mrr": r.per_query["map"],
                                              "p_1": r.per_query["p_1"]}) for r in records]


def test_metrics_merge_only_where_identical_on_every_collection() -> None:
    metrics = ("map", "mrr", "p_1")
    chat = _one_relevant(synthetic_records(effects=EFFECTS, metrics=metrics))
    adhoc = synthetic_records(queries=30, effects=EFFECTS, metrics=metrics)
    cols = {"chat": StudyResults.build(chat, source="chat"), "adhoc": StudyResults.build(adhoc, source="adhoc")}
    # Alone, the chat collection merges MRR into MAP; the ad hoc one keeps three metrics.
    assert analyse(cols["chat"]).metrics == ("map", "p_1")
    assert analyse(cols["adhoc"]).metrics == metrics
    table = analyse_collections(cols)
    assert table.metrics == metrics
    for name, a in table.analyses.items():
        assert {c.metric for c in a.comparisons} == set(metrics), name
        assert a.identical == ()
    chat_mrr = table.analyses["chat"].get("better", "mrr")
    chat_map = table.analyses["chat"].get("better", "map")
    assert chat_mrr is not None and chat_map is not None
    assert chat_mrr.result.p_value == chat_map.result.p_value  # the same values, the same test
    # Identical on both collections: merged once, as for one collection.
    both = {n: StudyResults.build(_one_relevant(synthetic_records(queries=q, effects=EFFECTS, metrics=metrics)),
                                  source=n) for n, q in (("a", 40), ("b", 30))}
    merged = analyse_collections(both)
    assert merged.metrics == ("map", "p_1")
