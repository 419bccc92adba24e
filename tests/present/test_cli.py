"""`harness table --from`: options, output, and one-line errors with a non-zero exit."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.results.stored import RunRecord
from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]


def _error(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli("table", *argv)
    assert rc != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: ")
    return lines[0]


def test_output_file_baseline_and_plots(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "r.csv", synthetic_records())
    out_file = tmp_path / "out" / "t.md"
    rc, out, err = run_cli("table", "--from", str(src), "--baseline", "same", "--output", str(out_file),
                           "--plots", str(tmp_path / "plots"), "--metric", "map")
    assert rc == 0 and out == ""
    text = out_file.read_text()
    assert "| seed | same | base | better | worse |" in text and "against the baseline same" in text
    png = tmp_path / "plots" / "map.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "wrote" in err


def test_a_baseline_named_baseline_is_not_named_twice(tmp_path: Path, run_cli: Cli) -> None:
    records = [RunRecord(config="baseline" if r.config == "same" else r.config, seed=r.seed,
                         per_query=r.per_query) for r in synthetic_records()]
    rc, out, _ = run_cli("table", "--from", str(write_long_csv(tmp_path / "r.csv", records)),
                         "--baseline", "baseline", "--metric", "map")
    assert rc == 0 and "against the baseline;" in out and "baseline baseline" not in out


def test_options_reach_the_footnote(tmp_path: Path, run_cli: Cli) -> None:
    src = write_long_csv(tmp_path / "r.csv", synthetic_records())
    rc, out, _ = run_cli("table", "--from", str(src), "--test", "wilcoxon", "--correction", "holm",
                         "--family", "table", "--form", "configs", "--levels", "0.1", "0.05", "0.001")
    assert rc == 0
    assert "Wilcoxon signed-rank test" in out and "Holm-Bonferroni correction, family: all metrics " \
        "(m = 6 comparisons)" in out and "p < 0.001" in out and "| configuration | MAP | MRR |" in out
    rc, out, _ = run_cli("table", "--from", str(src), "--test", "randomisation", "--seed", "3",
                         "--resamples", "500", "--format", "csv")
    rows = list(csv.DictReader(out.splitlines()))
    assert rc == 0 and {r["test"] for r in rows} == {"randomisation"}
    assert all(float(r["p_value"]) * 501 == pytest.approx(round(float(r["p_value"]) * 501))
               for r in rows if r["p_value"])


def test_errors(tmp_path: Path, run_cli: Cli) -> None:
    records = synthetic_records()
    # runs with different query sets
    changed = [RunRecord(config=r.config, seed=r.seed, per_query={
        m: {q: v for q, v in vals.items() if not (r.config == "worse" and r.seed == "2" and q == "q005")}
        for m, vals in r.per_query.items()}) for r in records]
    rc, out, _ = run_cli("table", "--from", str(write_long_csv(tmp_path / "q.csv", changed)))
    assert rc == 0 and ("1 of 40 queries are missing from some runs and left out: q005 (missing from "
                        "worse seed 2 (map), worse seed 2 (mrr)). Every mean and test here is over the 39 "
                        "queries every run has.") in " ".join(out.split())
    # a configuration missing seeds the baseline has
    short = [r for r in records if not (r.config == "same" and r.seed == "3")]
    msg = _error(run_cli, "--from", str(write_long_csv(tmp_path / "s.csv", short)))
    assert "configuration 'same' is missing seeds 3 that the baseline 'base' has" in msg
    src = write_long_csv(tmp_path / "r.csv", records)
    # a metric that does not exist
    msg = _error(run_cli, "--from", str(src), "--metric", "map", "ndcg_10")
    assert "unknown metric 'ndcg_10'" in msg and "valid: map, mrr" in msg
    msg = _error(run_cli, "--from", str(src), "--baseline", "bert")
    assert "baseline 'bert'" in msg and "valid: base, better, same, worse" in msg
    msg = _error(run_cli, "--from", str(src), "--test", "crossed", "--metric", "map", "--levels", "2")
    assert "levels must be strictly decreasing values in (0, 1)" in msg
    msg = _error(run_cli, "--from", str(src), "--levels", "0.01", "0.05")
    assert "levels must be strictly decreasing" in msg
    # per-run values only
    per_run = write_long_csv(tmp_path / "p.csv", records, per_query=False)
    msg = _error(run_cli, "--from", str(per_run), "--test", "seed-averaged")
    assert "per-run values only" in msg and "--test across-seeds alone" in msg
    # malformed files
    msg = _error(run_cli, "--from", str(tmp_path / "absent.csv"))
    assert "absent.csv: no such file" in msg
    (tmp_path / "cols.csv").write_text("config,run,metric,value\na,1,map,0.5\n")
    assert "missing column(s) seed" in _error(run_cli, "--from", str(tmp_path / "cols.csv"))
    (tmp_path / "num.csv").write_text("config,seed,metric,value\na,1,map,0.5\nb,1,map,high\n")
    assert "num.csv:3: value 'high' is not a number" in _error(run_cli, "--from", str(tmp_path / "num.csv"))
    (tmp_path / "empty.csv").write_text("config,seed,metric,value\n")
    assert "no result rows" in _error(run_cli, "--from", str(tmp_path / "empty.csv"))
    (tmp_path / "dup.csv").write_text("config,seed,metric,value\na,1,map,0.5\na,1,map,0.6\n")
    assert "dup.csv:3: duplicate value" in _error(run_cli, "--from", str(tmp_path / "dup.csv"))
    (tmp_path / "one.csv").write_text("config,seed,metric,value\na,1,map,0.5\nb,1,map,0.6\n")
    # one seed of per-run values: a table without markers (tests/stats/test_significance.py), but no
    # query-only test
    assert "has one seed (1) and per-run values only: the query-only test" in \
        _error(run_cli, "--from", str(tmp_path / "one.csv"), "--one-seed-test", "query")


def test_from_refuses_what_it_would_get_wrong(tmp_path: Path, run_cli: Cli) -> None:
    """--output naming the --from file (itself, by another path or a link to it) replaced the
    results with the table; --phase was ignored without a word (a CSV records no phases). The file
    is left as it was, and `harness power` refuses the same output."""
    src = write_long_csv(tmp_path / "r.csv", synthetic_records(queries=8))
    before = src.read_bytes()
    (tmp_path / "link.csv").symlink_to(src)
    for output in (src, tmp_path / "sub" / ".." / "r.csv", tmp_path / "link.csv"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        msg = _error(run_cli, "--from", str(src), "--output", str(output))
        assert msg == (f"harness: error: --output {output} is the --from file: writing there would replace "
                       "the results it reads; give another file")
    rc, out, err = run_cli("power", "--from", str(src), "--output", str(src))
    assert rc == 2 and out == "" and "is the --from file" in err
    assert src.read_bytes() == before
    for phase in ("auto", "confirmatory", "exploratory"):
        assert f"--phase {phase}: a long results CSV ({src}) records no phases" in _error(
            run_cli, "--from", str(src), "--phase", phase)
    # and --tracking-uri, read by --experiment only, was ignored as silently
    assert "--tracking-uri sqlite:////tmp/x.db: --from" in _error(
        run_cli, "--from", str(src), "--tracking-uri", "sqlite:////tmp/x.db")


@pytest.mark.parametrize(("argv", "says"), [
    (("table", "--metric", "map"), "harness: error: table: one of the arguments --experiment --from is required"),
    (("table", "--from", "r.csv", "--format", "docx"), ("harness: error: table: argument --format: invalid "
                                                        "choice: 'docx'")),
    (("table", "--from", "r.csv", "--bogus"), ("harness: error: table: unrecognized arguments: --bogus "
                                                "(`harness table -h` lists the options)")),
    (("runs", "export", "--experiment", "x", "--to", "d", "--bogus", "1"),
     "harness: error: runs export: unrecognized arguments: --bogus 1 (`harness runs export -h`"),
    (("-v", "--bogus"), "harness: error: unrecognized arguments: --bogus (`harness -h`"),
    (("data", "frob"), "harness: error: data: argument ACTION: invalid choice: 'frob'")])
def test_argument_errors_are_one_line(argv: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse's errors as the harness's own: one line, exit 2, no usage block."""
    from harness.cli import main

    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith(says), err
    assert "-h` lists the options" in err


@pytest.mark.parametrize("levels", [["0.1"], ["0.1", "0.05"], ["0.2", "0.01"]])
def test_the_interval_beside_a_marker_is_at_the_loosest_level(tmp_path: Path, run_cli: Cli,
                                                               levels: list[str]) -> None:
    """`--levels 0.1` put a dagger (p_adjusted 0.08) beside a 95% interval that held 0, under a
    footnote saying the interval excludes 0 exactly when p_adjusted < 0.05. The interval is now at
    1 - the loosest level: every row's interval excludes 0 exactly when the row is marked."""
    records = synthetic_records(queries=30, effects={"base": 0.0, "a": 0.012, "b": 0.02, "c": -0.015})
    src = write_long_csv(tmp_path / "r.csv", records)
    loosest = max(map(float, levels))
    rc, out, _ = run_cli("table", "--from", str(src), "--levels", *levels, "--format", "csv", "--test", "seed-averaged")
    rows = [r for r in csv.DictReader(out.splitlines()) if r["p_adjusted"]]
    assert rc == 0 and rows
    for r in rows:
        excludes = float(r["ci_low"]) > 0 or float(r["ci_high"]) < 0
        assert excludes == (float(r["p_adjusted"]) < loosest), r
    rc, out, _ = run_cli("table", "--from", str(src), "--levels", *levels, "--form", "summary", "--metric", "map",
                         "--test", "seed-averaged")
    assert rc == 0 and f"{100 * (1 - loosest):g}% CI" in out and f"adjusted p-value is below {loosest:g}" in out


def test_a_metric_with_per_run_values_only_is_named_in_the_footnote(tmp_path: Path, run_cli: Cli) -> None:
    """MAP per query beside MRR per run: the table runs the across-seeds test for both, and its
    footnote said "Only per-run values are available", false for MAP (whose --metric alone runs the
    crossed test). It now names the metric that lacks them."""
    records = synthetic_records()
    per_query = write_long_csv(tmp_path / "q.csv", records).read_text().splitlines()
    per_run = write_long_csv(tmp_path / "r.csv", records, per_query=False).read_text().splitlines()
    mixed = tmp_path / "mixed.csv"
    mixed.write_text("\n".join([per_query[0]] + [line for line in per_query[1:] if ",map," in line]
                               + [f"{line}," for line in per_run[1:] if ",mrr," in line]) + "\n")
    rc, out, _ = run_cli("table", "--from", str(mixed), "--form", "configs")
    assert rc == 0 and "Paired t-test over the per-seed means" in out
    assert "Only per-run values are available" not in out
    assert "MRR has per-run values only, so every metric of this table takes the across-seeds test" in out
    rc, out, _ = run_cli("table", "--from", str(mixed), "--metric", "map")
    assert rc == 0 and "Crossed seeds × queries test" in out and "per-run values only" not in out


def test_a_metric_that_is_no_ir_measure_has_its_direction_stated(tmp_path: Path, run_cli: Cli) -> None:
    """A results CSV's cascade_cost 0.40 -> 0.61 was marked "significantly better": every marker took
    higher as better, true of IR measures and not of a cost. The harness's own cost is now lower-is-
    better (its rise is marked worse, its least mean bold), another metric's direction is stated in
    the footnote as assumed, and --lower-better turns it round; an IR measure's table says nothing."""
    rows = [f"{c},{s},{metric},{v}" for metric in ("cascade_cost", "latency")
            for c, vals in (("base", (0.40, 0.41, 0.40)), ("x", (0.60, 0.62, 0.61)))
            for s, v in zip((1, 2, 3), vals, strict=True)]
    cost = tmp_path / "cost.csv"
    cost.write_text("config,seed,metric,value\n" + "\n".join(rows) + "\n")
    rc, out, _ = run_cli("table", "--from", str(cost), "--form", "configs")
    assert rc == 0, out
    assert "| base | **0.4033** ± 0.0058 | 0.4033 ± 0.0058 |" in out
    assert "| x | 0.6100 ± 0.0100⇓ | **0.6100** ± 0.0100‡ |" in out
    assert "Lower values are better for cascade\\_cost: its falls are marked better" in out
    assert "Higher values are taken as better for latency (not an IR measure" in out
    rc, out, _ = run_cli("table", "--from", str(cost), "--form", "configs", "--lower-better", "latency")
    assert rc == 0 and "| x | 0.6100 ± 0.0100⇓ | 0.6100 ± 0.0100⇓ |" in out
    assert "Lower values are better for cascade\\_cost and latency" in out and "Higher values" not in out
    rc, out, _ = run_cli("table", "--from", str(cost), "--form", "summary", "--lower-better", "latency")
    assert rc == 0 and out.count("| base | **0.4033** | 0.0058 |") == 2  # the least mean, bold in both
    rc, out, _ = run_cli("table", "--from", str(write_long_csv(tmp_path / "r.csv", synthetic_records())))
    assert rc == 0 and "Higher values are taken" not in out and "Lower values" not in out


@pytest.mark.parametrize(("names", "message"), [
    (["AP"], "harness: error: lower_better: AP is an IR measure, higher when the ranking is better"),
    (["latncy"], "harness: error: unknown lower-better metric 'latncy' in {cost} (did you mean latency?)"),
])
def test_lower_better_refuses_an_ir_measure_and_an_unknown_metric(tmp_path: Path, run_cli: Cli, names: list[str],
                                                                   message: str) -> None:
    cost = tmp_path / "cost.csv"
    cost.write_text("config,seed,metric,value\n" + "\n".join(
        f"{c},{s},latency,{v + s / 100}" for c, v in (("base", 1.0), ("x", 2.0)) for s in (1, 2, 3)) + "\n")
    rc, out, err = run_cli("table", "--from", str(cost), "--lower-better", *names)
    assert rc == 2 and out == "" and err.strip().splitlines() == [err.strip()]
    assert err.startswith(message.format(cost=cost)), err
