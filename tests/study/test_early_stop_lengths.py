"""Early stopping compares configurations of different lengths at the same fraction of their own
training (harness.study.early_stop): a rung is a fraction of each configuration's ``train.steps``,
so a configuration that sets ``train.steps: 12`` reads rung 0.5 at step 6 while the 6-step ones
read it at step 3, and all of them are ranked together there. Keyed by the step, they never met:
min_groups was never reached and nothing was stopped, silently."""

from __future__ import annotations

import json

import pytest

from harness.study.early_stop import EarlyStopSettings, EarlyStopState, rungs_at
from harness.study.protocol import DevPoint, TrialTicket
from harness.study.spec import load_spec
from tests.study.conftest import write_study


def _settings(rungs: tuple[float, ...] = (0.5,)) -> EarlyStopSettings:
    return EarlyStopSettings(rungs=rungs, reduction_factor=2, metric="map")


def test_a_longer_configuration_is_ranked_with_the_others_at_the_same_fraction():
    """The reviewer's study: baseline and bad (6 steps, eval every 3) read rung 0.5 at step 3,
    longer (12 steps) at step 6; with all three in, bad ranks 3 of 3 and is stopped."""
    st = EarlyStopState(_settings(), min_groups=3)
    assert rungs_at(st.settings, 6, 3, 3) == rungs_at(st.settings, 12, 3, 6) == (0.5,)
    assert st.observe("b", "baseline", seed=1, step=3, value=0.25, total_steps=6, baseline=True, rung=0.5) is None
    assert st.observe("x", "bad", seed=1, step=3, value=0.01, total_steps=6, rung=0.5) is None  # 2 of 3 in
    # longer's value arrives last, at its own step 6: the rung now has all three configurations
    assert st.observe("l", "longer", seed=1, step=6, value=0.30, total_steps=12, rung=0.5) is None
    assert st.means(0.5) == pytest.approx({"b": 0.25, "x": 0.01, "l": 0.30})
    # bad is judged at its next reading (its second seed here): ranked 3 of 3 at rung 0.5, stopped
    stop = st.observe("x", "bad", seed=2, step=3, value=0.01, total_steps=6, rung=0.5)
    assert stop is not None and (stop.rung, stop.point, stop.rank, stop.groups) == (3, 0.5, 3, 3)
    assert "at rung 0.5 (step 3 of 6)" in stop.reason


@pytest.mark.parametrize("steps, value, stopped", [(12, 0.01, True), (6, 0.01, True), (12, 0.50, False)])
def test_a_search_proposal_of_another_length_is_judged_against_the_fixed_ones(steps, value, stopped):
    """A search over train.steps: a proposal of 12 or 6 steps is judged at rung 0.5 against the
    fixed configurations' values there (6-step ones, read at step 3), read at its own step."""
    st = EarlyStopState(_settings(), min_groups=2)
    st.observe("b", "baseline", seed=1, step=3, value=0.25, total_steps=6, baseline=True, rung=0.5)
    st.observe("c", "ls", seed=1, step=3, value=0.30, total_steps=6, rung=0.5)
    (rung,) = rungs_at(st.settings, steps, 3, steps // 2)
    got = st.observe("p", "tpe-p", seed=1, step=steps // 2, value=value, total_steps=steps, rung=rung)
    assert (got is not None) == stopped
    # without an explicit rung the state finds it from the step and the configuration's length
    again = EarlyStopState(_settings(), min_groups=2)
    again.groups, again.stopped = st.groups, {}
    again.groups["p"].values.clear()
    assert (again.observe("p", "tpe-p", seed=1, step=steps // 2, value=value, total_steps=steps)
            is not None) == stopped


def test_the_scheduler_reads_each_configuration_s_rung_at_its_own_step(tmp_path):
    """Through the Tune scheduler (stub trials, no Ray cluster), one trial at a time in grid order
    (baseline, longer, bad; seed 1): longer reports rung 0.5 at its step 6, so when bad reads the
    rung at its step 3 all three configurations have a value there and bad, the worst, is stopped.
    (Keyed by step, bad found two values at step 3 and went on.)"""
    from ray.tune.experiment import Trial

    from harness.driver._early_stop_ray import EarlyStopScheduler
    from harness.driver._orchestrate import fixed_tickets

    spec = load_spec(write_study(tmp_path, "lengths", seeds=[1], concurrency=1,
                                 configs={"longer": {"train.steps": 12}, "bad": {"train.lr": 1.0e-9}},
                                 early_stopping={"rungs": [0.5], "reduction_factor": 2}))
    uri = tmp_path / "state.json"
    sched = EarlyStopScheduler(spec.early_stopping, str(uri), TrialTicket.from_tune, len(spec.fixed_configs()))
    trials = [Trial("trainable", config=t, stub=True) for t in fixed_tickets(spec)]
    for trial in trials:
        trial.set_status(Trial.RUNNING)  # none pending: the scheduler stops a pending one itself
    values = {"baseline": 0.25, "bad": 0.01, "longer": 0.30}
    answers: dict[str, list[str]] = {}

    class Controller:
        def get_trials(self):
            return trials

        def stop_trial(self, trial):  # pragma: no cover - no trial is pending here
            raise AssertionError(trial)

    for trial in trials:
        ticket = TrialTicket.from_tune(trial.config)
        assert ticket.name == ["baseline", "longer", "bad"][trials.index(trial)]
        for step in range(3, int(ticket.flat["train.steps"]), 3):
            point = DevPoint(ticket.key, step, {"map": values[ticket.name]}, {"map": values[ticket.name]},
                             values[ticket.name])
            answer = sched.on_trial_result(Controller(), trial, point.to_result())
            answers.setdefault(ticket.name, []).append(answer)
            if answer == "STOP":
                break
    state = json.loads(uri.read_text())
    ids = {nc.name: nc.config.config_id() for nc in spec.fixed_configs()}
    assert list(state["stopped"]) == [ids["bad"]]
    assert state["stopped"][ids["bad"]]["rung"] == 3 and state["stopped"][ids["bad"]]["point"] == 0.5
    assert state["groups"][ids["longer"]]["values"] == {"0.5": {"1": 0.30}}  # read at its step 6
    assert answers == {"baseline": ["CONTINUE"], "longer": ["CONTINUE"] * 3, "bad": ["STOP"]}
