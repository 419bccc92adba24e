"""`harness table --plots DIR` over several collections (harness.present.plots): a figure per
collection and metric, DIR/<collection>/<metric>.png, read from a real MLflow store written as a
study over two collections writes it (tests/synthetic.py, no Ray); each figure draws its
collection's per-seed values and carries the whole table's markers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from matplotlib.collections import PathCollection

from harness.analysis import CollectionsStudy
from harness.errors import DataError
from harness.present.plots import collection_folders, metric_figure
from harness.results.mlflow_reader import read_experiment_collections
from harness.tracking.store import default_tracking_uri
from tests.synthetic import synthetic_records, write_collections_records

Cli = Callable[..., tuple[int, str, str]]
NAMES = {"base": "baseline", "better": "ls"}
EFFECTS = {"talk-a": {"base": 0.0, "better": 0.3}, "talk b": {"base": 0.0, "better": 0.0}}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = default_tracking_uri(tmp_path_factory.mktemp("store"))
    write_collections_records(uri, "multi", {name: synthetic_records(queries=20, effects=effects)
                                             for name, effects in EFFECTS.items()}, NAMES, failed=False)
    return uri


@pytest.mark.slow  # the module's MLflow store and matplotlib: seconds
def test_table_plots_a_figure_per_collection_and_metric(store: str, tmp_path: Path, run_cli: Cli) -> None:
    rc, out, err = run_cli("table", "--experiment", "multi", "--tracking-uri", store,
                           "--plots", str(tmp_path / "plots"))
    assert rc == 0 and "talk-a" in out
    # The one-collection layout (<metric>.png) inside a folder per collection, named safely.
    pngs = sorted(p.relative_to(tmp_path / "plots").as_posix() for p in (tmp_path / "plots").rglob("*.png"))
    assert pngs == ["talk-a/map.png", "talk-a/mrr.png", "talk_b/map.png", "talk_b/mrr.png"]
    for png in pngs:
        assert (tmp_path / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {tmp_path / 'plots' / png}" in err
    assert (tmp_path / "plots" / "talk-a/map.png").read_bytes() != (tmp_path / "plots" / "talk_b/map.png").read_bytes()


@pytest.mark.slow  # the module's MLflow store and matplotlib: seconds
def test_each_figure_is_its_collection_with_the_whole_tables_markers(store: str) -> None:
    analysis = CollectionsStudy(collections=read_experiment_collections("multi", tracking_uri=store)).analyse()
    marked = {(name, config) for name, a in analysis.analyses.items() for config in a.results.configs
              if analysis.marker(a.get(config, "map"))}
    assert marked == {("talk-a", "ls")}  # the effect is on talk-a alone
    for name, a in analysis.analyses.items():
        ax = metric_figure(a, "map", collection=name).axes[0]
        assert ax.get_title().startswith(f"MAP on {name}: 1 configurations vs baseline, 3 seeds")
        # The per-seed points of each configuration are that collection's seed means, in table order.
        points = [c for c in ax.collections if isinstance(c, PathCollection)]
        drawn = np.concatenate([np.ma.getdata(c.get_offsets())[:, 1] for c in points])
        expected = np.concatenate([a.results.seed_values(config, "map") for config in a.results.configs])
        assert drawn == pytest.approx(expected)
        # A marker above a configuration exactly where the whole table marks it.
        annotated = {t.get_text() for t in ax.texts}
        want = {analysis.marker(a.get(c, "map")) for c in a.results.configs if (name, c) in marked}
        assert annotated == want


def test_collections_that_would_share_a_plot_folder_are_refused() -> None:
    assert collection_folders(("a/b", "c")) == {"a/b": "a_b", "c": "c"}
    with pytest.raises(DataError, match="collections 'a/b' and 'a b' would share the plot folder 'a_b'"):
        collection_folders(("a/b", "a b"))


@pytest.mark.slow  # the module's MLflow store: seconds
def test_load_study_of_a_study_over_collections_is_its_whole_table(store: str, run_cli: Cli) -> None:
    """`harness.load_study` reads a study over several collections as `harness table --experiment`
    does: a CollectionsStudy whose table is the one the command prints."""
    import harness

    study = harness.load_study("multi", tracking_uri=store)
    assert isinstance(study, CollectionsStudy) and list(study.collections) == ["talk-a", "talk b"]
    rc, out, _ = run_cli("table", "--experiment", "multi", "--tracking-uri", store)
    assert rc == 0 and out == study.table().render("md")
    assert isinstance(harness.load_study("multi", tracking_uri=store, phase="exploratory"), CollectionsStudy)
    with pytest.raises(harness.ConfigError, match="phase: unknown name 'confirm'"):
        harness.load_study("multi", tracking_uri=store, phase="confirm")
