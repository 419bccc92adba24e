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
from tests.study.conftest import runs_by_kind, write_study

COLLECTIONS = [
    {"name": "talk-a", "data": {"conversations": 30, "split_seed": 13}},
    {"name": "talk-b", "data": {"conversations": 30, "split_seed": 29}},
]


@pytest.mark.heavy
def test_a_seed_schedule_over_two_collections(ray_root: Path) -> None:
    root = ray_root
    path = write_study(root, "sched2", configs={"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}},
                       seeds={"start": 4, "step": 1, "max": 5}, collections=COLLECTIONS)
    uri = f"sqlite:///{root / 'sched2.db'}"
    lines: list[str] = []
    run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
    assert "round 1 of 2: 4 configurations x seeds [1, 2, 3, 4] (2 comparisons open)" in lines
    runs = runs_by_kind(MlflowClient(uri), "sched2")
    seeds: dict[tuple[str, str], list[int]] = {}
    for t in runs[C.KIND_TRIAL]:
        assert t.info.status == "FINISHED"
        seed = int(t.data.tags[C.TAG_SEED])
        assert t.data.tags[C.TAG_ROUND] == str({1: 1, 2: 1, 3: 1, 4: 1, 5: 2}[seed])
        key = (t.info.run_name.rsplit("-seed", 1)[0], t.data.tags[C.TAG_COLLECTION])
        seeds.setdefault(key, []).append(seed)
    # Paired seeds: each configuration has the same seeds on both collections.
    for name in ("baseline", "ls"):
        assert sorted(seeds[(name, "talk-a")]) == sorted(seeds[(name, "talk-b")])
    # Each comparison's reason is the rule's verdict on its own collection's per-query values
    # (read back by the table's reader), at 0.05 / 2 comparisons.
    rule = GroupSequential.for_family((4, 5), 0.05, 2)
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


@pytest.mark.heavy
def test_search_early_stopping_and_confirmation_over_two_collections(ray_root: Path) -> None:
    """A searcher's proposal runs on both collections under one name; a configuration that cannot
    learn (lr 0.5) is stopped at the rung on each collection by that collection's ranking, the
    baseline never; the pick is the proposal with the best mean over the collections of its mean
    dev objective, and the confirmation retrains it and the baselines on both with fresh seeds."""
    root = ray_root
    path = write_study(root, "across", data={"max_dev_queries": 16},
                       train={"steps": 12, "eval_every": 3, "lr": 3.0e-3},
                       configs={"diverging-lr": {"train.lr": 0.5}}, collections=COLLECTIONS,
                       search={"searcher": "random", "num_configs": 1,
                               "space": {"smoothing.method": {"choice": ["LS"]},
                                         "smoothing.epsilon": {"uniform": [0.05, 0.3]}}},
                       early_stopping={"rungs": [0.25], "reduction_factor": 2}, confirm={"top": 1})
    uri = f"sqlite:///{root / 'across.db'}"
    lines: list[str] = []
    run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
    client = MlflowClient(uri)
    runs = runs_by_kind(client, "across")
    configs = runs[C.KIND_CONFIG]
    trials = runs[C.KIND_TRIAL]
    for r in [*configs, *trials]:  # the collection: a tag and a param on every config and seed run
        assert r.data.tags[C.TAG_COLLECTION] == r.data.params[C.COLLECTION_PARAM] in ("talk-a", "talk-b")

    # Early stopping: the diverging configuration stops on each collection, ranked there.
    for collection in ("talk-a", "talk-b"):
        bad = next(r for r in configs if r.info.run_name == "diverging-lr"
                   and r.data.tags[C.TAG_COLLECTION] == collection)
        assert bad.data.tags[C.TAG_STOPPED] == "1" and bad.data.tags[C.TAG_STOPPED_RUNG] == "3"
        assert f"configurations on {collection} at rung 0.25 (step 3 of 12)" in bad.data.tags[C.TAG_STOPPED_REASON]
    assert not any(C.TAG_STOPPED in r.data.tags for r in configs if r.data.tags[C.TAG_ROLE] == C.ROLE_BASELINE)

    # The search: one proposal, one name, one config id per collection, every study seed on each.
    searched = [r for r in configs if r.data.tags[C.TAG_PHASE] == C.PHASE_SEARCH]
    (name,) = {r.info.run_name for r in searched}
    assert sorted(r.data.tags[C.TAG_COLLECTION] for r in searched) == ["talk-a", "talk-b"]
    dev = {}
    for r in searched:
        cid = r.data.tags[C.TAG_CONFIG_ID]
        mine = [t for t in trials if t.data.tags[C.TAG_CONFIG_ID] == cid]
        assert sorted(int(t.data.tags[C.TAG_SEED]) for t in mine) == [1, 2]
        dev[r.data.tags[C.TAG_COLLECTION]] = sum(t.data.metrics["objective"] for t in mine) / 2
    # The pick, and its dev objective as stated: the mean over the collections.
    expected = (dev["talk-a"] + dev["talk-b"]) / 2
    line = next(ln for ln in lines if ln.startswith("confirmation: "))
    assert line == (f"confirmation: {name} (dev map {expected:.4f}) and the baseline, retrained with fresh "
                    "seeds [3, 4] on 2 collections")

    # The confirmation: the pick and each baseline, on both collections, with the fresh seeds.
    confirmed = [r for r in configs if r.data.tags[C.TAG_PHASE] == C.PHASE_CONFIRMATION]
    assert sorted((r.info.run_name, r.data.tags[C.TAG_COLLECTION]) for r in confirmed) == [
        ("baseline", "talk-a"), ("baseline", "talk-b"), (name, "talk-a"), (name, "talk-b")]
    for r in confirmed:
        cid = r.data.tags[C.TAG_CONFIG_ID]
        assert cid.endswith("-confirm")
        assert sorted(int(t.data.tags[C.TAG_SEED]) for t in trials if t.data.tags[C.TAG_CONFIG_ID] == cid) == [3, 4]
    # The study's table is the confirmatory one, on each collection.
    results = read_experiment_collections("across", tracking_uri=uri)
    assert set(results) == {"talk-a", "talk-b"}
    for res in results.values():
        assert res.phase == "confirmatory" and set(res.configs) == {"baseline", name} and res.seeds == ("3", "4")
    study = runs[C.KIND_STUDY][0]
    assert study.info.status == "FINISHED"

    # The study run: the confirmatory table and its plots, and beside them the exploratory table
    # (the runs that picked), as a one-collection confirmed study logs both.
    def artifacts(folder: str) -> set[str]:
        return {a.path for a in client.list_artifacts(study.info.run_id, folder)}

    forms = {f"collections-{form}.{ext}" for form in ("configs", "seeds") for ext in ("md", "tex", "csv", "html")}
    assert {f"tables/{f}" for f in forms} <= artifacts("tables")
    assert {f"exploratory/tables/{f}" for f in forms} <= artifacts("exploratory/tables")
    assert artifacts("plots") == {"plots/talk-a", "plots/talk-b"}
    assert "plots/talk-a/map.png" in artifacts("plots/talk-a") and "plots/talk-b/map.png" in artifacts("plots/talk-b")
    confirmatory, exploratory = (
        Path(client.download_artifacts(study.info.run_id, path, str(root / folder))).read_text()
        for path, folder in (("tables/collections-configs.md", "c"), ("exploratory/tables/collections-configs.md", "e")))
    assert "on talk-a and talk-b (confirmatory)" in confirmatory.splitlines()[0]
    assert "on talk-a and talk-b (exploratory)" in exploratory.splitlines()[0]
    assert f"| {name} |" in exploratory and "stopped early and left out: diverging-lr" in exploratory
    # Each config run has its verdict: the exploratory ones (fixed and search phases) say so.
    notes = {(r.data.tags[C.TAG_PHASE], r.info.run_name, r.data.tags[C.TAG_COLLECTION]):
             r.data.tags.get(C.TAG_NOTE, "") for r in runs_by_kind(client, "across")[C.KIND_CONFIG]}
    for collection in ("talk-a", "talk-b"):
        assert notes[(C.PHASE_FIXED, "baseline", collection)] == f"exploratory: baseline on {collection}"
        assert notes[(C.PHASE_SEARCH, name, collection)].startswith(f"exploratory: map on {collection}: \u0394 ")
        assert notes[(C.PHASE_CONFIRMATION, name, collection)].startswith(f"map on {collection}: \u0394 ")
    # The combined verdict in MLflow: the pick's config run on each collection carries the same
    # combined metrics, their estimate the mean of the two collections' differences (equal
    # weights, docs/statistics.md "Across collections"), and its verdict note says it.
    picked = {r.data.tags[C.TAG_COLLECTION]: r for r in runs_by_kind(client, "across")[C.KIND_CONFIG]
              if r.data.tags[C.TAG_PHASE] == C.PHASE_CONFIRMATION and r.info.run_name == name}
    a, b = picked["talk-a"].data.metrics, picked["talk-b"].data.metrics
    assert a["combined_map_delta"] == b["combined_map_delta"] == pytest.approx((a["map_delta"] + b["map_delta"]) / 2)
    assert a["combined_map_p"] == b["combined_map_p"] and 0 < a["combined_map_p"] <= 1
    # I² where it is defined: differences without spread on a collection leave it NaN, and no
    # non-finite value is logged (TrackingStore.log_metrics); such a pick's combined p is 1
    assert "combined_map_i2" in a or a["combined_map_p"] == 1.0
    for r in picked.values():
        assert f"across 2 collections: \u0394 {a['combined_map_delta']:+.4f}, p_adj " in r.data.tags[C.TAG_NOTE]
