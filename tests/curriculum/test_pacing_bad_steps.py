"""`harness pacing --at`: a refusal names the steps at fault only; `--at -1 1e300` named both, as if
1e300 (a finite step >= 0, printed like any other) were wrong too."""

from __future__ import annotations

import pytest

from harness.cli import main


@pytest.mark.parametrize("steps, named", [
    (["-1", "1e300"], "-1"),
    (["0", "nan", "5", "inf", "2.5"], "nan inf"),
    (["-0.5", "10"], "-0.5"),
    ([str(-i) for i in range(1, 13)], "-1 -2 -3 -4 -5 -6 -7 -8 (and 4 more)"),
])
def test_only_the_bad_steps_are_named(capsys: pytest.CaptureFixture[str], steps: list[str], named: str) -> None:
    assert main(["pacing", "linear", "--at", *steps]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip().splitlines() == [f"harness: error: --at steps must be finite numbers >= 0, got {named}"]


def test_good_steps_still_print(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pacing", "linear", "--at", "0", "1e300"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split() == ["1e+300", "1.0000"]
