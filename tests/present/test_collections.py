"""A table over several collections (harness.stats.across, harness.present.collections_*): the long
CSV's collection column, one family over the whole table (checked against statsmodels' Holm and by
seeded simulation of null studies), the combined verdict beside each collection's, and the table in
every format, from the command line and from Python."""

from __future__ import annotations

import csv
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.multitest import multipletests

from harness.analysis import StudyAnalysis, compare
from harness.errors import ConfigError, DataError
from harness.present.collections_render import CSV_HEADER, render_collections
from harness.present.collections_table import build_collection_tables
from harness.results.longcsv import collection_rows, read_long_collections, read_long_csv
from harness.results.stored import StudyResults
from harness.stats.across import analyse_collections, collection_effect
from harness.stats.combined import combine, combine_batch
from harness.stats.corrections import adjust
from harness.stats.crossed import crossed_batch
from harness.stats.significance import AnalysisOptions
from tests.synthetic import synthetic_records

SHIFTS = {"msdialog": {"base": 0.0, "better": 0.06, "same": 0.0, "worse": -0.08},
          "mantis": {"base": 0.0, "better": 0.04, "same": 0.01, "worse": -0.05}}


def _collections() -> dict[str, StudyResults]:
    out = {}
    for i, (name, effects) in enumerate(SHIFTS.items()):
        records = synthetic_records(queries=40 + 10 * i, effects=effects)
        out[name] = StudyResults.build(records, source=name)
    return out


def _write(path: Path, collections: dict[str, StudyResults]) -> Path:
    rows = collection_rows(collections)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_collection_column_reads_back_per_collection(tmp_path: Path) -> None:
    cols = _collections()
    got = read_long_collections(_write(tmp_path / "r.csv", cols))
    assert list(got) == ["msdialog", "mantis"]
    for name, res in cols.items():
        assert got[name].configs == res.configs and got[name].qids == res.qids
        assert got[name].value("better", "2", "map") == pytest.approx(res.value("better", "2", "map"))
    # One collection's file is the file of today: read_long_csv reads it; several are refused there.
    with pytest.raises(DataError, match="has 2 collections \\(msdialog, mantis\\)"):
        read_long_csv(tmp_path / "r.csv")
    one = read_long_csv(_write(tmp_path / "one.csv", {"msdialog": cols["msdialog"]}))
    assert one.configs == cols["msdialog"].configs


def test_a_file_mixing_named_and_empty_collections_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    path.write_text("config,seed,metric,value,collection\na,1,map,0.5,x\nb,1,map,0.6,\n")
    with pytest.raises(DataError, match=r"mixed.csv:3: empty collection cell, but .*mixed.csv:2 names "
                                         r"collection 'x'"):
        read_long_collections(path)


def test_each_collection_is_validated_alone_and_named(tmp_path: Path) -> None:
    path = tmp_path / "gap.csv"
    path.write_text("config,seed,metric,value,collection\na,1,map,0.5,x\nb,1,map,0.6,x\n"
                    "a,1,map,0.5,y\na,2,map,0.5,y\nb,1,map,0.6,y\n")
    with pytest.raises(DataError, match="collection 'y': configuration 'b' is missing seeds 2"):
        read_long_collections(path)


@pytest.mark.slow
def test_the_whole_table_is_one_holm_family_equal_to_statsmodels() -> None:
    cols = _collections()
    analysis = analyse_collections(cols)
    comps = [(n, c) for n, a in analysis.analyses.items() for c in a.comparisons]
    raw = [c.result.p_value for _, c in comps] + [c.result.p_value for c in analysis.combined]
    ref = multipletests(raw, method="holm")[1]
    got = [c.p_adjusted for _, c in comps] + [c.p_adjusted for c in analysis.combined]
    assert got == pytest.approx(ref.tolist(), rel=1e-12)
    # 2 collections x 3 candidates x 2 metrics + 3 candidates x 2 metrics combined
    assert len(raw) == 18 and analysis.comparisons == 18
    assert {c.family_size for _, c in comps} | {c.family_size for c in analysis.combined} == {18}


@pytest.mark.slow
def test_metrics_identical_on_one_collection_are_one_member_of_the_family() -> None:
    """MRR equal to MAP on msdialog alone (as with one relevant document per query there): both
    columns stay (mantis tells them apart), but msdialog's MRR comparison is its MAP comparison,
    counted once: the family is statsmodels' Holm over the distinct tests, and the footnote says so."""
    from dataclasses import replace

    from harness.results.stored import RunRecord

    cols = _collections()
    records = [replace(r, per_query={**r.per_query, "mrr": r.per_query["map"]})
               for r in synthetic_records(queries=40, effects=SHIFTS["msdialog"])]
    assert all(isinstance(r, RunRecord) for r in records)
    cols["msdialog"] = StudyResults.build(records, source="msdialog")
    analysis = analyse_collections(cols)
    assert analysis.metrics == ("map", "mrr") and analysis.counted_once == (("msdialog", ("map", "mrr")),)
    ms, mt = analysis.analyses["msdialog"], analysis.analyses["mantis"]
    distinct = [c for c in ms.comparisons if c.metric == "map"] + list(mt.comparisons) + list(analysis.combined)
    ref = multipletests([c.result.p_value for c in distinct], method="holm")[1]
    assert [c.p_adjusted for c in distinct] == pytest.approx(ref.tolist(), rel=1e-12)
    # 3 candidates on msdialog + 3 x 2 on mantis + 3 x 2 combined, not 18
    assert analysis.comparisons == 15 and {c.family_size for c in ms.comparisons} == {15}
    for c in ms.comparisons:
        twin = ms.get(c.config, "map")
        assert (c.result.p_value, c.p_adjusted, c.level) == (twin.result.p_value, twin.p_adjusted, twin.level)
    text = render_collections(build_collection_tables(analysis), "md")
    assert "(m = 15 comparisons)" in text
    assert "msdialog: MAP = MRR there (equal per-query values in every run" in text
    assert "counted once in the family" in text


@pytest.mark.slow
@pytest.mark.parametrize("family, sizes", [("metric", {9}), ("collection", {6})])
def test_the_other_families(family: str, sizes: set[int]) -> None:
    analysis = analyse_collections(_collections(), family=family)
    assert {c.family_size for a in analysis.analyses.values() for c in a.comparisons} | \
        {c.family_size for c in analysis.combined} == sizes
    if family == "metric":
        for metric in analysis.metrics:
            members = [c for a in analysis.analyses.values() for c in a.comparisons if c.metric == metric]
            members_c = [c for c in analysis.combined if c.metric == metric]
            ref = multipletests([c.result.p_value for c in [*members, *members_c]], method="holm")[1]
            assert [c.p_adjusted for c in [*members, *members_c]] == pytest.approx(ref.tolist(), rel=1e-12)


@pytest.mark.parametrize("correction", ["holm", "bonferroni", "bh"])
def test_every_interval_excludes_0_exactly_when_its_cell_is_marked(correction: str) -> None:
    """Over collections as over one: the interval beside a marker (and the CSV's ci_low, ci_high) is
    at the level the correction implies, per collection and for the combined verdicts, so it
    excludes 0 exactly when the adjusted p-value is below 0.05; uncorrected (none) it is the test's."""
    effects = {"base": 0.0, "a": 0.012, "b": 0.008, "c": 0.0, "d": -0.01}
    cols = {f"c{i}": StudyResults.build(synthetic_records(queries=30 + 10 * i, effects=effects), source=f"c{i}")
            for i in range(3)}
    analysis = analyse_collections(cols, AnalysisOptions(correction=correction))
    cells = [*(c for a in analysis.analyses.values() for c in a.comparisons), *analysis.combined]
    for c in cells:
        low, high = c.interval
        assert (low > 0 or high < 0) == (c.p_adjusted < 0.05), (c.config, c.metric, c.interval, c.p_adjusted)
    # the case the check is about: a raw p below 0.05, the adjusted one above it
    assert any(c.result.p_value < 0.05 <= c.p_adjusted for c in cells)
    plain = analyse_collections(cols, AnalysisOptions(correction="none"))
    for a in plain.analyses.values():
        assert all(c.interval == (c.result.ci_low, c.result.ci_high) for c in a.comparisons)


def test_the_combined_verdict_is_the_hksj_combination_of_the_collections() -> None:
    cols = _collections()
    analysis = analyse_collections(cols)
    for comb in analysis.combined:
        y = [analysis.analyses[n].get(comb.config, comb.metric).result.mean_diff for n in cols]
        se = [analysis.analyses[n].get(comb.config, comb.metric).result.se for n in cols]
        ref = combine(y, np.square(se), weighting="equal")
        assert comb.result.estimate == pytest.approx(ref.estimate) and comb.result.p_value == pytest.approx(ref.p_value)
        assert comb.result.estimate == pytest.approx(np.mean(y))
        assert comb.result.p_value == pytest.approx(stats.ttest_1samp(y, 0.0).pvalue)
    weighted = analyse_collections(cols, weighting="inverse-variance")
    assert weighted.get_combined("better", "map").result.weighting == "inverse-variance"
    # a name the analysis lacks is refused, as Analysis.get refuses it (it read as "no verdict")
    from harness.errors import UnknownName

    assert weighted.get_combined(weighted.baseline, "map") is None
    for config, metric, kind in (("nope", "map", "configuration"), ("better", "nope", "metric")):
        with pytest.raises(UnknownName, match=f"unknown {kind} 'nope'"):
            weighted.get_combined(config, metric)


@pytest.mark.parametrize("test", ["per-seed", "wilcoxon", "randomisation", "across-seeds", "seed-averaged"])
def test_every_test_gives_a_table_over_collections(test: str) -> None:
    """Each test the one-collection table runs runs over collections too; a test with no one
    standard error (per-seed, Wilcoxon, randomisation) gives the combination the paired t-test's
    over seed-averaged queries (harness.stats.across), checked against scipy."""
    cols = _collections()
    analysis = analyse_collections(cols, AnalysisOptions(test=test, resamples=200))
    assert analysis.test == test and len(analysis.combined) == 3 * len(analysis.metrics)
    means = []
    for name, res in cols.items():
        config = res.seeds_of("better")
        cand = np.mean([res.query_values("better", s, "map") for s in config], axis=0)
        base = np.mean([res.query_values(res.baseline, s, "map") for s in config], axis=0)
        means.append((cand - base).mean())
        mean, var = collection_effect(analysis.analyses[name], "better", "map")
        assert mean == pytest.approx(means[-1], rel=1e-12)
        if test in ("per-seed", "wilcoxon", "randomisation"):
            t = stats.ttest_rel(cand, base)
            assert var == pytest.approx((means[-1] / t.statistic) ** 2, rel=1e-9)
    assert analysis.get_combined("better", "map").result.estimate == pytest.approx(np.mean(means), rel=1e-12)


def test_one_seed_over_collections_is_refused_in_one_line(tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    one = {name: StudyResults.build(synthetic_records(queries=10, seeds=(1,)), source=name) for name in ("a", "b")}
    with pytest.raises(DataError, match=r"needs 2 or more seeds per collection; collection 'a' has one \(1\)"):
        analyse_collections(one)
    rc, out, err = run_cli("table", "--from", str(_write(tmp_path / "r.csv", one)))
    assert rc != 0 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("seeds", [(1,), (1, 2, 3)])
def test_a_test_named_for_one_seed_collections_is_refused_over_collections(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]], seeds: tuple[int, ...]) -> None:
    """`--test seed-averaged` let one-seed collections in: their cells took the multi-seed daggers
    (54 of 100 null tables marked something) beside a footnote saying one-seed markers are the
    query-only ones, and a combined verdict rested on query-level tests alone. A collection of one
    seed is refused over collections whatever the test, beside one of 3 seeds too."""
    one = {"a": StudyResults.build(synthetic_records(queries=20, seeds=seeds), source="a"),
           "b": StudyResults.build(synthetic_records(queries=20, seeds=(1,)), source="b")}
    for test in ("seed-averaged", "wilcoxon"):
        with pytest.raises(DataError, match=r"needs 2 or more seeds per collection; collection '(a|b)' has one \(1\)"):
            analyse_collections(one, AnalysisOptions(test=test))
        rc, out, err = run_cli("table", "--from", str(_write(tmp_path / "r.csv", one)), "--test", test)
        assert rc != 0 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_looser_level_widens_the_intervals_over_collections_as_over_one(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """`--levels 0.1 0.05` put each collection's and each combined verdict's interval at 95%, so a
    cell marked at 0.1 showed an interval holding 0; they are at 90%, as on one collection: the
    uncorrected ones are scipy's 90% paired t intervals."""
    cols = _collections()
    path = _write(tmp_path / "r.csv", cols)
    rc, out, err = run_cli("table", "--from", str(path), "--test", "seed-averaged", "--correction", "none",
                           "--levels", "0.1", "0.05", "--format", "csv")
    assert rc == 0, err
    rows = {(r["collection"], r["row"], r["metric"]): r for r in csv.DictReader(out.splitlines())}
    for name, res in cols.items():
        seeds = res.seeds_of("better")
        cand = np.mean([res.query_values("better", s, "map") for s in seeds], axis=0)
        base = np.mean([res.query_values(res.baseline, s, "map") for s in seeds], axis=0)
        ci = stats.ttest_rel(cand, base).confidence_interval(0.90)
        row = rows[(name, "better", "map")]
        assert (float(row["ci_low"]), float(row["ci_high"])) == pytest.approx((ci.low, ci.high), rel=1e-9)
    study = compare(path, test="seed-averaged", levels=(0.1, 0.05)).analyse()
    for cell in [*(c for a in study.analyses.values() for c in a.comparisons), *study.combined]:
        low, high = cell.interval
        assert (low > 0 or high < 0) == (cell.p_adjusted < 0.1), (cell.config, cell.metric, cell.interval)


def test_configurations_stopped_on_a_collection_where_none_finished_count_in_the_family() -> None:
    """On a collection where only the baseline finished, its stopped configurations added nothing
    to m (each counts as often as a finished one would, p = 1): Holm ran over 4 instead of 6."""
    from dataclasses import replace

    effects = {"base": 0.0, "c1": 0.02, "c2": 0.0}
    a = StudyResults.build(synthetic_records(queries=30, effects=effects), source="A")
    b = StudyResults.build(synthetic_records(queries=25, effects={"base": 0.0}), source="B")
    b = replace(b, stopped={"c1": "rung 1", "c2": "rung 1"})
    analysis = analyse_collections({"A": a, "B": b}, AnalysisOptions(test="seed-averaged", metrics=("map",)))
    # A's 2 comparisons, B's 2 stopped ones at p = 1 and 2 combined verdicts that could not be made
    assert analysis.comparisons == 6
    ps = [c.result.p_value for c in analysis.analyses["A"].comparisons]
    ref = multipletests([*ps, 1.0, 1.0, 1.0, 1.0], method="holm")[1][:2]
    assert [c.p_adjusted for c in analysis.analyses["A"].comparisons] == pytest.approx(ref.tolist(), rel=1e-12)


def _without_z_on_c(tmp_path: Path) -> tuple[dict[str, StudyResults], Path]:
    """Three collections A, B, C of the baseline, a and z, and the long CSV of them without z on C."""
    cols = {name: StudyResults.build(synthetic_records(queries=30, effects={"base": 0.0, "a": s, "z": s / 2}),
                                     source=name) for name, s in (("A", 0.02), ("B", 0.03), ("C", 0.01))}
    rows = [r for r in collection_rows(cols) if not (r["collection"] == "C" and r["config"] == "z")]
    path = tmp_path / "c.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return cols, path


def test_the_footnote_names_each_familys_m_where_they_differ(tmp_path: Path, run_cli) -> None:
    """Under --family collection a collection without one configuration has a smaller family: the
    footnote said "m = 6" for all (its CSV rows said 4); it gives the range."""
    _, path = _without_z_on_c(tmp_path)
    rc, out, err = run_cli("table", "--from", str(path), "--test", "seed-averaged", "--family", "collection")
    assert rc == 0, err
    assert "(m = 2 to 4 comparisons by family)" in out, out[-1500:]
    rc, out, err = run_cli("table", "--from", str(path), "--test", "seed-averaged")
    assert rc == 0 and "(m = " in out and " to " not in out.split("(m = ")[1].split(")")[0], out[-1500:]


def test_an_unknown_name_in_one_collections_analysis_is_refused_in_one_line(
        tmp_path: Path, run_cli: Callable[..., tuple[int, str, str]]) -> None:
    """A mistake the analysis of one collection finds (an unknown metric) is that collection's
    one-line refusal, with the valid names, from the API, `harness table` and `harness power`."""
    from harness.errors import UnknownName

    path = _write(tmp_path / "r.csv", _collections())
    with pytest.raises(UnknownName, match=r"unknown metric 'mapp' .*collection 'msdialog'.*did you mean map") as exc:
        compare(path).table(metric="mapp")
    assert exc.value.name == "mapp" and "map" in exc.value.valid
    for argv in (("table",), ("power", "--collection", "mantis")):
        rc, out, err = run_cli(*argv, "--from", str(path), "--metric", "mapp")
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert "unknown metric 'mapp'" in err and "Traceback" not in err


def test_maxt_and_mismatched_baselines_are_refused() -> None:
    cols = _collections()
    with pytest.raises(ConfigError, match="maxt is not available over several collections"):
        analyse_collections(cols, AnalysisOptions(correction="maxt"))
    other = StudyResults.build(synthetic_records(), baseline="same", source="x")
    with pytest.raises(DataError, match="different baselines: msdialog: 'base', x: 'same'"):
        analyse_collections({"msdialog": cols["msdialog"], "x": other})


def _null_table_rejections(k: int, candidates: int, metrics: int, studies: int, seed: int,
                           correction: str) -> float:
    """Share of null studies over ``k`` collections (no candidate differs from the baseline on any
    collection or metric; 3 seeds x 40 queries; per-seed effect SD 0.02, query 0.1, residual 0.1;
    the metrics of one run correlated through a shared query effect) in which the whole-table family
    marks anything: any collection's comparison or any combined verdict."""
    g = np.random.default_rng(seed)
    seeds, queries = 3, 40
    p_all = []
    for _ in range(k):
        query = g.normal(0.5, 0.1, (studies, 1, 1, 1, queries))
        runs = (query + g.normal(0, 0.02, (studies, metrics, candidates + 1, seeds, 1))
                + g.normal(0, 0.1, (studies, metrics, candidates + 1, seeds, queries)))
        per = [crossed_batch(runs[:, m, c] - runs[:, m, 0]) for m in range(metrics) for c in range(1, candidates + 1)]
        p_all.append(per)
    raw = [b.p_value for per in p_all for b in per]
    for j in range(metrics * candidates):
        y = np.stack([p_all[i][j].mean for i in range(k)], 1)
        v = np.stack([p_all[i][j].se for i in range(k)], 1) ** 2
        raw.append(combine_batch(y, v, weighting="equal").p_value)
    p = np.stack(raw, 1)
    return float(np.mean([(adjust(correction, row) < 0.05).any() for row in p]))


@pytest.mark.slow
@pytest.mark.parametrize("k", [pytest.param(2, marks=pytest.mark.heavy), 3])
def test_family_wise_error_of_the_whole_table(k: int) -> None:
    """docs/statistics.md ("Across collections"): Holm over the whole table keeps the chance of any
    false marker at or below 5% in null studies of k collections x 4 candidates x 2 metrics."""
    studies = 400
    holm = _null_table_rejections(k, 4, 2, studies, seed=k, correction="holm")
    none = _null_table_rejections(k, 4, 2, studies, seed=k, correction="none")
    print(f"{k} collections x 4 candidates x 2 metrics: a marker in {holm:.3f} (holm), {none:.3f} (none)")
    assert holm <= stats.binom.ppf(0.999, studies, 0.05) / studies, holm
    assert none > 0.2, none


def test_the_table_in_every_format(tmp_path: Path) -> None:
    analysis = analyse_collections(_collections())
    [table] = build_collection_tables(analysis, "configs")
    assert table.groups == (("msdialog", 2), ("mantis", 2), ("combined \u0394", 2))
    assert [r.label for r in table.rows] == ["base", "better", "same", "worse"]
    md = render_collections([table], "md")
    assert "| configuration | msdialog: MAP | msdialog: MRR | mantis: MAP |" in md
    assert "family: every comparison in the table (all collections, metrics and combined verdicts) (m = 18" in md
    better = next(r for r in table.rows if r.label == "better")
    # Every cell is its collection's mean over seeds, with its comparison's marker.
    res = analysis.analyses["mantis"].results
    cell = better.cells[2]
    assert cell.collection == "mantis" and cell.value == pytest.approx(float(res.seed_values("better", "map").mean()))
    assert cell.marker == analysis.marker(analysis.analyses["mantis"].get("better", "map"))
    assert better.cells[4].value == pytest.approx(analysis.get_combined("better", "map").result.estimate)

    latex = render_collections([table], "latex")
    assert latex.count(r"\begin{table}") == 1 and latex.count(r"\caption{") == 1
    assert r"\multicolumn{2}{c}{msdialog} & \multicolumn{2}{c}{mantis}" in latex
    assert r"\cmidrule(lr){2-3} \cmidrule(lr){4-5} \cmidrule(lr){6-7}" in latex

    rows = list(csv.DictReader(render_collections([table], "csv").splitlines()))
    assert tuple(rows[0]) == CSV_HEADER
    assert {r["collection"] for r in rows} == {"msdialog", "mantis", "combined"}
    comb = [r for r in rows if r["collection"] == "combined" and r["row"] == "better" and r["metric"] == "map"]
    assert float(comb[0]["i2"]) >= 0 and int(comb[0]["k"]) == 2 and comb[0]["comparisons"] == "18"

    html = render_collections([table], "html")
    assert '<th colspan="2" scope="colgroup">mantis</th>' in html

    seeds = build_collection_tables(analysis, "seeds")
    assert len(seeds) == 2  # one per metric, Penha & Hauff 2020 Table 5's blocks
    blocks = [r.block for r in seeds[0].rows if r.block]
    assert blocks == ["msdialog", "mantis", "combined across collections"]
    assert [r.label for r in seeds[0].rows][:5] == ["1", "2", "3", "AVG", "SD"]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine (pdflatex) on PATH")
def test_the_latex_compiles_as_one_float(tmp_path: Path) -> None:
    analysis = analyse_collections(_collections())
    tex = render_collections(build_collection_tables(analysis, "configs"), "latex")
    (tmp_path / "t.tex").write_text(tex, encoding="utf-8")
    doc = [r"\documentclass{article}", r"\usepackage[T1]{fontenc}", r"\usepackage{booktabs}",
           r"\begin{document}", r"\input{t}", r"\end{document}", ""]
    (tmp_path / "doc.tex").write_text("\n".join(doc), encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]


@pytest.mark.slow
def test_the_command_and_compare_accept_the_collection_column(
        run_cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    path = _write(tmp_path / "r.csv", _collections())
    rc, out, err = run_cli("table", "--from", str(path), "--format", "csv")
    assert rc == 0, err
    study = compare(path)
    assert out == study.table().to_csv() == study.table().render("csv")
    frame = pd.read_csv(path, dtype={"seed": str})
    assert str(compare(frame).table()) == str(study.table()).replace(str(path), "DataFrame")
    assert list(study.runs()["collection"].unique()) == ["msdialog", "mantis"]
    rc, out, err = run_cli("table", "--from", str(path), "--correction", "maxt")
    assert rc != 0 and "maxt is not available over several collections" in err and "Traceback" not in err
    rc, out, _ = run_cli("table", "--from", str(path), "--family", "metric")
    assert rc == 0 and "family: each metric's comparisons over all collections" in out
    rc, out, _ = run_cli("table", "--from", str(path), "--family", "collection")
    assert rc == 0 and "family: each collection's comparisons, and the combined verdicts as one family" in out


@pytest.mark.slow
def test_power_of_one_collection_at_the_whole_tables_level(run_cli: Callable[..., tuple[int, str, str]],
                                                           tmp_path: Path) -> None:
    """`harness power` over a file of several collections: one collection named with --collection
    (its own variance components, as `power` of that collection's rows alone gives them), at alpha
    over the whole table's family (Holm's first step: 18 comparisons here), not its own 3."""
    import json

    from harness.stats.power import PowerOptions, power_analysis

    cols = _collections()
    path = _write(tmp_path / "r.csv", cols)
    rc, out, err = run_cli("power", "--from", str(path))
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "holds collections msdialog, mantis" in err and "--collection" in err
    rc, out, err = run_cli("power", "--from", str(path), "--collection", "mantsi")
    assert rc == 2 and "unknown collection 'mantsi'" in err and "did you mean mantis" in err
    rc, out, err = run_cli("power", "--from", str(path), "--collection", "mantis", "--format", "json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["family_size"] == analyse_collections(cols).comparisons == 18
    ref = power_analysis(cols["mantis"], PowerOptions(family_size=18))
    assert got["level"] == pytest.approx(ref.level)
    # ... and from Python: the CollectionsStudy's power of one collection is the command's
    study = compare(path)
    assert json.loads(study.power("mantis").to_json()) == got
    with pytest.raises(ConfigError, match="unknown collection 'mantsi'.*did you mean mantis"):
        study.power("mantsi")
    rc, out, err = run_cli("power", "--from", str(path), "--collection", "mantis", "--family-size", "1",
                           "--format", "json")
    assert rc == 0 and json.loads(out)["family_size"] == 1
    assert json.loads(study.power("mantis", family_size=1).to_json()) == json.loads(out)
    one = _write(tmp_path / "one.csv", {"": cols["mantis"]})
    rc, out, err = run_cli("power", "--from", str(one), "--collection", "mantis")
    assert rc == 2 and "is not a study over several collections; leave out --collection" in err


@pytest.mark.slow
def test_the_table_object_holds_what_it_prints(tmp_path: Path) -> None:
    """CollectionsStudy.table() is data: a row per collection, configuration and metric whose mean
    and SD are the seeds' (computed here from the CSV with pandas), whose markers are the printed
    ones, and a row per combined verdict with the analysis' own estimate and adjusted p-value."""
    path = _write(tmp_path / "r.csv", _collections())
    study = compare(path)
    table = study.table()
    frame = table.frame
    runs = pd.read_csv(path, dtype={"seed": str})
    runs = runs[runs["query"].isna()] if "query" in runs else runs
    per = frame[frame["collection"] != "combined"]
    for row in per.itertuples():
        values = runs[(runs.collection == row.collection) & (runs.config == row.config) & (runs.metric == row.metric)]
        assert row.mean == pytest.approx(values.value.mean()) and row.n_seeds == len(values)
        assert row.sd == pytest.approx(values.value.std(ddof=1))
    analysis = study.analyse()
    combined = frame[frame["collection"] == "combined"]
    assert len(combined) == len(analysis.combined) > 0
    for row in combined.itertuples():
        comb = analysis.get_combined(row.config, row.metric)
        assert row.delta == pytest.approx(comb.result.estimate) and row.p_adjusted == pytest.approx(comb.p_adjusted)
        assert (None if pd.isna(row.marker) else row.marker) == analysis.marker(comb)
    markers = {m for m in frame["marker"].dropna()}
    assert markers and all(m in table.to_markdown() for m in markers)
    assert table.render("latex") == table.to_latex() and table._repr_html_() == table.to_html()
    assert repr(table).startswith("CollectionsSignificanceTable(form='configs', collections=('msdialog', 'mantis')")


def test_a_one_collection_file_gives_the_table_of_today(run_cli: Callable[..., tuple[int, str, str]],
                                                        tmp_path: Path) -> None:
    records = synthetic_records()
    path = tmp_path / "one.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "seed", "metric", "value", "query"])
        for rec in records:
            for metric, values in rec.per_query.items():
                w.writerows([rec.config, rec.seed, metric, v, q] for q, v in values.items())
    rc, out, err = run_cli("table", "--from", str(path))
    assert rc == 0, err
    assert out == compare(path).table().to_markdown()
    assert "collection" not in out
    assert isinstance(compare(path), StudyAnalysis)



CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.slow
def test_the_table_and_report_page_in_chromium(tmp_path: Path) -> None:
    """The study's report page (the whole table, then the per-seed blocks) opened from a file in
    headless Chromium: no console error, the column groups span their metrics, every body row has a
    cell per column, the markers and the footnote's family are on screen."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs Playwright: pip install playwright (it drives Debian's chromium)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs {CHROMIUM}: apt-get install -y chromium")
    from harness.present.collections_render import collections_page

    analysis = analyse_collections(_collections())
    page_html = collections_page("synthetic",
                                 render_collections(build_collection_tables(analysis, "configs"), "html"),
                                 render_collections(build_collection_tables(analysis, "seeds"), "html"))
    path = tmp_path / "report.html"
    path.write_text(page_html, encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        messages, errors = [], []
        page.on("console", lambda m: messages.append((m.type, m.text)))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri(), wait_until="load")
        assert errors == [] and [m for m in messages if m[0] in ("error", "warning")] == []
        groups = page.eval_on_selector_all("#collections thead tr:first-child th[colspan]",
                                           "els => els.map(e => [e.innerText, e.colSpan])")
        assert groups == [["msdialog", 2], ["mantis", 2], ["combined \u0394", 2]]
        widths = page.eval_on_selector_all("#collections tbody tr", "els => els.map(e => e.cells.length)")
        assert widths == [7, 7, 7, 7]
        body = page.inner_text("#collections tbody")
        assert "\u2020" in body or "\u2021" in body  # the strong effects are marked
        assert "every comparison in the table" in page.inner_text("#collections tfoot")
        blocks = page.eval_on_selector_all("#per-seed tr.block th", "els => els.map(e => e.innerText)")
        assert blocks[:3] == ["msdialog", "mantis", "combined across collections"]
        assert page.is_visible("#per-seed table")
        browser.close()


def test_a_configuration_missing_from_a_collection_is_combined_over_its_own(tmp_path: Path, run_cli) -> None:
    """A configuration absent from one of three collections is combined over the two it has (t on
    1 df, scipy's one-sample t-test over its two differences), and the footnote says so: it read
    "t on k - 1 = 2 df" for every combined verdict."""
    cols, path = _without_z_on_c(tmp_path)
    rc, out, err = run_cli("table", "--from", str(path), "--test", "seed-averaged", "--metric", "map")
    assert rc == 0, err
    assert "t on k - 1 = 2 df; z over its 2 collections, t on 1 df," in out
    rc, out, _ = run_cli("table", "--from", str(path), "--test", "seed-averaged", "--metric", "map", "--format", "csv")
    z = next(r for r in csv.DictReader(out.splitlines()) if r["collection"] == "combined" and r["row"] == "z")
    assert z["k"] == "2"
    diffs = [cols[c].seed_values("z", "map").mean() - cols[c].seed_values("base", "map").mean() for c in ("A", "B")]
    assert float(z["p_value"]) == pytest.approx(stats.ttest_1samp(diffs, 0.0).pvalue, rel=1e-6)
