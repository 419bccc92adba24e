"""`harness power --from` a long CSV: components and a seed table, the seeds an effect needs, clamped
components said, and one-line errors on bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from harness.errors import DataError
from harness.results.stored import RunRecord, StudyResults
from harness.stats.crossed import VarianceComponents
from harness.stats.power import mde, power_analysis
from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


def _error(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli("power", *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: ")
    return lines[0]


@pytest.mark.slow
def test_cli_prints_components_and_a_seed_table(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "r.csv", synthetic_records())
    rc, out, err = run_cli("power", "--from", str(src), "--metric", "map", "--effect", "0.01")
    assert rc == 0, err
    assert "**better vs base, MAP**: observed difference +0.06" in out and "variance components: seed" in out
    assert "| seeds | queries | SE | MDE |" in out and "\u03b1/m = 0.05/3 = 0.01667" in out and "| 3 (this study) | 40 |" in out
    assert all(f"| {s} | 40 |" in out for s in (5, 10, 20))
    assert "Effect 0.01: needs" in out
    rc, out, _ = run_cli("power", "--from", str(src), "--format", "json", "--seeds", "4", "--queries", "400",
                         "--alpha", "0.01", "--power", "0.9")
    data = json.loads(out)
    assert rc == 0 and data["alpha"] == 0.01 and data["power"] == 0.9 and len(data["comparisons"]) == 6
    assert data["family_size"] == 3 and data["level"] == pytest.approx(0.01 / 3)
    first = data["comparisons"][0]
    assert [r["seeds"] for r in first["mde"]] == [3, 4] and {r["queries"] for r in first["mde"]} == {400}
    comps = VarianceComponents(**{k if k != "residual" else "resid": v for k, v in first["components"].items()})
    assert first["mde"][1]["mde"] == pytest.approx(mde(comps, 4, 400, level=0.01 / 3, power=0.9).mde)
    rc, out, _ = run_cli("power", "--from", str(src), "--format", "json", "--family-size", "1")
    assert rc == 0 and json.loads(out)["level"] == 0.05
    out_file = tmp_path / "o" / "power.md"
    assert run_cli("power", "--from", str(src), "--output", str(out_file))[1] == ""
    assert out_file.read_text().startswith("**Power: ")


@pytest.mark.slow
def test_cli_says_when_an_effect_needs_more_queries(tmp_path: Path, run_cli: Cli) -> None:
    """A query component that alone exceeds the effect: no seed count reaches it."""
    g = np.random.default_rng(4)
    base = g.uniform(0.2, 0.8, (3, 30))
    cand = base + 0.01 + g.normal(0, 0.002, (3, 1)) + g.normal(0, 0.1, (1, 30)) + g.normal(0, 0.01, (3, 30))
    src = write_long_csv(tmp_path / "q.csv", _records({"base": base, "new": cand}))
    rc, out, _ = run_cli("power", "--from", str(src), "--effect", "0.02")
    assert rc == 0
    assert "Effect 0.02: not reachable at any seed count with 30 queries: the query term alone" in out


def _records(matrices: dict[str, np.ndarray], metric: str = "map") -> list[RunRecord]:
    return [RunRecord(config=c, seed=str(s + 1),
                      per_query={metric: {f"q{q:02d}": float(v) for q, v in enumerate(row)}})
            for c, m in matrices.items() for s, row in enumerate(m)]


@pytest.mark.slow
def test_cli_says_which_components_were_clamped(tmp_path: Path, run_cli: Cli) -> None:
    g = np.random.default_rng(5)
    base = g.uniform(0.2, 0.8, (3, 20))
    d = g.normal(0, 0.05, (1, 20)) + g.normal(0, 0.05, (3, 20))
    d -= d.mean(axis=1, keepdims=True) - d.mean()  # equal seed means: MS_seed = 0 < MS_resid
    src = write_long_csv(tmp_path / "c.csv", _records({"base": base, "new": base + d}))
    rc, out, _ = run_cli("power", "--from", str(src))
    assert rc == 0
    assert "variance components: seed 0 (estimate -" in out and ", clamped)" in out
    assert "Negative variance estimates were set to 0 (seed for new on MAP)" in out
    rc, out, _ = run_cli("table", "--from", str(src))
    assert rc == 0 and "set to 0 in the effect size (the test uses them unclamped): the seed " \
        "component for new on MAP" in out


@pytest.mark.slow
def test_cli_errors(tmp_path: Path, run_cli: Cli) -> None:
    records = synthetic_records()
    one = write_long_csv(tmp_path / "one.csv", synthetic_records(seeds=(1,)))
    msg = _error(run_cli, "--from", str(one))
    assert "has one seed (1); a power analysis needs at least 2" in msg
    unequal = [RunRecord(config=r.config, seed=r.seed, per_query={
        m: {q: v for q, v in vals.items() if not (r.config == "same" and r.seed == "3" and q == "q009")}
        for m, vals in r.per_query.items()}) for r in records]
    rc, out, _ = run_cli("power", "--from", str(write_long_csv(tmp_path / "u.csv", unequal)))
    assert rc == 0 and "this study: 3 seeds \u00d7 39 queries (and 1 that some runs lack, left out);" in out
    per_run = write_long_csv(tmp_path / "p.csv", records, per_query=False)
    msg = _error(run_cli, "--from", str(per_run))
    assert "per-run values only for map, mrr; a power analysis needs per-query values" in msg
    src = write_long_csv(tmp_path / "r.csv", records)
    assert "alpha must be in (0, 1), got 5.0" in _error(run_cli, "--from", str(src), "--alpha", "5")
    assert "seeds must be seed counts >= 2" in _error(run_cli, "--from", str(src), "--seeds", "1", "3")
    assert "queries must be an integer >= 2, got 1" in _error(run_cli, "--from", str(src), "--queries", "1")
    assert "unknown metric 'bleu'" in _error(run_cli, "--from", str(src), "--metric", "bleu")
    only_base = write_long_csv(tmp_path / "b.csv", [r for r in records if r.config == "base"])
    assert "has only the baseline 'base'" in _error(run_cli, "--from", str(only_base))
    with pytest.raises(DataError, match="has one seed"):
        power_analysis(StudyResults.build(synthetic_records(seeds=(2,))))
