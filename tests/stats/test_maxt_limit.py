"""The maxt correction's bound on the family (harness.stats.maxt.MAXT_MAX_FAMILY): its integral
grows with the cube of the family, so a family past the limit is refused in one line before any
test runs (it ran for minutes, or allocated gigabytes), and a family at the limit still runs; the
family counted is the one ``analyse`` corrects (--family, identical metrics merged, per-seed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.analysis import compare
from harness.errors import ConfigError, DataError
from harness.results.stored import RunRecord, StudyResults
from harness.stats import maxt as _maxt
from harness.stats import significance
from harness.stats.significance import AnalysisOptions, analyse
from tests.synthetic import write_long_csv

Cli = Callable[..., tuple[int, str, str]]
LIMIT = _maxt.MAXT_MAX_FAMILY


def _records(candidates: int, *, seeds: int = 2, queries: int = 3,
             metrics: tuple[str, ...] = ("map",), identical: bool = False) -> list[RunRecord]:
    """A baseline and ``candidates`` configurations (the repro's shape: 2 seeds x 3 queries);
    ``identical``: every metric has the first one's values (one identical group)."""
    g = np.random.default_rng(candidates)
    qids = [f"q{i}" for i in range(queries)]
    records = []
    for c in range(candidates + 1):
        for s in range(1, seeds + 1):
            per_query = {}
            for m in metrics:
                values = per_query[metrics[0]] if identical and per_query else dict(
                    zip(qids, g.uniform(0.2, 0.8, queries).round(4).tolist(), strict=True))
                per_query[m] = values
            records.append(RunRecord(config="base" if c == 0 else f"c{c:03d}", seed=str(s), per_query=per_query))
    return records


@pytest.fixture
def no_test_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any test run (the work before the correction) fails: the refusal must come first."""
    def run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a test ran before the family was refused")

    monkeypatch.setattr(significance.TestDesign, "run", run)


def test_a_family_just_past_the_limit_is_refused_in_one_line_before_any_output(
        tmp_path: Path, run_cli: Cli, no_test_runs: None) -> None:
    """The repro: LIMIT + 1 candidates x 2 seeds x 3 queries under the seed-averaged t-test ran the
    integral (k = 30: about a minute, k = 100: over four); it is refused up front, exit 2."""
    src = write_long_csv(tmp_path / "r.csv", _records(LIMIT + 1))
    output = tmp_path / "t.md"
    start = time.perf_counter()
    rc, out, err = run_cli("table", "--from", str(src), "--test", "seed-averaged", "--correction", "maxt",
                           "--output", str(output))
    assert time.perf_counter() - start < 5.0
    assert rc == 2 and out == "" and not output.exists()
    (line,) = err.strip().splitlines()
    assert line.startswith("harness: error: correction maxt: a family of 21 comparisons")
    assert f"limit of {LIMIT}" in line and "use holm" in line and "fewer configurations" in line
    # the Python API refuses alike (harness.compare, TableOptions)
    with pytest.raises(ConfigError, match=f"correction maxt: a family of 21 comparisons .* limit of {LIMIT}"):
        compare(src, test="seed-averaged", correction="maxt").table()


@pytest.mark.parametrize("test, metrics, family, size, way", [
    # per-seed: a comparison per seed; 7 candidates x 3 seeds
    ("per-seed", ("map",), "metric", 21, "--test seed-averaged"),
    # the family of every metric: 11 candidates x 2 metrics
    ("seed-averaged", ("map", "ndcg"), "all", 22, "--family metric"),
])
def test_the_family_counted_is_the_one_analyse_corrects(test: str, metrics: tuple[str, ...], family: str,
                                                        size: int, way: str, no_test_runs: None) -> None:
    candidates = {21: 7, 22: 11}[size]
    res = StudyResults.build(_records(candidates, seeds=3 if test == "per-seed" else 2, metrics=metrics))
    with pytest.raises(ConfigError, match=f"a family of {size} comparisons") as info:
        analyse(res, AnalysisOptions(test=test, correction="maxt", family=family))
    assert way in str(info.value) and "\n" not in str(info.value)


def test_the_engine_refuses_a_family_past_the_limit_itself() -> None:
    corr = np.eye(LIMIT + 1)
    start = time.perf_counter()
    with pytest.raises(DataError, match=f"at most {LIMIT}"):
        _maxt.max_abs_sf([2.0], corr, 10.0)
    with pytest.raises(DataError, match=f"at most {LIMIT}"):
        _maxt.critical_value(corr, 10.0, 0.05)
    assert time.perf_counter() - start < 2.0


@pytest.mark.slow
def test_a_family_at_the_limit_runs_identical_metrics_counted_once(tmp_path: Path) -> None:
    """LIMIT candidates on two identical metrics, one family for the table (--form configs): 2 x
    LIMIT tests before the identical ones merge, LIMIT after, which is what max-t integrates."""
    src = write_long_csv(tmp_path / "r.csv", _records(LIMIT, metrics=("map", "mrr"), identical=True))
    a = compare(src, test="seed-averaged", correction="maxt").analyse(form="configs")
    assert a.identical == (("map", "mrr"),) and len(a.comparisons) == LIMIT
    assert {c.family_size for c in a.comparisons} == {LIMIT}
    assert all(c.result.p_value <= c.p_adjusted <= 1.0 and c.simultaneous is not None for c in a.comparisons)
