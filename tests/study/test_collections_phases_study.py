"""Seed schedules, early stopping, search and confirmation over two collections, through real
local Ray Tune trials and real MLflow (tiny model): what each phase records on each collection and
the table over the collections that ends the study. The rules alone (no Ray):
tests/study/test_collections_phases.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.results.mlflow_reader import read_experiment_collections
from harness.stats.crossed import crossed_test
from harness.stats.sequential import GroupSequential, Stop, signed_z
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

COLLECTIONS = [
    {"name": "talk-a", "data": {"conversations": 30, "split_seed": 13}},
    {"name": "talk-b", "data": {"conversations": 30, "split_seed": 29}},
]


def _by_kind(client: MlflowClient, name: str) -> dict[str, list]:
    exp = client.get_experiment_by_name(name)
    out: dict[str, list] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(r.data.tags.get(C.TAG_KIND), []).append(r)
    return out


@pytest.mark.slow
def test_a_seed_schedule_over_two_collections(ray_root: Path) -> None:
    root = ray_root
    path = write_study(root, "sched2", configs={"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}},
                       seeds={"start": 2, "step": 1, "max": 3}, collections=COLLECTIONS)
    uri = f"sqlite:///{root / 'sched2.db'}"
    lines: list[str] = []
    run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
    assert "round 1 of 2: 4 configurations x seeds [1, 2] (2 comparisons open)" in lines
    runs = _by_kind(MlflowClient(uri), "sched2")
    seeds: dict[tuple[str, str], list[int]] = {}
    for t in runs[C.KIND_TRIAL]:
        assert t.info.status == "FINISHED"
        seed = int(t.data.tags[C.TAG_SEED])
        assert t.data.tags[C.TAG_ROUND] == str({1: 1, 2: 1, 3: 2}[seed])
        key = (t.info.run_name.rsplit("-seed", 1)[0], t.data.tags[C.TAG_COLLECTION])
        seeds.setdefault(key, []).append(seed)
    # Paired seeds: each configuration has the same seeds on both collections.
    for name in ("baseline", "ls"):
        assert sorted(seeds[(name, "talk-a")]) == sorted(seeds[(name, "talk-b")])
    # Each comparison's reason is the rule's verdict on its own collection's per-query values
    # (read back by the table's reader), at 0.05 / 2 comparisons.
    rule = GroupSequential.for_family((2, 3), 0.05, 2)
    results = read_experiment_collections("sched2", tracking_uri=uri)
    reasons = {(r.info.run_name, r.data.tags[C.TAG_COLLECTION]): r.data.tags[C.TAG_SEQUENTIAL]
               for r in runs[C.KIND_CONFIG]}
    for collection, res in results.items():
        got = sorted(seeds[("ls", collection)])
        z, verdict = [], None
        for n in rule.looks[:rule.looks.index(len(got)) + 1]:
            pick = [str(s) for s in got[:n]]
            r = crossed_test([res.query_values("ls", s, "map") for s in pick],
                             [res.query_values("baseline", s, "map") for s in pick])
            z.append(float(signed_z(r.mean_diff, r.p_value)))
            verdict = rule.verdict(z)
            if verdict.stop is not Stop.OPEN:
                break
        assert verdict is not None and verdict.stop is not Stop.OPEN
        assert reasons[("ls", collection)] == verdict.reason
        assert reasons[("baseline", collection)].startswith(f"baseline: {len(got)} seeds")
    study = runs[C.KIND_STUDY][0]
    assert study.info.status == "FINISHED"
    assert "collections-configs.md" in {a.path.rsplit("/", 1)[-1] for a in
                                        MlflowClient(uri).list_artifacts(study.info.run_id, "tables")}
