"""A seed schedule through real Ray Tune trials and real MLflow: rounds of seeds, each seed run's
round, each config run's reason for getting no more seeds (the rule's verdict, recomputed here from
the per-query values read back by the table's reader), the final table over the seeds each
comparison received, and a resumed driver that takes the same rounds and records nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.results.mlflow_reader import read_experiment
from harness.stats.crossed import crossed_test
from harness.stats.sequential import RULE, GroupSequential, Stop, signed_z
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import runs_by_kind, write_study

# A configuration that learns and one that diverges (its scores collapse to ties), against the
# baseline, 20 steps each; seeds 4, then 1 more per round, up to 6.
ROUNDS = {"data": {"max_dev_queries": 16}, "train": {"steps": 20, "eval_every": 5, "lr": 3.0e-3},
          "configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1},
                      "diverging-lr": {"train.lr": 0.5}},
          "seeds": {"start": 4, "step": 1, "max": 6}}


@pytest.mark.heavy
def test_seed_rounds_through_ray_and_mlflow(ray_root, tmp_path):
    root = ray_root
    path = write_study(root, "rounds", **ROUNDS)
    spec = load_spec(path)
    uri = f"sqlite:///{root / 'rounds.db'}"
    lines: list[str] = []
    out = run_study(spec, tracking_uri=uri, progress=lines.append)
    client = MlflowClient(uri)
    runs = runs_by_kind(client, "rounds")
    configs = {r.info.run_name: r for r in runs[C.KIND_CONFIG]}
    seeds: dict[str, list[int]] = {}
    for t in runs[C.KIND_TRIAL]:
        seed = int(t.data.tags[C.TAG_SEED])
        name = t.info.run_name.rsplit("-seed", 1)[0]
        seeds.setdefault(name, []).append(seed)
        # every seed run carries the round that trained it: seeds 1-4 round 1, 5 round 2, 6 round 3
        assert t.data.tags[C.TAG_ROUND] == str({1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 3}[seed]), t.info.run_name
        assert t.info.status == "FINISHED"
    assert "round 1 of 3: 3 configurations x seeds [1, 2, 3, 4] (2 comparisons open)" in lines

    # Each candidate's reason is the rule's verdict on its looks, recomputed from what the table's
    # reader reads back; it got exactly the seeds up to its stop, and no later one.
    results = read_experiment("rounds", tracking_uri=uri)
    rule = GroupSequential.for_family((4, 5, 6), 0.05, 2)
    rounds_run = 0
    for name in ("ls", "diverging-lr"):
        got = sorted(seeds[name])
        z = []
        for n in rule.looks[:rule.looks.index(len(got)) + 1]:
            pick = [str(s) for s in got[:n]]
            r = crossed_test([results.query_values(name, s, "map") for s in pick],
                             [results.query_values("baseline", s, "map") for s in pick])
            z.append(float(signed_z(r.mean_diff, r.p_value)))
        verdict = rule.verdict(z)
        assert verdict.stop is not Stop.OPEN and verdict.seeds == len(got) == got[-1]
        assert configs[name].data.tags[C.TAG_SEQUENTIAL] == verdict.reason
        assert configs[name].data.metrics[C.METRIC_SEQUENTIAL_SEEDS] == len(got)
        assert results.seeds_of(name) == tuple(map(str, got))
        rounds_run = max(rounds_run, verdict.round)
    # The baseline ran every seed an open comparison needed, no more.
    assert sorted(seeds["baseline"]) == list(range(1, rule.looks[rounds_run - 1] + 1))
    assert configs["baseline"].data.tags[C.TAG_SEQUENTIAL].startswith(f"baseline: {len(seeds['baseline'])} seeds")
    # The final table: every configuration, each comparison on the seeds it received, the rule named.
    study = runs[C.KIND_STUDY][0]
    table = Path(client.download_artifacts(study.info.run_id, "tables/seeds.md", str(tmp_path))).read_text()
    assert RULE in table and f"ls ({configs['ls'].data.tags[C.TAG_SEQUENTIAL]})" in table
    assert set(out["configs"]) == {"baseline", "ls", "diverging-lr"}

    # A resumed driver recomputes the same rounds from MLflow: nothing trained or recorded twice.
    before = {kind: len(v) for kind, v in runs.items()}
    run_study(spec, tracking_uri=uri, resume=True, progress=lambda _: None)
    again = runs_by_kind(client, "rounds")
    assert {kind: len(v) for kind, v in again.items()} == before
    assert {r.info.run_name: r.data.tags.get(C.TAG_SEQUENTIAL) for r in again[C.KIND_CONFIG]} == \
        {n: r.data.tags.get(C.TAG_SEQUENTIAL) for n, r in configs.items()}
