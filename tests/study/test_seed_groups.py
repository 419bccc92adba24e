"""Seed groups (``resources.seeds_per_trial``) without Ray running: which seeds go to which trial,
the group's tickets and results, and what Optuna is told of a proposal trained in groups."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.driver import _searchers
from harness.study.protocol import (
    DevPoint,
    TrialOutcome,
    TrialTicket,
    group_outcome,
    group_point,
    group_tickets,
    member_outcomes,
    member_points,
    seed_groups,
)
from harness.study.spec import load_spec
from harness.study.variants import trial_count
from tests.study.conftest import write_study


def _spec(tmp_path, **overrides):
    return load_spec(write_study(tmp_path, "groups", **{
        "configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}}, **overrides}))


@pytest.mark.parametrize("seeds, k, expected", [
    ((1, 2, 3), 1, [(1,), (2,), (3,)]),
    ((1, 2, 3), 2, [(1, 2), (3,)]),
    ((1, 2, 3), 3, [(1, 2, 3)]),
    ((1, 2, 3), 5, [(1, 2, 3)]),
    ((4, 9, 2, 7, 5), 2, [(4, 9), (2, 7), (5,)]),
    ((1, 2, 3, 4, 5, 6), 3, [(1, 2, 3), (4, 5, 6)]),
])
def test_seed_groups_keep_the_seed_order_and_end_with_the_rest(seeds, k, expected):
    assert seed_groups(seeds, k) == expected


def test_a_study_default_is_one_seed_per_trial_with_the_tickets_of_today(tmp_path):
    from harness.driver._orchestrate import fixed_tickets

    spec = _spec(tmp_path, seeds=[1, 2, 3])
    assert spec.seeds_per_trial == 1
    tickets = fixed_tickets(spec)
    assert group_tickets(tickets, 1) is tickets
    assert all("seeds" not in t["ticket"] for t in tickets)


def test_group_tickets_split_each_configuration_s_seeds_in_runs_of_k(tmp_path):
    from harness.driver._orchestrate import fixed_tickets

    spec = _spec(tmp_path, seeds=[1, 2, 3, 4, 5], resources={"seeds_per_trial": 2})
    assert spec.seeds_per_trial == 2
    grid = group_tickets(fixed_tickets(spec), spec.seeds_per_trial)
    got = [(TrialTicket.from_tune(json.loads(json.dumps(t))).name,
            [m.seed for m in TrialTicket.from_tune(t).members()]) for t in grid]
    assert got == [("baseline", [1, 2]), ("baseline", [3, 4]), ("baseline", [5]),
                   ("ls", [1, 2]), ("ls", [3, 4]), ("ls", [5])]
    # Every (configuration, seed) trains exactly once, as the ticket a one-seed trial would have.
    members = [m for t in grid for m in TrialTicket.from_tune(t).members()]
    singles = [TrialTicket.of(nc.name, nc.role, nc.config, s) for nc in spec.fixed_configs() for s in spec.seeds]
    assert sorted(members, key=lambda m: m.key) == sorted(singles, key=lambda m: m.key)
    assert sum(len(TrialTicket.from_tune(t).members()) for t in grid) == trial_count(spec)
    # A group of one (the last seed) is a plain one-seed ticket; a real group is named by its seeds.
    last = TrialTicket.from_tune(grid[2])
    assert grid[2] == TrialTicket.of("baseline", "baseline", spec.baseline.config, 5).to_tune()
    first = TrialTicket.from_tune(grid[0])
    assert first.key == f"{spec.baseline.config.config_id()}-seeds1_2" and last.key.endswith("-seed5")
    assert first.member(f"{first.config_id}-seed2").config() == spec.baseline.config.with_seed(2)
    with pytest.raises(ValueError, match="grouped already"):
        group_tickets(grid, 2)


def test_a_group_result_carries_each_member_and_their_means():
    a = DevPoint("c-seed1", 3, {"map": 0.2, "mrr": 0.5}, {"map": 0.25}, 0.25)
    b = DevPoint("c-seed2", 3, {"map": 0.4, "mrr": 0.7}, {"map": 0.4}, 0.4)
    res = json.loads(json.dumps(group_point("c-seeds1_2", 3, [a, b])))
    assert member_points(res) == [a, b]
    top = DevPoint.from_result(res)
    assert top.metrics == pytest.approx({"map": 0.3, "mrr": 0.6}) and top.objective == pytest.approx(0.325)
    o1 = TrialOutcome("c-seed1", 0.25, 3, {"map": 0.1}, {"map": 0.25}, started=1.0, ended=2.0)
    o2 = TrialOutcome("c-seed2", 0.5, 6, {"map": 0.3}, {"map": 0.5}, started=1.0, ended=2.0)
    out = json.loads(json.dumps(group_outcome("c-seeds1_2", [o1, o2])))
    assert out["final"] and out["group_size"] == 2 and out["objective"] == pytest.approx(0.375)
    assert out["best_dev"] == pytest.approx({"map": 0.375})
    assert member_outcomes(out) == [o1, o2]
    replay = group_outcome("c-seeds1_2", [TrialOutcome.replay("c-seed1", 0.25), TrialOutcome.replay("c-seed2", 0.5)])
    assert replay["replayed"] and replay["objective"] == pytest.approx(0.375)


def _repeater(seeds, k):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from harness.config import TrialConfig
    from harness.study.space import parse_param

    space = {"smoothing.method": {"choice": ["LS"]}, "smoothing.epsilon": {"uniform": [0.05, 0.3]}}
    defaults = TrialConfig.from_flat({"model.name": "tiny", "train.steps": 6}).to_flat()
    params = {key: parse_param(key, value) for key, value in space.items()}
    opt = OptunaSearch(space=_searchers.DefineByRun(params, defaults), metric="objective", mode="max",
                       sampler=optuna.samplers.RandomSampler(seed=0))
    return opt, _searchers.SeedRepeater(opt, seeds=seeds, defaults=defaults, name="random", seeds_per_trial=k)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_optuna_gets_the_seed_mean_of_a_proposal_whatever_its_groups(k):
    """Seeds 1..5 with values v_s: Optuna's value of the proposal is mean(v) for one seed per trial
    (Tune's Repeater) and for groups of 2 (2 + 2 + 1 seeds) or 3 (3 + 2), whose trials report their
    own seed means."""
    seeds = (1, 2, 3, 4, 5)
    values = dict(zip(seeds, [0.31, 0.12, 0.55, 0.47, 0.08], strict=True))
    opt, rep = _repeater(seeds, k)
    trials = []
    for i in range(len(seed_groups(seeds, k))):
        config = rep.suggest(f"t{i}")
        trials.append((f"t{i}", TrialTicket.from_tune(config)))
    assert [tuple(m.seed for m in t.members()) for _, t in trials] == seed_groups(seeds, k)
    assert len({t.config_id for _, t in trials}) == 1  # one proposal, every seed
    for trial_id, ticket in trials:
        seed_values = [values[m.seed] for m in ticket.members()]
        if ticket.seeds:
            result = group_outcome(ticket.key, [TrialOutcome(m.key, values[m.seed]) for m in ticket.members()])
        else:
            result = TrialOutcome(ticket.key, seed_values[0]).to_result()
        rep.on_trial_complete(trial_id, result)
    (done,) = opt._ot_study.trials
    assert done.value == pytest.approx(float(np.mean(list(values.values()))), abs=1e-12)


def test_a_failed_group_leaves_its_seeds_out_of_optuna_s_mean():
    seeds = (1, 2, 3)
    opt, rep = _repeater(seeds, 2)
    first, second = (TrialTicket.from_tune(rep.suggest(t)) for t in ("a", "b"))
    rep.on_trial_complete("a", group_outcome(first.key, [TrialOutcome(m.key, v)
                                                         for m, v in zip(first.members(), (0.2, 0.6), strict=True)]))
    rep.on_trial_complete("b", None)  # an errored trial reports nothing
    (done,) = opt._ot_study.trials
    assert done.value == pytest.approx(0.4) and not math.isnan(done.value)
    assert second.seed == 3 and not second.seeds


class _Controller:
    """What the scheduler asks of Tune's controller when it stops a configuration: the trials (none
    pending here) and stopping one."""

    def __init__(self, trials):
        self.trials = trials

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):  # pragma: no cover - no trial is pending in these tests
        raise AssertionError(f"{trial} is not pending")


def _decisions(spec, tickets, values, uri):
    """Feed every trial's step-3 evaluation (then its steps 6) to a fresh early-stopping scheduler:
    its answers per configuration, and the state it wrote."""
    from ray.tune.experiment import Trial

    from harness.driver._early_stop_ray import EarlyStopScheduler
    from harness.study.protocol import TrialTicket as T

    sched = EarlyStopScheduler(spec.early_stopping, str(uri), T.from_tune, len(spec.fixed_configs()))
    trials = [Trial("trainable", config=t, stub=True) for t in tickets]
    for trial in trials:
        trial.set_status(Trial.RUNNING)
    answers: dict[str, list[str]] = {}
    for step in (3, 6):
        for trial in trials:
            ticket = T.from_tune(trial.config)
            if "STOP" in answers.get(ticket.name + ticket.key, []):
                continue  # Tune stopped it
            points = [DevPoint(m.key, step, {"map": values[m.config_id][m.seed] + step / 100},
                               {"map": values[m.config_id][m.seed]}, values[m.config_id][m.seed])
                      for m in ticket.members()]
            result = group_point(ticket.key, step, points) if ticket.seeds else points[0].to_result()
            answer = sched.on_trial_result(_Controller(trials), trial, result)
            answers.setdefault(ticket.name, []).append(answer)
            answers.setdefault(ticket.name + ticket.key, []).append(answer)
    return answers, json.loads(uri.read_text())


def test_early_stopping_judges_a_group_s_seeds_as_separate_trials(tmp_path):
    """Three configurations x 3 seeds, one rung at step 3 keeping the top 2 of 3 (reduction factor
    2): fed as one trial per seed or as groups of 2 + 1 seeds, the scheduler records the same values
    and progress of the configurations that continue, stops the same configuration (the worst) at
    the same rung and answers STOP to every trial of it; a group's seeds are judged together (the
    decision sees both values of the group of seeds 1 and 2)."""
    from harness.driver._orchestrate import fixed_tickets

    spec = _spec(tmp_path, seeds=[1, 2, 3], configs={"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1},
                                                     "ls2": {"smoothing.method": "LS", "smoothing.epsilon": 0.2}},
                 early_stopping={"rungs": [3], "reduction_factor": 2})
    ids = {nc.name: nc.config.config_id() for nc in spec.fixed_configs()}
    values = {ids["baseline"]: {1: 0.30, 2: 0.32, 3: 0.31}, ids["ls"]: {1: 0.40, 2: 0.20, 3: 0.35},
              ids["ls2"]: {1: 0.25, 2: 0.26, 3: 0.22}}  # means 0.31, 0.317, 0.243: ls2 is stopped
    single, single_state = _decisions(spec, fixed_tickets(spec), values, tmp_path / "single.json")
    grouped, grouped_state = _decisions(spec, group_tickets(fixed_tickets(spec), 2), values, tmp_path / "grouped.json")
    assert set(single_state["stopped"]) == set(grouped_state["stopped"]) == {ids["ls2"]}
    assert single_state["stopped"][ids["ls2"]]["rung"] == grouped_state["stopped"][ids["ls2"]]["rung"] == 3
    for name in ("baseline", "ls"):
        assert single_state["groups"][ids[name]] == grouped_state["groups"][ids[name]]
        assert single_state["groups"][ids[name]]["progress"] == {"1": 6, "2": 6, "3": 6}
        assert set(single[name]) == set(grouped[name]) == {"CONTINUE"}
    assert grouped["ls2"] == ["STOP", "STOP"]  # the group of seeds 1+2 and the trial of seed 3
    assert single["ls2"] == ["STOP", "STOP", "STOP"]  # decided at seed 1, once every configuration had one
    assert "mean of 1 seed(s)" in single_state["stopped"][ids["ls2"]]["reason"]
    assert "map 0.2850 (mean of 2 seed(s))" in grouped_state["stopped"][ids["ls2"]]["reason"]
    assert grouped_state["groups"][ids["ls2"]]["values"]["3.0"] == pytest.approx({"1": 0.28, "2": 0.29})


@pytest.mark.parametrize("seeds, k, expected", [
    ([1, 2, 3], 1, 6), ([1, 2, 3], 2, 4), ([1, 2, 3], 3, 2), ([1, 2, 3, 4, 5], 2, 6),
    ({"start": 5, "step": 2, "max": 9}, 2, 2 * (3 + 1 + 1)),  # rounds add seeds 1-5, 6-7, 8-9
])
def test_validate_counts_the_ray_trials_of_the_grouped_seeds(tmp_path, seeds, k, expected):
    from harness.driver._orchestrate import fixed_tickets
    from harness.study.validate import ray_trials

    spec = _spec(tmp_path, seeds=seeds, resources={"seeds_per_trial": k})
    assert ray_trials(spec) == expected
    if isinstance(seeds, list):
        assert len(group_tickets(fixed_tickets(spec), k)) == expected


def test_seed_groups_over_several_collections_stay_within_a_collection(tmp_path):
    """resources.seeds_per_trial over two collections: each (configuration, collection) trains its
    seeds in runs of k, a group never mixes collections (its members share one config id and one
    data.collection), and every (configuration, collection, seed) trains exactly once."""
    from harness.driver._orchestrate import fixed_tickets
    from harness.study.validate import ray_trials

    collections = [{"name": "talk-a", "data": {"split_seed": 13}}, {"name": "talk-b", "data": {"split_seed": 29}}]
    spec = _spec(tmp_path, seeds=[1, 2, 3], resources={"seeds_per_trial": 2}, collections=collections)
    grid = [TrialTicket.from_tune(t) for t in group_tickets(fixed_tickets(spec), spec.seeds_per_trial)]
    got = [(t.name, t.config().data.collection, [m.seed for m in t.members()]) for t in grid]
    assert sorted(got) == sorted((name, c, seeds) for name in ("baseline", "ls") for c in ("talk-a", "talk-b")
                                 for seeds in ([1, 2], [3]))
    for t in grid:
        assert {m.config_id for m in t.members()} == {t.config_id}
        assert {m.config().data.collection for m in t.members()} == {t.config().data.collection}
    members = sorted(m.key for t in grid for m in t.members())
    singles = sorted(TrialTicket.of(nc.name, nc.role, nc.config, s).key for nc in spec.fixed_configs() for s in spec.seeds)
    assert members == singles and len(members) == trial_count(spec) == 12
    assert ray_trials(spec) == len(grid) == 8
