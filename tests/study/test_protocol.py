"""The trial protocol without Ray: tickets of both phases, dev points and outcomes through Tune's
result dict and back, and the outcome's files."""

from __future__ import annotations

import json
import math
import subprocess
import sys

from harness.config import TrialConfig
from harness.study.protocol import (
    ARTIFACTS_DIR,
    DevPoint,
    TrialOutcome,
    TrialTicket,
    artifact_files,
    is_outcome,
    objective_key,
    read_outcome,
    write_outcome,
)
from harness.training.loop import FinalRecord

DEFAULTS = TrialConfig.from_flat({"model.name": "tiny", "train.steps": 20}).to_flat()


def test_the_protocol_imports_no_ray():
    code = "import sys, harness.study.protocol; print(any(m == 'ray' or m.startswith('ray.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fixed_ticket_round_trips_through_the_tune_config():
    cfg = TrialConfig.from_flat({**DEFAULTS, "smoothing.method": "LS", "smoothing.epsilon": 0.2})
    ticket = TrialTicket.of("ls", "candidate", cfg, 3)
    back = TrialTicket.from_tune(json.loads(json.dumps(ticket.to_tune())))  # Tune copies plain data
    assert back == ticket
    assert back.key == f"{cfg.config_id()}-seed3"
    assert back.flat["train.seed"] == 3 and back.config() == cfg.with_seed(3)
    assert back.config().config_id() == cfg.config_id()  # the seed is not part of the id


def test_a_proposal_becomes_the_same_ticket_shape_over_the_defaults():
    ticket = TrialTicket.proposed({"smoothing.method": "LS", "smoothing.epsilon": 0.1}, DEFAULTS, 2, "tpe")
    cfg = TrialConfig.from_flat({**DEFAULTS, "smoothing.method": "LS", "smoothing.epsilon": 0.1})
    assert ticket == TrialTicket.of(f"tpe-{cfg.config_id()[:6]}", "candidate", cfg, 2)
    assert set(ticket.to_tune()) == {"ticket"}
    assert TrialTicket.from_tune(ticket.to_tune()) == ticket
    # Two seeds of one proposal: one configuration, two trials.
    other = TrialTicket.proposed({"smoothing.method": "LS", "smoothing.epsilon": 0.1}, DEFAULTS, 5, "tpe")
    assert other.config_id == ticket.config_id and other.key != ticket.key


def test_dev_point_round_trip():
    point = DevPoint("c-seed1", 10, {"map": 0.5, "mrr": 0.6}, {"map": 0.55, "mrr": 0.6}, 0.55)
    result = point.to_result()
    assert not is_outcome(result) and result["objective"] == 0.55 and result["dev"] == {"map": 0.5, "mrr": 0.6}
    assert DevPoint.from_result(result) == point


def _outcome() -> TrialOutcome:
    final = FinalRecord(best_step=20, dev={"map": 0.41, "mrr": 0.5}, metrics={"map": 0.38, "mrr": 0.47},
                        per_query={"map": {"q1": 0.2, "q2": 0.56}},
                        resolved={"curriculum.T_steps": 10.0},
                        cascade={"cascade_map": 0.4, "cascade_cost": 0.7, "test_exit2_map": 0.33})
    return TrialOutcome.from_final("c-seed1", final, metric="map", select_metric="mrr", evaluation="fp",
                                   started=100.0, ended=160.0)


def test_outcome_round_trips_and_carries_no_per_query_values():
    outcome = _outcome()
    assert outcome.objective == 0.41 and outcome.best_dev == {"map": 0.41, "mrr": 0.5}
    result = outcome.to_result()
    assert is_outcome(result)
    assert TrialOutcome.from_result(result) == outcome
    assert TrialOutcome.from_result(json.loads(json.dumps(result))) == outcome
    assert "q1" not in json.dumps(result)  # per-query values travel as a file, not in the results
    # The seed run's metrics besides test_<metric>: the names of the records in docs/architecture.md.
    # best_dev_<metric>: the dev values of the checkpoint that was tested (best_step), not the last.
    assert outcome.metrics == {"best_step": 20.0, "objective": 0.41, "best_dev_map": 0.41, "best_dev_mrr": 0.5,
                               "cascade_map": 0.4, "cascade_cost": 0.7,
                               "test_exit2_map": 0.33, "trial_started": 100.0, "trial_ended": 160.0,
                               "curriculum.T_steps": 10.0}


def test_objective_falls_back_to_the_selection_metric():
    final = FinalRecord(best_step=4, dev={"mrr": 0.5}, metrics={}, per_query={})
    outcome = TrialOutcome.from_final("k", final, metric="map", select_metric="mrr", evaluation=None,
                                      started=0.0, ended=1.0)
    assert outcome.objective == 0.5


def test_a_cascade_objective_is_the_cascade_s_dev_value_and_a_plain_model_s_cost_is_one():
    """The outcome's objective under objective.metric cascade_cost was the dev MAP: the cascade's
    dev values live in ``final.cascade``, not in ``final.dev``. A configuration without a cascade
    (a study's plain baseline) scores a relative cost of 1 and its MAP as cascade MAP."""
    cascade = FinalRecord(best_step=4, dev={"map": 0.41, "mrr": 0.5}, metrics={}, per_query={},
                          cascade={"cascade_map": 0.39, "cascade_cost": 0.62, "test_cascade_cost": 0.6})
    plain = FinalRecord(best_step=4, dev={"map": 0.41, "mrr": 0.5}, metrics={}, per_query={})
    got = {(name, metric): TrialOutcome.from_final("k", final, metric=metric, select_metric="map", evaluation=None,
                                                   started=0.0, ended=1.0).objective
           for name, final in (("cascade", cascade), ("plain", plain)) for metric in ("cascade_cost", "cascade_map")}
    assert got == {("cascade", "cascade_cost"): 0.62, ("cascade", "cascade_map"): 0.39,
                   ("plain", "cascade_cost"): 1.0, ("plain", "cascade_map"): 0.41}


def test_replayed_outcome_round_trip():
    replayed = TrialOutcome.replay("c-seed2", 0.3)
    result = replayed.to_result()
    assert is_outcome(result) and result["replayed"] and result["objective"] == 0.3
    assert TrialOutcome.from_result(result) == replayed
    assert math.isnan(replayed.started)


def test_objective_keys_name_the_flattened_result(tmp_path):
    from ray.tune.utils import flatten_dict  # how Tune hands a final result to a searcher

    flat = flatten_dict(_outcome().to_result())
    assert flat[objective_key("map", "map", 1)] == 0.41
    assert flat[objective_key("mrr", "map", 2)] == 0.5
    assert flat[objective_key("cascade_cost", "map", 2)] == 0.7


def test_outcome_files_round_trip(tmp_path):
    outcome = _outcome()
    per_query = {"map": {"q1": 0.2, "q2": 0.56}, "mrr": {"q1": 1.0, "q2": 0.5}}
    assert read_outcome(tmp_path) is None  # an evaluation's checkpoint
    art = write_outcome(tmp_path, outcome, per_query)
    assert art == tmp_path / ARTIFACTS_DIR and art.is_dir()
    (art / "runs").mkdir()
    (art / "runs" / "test.trec").write_text("q1 Q0 d1 1 2.0 run\n")
    (art / "top.txt").write_text("x")
    assert read_outcome(tmp_path) == (outcome, per_query)
    assert list(artifact_files(tmp_path)) == [(art / "runs" / "test.trec", "runs"), (art / "top.txt", None)]

