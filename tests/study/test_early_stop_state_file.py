"""The saved early-stopping state (``<storage>/<study>-fixed/early_stopping.json``) is read back on
``--resume`` from storage that may be shared, so every field is checked: a damaged, truncated or
planted file is refused in one line naming the file and the field (a HarnessError: the CLI's exit
2), never a TypeError or JSONDecodeError traceback, and nothing is half-read. A state an earlier
harness wrote (version 1: rung values kept by step) still reads."""

from __future__ import annotations

import json
import re

import pytest

from harness.errors import HarnessError
from harness.study.early_stop import EarlyStopSettings, EarlyStopState, StateError

SETTINGS = {"rungs": [0.5], "reduction_factor": 2, "metric": "map", "mode": "max"}
GROUP = {"name": "bad", "baseline": False, "total_steps": 6, "collection": "", "values": {"0.5": {"1": 0.01}},
         "progress": {"1": 3}}
STOPPED = {"name": "bad", "rung": 3, "value": 0.01, "rank": 3, "groups": 3, "keep": 2, "reason": "r", "point": 0.5}


def _state(**changes) -> str:
    raw = {"version": 2, "settings": SETTINGS, "min_groups": 3, "groups": {"x": GROUP}, "stopped": {"x": STOPPED}}
    return json.dumps({**raw, **changes})


@pytest.mark.parametrize("text, field", [
    # the reviewer's three
    (json.dumps({"version": 1, "settings": SETTINGS, "groups": {"x": {"bogus": 1}}, "stopped": {}}),
     "groups.x: missing key 'baseline'"),
    ('{"version": 1, "settings": ', "not JSON (Expecting value"),
    ("[]", "the file: expected an object, got a list"),
    # and the rest of the structure
    ("", "not JSON"),
    ("[" * 100_000, "not JSON"),
    (_state(version=3), "version: 3 (this harness reads 1 and 2)"),
    (_state(version=True), "version: true"),
    (_state(settings={**SETTINGS, "rungs": "0.5"}), "settings.rungs: expected a non-empty list"),
    (_state(settings={**SETTINGS, "mode": "up"}), 'settings.mode: expected max or min, got "up"'),
    (_state(min_groups=0), "min_groups: expected a whole number >= 1, got 0"),
    (_state(groups=[]), "groups: expected an object, got a list"),
    (_state(groups={"x": {**GROUP, "total_steps": "6"}}), 'groups.x.total_steps: expected a whole number >= 0, got "6"'),
    (_state(groups={"x": {**GROUP, "baseline": 1}}), "groups.x.baseline: expected true or false, got 1"),
    (_state(groups={"x": {**GROUP, "values": {"0.5": {"1": "NaN"}}}}), "groups.x.values.0.5.1: expected a finite number"),
    (_state(groups={"x": {**GROUP, "values": {"0.5": {"1": 1e999}}}}), "groups.x.values.0.5.1: expected a finite number, got Infinity"),
    (_state(groups={"x": {**GROUP, "values": {"half": {"1": 0.1}}}}), "groups.x.values.half: 'half' is no rung"),
    (_state(groups={"x": {**GROUP, "values": {"0.5": {"one": 0.1}}}}), "groups.x.values.0.5: 'one' is no seed"),
    (_state(groups={"x": {**GROUP, "progress": {"1": -3}}}), "groups.x.progress.1: expected a whole number >= 0"),
    (_state(groups={"x": {**GROUP, "extra": 1}}), "groups.x: unknown key 'extra'"),
    (_state(stopped={"y": STOPPED}), "stopped.y: a stopped configuration with no entry under groups"),
    (_state(stopped={"x": {**STOPPED, "value": None}}), "stopped.x.value: expected a finite number, got null"),
    (_state(stopped={"x": {**STOPPED, "rank": 0}}), "stopped.x.rank: expected a whole number >= 1, got 0"),
    (_state(stopped={"x": {k: v for k, v in STOPPED.items() if k != "reason"}}), "stopped.x: missing key 'reason'"),
])
def test_a_bad_state_is_refused_in_one_line_naming_the_file_and_the_field(text, field):
    with pytest.raises(StateError) as info:
        EarlyStopState.from_json(text, source="early stopping state /s/es.json")
    message = str(info.value)
    assert isinstance(info.value, HarnessError) and "\n" not in message and len(message) < 600, message
    assert message.startswith(f"early stopping state /s/es.json: {field}"), message


def test_a_good_state_round_trips():
    st = EarlyStopState.from_json(_state())
    assert st.stopped["x"].point == 0.5 and st.groups["x"].values == {"0.5": {"1": 0.01}} and st.min_groups == 3
    assert json.loads(st.to_json()) == json.loads(_state())


def test_a_state_an_earlier_harness_wrote_reads_with_its_values_at_their_rungs():
    """Version 1 kept rung values by the step they were read at (3 of 6 steps, 6 of 12): they are
    moved to the rung of that step, and its stopped configurations stay stopped."""
    old = {"version": 1, "settings": SETTINGS, "min_groups": 3,
           "groups": {"x": {**GROUP, "values": {"3": {"1": 0.01}}},
                      "l": {**GROUP, "name": "longer", "total_steps": 12, "values": {"6": {"1": 0.3}}}},
           "stopped": {"x": {k: v for k, v in STOPPED.items() if k != "point"}}}
    st = EarlyStopState.from_json(json.dumps(old), EarlyStopSettings(rungs=(0.5,), reduction_factor=2, metric="map"))
    assert st.means(0.5) == pytest.approx({"x": 0.01, "l": 0.3})
    assert st.is_stopped("x") and st.stopped["x"].rung == 3 and st.stopped["x"].point is None


def test_the_driver_refuses_a_planted_state_before_the_phase_starts(tmp_path):
    """``scheduler(spec)`` (made before Tune restores a phase) reads the state: a planted file is
    refused there, as Tune's own state is; a file that is no UTF-8 text too; none at all is a new
    state."""
    from harness.driver import _early_stop_ray as es
    from harness.study.spec import load_spec
    from tests.study.conftest import write_study

    spec = load_spec(write_study(tmp_path, "planted", configs={"ls": {"smoothing.method": "LS"}},
                                 early_stopping={"rungs": [0.5], "reduction_factor": 2}))
    assert es.scheduler(spec) is not None  # no state yet
    state = tmp_path / "runs" / "planted-fixed" / "early_stopping.json"
    state.parent.mkdir(parents=True)
    for body, field in ((b'{"version": 1, "settings": ', "not JSON"), (b"\xff\xfe\x00", "not JSON (not UTF-8 text)"),
                        (json.dumps({"version": 2, "settings": SETTINGS, "groups": {"x": {"bogus": 1}},
                                     "stopped": {}}).encode(), "groups.x: missing key 'baseline'")):
        state.write_bytes(body)
        with pytest.raises(HarnessError, match=re.escape(f"early stopping state {state}: {field}")):
            es.scheduler(spec)
        assert state.read_bytes() == body  # left as it was
    state.write_text(_state())
    assert es.searcher_value(str(state), "objective", {"trial_key": "x-seed1", "objective": 0.9})["objective"] == 0.01
