"""`--plots DIR` writes inside DIR whatever the names: a metric named ``../escape`` wrote its PNG
beside DIR, ``a/b`` into a subfolder of it, one of 300 characters failed with "File name too long",
and a collection named ``..`` put its folder's PNGs beside DIR. Every name is now made a safe,
bounded file or folder name, two names never one."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.synthetic import synthetic_records, write_long_csv

Cli = Callable[..., tuple[int, str, str]]
LONG = "recall_at_" + "k" * 290
METRICS = ("../escape", "a/b", "a_b", LONG, "..")


def _inside(root: Path) -> list[str]:
    """Every file under ``root``'s parent, relative to it (what a run wrote, inside DIR or not)."""
    return sorted(p.relative_to(root.parent).as_posix() for p in root.parent.rglob("*") if p.is_file())


@pytest.mark.slow  # matplotlib: seconds
def test_metric_plots_stay_inside_the_directory(tmp_path: Path, run_cli: Cli) -> None:
    path = write_long_csv(tmp_path / "r.csv", synthetic_records(queries=6, effects={"base": 0.0, "better": 0.1},
                                                                metrics=METRICS))
    out = tmp_path / "out" / "plots"
    rc, _, err = run_cli("table", "--from", str(path), "--plots", str(out))
    assert rc == 0, err
    files = _inside(out)
    assert len(files) == len(METRICS) and all(f.startswith("plots/") and f.count("/") == 1 for f in files), files
    assert all(len(f.removeprefix("plots/")) <= 124 for f in files), files
    # a/b's plot no folder, nor the same file as a_b's
    assert "plots/.._escape.png" in files and sum(f.startswith("plots/a_b-") for f in files) == 2, files
    for f in files:
        assert (tmp_path / "out" / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"wrote {tmp_path / 'out' / f}" in err


def test_names_are_safe_unique_and_bounded() -> None:
    from harness.present.plots import metric_files, safe_names

    files = metric_files(METRICS)
    assert len(set(files.values())) == len(METRICS)
    assert all("/" not in f and f not in (".png", "..png") and len(f) <= 124 for f in files.values()), files
    assert files["a_b"] != files["a/b"] and files["a_b"].startswith("a_b-")  # one would have overwritten the other
    assert files[LONG].startswith("recall_at_kkk") and files == metric_files(METRICS)  # the same on every run
    folders = safe_names(("..", ".", "MAP", "map", "c" * 300))
    assert all(set(f) - {"."} and len(f) <= 120 for f in folders.values()) and len(set(folders.values())) == 5


@pytest.mark.slow  # matplotlib: seconds
def test_a_collection_named_dot_dot_plots_inside_the_directory(tmp_path: Path, run_cli: Cli) -> None:
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["config", "seed", "metric", "value", "query", "collection"])
        for coll in ("..", "ok"):
            for i, config in enumerate(("base", "better")):
                w.writerows([config, seed, "map", round(0.3 + 0.05 * i + 0.01 * ((seed * q) % 4) + 0.03 * (q % 3), 4),
                             f"q{q}", coll] for seed in (1, 2, 3) for q in range(6))
    out = tmp_path / "out" / "plots"
    rc, _, err = run_cli("table", "--from", str(path), "--plots", str(out))
    assert rc == 0, err
    files = _inside(out)
    assert files == ["plots/__-5ec1f7e7/map.png", "plots/ok/map.png"], files
