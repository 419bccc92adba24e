"""Seed schedules (``seeds: {start, step, max}``): the study file's spelling and refusals, the plan
`harness validate` prints, and the rounds of harness.driver._rounds against a real MLflow store:
which configurations get each round's seeds, the verdict and reason on each config run, and a
second driver (resume) that recomputes the same rounds and records nothing twice. The rounds
through real Ray Tune trials: tests/study/test_rounds_study.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.driver import _rounds
from harness.stats.crossed import crossed_test
from harness.stats.sequential import GroupSequential, SeedSchedule, Stop, signed_z
from harness.study import rounds
from harness.study.protocol import TrialOutcome, TrialTicket
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from harness.tracking.records import StudyRecords
from harness.tracking.store import TrackingStore

SCHEDULED = """\
name: s
defaults:
  model.name: tiny
  train.steps: 4
baseline: {}
configs:
  - name: ls
    set: {smoothing.method: LS, smoothing.epsilon: 0.1}
  - name: wsls
    set: {smoothing.method: WSLS, smoothing.epsilon: 0.1}
seeds: {start: 4, step: 2, max: 10}
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "study.yaml"
    p.write_text(text)
    return p


def test_a_schedule_lists_every_seed_and_runs_its_rounds_as_phases(tmp_path):
    spec = load_spec(_write(tmp_path, SCHEDULED))
    assert spec.seed_schedule == SeedSchedule(4, 2, 10)
    assert spec.seeds == tuple(range(1, 11))
    assert spec.phases == ("fixed", "round2", "round3", "round4")
    assert [rounds.round_of(spec, s) for s in spec.seeds] == [1, 1, 1, 1, 2, 2, 3, 3, 4, 4]
    assert rounds.seeds_through(spec, 5) == [1, 2, 3, 4, 5, 6]
    first = load_spec(_write(tmp_path, SCHEDULED.replace("max: 10}", "max: 10, first: 11}")))
    assert first.seeds == tuple(range(11, 21))
    # A plain list keeps the fixed design.
    fixed = load_spec(_write(tmp_path, SCHEDULED.replace("{start: 4, step: 2, max: 10}", "[1, 2, 3]")))
    assert fixed.seed_schedule is None and fixed.phases == ("fixed",)
    assert rounds.seeds_through(fixed, 2) == [1, 2, 3]


@pytest.mark.parametrize("change, expected", [
    (("max: 10}", "max: 10, stop: 3}"), r"study.yaml:11: seeds: unknown key 'stop'; did you mean step"),
    (("step: 2, ", ""), r"study.yaml:11: seeds: a seed schedule needs start, step and max; step is missing"),
    (("start: 4", "start: 1"), r"study.yaml:11: seeds.start must be >= 4 \(from fewer seeds in its first round "),
    (("start: 4", "start: 3"), r"study.yaml:11: seeds.start must be >= 4 .*: 5.8% of null comparisons at 0.05 from 3 seeds"),
    (("max: 10", "max: 4"), r"study.yaml:11: seeds.max must be larger than seeds.start \(4\)"),
    (("step: 2", "step: two"), r"study.yaml:11: seeds.step must be an integer, got 'two'"),
    (("max: 10}", "max: 10, first: -1}"), r"study.yaml:11: seeds.first must be an integer in \[0, "),
    (("seeds: {start: 4, step: 2, max: 10}", ("seeds: {start: 4, step: 2, max: 10}\nsearch:\n  searcher: random\n"
      "  num_configs: 2\n  space:\n    smoothing.epsilon: {uniform: [0.05, 0.3]}")),
     r"study.yaml:11: seeds: a seed schedule adds seeds to the listed configurations; a study with a searcher"),
    (("seeds: {start: 4, step: 2, max: 10}", "seeds: {start: 4, step: 2, max: 10}\nearly_stopping: {rungs: [1]}"),
     r"study.yaml:12: early_stopping stops configurations within a round of seeds"),
    ((("configs:\n  - name: ls\n    set: {smoothing.method: LS, smoothing.epsilon: 0.1}\n  - name: wsls\n"
      "    set: {smoothing.method: WSLS, smoothing.epsilon: 0.1}\n"), ""),
     (r"study.yaml:6: seeds: a seed schedule settles comparisons with the baseline, and this study has no "
     r"candidate")),
    (("seeds: {start: 4, step: 2, max: 10}", ("seeds: {start: 4, step: 2, max: 10}\n"
      "objective: {metric: cascade_cost, mode: min}\ncascade: {enabled: true, exits: [1, 2]}")),
     r"study.yaml:12: objective.metric 'cascade_cost' has no per-query test values"),
])
def test_bad_schedules_are_refused_in_one_line_naming_file_and_line(tmp_path, capsys, monkeypatch, change,
                                                                    expected):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, SCHEDULED.replace(*change))
    assert main(["validate", "--no-model", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    import re
    assert re.search(expected, err), err


def test_validate_shows_the_schedule(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "--no-model", str(_write(tmp_path, SCHEDULED))]) == 0
    out = capsys.readouterr().out
    assert "seeds: 4 rounds ending at 4, 6, 8, 10 seeds (start 4, step 2, max 10; seeds 1..10), at most 30 trials" in out
    assert "round 1: 3 configurations x 4 seeds = 12 trials; rounds 2-4: 2, 2, 2 more seeds for the baseline" in out
    assert "settled or stopped for futility: group-sequential rule at 0.05/2 = 0.025 per comparison" in out


# -- the rounds against a real MLflow store --------------------------------------------------------

QIDS = [f"q{i:02d}" for i in range(40)]


def _values(config: str, seed: int) -> dict[str, float]:
    """Per-query test MAP of a configuration's seed run: a query's difficulty, the run's training
    effect and noise, in [0, 1]. ``better`` gains 0.12, ``same`` nothing, ``slight`` 0.03."""
    g = np.random.default_rng([seed, sum(map(ord, config))])
    difficulty = np.random.default_rng(0).uniform(0.2, 0.7, len(QIDS))
    gain = {"baseline": 0.0, "better": 0.12, "same": 0.0, "slight": 0.03}[config]
    v = np.clip(difficulty + gain + g.normal(0, 0.01) + g.normal(0, 0.08, len(QIDS)), 0, 1)
    return dict(zip(QIDS, v.round(6).tolist(), strict=True))


def _synthetic_round(spec: Any, store: TrackingStore, exp: str, runs: list[str]) -> _rounds.RunRound:
    """A round that records its tickets' outcomes through the study's records, as the driver's
    callback does (``runs``: the trial keys, in order), without training."""
    def run_round(phase: str, tickets: list[dict[str, Any]]) -> set[str]:
        records = StudyRecords(store, exp, spec.name)
        for t in map(TrialTicket.from_tune, tickets):
            runs.append(t.key)
            k = rounds.round_of(spec, t.seed)
            records.trial_started(t, tags={C.TAG_ROUND: str(k)})
            values = _values(t.name, t.seed)
            outcome = TrialOutcome(t.key, 0.5, test={"map": float(np.mean(list(values.values())))})
            records.trial_finished(t, outcome, {"map": values})
        return {t["ticket"]["config_id"] for t in tickets}
    return run_round


def _recomputed(spec: Any, config: str, rounds: int) -> list[float]:
    """The signed z of each look, from the generator (not from MLflow)."""
    z = []
    for n in spec.seed_schedule.looks[:rounds]:
        seeds = spec.seeds[:n]
        cand = np.array([[_values(config, s)[q] for q in QIDS] for s in seeds])
        base = np.array([[_values("baseline", s)[q] for q in QIDS] for s in seeds])
        r = crossed_test(cand, base)
        z.append(float(signed_z(r.mean_diff, r.p_value)))
    return z


@pytest.mark.slow
def test_rounds_give_seeds_to_open_comparisons_only_and_record_why_each_stopped(tmp_path):
    spec = load_spec(_write(tmp_path, SCHEDULED.replace("ls", "better", 1).replace("wsls", "same").replace(
        "seeds: {start", "  - name: slight\n    set: {smoothing.method: LS, smoothing.epsilon: 0.3}\nseeds: {start")))
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    records = StudyRecords.open(store, spec.name)
    records.study_started()
    runs: list[str] = []
    lines: list[str] = []
    own = _rounds.run_rounds(spec, records, _synthetic_round(spec, store, records.experiment_id, runs), lines.append)
    assert len(own) == 4

    # The verdicts are the rule's on the looks recomputed from the generator.
    rule = GroupSequential.for_family(spec.seed_schedule.looks, 0.05, 3)
    verdicts = {}
    for name in ("better", "same", "slight"):
        for k in range(1, spec.seed_schedule.rounds + 1):
            v = rule.verdict(_recomputed(spec, name, k))
            if v.stop is not Stop.OPEN:
                verdicts[name] = v
                break
    # A large gain settles early, no gain stops for futility, a slight one takes every round.
    assert {n: v.reason for n, v in verdicts.items()} == {
        "better": "settled: better at round 2 (6 seeds)", "same": "futility at round 1 (4 seeds)",
        "slight": "settled: better at round 4 (10 seeds)"}

    client = MlflowClient(store.uri)
    configs = {r.info.run_name: r for r in client.search_runs(
        [records.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = 'config'")}
    trials = client.search_runs([records.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = 'trial'",
                                max_results=1000)
    seeds = {name: sorted(int(t.data.tags[C.TAG_SEED]) for t in trials if t.info.run_name.startswith(f"{name}-"))
             for name in configs}
    for name, v in verdicts.items():
        assert configs[name].data.tags[C.TAG_SEQUENTIAL] == v.reason
        assert configs[name].data.metrics[C.METRIC_SEQUENTIAL_ROUND] == v.round
        assert seeds[name] == list(spec.seeds[:v.seeds])  # no seed after its stop
    # The baseline ran every seed an open comparison needed, and says so.
    last = max(v.round for v in verdicts.values())
    assert seeds["baseline"] == list(spec.seeds[:spec.seed_schedule.looks[last - 1]])
    assert configs["baseline"].data.tags[C.TAG_SEQUENTIAL].startswith(
        f"baseline: {spec.seed_schedule.looks[last - 1]} seeds over {last} rounds")
    assert all(t.data.tags[C.TAG_ROUND] == str(rounds.round_of(spec, int(t.data.tags[C.TAG_SEED])))
               for t in trials)
    assert lines[0] == "round 1 of 4: 4 configurations x seeds [1, 2, 3, 4] (3 comparisons open)"
    assert lines[1] == "round 1: better: open; same: futility at round 1 (4 seeds); slight: open"
    assert lines[2] == "round 2 of 4: 3 configurations x seeds [5, 6] (2 comparisons open)"
    assert not any("map" in line for line in lines)  # verdicts, never a test value

    # A second driver (resume) takes the same rounds: the same tickets, and no run is added.
    again: list[str] = []
    _rounds.run_rounds(spec, StudyRecords.open(store, spec.name),
                       _synthetic_round(spec, store, records.experiment_id, again), lambda _: None)
    assert again == runs
    after = client.search_runs([records.experiment_id], max_results=1000)
    assert len(after) == 1 + 4 + len(trials)


@pytest.mark.slow
def test_a_failed_trial_stops_its_comparison_as_incomplete(tmp_path):
    spec = load_spec(_write(tmp_path, SCHEDULED.replace("ls", "slight", 1).replace("wsls", "same")))
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    records = StudyRecords.open(store, spec.name)
    records.study_started()
    inner = _synthetic_round(spec, store, records.experiment_id, [])

    def run_round(phase: str, tickets: list[dict[str, Any]]) -> set[str]:
        # seed 2 of "slight" fails after its retries: no finished run
        return inner(phase, [t for t in tickets if (t["ticket"]["name"], t["ticket"]["seed"]) != ("slight", 2)])

    lines: list[str] = []
    _rounds.run_rounds(spec, records, run_round, lines.append)
    tags = {r.info.run_name: r.data.tags.get(C.TAG_SEQUENTIAL) for r in MlflowClient(store.uri).search_runs(
        [records.experiment_id], filter_string=f"tags.`{C.TAG_KIND}` = 'config'")}
    assert tags["slight"] == "incomplete at round 1: no finished trial with test map for candidate seed 2"
