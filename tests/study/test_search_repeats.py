"""A searcher's proposal that repeats a known configuration (the baseline, a listed configuration,
an earlier proposal) is not trained (harness.driver._searchers): training it again spent a
proposal's trials on a result the study had, and its records folded into the known configuration's,
so the search trained less than it said, silently. The repeater tells Optuna that proposal failed
(out of its model) and asks again; ``num_configs`` counts distinct configurations; a space with no
new configuration left ends the search, in a line that says so. Real Optuna, no Ray cluster: the
repeater is fed as Tune feeds it."""

from __future__ import annotations

import optuna
import pytest

from harness.driver import _searchers
from harness.study.protocol import TrialTicket
from harness.study.spec import load_spec
from tests.study.conftest import write_study

# The template's lr is 0.001 (the baseline); ``faster`` lists 0.002: of the space's three values,
# only 0.003 is a configuration the study does not have.
LR = {"configs": {"faster": {"train.lr": 0.002}}, "seeds": [1, 2],
      "search": {"searcher": "random", "num_configs": 2,
                 "space": {"train.lr": {"choice": [0.001, 0.002, 0.003]}}}}


def _repeater(tmp_path, **study):
    spec = load_spec(write_study(tmp_path, "repeats", **study))
    return spec, _searchers.make_searcher(spec)


def _states(rep) -> dict[str, int]:
    trials = rep.searcher._ot_study.get_trials(deepcopy=False)
    return {s.name: sum(t.state == s for t in trials) for s in optuna.trial.TrialState}


def test_a_proposal_of_a_known_configuration_is_not_trained_and_the_search_ends_when_none_is_new(
        tmp_path, capsys):
    spec, rep = _repeater(tmp_path, **LR)
    fixed = {nc.config.config_id() for nc in spec.fixed_configs()}
    # the first proposal: whatever Optuna draws first, the one new configuration, once per seed
    first = [TrialTicket.from_tune(rep.suggest(t)) for t in ("t0", "t1")]
    assert [t.flat["train.lr"] for t in first] == [0.003, 0.003] and [t.seed for t in first] == [1, 2]
    assert first[0].config_id not in fixed and first[0].config_id == first[1].config_id
    # its value reaches the Optuna trial it was proposed under (a re-ask's, where known ones came first)
    for trial_id, ticket in zip(("t0", "t1"), first, strict=True):
        rep.on_trial_complete(trial_id, {"objective": 0.2 + 0.1 * ticket.seed, "trial_key": ticket.key})
    (done,) = rep.searcher._ot_study.get_trials(states=[optuna.trial.TrialState.COMPLETE])
    assert done.params == {"train.lr": 0.003} and done.value == pytest.approx(0.35)
    # every configuration is known now: no trial is spent on any; the search ends, saying so
    assert rep.suggest("t2") == _searchers.Searcher.FINISHED
    states = _states(rep)
    assert states["COMPLETE"] == 1 and states["RUNNING"] == 0 and states["FAIL"] == rep.repeats >= _searchers.MAX_REPEATS + 1
    # one line per proposal: the first came after repeats (seeded: the same draws every run), the
    # second never came; the known ones are named, the earlier proposal among them
    first_line, last = capsys.readouterr().err.splitlines()
    assert first_line.startswith("[search] random: ") and "proposal(s) repeated known configurations (" in first_line
    assert first_line.endswith(": not trained, random asked again (" + first_line.split("(")[-1])
    assert last.startswith(f"[search] random: {_searchers.MAX_REPEATS + 1} proposals in a row repeated known "
                           "configurations (")
    for name in ("baseline", "faster", first[0].name):
        assert name in last
    assert last.endswith("); the search ends with the 1 distinct configuration(s) it proposed (num_configs 2)")


def test_the_reviewer_s_search_of_the_baseline_alone_trains_nothing(tmp_path, capsys):
    """``smoothing.method: {choice: [none]}`` where the baseline is method none: every proposal is
    the baseline; nothing is trained (it was trained twice and recorded nothing new)."""
    _, rep = _repeater(tmp_path, seeds=[1], search={"searcher": "tpe", "num_configs": 2,
                                                    "space": {"smoothing.method": {"choice": ["none"]}}})
    assert rep.suggest("t0") == _searchers.Searcher.FINISHED
    assert _states(rep)["COMPLETE"] == 0 and rep.repeats == _searchers.MAX_REPEATS + 1
    assert "the search ends with the 0 distinct configuration(s) it proposed" in capsys.readouterr().err


def test_after_the_last_proposal_a_line_counts_the_repeated_ones(tmp_path, capsys):
    """num_configs 1 of the same space: Optuna's first draws (seeded) are known configurations,
    asked again until 0.003 comes; once Optuna has its value, a line says how many repeated."""
    _, rep = _repeater(tmp_path, **{**LR, "search": {**LR["search"], "num_configs": 1}})
    tickets = [TrialTicket.from_tune(rep.suggest(t)) for t in ("t0", "t1")]
    assert {t.flat["train.lr"] for t in tickets} == {0.003} and rep.repeats >= 1
    for trial_id, ticket in zip(("t0", "t1"), tickets, strict=True):
        rep.on_trial_complete(trial_id, {"objective": 0.3, "trial_key": ticket.key})
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"[search] random: 1 distinct configuration(s) trained; {rep.repeats} proposal(s) repeated known "
        "configurations and were not trained")


def test_the_repeater_pickles_with_what_it_knows(tmp_path):
    """Tune pickles the searcher into its experiment state: a resumed search still knows the
    configurations of the fixed phase and the proposals so far."""
    import cloudpickle

    spec, rep = _repeater(tmp_path, **LR)
    rep.suggest("t0")
    again = cloudpickle.loads(cloudpickle.dumps(rep))
    assert again.known == rep.known and len(again.known) == 3
    assert {nc.config.config_id() for nc in spec.fixed_configs()} <= set(again.known)
