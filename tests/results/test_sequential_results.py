"""The final table of a study whose seeds came in rounds: each comparison uses every seed it
received (the first ones of the baseline's), read back from a real MLflow store, tested on those
seeds against the same seeds of the baseline, and the footnote names the sequential rule and where
each comparison stopped."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from harness.errors import DataError
from harness.present.render import render
from harness.present.report import study_report
from harness.present.table import build_tables
from harness.results.longcsv import long_rows
from harness.results.mlflow_reader import read_experiment
from harness.results.stored import RunRecord, StudyResults
from harness.stats.crossed import crossed_test
from harness.stats.power import power_analysis
from harness.stats.sequential import RULE
from harness.stats.significance import AnalysisOptions, analyse
from harness.tracking import conventions as C
from tests.synthetic import synthetic_records

# The baseline and "open-long" ran 6 seeds; "stopped" got no more after round 1 (3 seeds).
REASONS = {"stopped": "futility at round 1 (3 seeds)", "open-long": "max seeds (6): not settled"}


def _records() -> list[RunRecord]:
    runs = synthetic_records(queries=30, seeds=(1, 2, 3, 4, 5, 6), metrics=("map",),
                             effects={"base": 0.0, "stopped": 0.0, "open-long": 0.03})
    return [r for r in runs if not (r.config == "stopped" and int(r.seed) > 3)]


def _results() -> StudyResults:
    return StudyResults.build(_records(), sequential=REASONS)


def test_a_stopped_comparison_has_the_first_seeds_and_is_refused_without_its_reason() -> None:
    res = _results()
    assert res.seeds == ("1", "2", "3", "4", "5", "6")
    assert res.seeds_of("stopped") == ("1", "2", "3") and res.seeds_of("open-long") == res.seeds
    assert res.seed_values("stopped", "map").shape == (3,)
    # Without the schedule's reason, a missing seed is what it always was: a refusal.
    with pytest.raises(DataError, match="configuration 'stopped' is missing seeds 4, 5, 6"):
        StudyResults.build(_records())
    # The rounds take seeds in order; a gap is not a stop.
    gap = [r for r in _records() if not (r.config == "stopped" and r.seed == "2")]
    with pytest.raises(DataError, match=r"has seeds 1, 3, not the first 2 of the baseline's"):
        StudyResults.build(gap, sequential=REASONS)


@pytest.mark.parametrize("test", ["crossed", "across-seeds", "seed-averaged", "per-seed"])
def test_each_comparison_pairs_the_baseline_on_its_own_seeds(test: str) -> None:
    res = _results()
    analysis = analyse(res, AnalysisOptions(test=test, correction="none"))
    seeds = ("1", "2", "3")
    cand = np.array([res.query_values("stopped", s, "map") for s in seeds])
    base = np.array([res.query_values("base", s, "map") for s in seeds])
    comps = [c for c in analysis.comparisons if c.config == "stopped"]
    if test == "crossed":
        assert comps[0].result.p_value == pytest.approx(crossed_test(cand, base).p_value, rel=1e-12)
    elif test == "across-seeds":
        assert comps[0].result.p_value == pytest.approx(stats.ttest_rel(cand.mean(1), base.mean(1)).pvalue)
    elif test == "seed-averaged":
        assert comps[0].result.p_value == pytest.approx(stats.ttest_rel(cand.mean(0), base.mean(0)).pvalue)
    else:
        assert [c.seed for c in comps] == list(seeds)
        for c, x, y in zip(comps, cand, base, strict=True):
            assert c.result.p_value == pytest.approx(stats.ttest_rel(x, y).pvalue)
    # The candidate with every seed is tested on all six.
    full = next(c for c in analysis.comparisons if c.config == "open-long")
    assert full.result.n == (6 * 30 if test == "crossed" else full.result.n)


def test_table_leaves_the_seeds_a_comparison_never_got_empty_and_names_the_rule() -> None:
    res = _results()
    analysis = analyse(res)
    table = build_tables(analysis, "seeds")[0]
    rows = {r.label: r for r in table.rows}
    col = table.columns.index("stopped")
    assert [rows[s].cells[col].value is None for s in res.seeds] == [False] * 3 + [True] * 3
    assert rows["AVG"].cells[col].value == pytest.approx(res.seed_values("stopped", "map").mean())
    assert rows["SD"].cells[col].value == pytest.approx(res.seed_values("stopped", "map").std(ddof=1))
    md = render([table], "md")
    row4 = next(line for line in md.splitlines() if line.startswith("| 4 | "))
    assert row4.split(" | ")[2] == "\u2013"  # the seed it never got: a dash
    assert RULE in md
    assert "stopped (futility at round 1 (3 seeds)); open-long (max seeds (6): not settled)" in md
    assert "n = 30 queries \u00d7 3 to 6 seeds (each comparison's)" in md
    assert "SD is the sample standard deviation over each configuration's seeds" in md
    # The study report's delta pairs the baseline on the candidate's seeds; power runs per comparison.
    report = study_report(res, formats=("md",))
    paired = res.seed_values("stopped", "map").mean() - res.seed_values("base", "map", ("1", "2", "3")).mean()
    assert report.outcomes["stopped"].metrics["map_delta"] == pytest.approx(paired)
    power = power_analysis(res)
    observed = next(c for c in power.comparisons if c.config == "stopped").observed
    assert observed.seeds == 3
    # The long format (StudyAnalysis.runs) lists the seeds each configuration has.
    rows = long_rows(res)
    assert sorted({r["seed"] for r in rows if r["config"] == "stopped"}) == ["1", "2", "3"]
    assert len([r for r in rows if r["config"] == "open-long" and r["query"] is None]) == 6


def test_read_back_from_mlflow_with_the_reasons_on_the_config_runs(tmp_path) -> None:
    from harness.config import TrialConfig
    from harness.study.protocol import TrialOutcome, TrialTicket
    from harness.tracking.records import StudyRecords
    from harness.tracking.store import TrackingStore

    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    records = StudyRecords.open(store, "rounds")
    records.study_started()
    configs = {"base": TrialConfig.from_flat({"model.name": "tiny"}),
               "stopped": TrialConfig.from_flat({"model.name": "tiny", "smoothing.method": "LS"}),
               "open-long": TrialConfig.from_flat({"model.name": "tiny", "smoothing.method": "WSLS"})}
    for rec in _records():
        role = C.ROLE_BASELINE if rec.config == "base" else C.ROLE_CANDIDATE
        ticket = TrialTicket.of(rec.config, role, configs[rec.config], int(rec.seed))
        records.trial_started(ticket)
        values = rec.per_query["map"]
        records.trial_finished(ticket, TrialOutcome(ticket.key, 0.5, test={"map": float(np.mean(list(values.values())))}),
                               {"map": dict(values)})
    for name, why in REASONS.items():
        records.config_report(configs[name].config_id(), {}, {C.TAG_SEQUENTIAL: why})
    res = read_experiment("rounds", tracking_uri=store.uri)
    assert res.baseline == "base" and res.sequential == REASONS
    assert res.seeds_of("stopped") == ("1", "2", "3")
    assert RULE in render(build_tables(analyse(res), "configs"), "md")
