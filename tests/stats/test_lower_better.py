"""Metrics that are lower when the ranker is better (a cost, a latency): a fall is marked better.
Every verdict on such a metric equals the verdict on its negation taken as higher-is-better: the
same p-values, the same family, the same direction."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.results.stored import RunRecord, StudyResults
from harness.stats.across import analyse_collections
from harness.stats.paired import BETTER, WORSE
from harness.stats.significance import AnalysisOptions, analyse
from tests.synthetic import synthetic_records

TESTS = ("crossed", "per-seed", "across-seeds", "seed-averaged", "wilcoxon", "randomisation")


def _records(cost: str, negated: bool, seed_shift: int = 0) -> list[RunRecord]:
    """MAP and a cost per query; ``negated``: the cost's negation under the name neg_<cost>."""
    out = []
    for rec in synthetic_records(metrics=("map", "lat"), seeds=(1 + seed_shift, 2 + seed_shift, 3 + seed_shift)):
        lat = rec.per_query["lat"]
        values = {q: -v for q, v in lat.items()} if negated else dict(lat)
        out.append(RunRecord(config=rec.config, seed=rec.seed,
                             per_query={"map": rec.per_query["map"], (f"neg_{cost}" if negated else cost): values}))
    return out


def _verdicts(analysis) -> list[tuple]:
    return [(c.config, c.seed, round(c.result.p_value, 12), round(c.p_adjusted, 12), c.family_size, c.level,
             c.direction) for c in analysis.comparisons]


@pytest.mark.parametrize("test", TESTS)
def test_a_declared_cost_gets_the_verdicts_of_its_negation(test: str) -> None:
    lower = analyse(StudyResults.build(_records("latency", False)),
                    AnalysisOptions(test=test, family="all", lower_better=("latency",)))
    negated = analyse(StudyResults.build(_records("latency", True)), AnalysisOptions(test=test, family="all"))
    assert _verdicts(lower) == _verdicts(negated)
    # the synthetic "better" configuration raises the cost: marked worse on it, better on MAP
    got = {(c.config, c.metric): c.direction for c in lower.comparisons if c.seed in (None, "1")}
    assert got[("better", "latency")] == WORSE and got[("better", "map")] == BETTER
    assert got[("worse", "latency")] == BETTER and got[("worse", "map")] == WORSE


def test_the_harness_cascade_cost_is_lower_is_better_undeclared() -> None:
    plain = analyse(StudyResults.build(_records("cascade_cost", False)))
    negated = analyse(StudyResults.build(_records("cascade_cost", True)))
    assert _verdicts(plain) == _verdicts(negated)
    assert plain.get("worse", "cascade_cost").direction == BETTER
    assert plain.get("worse", "cascade_cost").marked


def test_a_combined_verdict_over_collections_points_the_cost_way() -> None:
    lower = analyse_collections({"a": StudyResults.build(_records("latency", False)),
                                 "b": StudyResults.build(_records("latency", False, seed_shift=10))},
                                AnalysisOptions(lower_better=("latency",)))
    negated = analyse_collections({"a": StudyResults.build(_records("latency", True)),
                                   "b": StudyResults.build(_records("latency", True, seed_shift=10))})
    pairs = [(c.config, round(c.p_adjusted, 12), c.family_size, c.level, c.direction) for c in lower.combined]
    assert pairs == [(c.config, round(c.p_adjusted, 12), c.family_size, c.level, c.direction)
                     for c in negated.combined]
    assert lower.get_combined("worse", "latency").direction == BETTER
    assert all(_verdicts(lower.analyses[n]) == _verdicts(negated.analyses[n]) for n in ("a", "b"))


def test_an_ir_measure_cannot_be_declared_lower_is_better() -> None:
    for name in ("map", "AP", "P@5", "nDCG@10"):
        with pytest.raises(ConfigError, match=f"lower_better: {name} is an IR measure"):
            AnalysisOptions(lower_better=(name,))
    with pytest.raises(ConfigError, match="lower_better"):
        AnalysisOptions(lower_better=("",))


def test_a_cost_equal_to_an_ir_measure_is_not_merged_with_it() -> None:
    """Equal per-query values are one hypothesis only where both metrics point one way: a cost equal
    to MAP is the opposite verdict, so both are tested and shown."""
    records = [RunRecord(config=r.config, seed=r.seed, per_query={"map": r.per_query["map"],
                                                                  "latency": dict(r.per_query["map"])})
               for r in synthetic_records(metrics=("map",))]
    merged = analyse(StudyResults.build(records))  # latency taken as higher-is-better: one hypothesis
    assert merged.metrics == ("map",) and merged.identical == (("map", "latency"),)
    lower = analyse(StudyResults.build(records), AnalysisOptions(lower_better=("latency",)))
    assert lower.metrics == ("map", "latency") and lower.identical == ()
    assert lower.get("better", "latency").direction == WORSE
