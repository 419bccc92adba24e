"""Studies on real local Ray (2 CPUs) with the tiny model and real MLflow (SQLite): the session's
shared finished study (tests/conftest.py's ``finished_study``) and, beside it, variants of it run
here (under the module's ``ray_root``) that are compared with it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver._final_report import TrialsFailed
from harness.driver.runner import TrialHooks, run_study
from harness.model.export import MODEL_ARTIFACT
from harness.model.mlflow_model import TAG_MODEL_URI
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import SHARED, write_study

# The plain study (the session's finished study), which the module's other studies vary and are
# compared with; they log no MLflow models (the shared study's are checked below).
PLAIN = {**SHARED, "models": "none"}


def _spec(root: Path, name: str, **overrides):
    return load_spec(write_study(root, name, **overrides))


def _uri(root: Path) -> str:
    return f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"


def _runs(uri: str, name: str):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    by_kind: dict[str, list] = {}
    for r in runs:
        by_kind.setdefault(r.data.tags.get(C.TAG_KIND), []).append(r)
    return by_kind


def _test_maps(uri: str, name: str) -> dict[str, float]:
    return {r.data.tags[C.TAG_TRIAL_KEY]: r.data.metrics["test_map"] for r in _runs(uri, name)["trial"]}


@pytest.fixture(scope="module")
def finished(finished_study):
    """The session's finished study (tests/study/conftest.py's ``SHARED``): its MLflow URI, its name
    and its number of configurations and of seeds."""
    spec = finished_study.spec()
    return finished_study, finished_study.uri, finished_study.name, len(spec.fixed_configs()), len(spec.seeds)


@pytest.mark.slow
def test_progress_lines_show_dev_values_never_the_test_set(finished):
    study, uri, name, n_configs, n_seeds = finished
    progress = [line for line in study.progress if line.startswith(("[trial]", "[config]"))]
    done = [line for line in progress if ": done, " in line]
    assert len(done) == n_configs * n_seeds
    assert len([line for line in progress if line.startswith("[config]")]) == n_configs
    assert not [line for line in progress if "test" in line]
    # Each finished trial's line shows its seed run's dev objective (the best-dev checkpoint's map).
    objectives = {(r.data.tags[C.TAG_CONFIG_ID], r.data.tags[C.TAG_SEED]): r.data.metrics["objective"]
                  for r in _runs(uri, name)["trial"]}
    shown = sorted(float(line.split("dev map ")[1].split()[0]) for line in done)
    assert shown == sorted(round(v, 4) for v in objectives.values())


@pytest.mark.slow
def test_the_study_ends_by_logging_its_best_configurations_models(finished):
    """``models: best`` (the default): at its end the study logs the seed runs of its best
    configuration (the highest mean dev objective over seeds; never test) as MLflow models, each
    named on its seed run (``harness.model_uri``) and listed in the experiment's Models view with the
    run, the study, the configuration and the seed. That they score as the harness does is checked
    in tests/model/test_export.py (heavy: a study of its own)."""
    study, uri, name, _, n_seeds = finished
    trials = _runs(uri, name)["trial"]
    objective: dict[str, list[float]] = {}
    for r in trials:
        objective.setdefault(r.data.tags[C.TAG_CONFIG_ID], []).append(r.data.metrics["objective"])
    best = max(sorted(objective), key=lambda c: sum(objective[c]) / len(objective[c]))  # ties: lowest id
    logged = {r.info.run_id: r.data.tags[TAG_MODEL_URI] for r in trials if TAG_MODEL_URI in r.data.tags}
    assert sorted(logged) == sorted(r.info.run_id for r in trials if r.data.tags[C.TAG_CONFIG_ID] == best)
    assert len(logged) == n_seeds
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    models = {f"models:/{m.model_id}": m for m in client.search_logged_models([exp.experiment_id])}
    assert set(models) == set(logged.values())
    by_run = {r.info.run_id: r for r in trials}
    for run_id, model_uri in logged.items():
        model, tags = models[model_uri], by_run[run_id].data.tags
        assert model.source_run_id == run_id and model.name == MODEL_ARTIFACT
        assert {k: model.tags.get(k) for k in (C.TAG_STUDY, C.TAG_CONFIG_ID, C.TAG_SEED)} == {
            C.TAG_STUDY: name, C.TAG_CONFIG_ID: best, C.TAG_SEED: tags[C.TAG_SEED]}
        assert f"model: seed run {run_id} logged as {model_uri}" in study.progress


@pytest.mark.slow
def test_study_completes_with_nested_runs_and_same_seeds(finished, tmp_path):
    study, uri, name, n_configs, n_seeds = finished
    out = study.out
    runs = _runs(uri, name)
    assert len(runs["study"]) == 1 and len(runs["config"]) == n_configs and len(runs["trial"]) == n_configs * n_seeds
    study_id = runs["study"][0].info.run_id
    assert any(k.startswith("system/cpu") for k in runs["study"][0].data.metrics)  # system metrics
    # the storage report: where the fixed phase's Tune state is, and how many bytes it holds
    assert runs["study"][0].data.tags[C.TAG_STORAGE].endswith(f"{name}-fixed")
    assert runs["study"][0].data.metrics[C.METRIC_STORAGE_BYTES] > 0
    configs = {r.info.run_id: r for r in runs["config"]}
    for c in configs.values():
        assert c.data.tags["mlflow.parentRunId"] == study_id
        assert c.info.status == "FINISHED"
        assert "map_mean" in c.data.metrics and "map_sd" in c.data.metrics
    roles = sorted(c.data.tags[C.TAG_ROLE] for c in configs.values())
    assert roles == ["baseline"] + ["candidate"] * (n_configs - 1)
    seeds_per_config: dict[str, set[str]] = {}
    for t in runs["trial"]:
        parent = t.data.tags["mlflow.parentRunId"]
        assert parent in configs
        assert configs[parent].data.tags[C.TAG_CONFIG_ID] == t.data.tags[C.TAG_CONFIG_ID]
        seeds_per_config.setdefault(parent, set()).add(t.data.tags[C.TAG_SEED])
        assert t.data.params["train.seed"] == t.data.tags[C.TAG_SEED]
        assert t.info.status == "FINISHED" and "test_map" in t.data.metrics
    assert all(s == {str(seed) for seed in study.spec().seeds} for s in seeds_per_config.values())
    # The candidates got their comparison against the baseline.
    cands = [c for c in configs.values() if c.data.tags[C.TAG_ROLE] == "candidate"]
    assert all("map_p" in c.data.metrics and "map_delta" in c.data.metrics for c in cands)
    assert all(c.data.tags.get("harness.marker.map") for c in cands)
    # ... and the power analysis: variance components and minimum detectable effects per seed count.
    assert all({"map_var_seed", "map_var_query", "map_var_resid", "map_mde_s3", "map_mde_s20"}
               <= set(c.data.metrics) for c in cands)
    client = MlflowClient(uri)
    arts = {a.path for a in client.list_artifacts(study_id, "tables")}
    assert "tables/seeds.md" in arts and "tables/seeds.tex" in arts
    assert {a.path for a in client.list_artifacts(study_id, "power")} == {"power/power.md", "power/power.json"}
    text = client.download_artifacts(runs["trial"][0].info.run_id, C.PER_QUERY_ARTIFACT, str(tmp_path))
    assert Path(text).read_text().startswith("qid,measure,value")
    assert set(out["references"]) == {"random", "bm25"}


@pytest.mark.slow
def test_config_runs_sort_with_their_seeds_and_seed_runs_keep_the_tested_dev_value(finished):
    """Config runs carry test_<metric> (the mean of their seed runs' test_<metric>) beside
    <metric>_mean; each seed run carries best_dev_<metric>, the dev value at the checkpoint tested
    (its objective), which is not its last dev point in general."""
    _, uri, name, _, n_seeds = finished
    runs = _runs(uri, name)
    seeds: dict[str, list] = {}
    for t in runs["trial"]:
        seeds.setdefault(t.data.tags["mlflow.parentRunId"], []).append(t)
        assert t.data.metrics["best_dev_map"] == t.data.metrics["objective"]
        history = MlflowClient(uri).get_metric_history(t.info.run_id, "dev_map")
        best = next(m.value for m in history if m.step == int(t.data.metrics["best_step"]))
        assert t.data.metrics["best_dev_map"] == pytest.approx(best, abs=1e-12)
    for c in runs["config"]:
        mean = sum(t.data.metrics["test_map"] for t in seeds[c.info.run_id]) / n_seeds
        assert c.data.metrics["test_map"] == pytest.approx(mean, abs=1e-12) == c.data.metrics["map_mean"]


@pytest.mark.slow
def test_each_config_runs_verdict_says_what_its_metrics_say(finished):
    """The config runs' descriptions (the verdict column of the runs page that `harness ui` opens:
    tests/tracking/test_ui_landing.py) say what the metrics say: the baseline's mean and SD of its
    seeds' test MAP, the candidates' difference, interval, adjusted p, the test (harness.test) and
    the family of them."""
    _, uri, name, n_configs, n_seeds = finished
    runs = _runs(uri, name)
    verdicts = {r.info.run_name: r.data.tags[C.TAG_NOTE] for r in runs["config"]}
    base = next(r for r in runs["config"] if r.data.tags[C.TAG_ROLE] == "baseline")
    maps = [t.data.metrics["test_map"] for t in runs["trial"] if t.data.tags[C.TAG_ROLE] == "baseline"]
    mean = sum(maps) / n_seeds
    sd = (sum((v - mean) ** 2 for v in maps) / (n_seeds - 1)) ** 0.5
    assert verdicts[base.info.run_name] == f"baseline: MAP {mean:.3f} \u00b1 {sd:.3f} over {n_seeds} seeds"
    for r in runs["config"]:
        if r is base:
            continue
        m, tags = r.data.metrics, r.data.tags
        p = m["map_p"]
        assert tags[C.TAG_TEST] == "crossed" and tags[C.TAG_CORRECTION] == "holm"
        marker = tags["harness.marker.map"]
        decided = "ns" if marker == "ns" else f"{marker} {'better' if m['map_delta'] > 0 else 'worse'}"
        assert verdicts[r.info.run_name] == (
            f"{decided}: MAP {m['map_delta']:+.3f} [{m['map_ci_low']:.3f}, {m['map_ci_high']:.3f}], "
            f"{'p < 0.001' if p < 0.001 else f'p = {p:.2g}'}; crossed, Holm over {n_configs - 1}")


@pytest.mark.heavy
def test_a_trial_that_fails_every_retry_fails_the_study_naming_it(ray_root):
    """The README's promise: a study with trials that failed after their retries ends with an error
    naming them (the CLI exits non-zero with it), its study run and their configuration's run FAILED,
    and no table over the seeds that happened to finish."""
    root = ray_root
    spec = _spec(root, "always", **{**PLAIN, "configs": {"ls": PLAIN["configs"]["ls"]}, "seeds": [1],
                                     "failure": {"max_retries": 1}})
    ls = next(nc for nc in spec.configs if nc.name == "ls")
    key = f"{ls.config.config_id()}-seed1"
    with pytest.raises(TrialsFailed) as exc:
        run_study(spec, tracking_uri=_uri(root), progress=lambda m: None, hooks=TrialHooks(fail_always=(key,)))
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith("study 'always': 1 trial(s) failed after their retries: ls-seed1 (RuntimeError: "
                          f"injected failure in {key} at step ")
    runs = _runs(_uri(root), "always")
    assert runs["study"][0].info.status == "FAILED"
    assert {r.info.run_name: r.info.status for r in runs["config"]} == {"baseline": "FINISHED", "ls": "FAILED"}
    assert {r.info.run_name: r.info.status for r in runs["trial"]} == {"baseline-seed1": "FINISHED",
                                                                       "ls-seed1": "FAILED"}
    client = MlflowClient(_uri(root))
    assert not client.list_artifacts(runs["study"][0].info.run_id, "tables")


@pytest.mark.heavy
def test_fractional_gpus_pack_two_trials_at_once(ray_root, tmp_path):
    """Two 0.5-GPU trials on one GPU run at once: each waits after its first evaluation until the
    other has reached its own (up to a minute), so a worker that starts late cannot hide the packing
    and trials run one after the other would not overlap."""
    root = ray_root
    gpu = {**PLAIN, "configs": {}, "seeds": [1, 2], "train": {"steps": 30}, "resources": {"gpus": 0.5}}
    run_study(_spec(root, "gpu", **gpu), tracking_uri=_uri(root), progress=lambda m: None,
              hooks=TrialHooks(meet=(str(tmp_path), 2)))
    trials = _runs(_uri(root), "gpu")["trial"]
    assert len(trials) == 2
    (s1, e1), (s2, e2) = [(t.data.metrics["trial_started"], t.data.metrics["trial_ended"]) for t in trials]
    assert max(s1, s2) < min(e1, e2), "the two 0.5-GPU trials did not overlap"
    assert all(t.data.params["train.device"] == "auto" for t in trials)


@pytest.mark.heavy
def test_nsga2_search_over_alpha_with_cascade_cost_objective(ray_root):
    root = ray_root
    nsga = _spec(root, "nsga", train={"steps": 4, "eval_every": 2}, cascade={"enabled": True}, search={
        "searcher": "nsga2", "num_configs": 2, "space": {"cascade.alpha": {"uniform": [0.2, 0.6]}},
        "objectives": [{"metric": "map", "mode": "max"}, {"metric": "cascade_cost", "mode": "min"}]})
    run_study(nsga, tracking_uri=_uri(root), progress=lambda m: None)
    everything = _runs(_uri(root), "nsga")
    # A search confirms its pick (by the first objective, dev map) with fresh seeds 3 and 4.
    confirmed = {kind: [r for r in rs if r.data.tags.get(C.TAG_PHASE) == C.PHASE_CONFIRMATION]
                 for kind, rs in everything.items()}
    assert len(confirmed["config"]) == 2 and len(confirmed["trial"]) == 4
    assert {t.data.tags[C.TAG_SEED] for t in confirmed["trial"]} == {"3", "4"}
    runs = {kind: [r for r in rs if r not in confirmed[kind]] for kind, rs in everything.items()}
    assert len(runs["config"]) == 3 and len(runs["trial"]) == 6
    by_config: dict[str, set[str]] = {}
    for t in runs["trial"]:
        by_config.setdefault(t.data.tags[C.TAG_CONFIG_ID], set()).add(t.data.tags[C.TAG_SEED])
        assert 0.0 < t.data.metrics["cascade_cost"] <= 1.0
        assert "test_exit2_map" in t.data.metrics and "test_cascade_map" in t.data.metrics
    assert all(seeds == {"1", "2"} for seeds in by_config.values())
    proposed = [t for t in runs["trial"] if t.data.tags[C.TAG_ROLE] == "candidate"]
    assert len(proposed) == 4
    assert all(t.data.metrics["cascade_cost"] < 1.0 for t in proposed)  # alpha >= 0.2 drops candidates


def _seed_runs(uri: str, name: str) -> dict[str, dict]:
    """Each seed run of a study by its trial key: name, tags (but the run ids and the study's name),
    metrics, dev curve, parameters and every artifact's path."""
    client = MlflowClient(uri)
    out = {}
    for r in _runs(uri, name)["trial"]:
        def files(path=None, run_id=r.info.run_id):
            for a in client.list_artifacts(run_id, path):
                yield from (files(a.path) if a.is_dir else [a.path])
        # (the shared study's best configuration's seed runs name their logged model and may hold it:
        # no study here logs one)
        tags = {k: v for k, v in r.data.tags.items()
                if not k.startswith("mlflow.") and k not in (C.TAG_STUDY, TAG_MODEL_URI)}
        curve = [(m.step, m.value) for m in client.get_metric_history(r.info.run_id, "dev_map")]
        out[r.data.tags[C.TAG_TRIAL_KEY]] = {"id": r.info.run_id, "name": r.info.run_name, "status": r.info.status,
                                             "tags": tags,
                                             "metrics": r.data.metrics, "curve": sorted(curve),
                                             "params": r.data.params,
                                             "artifacts": sorted(a for a in files()
                                                                 if a.split("/")[0] != MODEL_ARTIFACT)}
    return out


@pytest.mark.heavy
def test_seeds_per_trial_records_each_seed_as_its_own_trial_would(finished, ray_root, tmp_path):
    """``resources.seeds_per_trial: 2`` with ``fuse: true`` over 3 seeds: each configuration (the
    plain study's baseline, curriculum and ls) trains as
    two Tune trials (seeds 1+2 as one fused model, then 3), every trial failing once after its first
    checkpoint and resuming its seeds from it; MLflow holds the same seed runs as the plain study's
    one trial per seed (names, tags, parameters, metric keys, dev curves, artifacts), with the same
    test metrics and best-dev weights (fp32 on CPU: within 1e-5; harness.training.fused)."""
    _, uri, name, _, n_seeds = finished
    root = ray_root
    fail_dir, log = tmp_path / "fail", tmp_path / "trials.log"
    fail_dir.mkdir()
    # the configurations that fuse (a cascade ranker does not; the baseline's sampler is the plain one's)
    fusing = {n: PLAIN["configs"][n] for n in ("curriculum", "ls")}
    spec = _spec(root, "grouped", **{**PLAIN, "configs": fusing, "resources": {"seeds_per_trial": 2, "fuse": True}})
    assert (spec.seeds_per_trial, spec.fuse) == (2, True)
    run_study(spec, tracking_uri=_uri(root), progress=lambda m: None,
              hooks=TrialHooks(fail_once_dir=str(fail_dir), trial_log=str(log)))
    ids = [nc.config.config_id() for nc in spec.fixed_configs()]
    # Two trials per configuration, named by their seeds; each failed once and resumed at step 3.
    assert sorted(p.name for p in fail_dir.iterdir()) == sorted([*(f"{c}-seeds1_2" for c in ids),
                                                              *(f"{c}-seed3" for c in ids)])
    restarts = sorted(ln.split()[0] for ln in log.read_text().splitlines() if " start 3" in ln)
    assert restarts == sorted(p.name for p in fail_dir.iterdir())
    grouped = _seed_runs(_uri(root), "grouped")
    plain = {key: runs for key, runs in _seed_runs(uri, name).items() if key.rsplit("-seed", 1)[0] in ids}
    assert sorted(grouped) == sorted(plain) and len(grouped) == len(ids) * n_seeds
    for key, g in grouped.items():
        p = plain[key]
        assert (g["name"], g["status"], g["tags"], g["params"], g["artifacts"]) == \
            (p["name"], p["status"], p["tags"], p["params"], p["artifacts"]), key
        assert set(g["metrics"]) == set(p["metrics"]), key
        tested = {k for k in g["metrics"] if k.startswith(("test_", "dev_")) or k in ("objective", "best_step")}
        assert {k: g["metrics"][k] for k in tested} == pytest.approx({k: p["metrics"][k] for k in tested},
                                                                    abs=1e-5), key
        assert [s for s, _ in g["curve"]] == [s for s, _ in p["curve"]]
        assert [v for _, v in g["curve"]] == pytest.approx([v for _, v in p["curve"]], abs=1e-5)
    # Each seed's best-dev weights, as `harness export` finds them in the Tune checkpoint (a group's
    # in its member folder), are the plain study's.
    from harness.model.export import load_seed_model

    for key in (f"{ids[1]}-seed1", f"{ids[1]}-seed2", f"{ids[1]}-seed3"):
        g, p = (load_seed_model(runs[key]["id"], store, logged=False)
                for runs, store in ((grouped, _uri(root)), (plain, uri)))
        assert (g.seed, g.best_step) == (p.seed, p.best_step) and sorted(g.state) == sorted(p.state)
        assert all(float((g.state[k].float() - p.state[k].float()).abs().max()) <= 1e-5 for k in p.state), key


@pytest.mark.slow
def test_a_study_asking_for_more_gpus_or_cpus_than_the_local_ray_has_is_refused(ray_root):
    """Tune would wait for the GPUs forever (it only logs that no trial can start): the driver
    refuses in one line naming the study, the ask and what the local Ray has (1 logical GPU here),
    before anything is recorded or prepared (a study run ended FAILED, after its data was built, for
    a number in its file)."""
    from harness.errors import HarnessError

    # GPUs (the session's Ray has 1 logical GPU), then CPUs alike (it has 2)
    for name, resources, message in [
        ("toomany", {"gpus": 2}, ("each trial asks for resources.gpus 2 but the local Ray has 1 GPU(s); run it "
         "where there is a GPU (or on a cluster: RAY_ADDRESS), or set resources.gpus: 0 in the study file to "
         "train on CPU")),
        ("toomanycpus", {"cpus": 3}, ("each trial asks for resources.cpus 3 but the local Ray has 2 CPU(s); lower "
         "resources.cpus in the study file to 2 or less, or run it on a cluster (RAY_ADDRESS)"))]:
        spec = _spec(ray_root, name, resources=resources)
        with pytest.raises(HarnessError) as exc:
            run_study(spec, tracking_uri=_uri(ray_root), progress=lambda m: None)
        assert str(exc.value) == f"study {name!r}: {message}"
        assert _runs(_uri(ray_root), name) == {}


def test_the_gcs_of_a_running_ray_passes_the_address_check(ray_root, monkeypatch) -> None:
    """The check that refuses a port where no Ray listens (tests/test_reliability.py) lets a real
    GCS through: the session's Ray, addressed as a cluster's is, RAY_ADDRESS=host:port."""
    import ray

    from harness.driver._orchestrate import check_ray_address

    monkeypatch.setenv("RAY_ADDRESS", ray.get_runtime_context().gcs_address)
    check_ray_address()


@pytest.mark.heavy
def test_a_search_stopped_before_tunes_first_state_resumes_every_proposal(ray_root, tmp_path, capfd):
    """A stop between the search phase's tuner.pkl and Tune's first experiment state: Tune could
    not restore it, started the phase anew with its default of one sample, and the driver called the
    study finished after one of its proposals. The phase now starts as a first run would, and Tune
    runs every proposal. The stop is made by leaving only tuner.pkl in the finished phase's folder."""
    import json

    path = write_study(tmp_path, "earlystop", seeds=[1], confirm=False, search={
        "searcher": "random", "num_configs": 2,
        "space": {"smoothing.method": {"choice": ["LS"]}, "smoothing.epsilon": {"uniform": [0.05, 0.3]}}})
    spec = load_spec(path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_study(spec, tracking_uri=uri, progress=lambda m: None)
    search = Path(spec.phase_dir("search"))
    for f in search.iterdir():
        if f.name != "tuner.pkl":
            shutil.rmtree(f) if f.is_dir() else f.unlink()
    capfd.readouterr()
    run_study(spec, tracking_uri=uri, resume=True, progress=lambda m: None)
    assert "Failed to restore" not in capfd.readouterr().err
    state = max(search.glob("experiment_state*.json"))
    assert len(json.loads(state.read_text())["trial_data"]) == 2
