"""The confirmation phase (``confirm: {top, seeds}``; harness.driver._confirm): the study file's
spelling, defaults and refusals, and the plan `harness validate` prints. The phase through real
Ray Tune trials and MLflow: tests/study/test_confirm_study.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import main
from harness.study.spec import GRID_CONFIRM_MIN, ConfirmSpec, load_spec
from harness.study.variants import trial_count

SEARCH = """\
name: c
defaults:
  model.name: tiny
  train.steps: 4
baseline: {}
configs:
  - name: ls
    set: {smoothing.method: LS, smoothing.epsilon: 0.1}
search:
  searcher: random
  num_configs: 3
  space:
    smoothing.epsilon: {uniform: [0.05, 0.3]}
seeds: [1, 2, 5]
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(text)
    return p


def test_a_search_confirms_its_best_by_default_with_the_seeds_after_the_largest(tmp_path):
    spec = load_spec(_write(tmp_path, SEARCH))
    assert spec.confirm == ConfirmSpec(top=1, seeds=(6, 7, 8))
    assert spec.phases == ("fixed", "search", "confirmation")
    # 2 fixed + 3 proposed, x 3 seeds; then the best one and the baseline x 3 fresh seeds
    assert trial_count(spec) == 5 * 3 + 2 * 3
    top2 = load_spec(_write(tmp_path, SEARCH + "confirm: {top: 2, seeds: 5}\n"))
    assert top2.confirm == ConfirmSpec(top=2, seeds=(6, 7, 8, 9, 10))
    assert trial_count(top2) == 5 * 3 + 3 * 5
    assert load_spec(_write(tmp_path, SEARCH + "confirm: true\n")).confirm == ConfirmSpec(top=1, seeds=(6, 7, 8))
    off = load_spec(_write(tmp_path, SEARCH + "confirm: false\n"))
    assert off.confirm is None and off.phases == ("fixed", "search") and trial_count(off) == 15
    # A study of a few listed configurations confirms only when asked ...
    listed = SEARCH.split("search:")[0] + "seeds: [1, 2, 5]\n"
    assert load_spec(_write(tmp_path, listed)).confirm is None
    # ... a grid of GRID_CONFIRM_MIN (10) candidates or more by default.
    def grid(n: int) -> str:
        return SEARCH.split("configs:")[0] + "configs:\n" + "".join(
            f"  - name: ls{i}\n    set: {{smoothing.method: LS, smoothing.epsilon: 0.{i + 1:02d}}}\n"
            for i in range(n)) + "seeds: [1, 2, 5]\n"
    assert GRID_CONFIRM_MIN == 10
    assert load_spec(_write(tmp_path, grid(9))).confirm is None
    big = load_spec(_write(tmp_path, grid(10)))
    assert big.confirm == ConfirmSpec(top=1, seeds=(6, 7, 8)) and big.phases == ("fixed", "confirmation")
    assert load_spec(_write(tmp_path, grid(10) + "confirm: false\n")).confirm is None
    asked = load_spec(_write(tmp_path, listed + "confirm: {top: 1}\n"))
    assert asked.confirm == ConfirmSpec(top=1, seeds=(6, 7, 8)) and asked.phases == ("fixed", "confirmation")


@pytest.mark.parametrize("extra, expected", [
    ("confirm: {top: 0}", r"study.yaml:15: confirm.top must be an integer in \[1, 4\] \(the study's candidate"),
    ("confirm: {top: 5}", r"study.yaml:15: confirm.top must be an integer in \[1, 4\]"),
    ("confirm: {top: 1, seeds: 0}", r"study.yaml:15: confirm.seeds must be an integer in \[1, 1000\]"),
    ("confirm: {tops: 1}", r"study.yaml:15: confirm: unknown key 'tops'; did you mean top"),
    ("confirm: 2", r"study.yaml:15: confirm must be a mapping \{top: k, seeds: S\}, true or false, got 2"),
])
def test_bad_confirmations_are_refused_in_one_line_naming_file_and_line(tmp_path, capsys, monkeypatch,
                                                                        extra, expected):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-model", str(_write(tmp_path, SEARCH + extra + "\n"))]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert re.search(expected, err), err


@pytest.mark.parametrize("text, expected", [
    ("name: c\nbaseline: {}\ndefaults: {model.name: tiny}\nseeds: [1, 2]\nconfirm: {top: 1}\n",
     r"study.yaml:5: confirm retrains the best candidates, and this study has none"),
    (("name: c\ndefaults: {model.name: tiny}\nconfigs:\n  - name: ls\n    set: {smoothing.method: LS}\n"
     "seeds: {start: 4, step: 1, max: 6}\nconfirm: {top: 1}\n"),
     r"study.yaml:7: confirm retrains a pick with fresh seeds; a study with a seed schedule picks nothing"),
    (("name: c\ndefaults: {model.name: tiny}\nconfigs:\n  - name: ls\n    set: {smoothing.method: LS}\n"
     "seeds: [1, 4294967295]\nconfirm: true\n"),
     r"study.yaml:7: confirm.seeds: the fresh seeds 4294967296..4294967297 go past"),
])
def test_confirmations_that_cannot_run_are_refused(tmp_path, capsys, monkeypatch, text, expected):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-model", str(_write(tmp_path, text))]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert re.search(expected, err), err


def test_validate_shows_the_confirmation_of_the_shipped_joint_search(tmp_path, capsys, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-model", str(root / "search_spaces" / "joint.yaml")]) == 0
    out = capsys.readouterr().out
    assert "  seeds: [1, 2, 3]  ->  at most 75 trials\n" in out  # a search may end early
    # It stops proposals early (seed groups at half of training), as the study file explains.
    assert ("  early stopping: at steps [1500] of 3000 (the baseline's), a configuration outside the top "
            "1/2 by its seeds' mean dev map stops with its seeds; the baseline never stops\n") in out
    assert ("  confirmation: top 1 by dev map + baseline x 3 fresh seeds [4, 5, 6] = 6 trials "
            "(the confirmatory table uses these runs only)") in out


def test_validate_says_when_a_search_confirms_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-model", str(_write(tmp_path, SEARCH + "confirm: false\n"))]) == 0
    assert "confirmation: none (confirm: false); the study's tables are exploratory" in capsys.readouterr().out
