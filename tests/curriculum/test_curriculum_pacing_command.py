"""`harness pacing`: the fraction available per step, Figure 2 as a PNG, one-line errors."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from harness.cli import curriculum as commands
from harness.cli import main
from harness.errors import ConfigError


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="harness")
    commands.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_prints_the_papers_figure2_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["pacing", "root_10", "geom_progression", "--delta", "0.33", "--T", "1000",
               "--at", "125", "800"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    assert lines[0].split() == ["step", "root_10", "geom_progression"]
    assert lines[1].split() == ["125", "0.8123", "0.3791"]
    assert lines[2].split() == ["800", "0.9779", "0.8011"]


def test_default_steps_span_zero_to_T(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["pacing", "linear", "--delta", "0.5", "--T", "10"])
    assert args.func(args) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows[0] == ["0", "0.5000"] and rows[-1] == ["10", "1.0000"] and len(rows) == 11


def test_a_T_near_the_largest_float_spans_zero_to_T_too(capsys: pytest.CaptureFixture[str]) -> None:
    """`--T 1e308` printed steps of inf (T * i overflowed) with linear's 1.0000 beside them, exit 0:
    the steps are T's tenths, and the linear values delta + (1 - delta) i / 10 (Penha & Hauff, Table 3)."""
    assert main(["pacing", "linear", "--delta", "0.5", "--T", "1e308"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["0", *(f"{i * 1e307:g}" for i in range(1, 11))]
    assert [float(r[1]) for r in rows] == pytest.approx([0.5 + 0.05 * i for i in range(11)], abs=1e-4)


def test_n_flag_and_root_names(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["pacing", "root_n", "root_10", "--n", "10", "--at", "125"])
    args.func(args)
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[1] == row[2] == "0.8123"


def test_plot_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "pacing.png"
    args = parse(["pacing", "baseline", "step", "linear", "root_2", "root_10", "geom_progression",
                  "--plot", str(out)])
    assert args.func(args) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_name_is_a_one_line_error_listing_valid_names(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="valid: baseline, geom_progression, linear, root_n, step"):
        args = parse(["pacing", "cubic"])
        args.func(args)
    assert main(["pacing", "linear", "cubic"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown name 'cubic'" in err[0] and "valid:" in err[0]


def test_bad_delta_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pacing", "linear", "--delta", "1.5"]) == 2
    assert "curriculum.delta must be in (0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    # --T inf made the first step inf * 0 = NaN: a traceback after the header was printed
    (["root_10", "--T", "inf"], "--T must be a finite number, got inf"),
    (["linear", "--n", "nan"], "--n must be a finite number, got nan"),
    (["geom_progression", "--at", "nan"], "--at steps must be finite numbers >= 0, got nan"),
    (["linear", "--at", "5", "inf"], "--at steps must be finite numbers >= 0, got inf"),  # printed a row
    (["linear", "--plot", ""], "--plot '': name a file ending in .png, .pdf, .svg"),  # printed the table
    (["linear", "--plot", "curves.jpg"], "--plot 'curves.jpg': name a file ending in .png, .pdf, .svg"),
])
def test_numbers_and_files_it_cannot_draw_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                       message: str) -> None:
    assert main(["pacing", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [f"harness: error: {message}"]


def test_plot_writes_the_format_its_name_says(tmp_path: Path) -> None:
    # a .pdf held PNG bytes
    for name, magic in (("pacing.pdf", b"%PDF"), ("pacing.svg", b"<?xml")):
        assert main(["pacing", "linear", "root_2", "--plot", str(tmp_path / name)]) == 0
        assert (tmp_path / name).read_bytes().startswith(magic)
