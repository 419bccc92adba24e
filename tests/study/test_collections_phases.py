"""Seed schedules, early stopping, search and confirmation over several collections: the study
file's spelling and refusals, and the rules themselves against real MLflow (seed rounds) or the
pure early-stopping state. The phases through real Ray Tune trials:
tests/study/test_collections_phases_study.py."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from harness.driver import _rounds
from harness.errors import ConfigError
from harness.stats.crossed import crossed_test
from harness.stats.sequential import GroupSequential, Stop, signed_z
from harness.study import rounds
from harness.study.protocol import TrialOutcome, TrialTicket
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from harness.tracking.records import StudyRecords
from harness.tracking.store import TrackingStore
from tests.study.conftest import write_study

COLLECTIONS = [
    {"name": "talk-a", "data": {"conversations": 30, "split_seed": 13}},
    {"name": "talk-b", "data": {"conversations": 30, "split_seed": 29}},
]
SCHEDULED = {"configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}},
             "seeds": {"start": 4, "step": 2, "max": 10}, "collections": COLLECTIONS}

# -- seed schedules ------------------------------------------------------------------------------

QIDS = [f"q{i:02d}" for i in range(40)]
# The candidate's gain on each collection: large on one (settles early), none on the other
# (futility at once).
GAIN = {"talk-a": 0.12, "talk-b": 0.0}


def _values(name: str, collection: str, seed: int) -> dict[str, float]:
    """Per-query test MAP of a seed run on a collection: a query's difficulty, the candidate's gain
    on that collection, the run's noise; in [0, 1]."""
    g = np.random.default_rng([seed, sum(map(ord, name + collection))])
    difficulty = np.random.default_rng(sum(map(ord, collection))).uniform(0.2, 0.7, len(QIDS))
    gain = GAIN[collection] if name != "baseline" else 0.0
    v = np.clip(difficulty + gain + g.normal(0, 0.01) + g.normal(0, 0.08, len(QIDS)), 0, 1)
    return dict(zip(QIDS, v.round(6).tolist(), strict=True))


def _synthetic_round(spec: Any, store: TrackingStore, exp: str, runs: list[tuple[str, str, int]]) -> _rounds.RunRound:
    """A round that records its tickets' outcomes as the driver's callback does, without training."""
    def run_round(phase: str, tickets: list[dict[str, Any]]) -> set[str]:
        records = StudyRecords(store, exp, spec.name)
        for t in map(TrialTicket.from_tune, tickets):
            collection = t.flat[C.COLLECTION_PARAM]
            runs.append((t.name, collection, t.seed))
            records.trial_started(t, tags={C.TAG_ROUND: str(rounds.round_of(spec, t.seed))})
            values = _values(t.name, collection, t.seed)
            outcome = TrialOutcome(t.key, 0.5, test={"map": float(np.mean(list(values.values())))})
            records.trial_finished(t, outcome, {"map": values})
        return {t["ticket"]["config_id"] for t in tickets}
    return run_round


@pytest.mark.slow
def test_a_seed_schedule_decides_each_collection_on_its_own_results_with_the_same_seeds(tmp_path: Path) -> None:
    spec = load_spec(write_study(tmp_path, "sched", **SCHEDULED))
    assert spec.seed_schedule is not None and rounds.comparisons(spec) == 2
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    records = StudyRecords.open(store, spec.name)
    records.study_started()
    runs: list[tuple[str, str, int]] = []
    lines: list[str] = []
    _rounds.run_rounds(spec, records, _synthetic_round(spec, store, records.experiment_id, runs), lines.append)

    # Each comparison's verdict is the rule's (at 0.05 / 2: one candidate on two collections) on
    # the looks of its own collection, recomputed from the generator.
    rule = GroupSequential.for_family(spec.seed_schedule.looks, 0.05, 2)
    verdicts = {}
    for collection in GAIN:
        for k in range(1, spec.seed_schedule.rounds + 1):
            z = []
            for n in spec.seed_schedule.looks[:k]:
                seeds = spec.seeds[:n]
                cand = np.array([[_values("ls", collection, s)[q] for q in QIDS] for s in seeds])
                base = np.array([[_values("baseline", collection, s)[q] for q in QIDS] for s in seeds])
                r = crossed_test(cand, base)
                z.append(float(signed_z(r.mean_diff, r.p_value)))
            v = rule.verdict(z)
            if v.stop is not Stop.OPEN:
                verdicts[collection] = v
                break
    # each collection's own verdict on its own results: a gain settled, none stopped for futility
    assert verdicts["talk-b"].stop is Stop.FUTILITY and verdicts["talk-a"].stop is Stop.BETTER
    client = MlflowClient(store.uri)
    configs = client.search_runs([records.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = 'config'")
    reason = {(r.info.run_name, r.data.tags[C.TAG_COLLECTION]): r.data.tags[C.TAG_SEQUENTIAL] for r in configs}
    assert reason[("ls", "talk-a")] == verdicts["talk-a"].reason
    assert reason[("ls", "talk-b")] == verdicts["talk-b"].reason
    # Paired seeds: a configuration has the same seeds on every collection, the first ones of the
    # study's list, up to the last open comparison's round.
    last = spec.seed_schedule.looks[verdicts["talk-a"].round - 1]
    for name in ("baseline", "ls"):
        got = {c: sorted(s for n, cc, s in runs if n == name and cc == c) for c in GAIN}
        assert got["talk-a"] == got["talk-b"] == list(spec.seeds[:last])
    assert lines[0] == "round 1 of 4: 4 configurations x seeds [1, 2, 3, 4] (2 comparisons open)"
    assert lines[1] == "round 1: ls on talk-a: open; ls on talk-b: open"
    assert lines[3].startswith("round 2: ls on talk-a: settled: better at round 2 (6 seeds); "
                               "ls on talk-b: futility at round 2"), lines


# -- early stopping ------------------------------------------------------------------------------

def test_a_rung_ranks_only_the_configurations_of_the_same_collection() -> None:
    from harness.study.early_stop import EarlyStopSettings, EarlyStopState

    st = EarlyStopState(EarlyStopSettings(rungs=(0.25,), reduction_factor=2, metric="map"), min_groups=2)
    # On talk-a, the candidate beats its baseline; on talk-b (a harder collection, lower values
    # everywhere) it trails its own baseline. Ranked against talk-a's values it would rank last.
    st.observe("ba", "baseline", seed=1, step=2, value=0.60, total_steps=8, baseline=True, collection="talk-a")
    assert st.observe("la", "ls", seed=1, step=2, value=0.70, total_steps=8, collection="talk-a") is None
    st.observe("bb", "baseline", seed=1, step=2, value=0.30, total_steps=8, baseline=True, collection="talk-b")
    stop = st.observe("lb", "ls", seed=1, step=2, value=0.20, total_steps=8, collection="talk-b")
    assert stop is not None and "ranks 2 of 2 configurations on talk-b" in stop.reason
    assert st.means(0.25, "talk-a") == pytest.approx({"ba": 0.60, "la": 0.70})
    # A baseline trailing its candidate is never stopped, and the state keeps each group's collection.
    assert set(st.stopped) == {"lb"}
    again = EarlyStopState.from_json(st.to_json())
    assert again.groups["lb"].collection == "talk-b" and again.groups["ba"].baseline


# -- search ----------------------------------------------------------------------------------------

SEARCH = {"search": {"searcher": "random", "num_configs": 2,
                     "space": {"smoothing.method": {"choice": ["LS"]}, "smoothing.epsilon": {"uniform": [0.05, 0.3]}}},
          "seeds": [1, 2, 3], "collections": COLLECTIONS}


@pytest.mark.parametrize("target", [None, "talk-b"])
def test_a_proposal_runs_on_every_collection_and_optuna_gets_the_stated_objective(tmp_path: Path,
                                                                                 target: str | None) -> None:
    """One proposal, seeds 1-3 on two collections: six trials with one name, one config id per
    collection, each collection's data; Optuna's value is the mean over the collections of each
    one's mean over its finished seeds (talk-a's seed 1 failed: left out of talk-a's mean only),
    or the objective collection's mean."""
    from harness.driver._searchers import make_searcher

    search = {**SEARCH["search"], **({"objective_collection": target} if target else {})}
    spec = load_spec(write_study(tmp_path, "search", **{**SEARCH, "search": search}))
    assert spec.search is not None and spec.objective_collection == target
    rep = make_searcher(spec)
    values = {("talk-a", 1): None, ("talk-a", 2): 0.2, ("talk-a", 3): 0.4,
              ("talk-b", 1): 0.7, ("talk-b", 2): 0.8, ("talk-b", 3): 0.9}
    tickets = {f"t{i}": TrialTicket.from_tune(rep.suggest(f"t{i}")) for i in range(6)}
    where = {tid: (t.flat[C.COLLECTION_PARAM], t.seed) for tid, t in tickets.items()}
    assert sorted(where.values()) == sorted(values)
    assert len({t.name for t in tickets.values()}) == 1
    ids = {t.flat[C.COLLECTION_PARAM]: t.config_id for t in tickets.values()}
    assert len(set(ids.values())) == 2
    assert {t.flat["data.split_seed"] for t in tickets.values() if t.flat[C.COLLECTION_PARAM] == "talk-b"} == {29}
    for i, (tid, t) in enumerate(tickets.items()):
        if i == 3:  # Tune's experiment state mid-proposal, as a resumed driver reads it back
            rep = pickle.loads(pickle.dumps(rep))
        v = values[where[tid]]
        rep.on_trial_complete(tid, None if v is None else TrialOutcome(t.key, v).to_result())
    (done,) = rep.searcher._ot_study.trials
    expected = 0.8 if target else (0.3 + 0.8) / 2
    assert done.value == pytest.approx(expected, abs=1e-12)


# -- confirmation ----------------------------------------------------------------------------------

CONFIRMED = {"configs": {"ls": {"smoothing.method": "LS"}, "wsls": {"smoothing.method": "WSLS"},
                         "late": {"smoothing.method": "LS", "smoothing.epsilon": 0.3}},
             "seeds": [1, 2], "collections": COLLECTIONS, "confirm": {"top": 1, "seeds": 2}}


def _record(spec: Any, records: StudyRecords, dev: dict[tuple[str, str], list[float | None]]) -> set[str]:
    """Seed runs with these dev objectives ((name, collection) -> per seed; None: the seed failed),
    as the callback records them; returns the config ids."""
    own = set()
    for collection in spec.collections:
        for nc in spec.collection_configs(collection):
            own.add(nc.config.config_id())
            for seed, value in zip(spec.seeds, dev.get((nc.name, collection), [0.5, 0.5]), strict=True):
                t = TrialTicket.of(nc.name, nc.role, nc.config, seed)
                records.trial_started(t)
                if value is not None:
                    records.trial_finished(t, TrialOutcome(t.key, value), {})
    return own


@pytest.mark.parametrize("target, picked", [(None, "wsls"), ("talk-b", "ls")])
def test_the_pick_is_finished_on_every_collection_and_ranked_by_the_stated_objective(
        tmp_path: Path, target: str | None, picked: str) -> None:
    """ls: best on talk-b, poor on talk-a; wsls: best mean over the collections; late: the best on
    talk-a and talk-b alike, but a seed failed on talk-b, so not eligible. The confirmation retrains
    the pick and each baseline on both collections with the fresh seeds."""
    from harness.driver import _confirm

    study = {**CONFIRMED}
    if target:  # a grid's point joins the listed configurations; the file's objective collection ranks them
        study["search"] = {"searcher": "grid", "space": {"train.lr": {"choice": [2e-3]}}, "objective_collection": target}
    spec = load_spec(write_study(tmp_path, "pick", **study))
    assert spec.objective_collection == target
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    records = StudyRecords.open(store, spec.name)
    records.study_started()
    own = _record(spec, records, {("ls", "talk-a"): [0.30, 0.32], ("ls", "talk-b"): [0.90, 0.92],
                                  ("wsls", "talk-a"): [0.70, 0.72], ("wsls", "talk-b"): [0.70, 0.72],
                                  ("late", "talk-a"): [0.95, 0.95], ("late", "talk-b"): [0.95, None]})
    records = StudyRecords(store, records.experiment_id, spec.name)
    picks = _confirm.pick(spec, records, own)
    assert [(p.name, p.collection) for p in picks] == [(picked, "talk-a"), (picked, "talk-b")]
    means = {"wsls": 0.71, "ls": (0.31 + 0.91) / 2} if target is None else {"ls": 0.91}
    assert picks[0].dev == pytest.approx(means[picked])
    ids = {nc.config.config_id(): (nc.name, nc.config.data.collection) for nc in spec.fixed_configs()}
    assert [ids[p.config_id] for p in picks] == [(picked, "talk-a"), (picked, "talk-b")]
    tickets = [TrialTicket.from_tune(t) for t in _confirm.tickets(spec, picks)]
    assert sorted((t.name, t.flat[C.COLLECTION_PARAM], t.seed) for t in tickets) == sorted(
        (n, c, s) for n in ("baseline", picked) for c in ("talk-a", "talk-b") for s in (3, 4))
    assert all(t.config_id.endswith("-confirm") for t in tickets)
    # A second driver takes the recorded pick.
    again = _confirm.pick(spec, StudyRecords(store, records.experiment_id, spec.name), own)
    assert [p.config_id for p in again] == [p.config_id for p in picks]


@pytest.mark.slow
def test_validate_prints_each_collection_s_search_and_confirmation_trials(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from harness.cli import main

    path = write_study(tmp_path, "plan", **{**SEARCH, "configs": {"ls": {"smoothing.method": "LS"}}},
                       confirm={"top": 1, "seeds": 2})
    assert main(["validate", str(path), "--no-model"]) == 0
    out = capsys.readouterr().out
    for name in ("talk-a", "talk-b"):
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(f"{name}: data.source chitchat"))
        assert line.endswith("2 configurations x 3 seeds = 6 trials + at most 2 proposal(s) x 3 seeds = at most 6 search "
                             "trials "
                             "+ 4 confirmation trials"), line
    # 12 fixed + 12 search + 8 confirmation trials in all
    assert "seeds: [1, 2, 3]  ->  at most 24 trials" in out  # a search may end early


@pytest.mark.parametrize("extra, message", [
    ({"seeds": {"start": 4, "step": 1, "max": 5}, "configs": {}}, "no candidate configuration"),
    ({**SEARCH, "search": {**SEARCH["search"], "objective_collection": "talk-c"}},
     "search.objective_collection: 'talk-c' is not one of the study's collections (talk-a, talk-b)"),
    ({**SEARCH, "search": {**SEARCH["search"], "objective_collection": "talk-c"}, "collections": None},
     "search.objective_collection 'talk-c' names one of the study's collections, and this study has none"),
    ({**SEARCH, "search": {**SEARCH["search"], "objective_collection": ["talk-a"]}},
     "search.objective_collection must be the name of one of the study's collections"),
])
def test_bad_phases_over_collections_are_refused_in_one_line(tmp_path: Path, extra: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_spec(write_study(tmp_path, "bad", **{**SCHEDULED, **extra}))
    assert message in str(err.value) and "\n" not in str(err.value)
