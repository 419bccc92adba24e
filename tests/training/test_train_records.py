"""`harness train` records a one-configuration study through harness.tracking.records: real
training (tiny model), real MLflow (SQLite); its seed run carries a study seed run's tags."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.results.mlflow_reader import read_experiment
from harness.tracking import conventions as C
from tests.study.conftest import shared_cache

pytestmark = pytest.mark.slow  # trains twice (tiny model) and reads MLflow back

ARGS = ["train", "--set", "model.name=tiny", "--set", "model.max_length=32", "--set", "data.conversations=30",
        "--set", "data.max_dev_queries=8", "--set", "data.max_test_queries=16", "--set", "train.steps=4",
        "--set", "train.eval_every=2", "--set", "train.batch_size=8", "--experiment", "one"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_CACHE", shared_cache())
    try:
        assert main([*ARGS, "--seed", "3", "--tracking-uri", uri]) == 0
        yield uri, mp
    finally:
        mp.undo()


def test_train_records_study_config_and_seed_run_with_the_study_tags(trained):
    uri, _ = trained
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("one")
    runs = {r.data.tags[C.TAG_KIND]: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {C.KIND_STUDY, C.KIND_CONFIG, C.KIND_TRIAL}
    study, config, seed = runs[C.KIND_STUDY], runs[C.KIND_CONFIG], runs[C.KIND_TRIAL]
    cid = config.data.tags[C.TAG_CONFIG_ID]
    assert seed.data.tags["mlflow.parentRunId"] == config.info.run_id
    assert config.data.tags["mlflow.parentRunId"] == study.info.run_id
    assert {k: seed.data.tags.get(k) for k in (C.TAG_CONFIG_ID, C.TAG_SEED, C.TAG_ROLE, C.TAG_TRIAL_KEY,
                                               C.TAG_STUDY, C.TAG_DONE)} == {
        C.TAG_CONFIG_ID: cid, C.TAG_SEED: "3", C.TAG_ROLE: C.ROLE_CANDIDATE, C.TAG_TRIAL_KEY: f"{cid}-seed3",
        C.TAG_STUDY: "one", C.TAG_DONE: "1"}
    assert seed.data.tags[C.TAG_EVAL_FINGERPRINT]
    assert seed.info.status == "FINISHED" and seed.data.params["train.seed"] == "3"
    assert {"test_map", "best_step", "objective", "trial_started", "train_loss"} <= set(seed.data.metrics)
    assert [m.step for m in client.get_metric_history(seed.info.run_id, "dev_map")] == [2, 4]
    # the TREC run files on the seed run, the qrels on the study run, as a study's
    assert {a.path for a in client.list_artifacts(seed.info.run_id, "runs")} == {"runs/dev.trec", "runs/test.trec"}
    assert {a.path for a in client.list_artifacts(study.info.run_id, "qrels")} == {"qrels/dev.qrels",
                                                                                 "qrels/test.qrels"}
    # ... and the table reader reads it back, per-query values included.
    results = read_experiment("one", tracking_uri=uri, baseline=config.info.run_name)
    assert results.configs == (config.info.run_name,)
    assert results.runs[(config.info.run_name, "3")].values["map"] == pytest.approx(seed.data.metrics["test_map"])


def test_training_a_recorded_configuration_and_seed_again_is_refused(trained, capsys):
    uri, _ = trained
    assert main([*ARGS, "--seed", "3", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "already has a finished run of configuration" in err and "seed 3" in err


def test_its_seed_run_cannot_be_exported_and_says_why(trained, capsys, tmp_path):
    """`harness export` takes a study's seed run (its model from MLflow or Tune's storage); a
    `harness train` run has neither, and the export said only "the study run records no
    study.storage_path"."""
    uri, _ = trained
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("one")
    seed = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags[C.TAG_KIND] == C.KIND_TRIAL)
    capsys.readouterr()
    assert main(["export", seed.info.run_id, "--to", str(tmp_path / "out"), "--tracking-uri", uri]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        (f"harness: error: run id {seed.info.run_id}: its study run records no Tune storage (study.storage_path) "
        "and the run logged no model, as a `harness train` run's: export the runs of a study (`harness run`), "
        "or keep `harness train --checkpoint-dir`'s trainer.pt")]
    assert not (tmp_path / "out").exists()


def test_its_run_files_export_with_the_baseline_named(trained, capsys, tmp_path):
    """`harness runs export` of a train experiment (no baseline: train records a candidate) said
    "name one with --baseline", an option it did not have; it has it, as `harness table` does, and
    the export's per_query.csv holds the seed run's per-query test values."""
    import csv

    uri, _ = trained
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("one")
    config = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags[C.TAG_KIND] == C.KIND_CONFIG)
    capsys.readouterr()
    assert main(["runs", "export", "--experiment", "one", "--tracking-uri", uri, "--to", str(tmp_path / "a")]) == 2
    assert "name one with --baseline" in capsys.readouterr().err
    assert main(["runs", "export", "--experiment", "one", "--tracking-uri", uri, "--to", str(tmp_path / "b"),
                 "--baseline", config.info.run_name]) == 0, capsys.readouterr().err
    rows = list(csv.DictReader((tmp_path / "b" / "per_query.csv").open()))
    assert {r["seed"] for r in rows} == {"3"} and (tmp_path / "b" / "runs" / "test").is_dir()


def test_an_interrupted_train_experiment_says_its_own_command_finishes_it(trained, capsys, tmp_path):
    """The table of an interrupted `harness train` experiment named `harness run STUDY --resume`,
    a command for study files, as what finishes it."""
    import shutil

    uri, _ = trained
    copy = tmp_path / "mlflow.db"
    shutil.copy(uri.removeprefix("sqlite:///"), copy)
    client = MlflowClient(f"sqlite:///{copy}")
    exp = client.get_experiment_by_name("one")
    runs = {r.data.tags[C.TAG_KIND]: r for r in client.search_runs([exp.experiment_id])}
    assert runs[C.KIND_STUDY].data.tags[C.TAG_ORIGIN] == C.ORIGIN_TRAIN
    client.set_terminated(runs[C.KIND_STUDY].info.run_id, "KILLED")
    capsys.readouterr()
    rc = main(["table", "--experiment", "one", "--tracking-uri", f"sqlite:///{copy}",
               "--baseline", runs[C.KIND_CONFIG].info.run_name])
    out, err = capsys.readouterr()
    assert rc == 3, err
    assert "its `harness train` command again, with --resume where it kept a --checkpoint-dir, finishes it" in out + err
    assert "harness run" not in out + err


def test_a_studys_experiment_is_refused_before_anything_is_written(tmp_path, capsys):
    """`harness train --experiment STUDY` reopened a finished study's run, replaced its qrels, ended it
    KILLED or FINISHED and added a one-seed configuration its table refused; a study's experiment
    (it has a baseline, which train never records) is refused, its records unchanged."""
    from tests.synthetic import synthetic_records, write_study_records

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_study_records(uri, "study", synthetic_records(queries=6, effects={"base": 0.0, "better": 0.1}),
                        {"base": "baseline", "better": "ls"}, failed=False)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("study")
    before = sorted((r.info.run_id, r.info.status) for r in client.search_runs([exp.experiment_id]))
    args = [a if a != "one" else "study" for a in ARGS]
    assert main([*args, "--seed", "3", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--experiment study: it is a study's experiment (harness run)" in err, err
    assert sorted((r.info.run_id, r.info.status) for r in client.search_runs([exp.experiment_id])) == before
