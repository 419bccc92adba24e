"""``harness cascade cost``: survivors and relative cost; bad values refused naming the key."""

from __future__ import annotations

import pytest

from harness.cli import main


def test_paper_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cascade", "cost", "--layers", "12", "--exits", "4,6,8,10,12", "--batch", "128",
                 "--alpha", "0.3"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[2:7]]
    assert [r[5] for r in rows] == ["90", "63", "45", "32", "32"]
    assert "relative cost 0.6328, cost reduction 36.7%" in out


def test_one_alpha_per_exit_and_nearest_rounding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cascade", "cost", "--alpha", "0.4", "--alpha", "0.4,0.4", "--alpha", "0.4",
                 "--alpha", "0", "--rounding", "nearest"]) == 0
    out = capsys.readouterr().out
    assert "cost reduction 44.8%" in out and "exits 4,6,8,10,12" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--alpha", "1.0"], "cascade.alpha must be in [0, 1)"),
    (["--alpha", "-0.2"], "cascade.alpha must be in [0, 1)"),
    (["--alpha", "0.3,0.3"], ("cascade.alpha must have 1 value, one per exit before the last (4, as the paper "
                              "gives them) or one per exit with 0 last (5) for cascade.exits=[4, 6, 8, 10, 12], got 2")),
    # the final exit's ratio would be ignored: refused, not taken
    (["--alpha", "0.3,0.3,0.3,0.3,0.9"], "cascade.alpha's last value (0.9) is the final exit's, which drops nothing"),
    (["--exits", "4,8,16"], "cascade.exits must be layers in [1, 12]"),
    (["--exits", "4,8"], "cascade.exits must end at the last layer (12)"),
    (["--exits", "4,x,12"], "cascade.exits must be a comma-separated list of int"),
    (["--alpha", "abc"], "cascade.alpha must be a comma-separated list of float"),
    (["--batch", "0"], "--batch must be >= 1"),
])
def test_bad_input_one_line_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cascade", "cost", *argv]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_minus_zero_is_shown_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """-0 drops nothing and reads as 0, as a study file's cascade.alpha does (harness.config)."""
    assert main(["cascade", "cost", "--alpha=-0.0"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:6]]
    assert [r[2] for r in rows] == ["0.00"] * 4, rows


def test_alpha_is_shown_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    """0.999 showed as 1.00 (a ratio the command refuses) and 0.004 as 0.00; the paper's two-decimal
    ratios keep their printed form."""
    assert main(["cascade", "cost", "--alpha", "0.999,0.004,0.3,0,0", "--batch", "1000"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert [r.split()[2] for r in rows[2:7]] == ["0.999", "0.004", "0.30", "0.00", "-"]
    assert rows[1].index("alpha") + len("alpha") == rows[2].index("0.999") + len("0.999")  # aligned
