"""The tests pair the right values, correct over the chosen family and mark the right cells."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats

from harness.errors import ConfigError, DataError
from harness.results.stored import RunRecord, StudyResults
from harness.stats.significance import AnalysisOptions, Markers, analyse
from tests.synthetic import synthetic_records


def _results(records: list[RunRecord], **kw: object) -> StudyResults:
    return StudyResults.build(records, **kw)  # type: ignore[arg-type]


def test_build_orders_and_derives(records: list[RunRecord]) -> None:
    res = _results(records, baseline="same")
    assert res.configs == ("same", "base", "better", "worse")
    assert res.seeds == ("1", "2", "3") and res.metrics == ("map", "mrr") and len(res.qids or ()) == 40
    per_query = records[0].per_query["map"]
    assert res.value("base", "1", "map") == pytest.approx(np.mean(list(per_query.values())))


def test_each_test_pairs_the_documented_values(records: list[RunRecord]) -> None:
    res = _results(records)
    q = {(c, s): res.query_values(c, s, "map") for c in res.configs for s in res.seeds}

    per_seed = analyse(res, AnalysisOptions(test="per-seed", metrics=("map",)))
    for s in res.seeds:
        ref = stats.ttest_rel(q[("better", s)], q[("base", s)])
        got = per_seed.get("better", "map", s)
        assert got is not None and got.result.p_value == pytest.approx(ref.pvalue, rel=1e-12)
        assert got.result.n == 40 and got.family_size == 3 * 3

    across = analyse(res, AnalysisOptions(test="across-seeds", metrics=("map",))).get("worse", "map")
    means = {c: [q[(c, s)].mean() for s in res.seeds] for c in res.configs}
    ref = stats.ttest_rel(means["worse"], means["base"])
    assert across is not None and across.result.p_value == pytest.approx(ref.pvalue, rel=1e-12)
    assert across.result.n == 3 and across.direction == "worse"

    averaged = {c: np.mean([q[(c, s)] for s in res.seeds], axis=0) for c in res.configs}
    for test, ref_p in (("seed-averaged", stats.ttest_rel(averaged["same"], averaged["base"]).pvalue),
                        ("wilcoxon", stats.wilcoxon(averaged["same"], averaged["base"]).pvalue)):
        got = analyse(res, AnalysisOptions(test=test, metrics=("map",))).get("same", "map")
        assert got is not None and got.result.p_value == pytest.approx(ref_p, rel=1e-12)
        assert got.result.n == 40
        assert got.result.mean_diff == pytest.approx(np.mean(means["same"]) - np.mean(means["base"]))


def test_auto_and_markers(records: list[RunRecord]) -> None:
    a = analyse(_results(records))
    assert a.test == "crossed" and not a.per_run_only and a.remarks == ()
    assert a.marker(a.get("better", "map")) == "\u2021"
    assert a.marker(a.get("worse", "map")) == "\u21d3"
    assert a.marker(a.get("same", "map")) is None
    strict = analyse(_results(records), AnalysisOptions(markers=Markers(levels=(1e-300,))))
    assert strict.marker(strict.get("better", "map")) is None


def test_corrections_over_families(records: list[RunRecord]) -> None:
    res = _results(records)
    raw = analyse(res, AnalysisOptions(test="per-seed"))
    for family, size in (("metric", 9), ("all", 18)):
        holm = analyse(res, AnalysisOptions(test="per-seed", correction="bonferroni", family=family))
        for r, h in zip(raw.comparisons, holm.comparisons, strict=True):
            assert h.family_size == size
            assert h.p_adjusted == pytest.approx(min(1.0, size * r.result.p_value))


def test_randomisation_is_deterministic_for_a_seed() -> None:
    res = _results(synthetic_records(queries=80, effects={"base": 0.0, "x": 0.005}))
    opts = AnalysisOptions(test="randomisation", resamples=2000, seed=5)
    p1 = analyse(res, opts).get("x", "map")
    p2 = analyse(res, opts).get("x", "map")
    p3 = analyse(res, dataclasses.replace(opts, seed=6)).get("x", "map")
    assert p1 is not None and p2 is not None and p3 is not None
    assert p1.result.p_value == p2.result.p_value != p3.result.p_value


def test_auto_with_one_seed_tests_nothing_unless_asked() -> None:
    res = _results(synthetic_records(seeds=(7,)))
    a = analyse(res)
    assert a.untested and a.comparisons == () and a.marker(a.get("better", "map")) is None
    q = analyse(res, AnalysisOptions(one_seed_test="query"))
    assert q.test == "seed-averaged" and q.query_only and len(q.remarks) == 1
    assert "Only one seed (7): the test counts the variance between that run's queries only" in q.remarks[0]
    one = res.query_values("better", "7", "map") - res.query_values("base", "7", "map")
    got = q.get("better", "map")
    assert got is not None and got.result.p_value == pytest.approx(stats.ttest_1samp(one, 0).pvalue)
    assert q.marker(got) in Markers().query_better and q.marker(q.get("worse", "map")) in Markers().query_worse
    # asked for by name, a per-query test on one seed is marked apart too
    named = analyse(res, AnalysisOptions(test="wilcoxon"))
    assert named.query_only and named.marker(named.get("better", "map")) in Markers().query_better
    with pytest.raises(DataError, match="has one seed \\(7\\); the crossed seeds x queries test needs "
                       "at least 2 \\(auto marks nothing from one seed; --one-seed-test query"):
        analyse(res, AnalysisOptions(test="crossed"))
    with pytest.raises(ConfigError, match="one_seed_test: unknown name 'seeds'; valid: query"):
        AnalysisOptions(one_seed_test="seeds")


def test_one_seed_of_per_run_values_is_a_table_without_markers(tmp_path, run_cli) -> None:
    """exchange.md's two-line example (one seed, per-run values): the table without markers, as
    for per-query values, and the query-only test asked for is refused in one line."""
    path = tmp_path / "ex.csv"
    path.write_text("config,seed,metric,value\nrandom,1,map,0.7142\n#turns,1,map,0.7220\n")
    rc, out, err = run_cli("table", "--from", str(path))
    assert rc == 0 and err == "", err
    assert "| AVG | 0.7142 | **0.7220** |" in out and "No significance markers: this study has one seed (1)" in out
    assert "over 1 seed (per-run values)" in out and "0 queries" not in out
    rc, out, err = run_cli("table", "--from", str(path), "--one-seed-test", "query")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "has one seed (1) and per-run values only: the query-only test" in err


def test_per_seed_tallies(records: list[RunRecord]) -> None:
    a = analyse(_results(records), AnalysisOptions(test="per-seed"))
    better, worse, total = a.seed_tally("worse", "map")
    assert (better, worse, total) == (0, 3, 3)
    assert [t.text for t in a.tallies("worse", "map")] == ["\u21933/3"]
    assert a.tallies("base", "map") == () and a.tallies("same", "map") == ()


def test_per_run_only_supports_across_seeds_alone() -> None:
    recs = [RunRecord(config=r.config, seed=r.seed, values={m: float(np.mean(list(v.values())))
                                                            for m, v in r.per_query.items()})
            for r in synthetic_records()]
    res = _results(recs)
    a = analyse(res)
    assert a.test == "across-seeds" and a.per_run_only
    for test in ("per-seed", "crossed"):
        with pytest.raises(DataError, match="per-run values only .*--test across-seeds alone"):
            analyse(res, AnalysisOptions(test=test))


def test_validation_errors(records: list[RunRecord]) -> None:
    short = [r for r in records if not (r.config == "better" and r.seed in ("2", "3"))]
    with pytest.raises(DataError, match="'better' is missing seeds 2, 3 that the baseline 'base' has"):
        _results(short)
    extra = [*records, RunRecord(config="better", seed="9", per_query=records[0].per_query)]
    with pytest.raises(DataError, match="'better' has seeds 9 that the baseline 'base' lacks"):
        _results(extra)
    odd = dict(records[5].per_query["map"])
    odd.pop("q007")
    odd["q999"] = 0.5
    changed = [*records[:5], dataclasses.replace(records[5], per_query={**records[5].per_query, "map": odd}),
               *records[6:]]
    # A query some runs lack drops out (with the runs that lack it); no query in common is refused.
    res = _results(changed)
    assert "q007" not in res.qids and "q999" not in res.qids and len(res.qids) == 39
    assert res.dropped["q007"] == ("better seed 3 (map)",)
    assert len(res.dropped["q999"]) == 2 * len(records) - 1 and "better seed 3 (map)" not in res.dropped["q999"]
    assert res.value("better", "3", "map") == pytest.approx(np.mean([odd[q] for q in res.qids]))
    disjoint = [dataclasses.replace(r, per_query={m: {f"{r.config}{r.seed}-{q}": v for q, v in vals.items()}
                                                  for m, vals in r.per_query.items()}) for r in records]
    with pytest.raises(DataError, match="the runs have no query in common"):
        _results(disjoint)
    with pytest.raises(ConfigError, match="unknown metric 'ndcg'.*valid: map, mrr"):
        analyse(_results(records), AnalysisOptions(metrics=("ndcg",)))
    with pytest.raises(ConfigError, match="baseline 'nope'.*valid: base, better, same, worse"):
        _results(records, baseline="nope")
    mismatch = [dataclasses.replace(records[0], values={"map": 0.99}), *records[1:]]
    with pytest.raises(DataError, match="per-query values average"):
        _results(mismatch)
    with pytest.raises(DataError, match="appears twice"):
        _results([*records, records[0]])
    with pytest.raises(ConfigError, match="test: unknown name 'z'"):
        AnalysisOptions(test="z")
    with pytest.raises(ConfigError, match="levels must be strictly decreasing"):
        Markers(levels=(0.01, 0.05))


def test_a_one_seed_tables_seed_suggestion_is_at_the_level_its_test_would_correct_to() -> None:
    """The one-seed note suggested seeds at Holm's first step over the candidates (0.05 / 4) for
    every form; the configs form corrects over every metric's comparisons (0.05 / 8 with two
    metrics), so its suggestion is at that level, and a seeds table's at its own metric's."""
    from harness.present.table import untested_note

    res = _results(synthetic_records(seeds=(7,), effects={"base": 0.0, "a": 0.06, "b": 0.05, "c": 0.04, "d": 0.0}))
    per_metric = untested_note(analyse(res, AnalysisOptions(family="metric")))
    whole = untested_note(analyse(res, AnalysisOptions(family="all")))
    assert "differences at 0.0125 (Holm's first step)" in per_metric, per_metric
    assert "differences at 0.00625 (Holm's first step)" in whole, whole
