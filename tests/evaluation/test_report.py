"""The end-of-study report: what goes onto each config run, the rendered tables, the plots."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ConfigError
from harness.evaluation.plots import write_plots
from harness.evaluation.report import study_report
from harness.evaluation.results import RunRecord, StudyResults
from harness.evaluation.significance import AnalysisOptions
from harness.tracking.conventions import TAG_MARKER_PREFIX


def test_outcomes_per_config(records: list[RunRecord]) -> None:
    report = study_report(StudyResults.build(records), AnalysisOptions(correction="bonferroni"))
    base, better, same, worse = (report.outcomes[c] for c in ("base", "better", "same", "worse"))
    assert base.role == "baseline" and base.markers == {} and set(base.metrics) == {
        "map_mean", "map_sd", "mrr_mean", "mrr_sd"}
    res = report.analysis.results
    assert better.metrics["map_mean"] == pytest.approx(res.seed_values("better", "map").mean())
    assert better.metrics["map_sd"] == pytest.approx(res.seed_values("better", "map").std(ddof=1))
    delta = res.seed_values("better", "map").mean() - res.seed_values("base", "map").mean()
    assert better.metrics["map_delta"] == pytest.approx(delta)
    assert better.metrics["map_ci_low"] < delta < better.metrics["map_ci_high"]
    comp = report.analysis.get("better", "map")
    assert comp is not None and better.metrics["map_p"] == comp.p_adjusted == min(1, 3 * comp.result.p_value)
    assert better.tags == {f"{TAG_MARKER_PREFIX}map": "\u2021", f"{TAG_MARKER_PREFIX}mrr": "\u2021"}
    assert worse.markers["map"] == "\u21d3" and same.markers["map"] == "ns"
    assert sorted(report.tables) == sorted(f"tables/{f}.{e}" for f in ("seeds", "configs")
                                           for e in ("md", "tex", "csv", "html"))
    assert report.tables["tables/configs.md"].startswith("**MAP, MRR**")


def test_report_is_reproducible(records: list[RunRecord]) -> None:
    opts = AnalysisOptions(test="randomisation", resamples=300, seed=1)
    first = study_report(StudyResults.build(records), opts)
    again = study_report(StudyResults.build(records), opts)
    assert first.tables == again.tables and first.outcomes == again.outcomes


def test_single_seed_and_per_seed() -> None:
    one = [RunRecord(config=c, seed="1", per_query={"map": {f"q{i}": (i + k) / 20 for i in range(8)}})
           for k, c in enumerate(("a", "b"))]
    report = study_report(StudyResults.build(one), formats=("md",))
    assert math.isnan(report.outcomes["b"].metrics["map_sd"])
    assert "| SD | \u2013 | \u2013 |" in report.tables["tables/seeds.md"]
    with pytest.raises(ConfigError, match="per-seed test gives one per seed"):
        study_report(StudyResults.build(one), AnalysisOptions(test="per-seed"))
    with pytest.raises(ConfigError, match="valid: csv, html, latex, md"):
        study_report(StudyResults.build(one), formats=("pdf",))


def test_plots(records: list[RunRecord], tmp_path: Path) -> None:
    report = study_report(StudyResults.build(records), formats=("md",))
    paths = write_plots(report.analysis, tmp_path / "plots")
    assert [p.name for p in paths] == ["map.png", "mrr.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert np.isfinite(report.outcomes["better"].metrics["map_dz"])
