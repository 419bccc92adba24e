"""The confirmation phase through real Ray Tune trials and real MLflow: a random search of 2
proposals and a listed configuration with seeds [1, 2]; the best candidate by mean dev objective and
the baseline retrained with fresh seeds 3, 4 as config runs of their own, every run tagged with its
phase; the study run's tables are confirmatory, the exploratory ones beside them; `harness table`
defaults to the confirmatory table; a resumed driver records nothing twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.results.mlflow_reader import read_experiment
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

CONFIRM = {"data": {"max_dev_queries": 16}, "train": {"steps": 10, "eval_every": 5},
           "configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}},
           "search": {"searcher": "random", "num_configs": 2,
                      "space": {"smoothing.method": {"choice": ["LS", "WSLS"]},
                                "smoothing.epsilon": {"uniform": [0.05, 0.3]}}},
           "seeds": [1, 2]}


@pytest.mark.heavy
def test_confirmation_through_ray_and_mlflow(ray_root, capsys):
    path = write_study(ray_root, "confirm", **CONFIRM)
    spec = load_spec(path)
    assert spec.confirm is not None and spec.confirm.seeds == (3, 4)
    uri = f"sqlite:///{ray_root / 'confirm.db'}"
    lines: list[str] = []
    run_study(spec, tracking_uri=uri, progress=lines.append)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("confirm")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    configs = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG]
    trials = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    study = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    # The pick: the candidate with the best mean dev objective over seeds 1, 2 (recomputed here).
    dev: dict[str, list[float]] = {}
    for t in trials:
        if t.data.tags[C.TAG_PHASE] != C.PHASE_CONFIRMATION and t.data.tags[C.TAG_ROLE] == C.ROLE_CANDIDATE:
            dev.setdefault(t.data.tags[C.TAG_CONFIG_ID], []).append(t.data.metrics["objective"])
    best = max(dev, key=lambda c: (sum(dev[c]) / len(dev[c]), c))
    assert study.data.tags[C.TAG_CONFIRM_PICK] == best
    phases = {r.data.tags[C.TAG_CONFIG_ID]: r.data.tags[C.TAG_PHASE] for r in configs}
    confirmed = sorted(c for c, p in phases.items() if p == C.PHASE_CONFIRMATION)
    base = spec.baseline.config.config_id()
    assert confirmed == sorted([f"{base}-confirm", f"{best}-confirm"])
    assert phases[base] == C.PHASE_FIXED and list(phases.values()).count(C.PHASE_SEARCH) >= 1
    seeds = sorted(int(t.data.tags[C.TAG_SEED]) for t in trials if t.data.tags[C.TAG_PHASE] == C.PHASE_CONFIRMATION)
    assert seeds == [3, 3, 4, 4]
    assert all(int(t.data.tags[C.TAG_SEED]) in (1, 2) for t in trials
               if t.data.tags[C.TAG_PHASE] != C.PHASE_CONFIRMATION)
    # Tables: the default one is confirmatory, over the confirmation's runs only.
    table = read_experiment("confirm", tracking_uri=uri)
    assert table.phase == "confirmatory" and set(table.config_ids.values()) == set(confirmed)
    assert set(table.seeds) == {"3", "4"}
    explored = read_experiment("confirm", tracking_uri=uri, phase="exploratory")
    assert explored.phase == "exploratory" and not set(explored.config_ids.values()) & set(confirmed)
    arts = {a.path for a in client.list_artifacts(study.info.run_id, "tables")}
    assert "tables/seeds.md" in arts
    md = client.download_artifacts(study.info.run_id, "tables/seeds.md", str(ray_root))
    assert "(confirmatory)" in Path(md).read_text()
    exp_md = client.download_artifacts(study.info.run_id, "exploratory/tables/seeds.md", str(ray_root))
    assert "(exploratory)" in Path(exp_md).read_text()
    # A resumed driver finishes nothing more and records nothing twice.
    run_study(spec, tracking_uri=uri, resume=True, progress=lines.append)
    again = client.search_runs([exp.experiment_id], max_results=1000)
    assert len(again) == len(runs)
