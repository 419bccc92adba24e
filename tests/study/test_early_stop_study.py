"""Early stopping on real Ray with real MLflow: a configuration that cannot learn is stopped at the
first rung, the baseline and the good configuration run to the end, the table leaves it out with a
footnote, and the steps saved are on the study run. One driver per study: a killed driver's study
refuses a second driver while it runs and resumes without reruns, duplicates or the stopped
configuration trained again."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

STEPS = 20
# Longer than the template's, so that the rungs (0.25 and 0.5 of 20 steps) fall on dev evaluations,
# at steps 5 and 10.
BUDGET = {"data": {"max_dev_queries": 16}, "train": {"steps": STEPS, "eval_every": 5, "lr": 3.0e-3}}
# The early-stopping study (test_storage_s3 runs it on S3 and checks it with
# check_the_configuration_that_cannot_learn_is_stopped_at_the_first_rung below): a configuration
# that learns and one that diverges, against the baseline.
ES = {**BUDGET,
      "configs": {"ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.1}, "diverging-lr": {"train.lr": 0.5}},
      "early_stopping": {"rungs": [0.25, 0.5], "reduction_factor": 2}}


def check_the_configuration_that_cannot_learn_is_stopped_at_the_first_rung(
        uri: str, name: str, out: dict, lines: list[str], tmp_path: Path) -> None:
    """What the early-stopping study ``ES`` (run as ``name`` into the MLflow store at ``uri``; ``out``
    and ``lines`` are run_study's return and progress lines) holds, wherever its Tune storage is:
    tests/study/test_storage_s3.py runs it once, on S3, and checks this besides the bucket (one
    study for both: the behaviour does not depend on the storage, and the study run's storage
    report on a local path is checked on the session's shared study, tests/study/test_run.py)."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    configs = {r.info.run_name: r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG}
    trials = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    study = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    # the diverging configuration (its scores collapse to ties: the worst MAP) is stopped at the first
    # rung (0.25 of 20 steps: the evaluation at step 5)
    bad = configs["diverging-lr"]
    assert bad.data.tags[C.TAG_STOPPED] == "1" and bad.data.tags[C.TAG_STOPPED_RUNG] == "5"
    assert "ranks 3 of 3" in bad.data.tags[C.TAG_STOPPED_REASON]
    assert all(C.TAG_STOPPED not in configs[n].data.tags for n in ("baseline", "ls"))
    # its seed runs that started end KILLED, with their dev curve up to the rung; the others finish
    bad_id = bad.data.tags[C.TAG_CONFIG_ID]
    steps_run = 0
    for t in trials:
        hist = client.get_metric_history(t.info.run_id, "dev_map")
        if t.data.tags[C.TAG_CONFIG_ID] == bad_id:
            assert t.info.status == "KILLED" and t.data.tags[C.TAG_STOPPED] == "1"
            assert hist and max(m.step for m in hist) == 5
            steps_run += 5
        else:
            assert t.info.status == "FINISHED" and max(m.step for m in hist) == STEPS
            steps_run += STEPS
    assert len([t for t in trials if t.data.tags[C.TAG_CONFIG_ID] != bad_id]) == 4
    # fewer trial-steps than without early stopping, saved ones on the study run and printed
    full = 3 * 2 * STEPS
    saved = study.data.metrics[C.METRIC_STEPS_SAVED]
    assert study.data.metrics[C.METRIC_STEPS_RUN] == steps_run < full
    assert saved == full - steps_run > 0
    assert (f"early stopping: 1 of 3 configuration(s) stopped (2 of 6 trials): diverging-lr (step 5); "
            f"{int(saved)} trial-steps saved of {full} ({100 * saved / full:.0f}%), {steps_run} run") in lines
    # its description (a tested configuration's verdict) says why it has no verdict
    assert bad.data.tags[C.TAG_NOTE] == f"stopped early at step 5: {bad.data.tags[C.TAG_STOPPED_REASON]}"
    # the table compares baseline and ls only, the footnote names the stopped configuration
    assert set(out["configs"]) == {"baseline", "ls"}
    table = Path(client.download_artifacts(study.info.run_id, "tables/seeds.md", str(tmp_path))).read_text()
    assert "diverging-lr (at step 5:" in table and "| diverging-lr" not in table


@pytest.mark.heavy
def test_search_phase_proposals_are_stopped_against_the_fixed_configurations(ray_root):
    """In a search phase, a proposal (it diverges: lr 0.5) is judged against the baseline's stored
    value at the rung and stopped there with all its seeds. (One proposal: two diverging ones would
    tie at the rung, and a tie keeps a configuration.)"""
    lines: list[str] = []
    root = ray_root
    path = write_study(root, "es-search", **BUDGET, search={
        "searcher": "random", "num_configs": 1,
        "space": {"train.lr": {"choice": [0.5]}, "smoothing.epsilon": {"uniform": [0.05, 0.3]}}},
        early_stopping={"rungs": [0.25], "reduction_factor": 2})
    uri = f"sqlite:///{root / 'mlflow.db'}"
    out = run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("es-search")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    configs = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG]
    proposals = [r for r in configs if r.data.tags.get(C.TAG_ROLE) != C.ROLE_BASELINE]
    assert len(proposals) == 1
    for r in proposals:
        assert r.data.tags[C.TAG_STOPPED] == "1" and r.data.tags[C.TAG_STOPPED_RUNG] == "5", r.info.run_name
    base = next(r for r in configs if r.data.tags.get(C.TAG_ROLE) == C.ROLE_BASELINE)
    assert C.TAG_STOPPED not in base.data.tags
    assert set(out["configs"]) == {base.info.run_name}
    study = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    assert study.data.metrics[C.METRIC_STOPPED] == 1 and study.data.metrics[C.METRIC_STEPS_SAVED] > 0
    assert any(ln.startswith("early stopping: 1 of 2 configuration(s) stopped (2 of 4 trials): ") for ln in lines)




@pytest.mark.heavy
def test_a_killed_driver_refuses_a_second_driver_then_resumes_without_reruns_and_stopped_stays_stopped(
        ray_root, tmp_path, monkeypatch, capsys):
    """One driver per study, and a killed driver's study resumed, on one study with early stopping.

    While the driver runs, a second `harness run` of the same study is refused in one line (who
    holds it, how to resume). The driver is then SIGKILLed right after a configuration is stopped;
    its lease stays but does not block `harness run --resume` (run in this process, on the
    session's Ray), which takes it over, reruns no finished trial, leaves no duplicate seed run and
    does not train the stopped configuration again (the stop is read back from the study's storage
    path).

    Two trials at a time, in grid order (baseline, ls, diverging-lr; seeds 1, 2). ls's second seed
    waits after its step-5 evaluation (a testing hook) until the test lets it go, so when
    diverging-lr's first seed reaches the rung all three configurations have a value there (it is
    stopped), the driver is still running when the second driver tries, and ls's second seed is
    still training when the driver dies, whatever the timing."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from harness.cli import main
    from harness.driver.lease import TIMEOUT_ENV
    from tests.study.hooked_run import main as hooked_run

    root = tmp_path
    path = write_study(root, "es-resume", **ES)
    spec = load_spec(path)
    ls_key = next(f"{nc.config.config_id()}-seed2" for nc in spec.configs if nc.name == "ls")
    gate = root / "go"
    uri = f"sqlite:///{root / 'mlflow.db'}"
    log = root / "trials.log"
    lease = root / "runs" / "es-resume.lease"
    knobs = {"MLFLOW_TRACKING_URI": uri, TIMEOUT_ENV: "5"}
    env = {**os.environ, **knobs}
    # `harness run` with the trial hooks injected (tests/study/hooked_run.py)
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "--hold", str(gate), ls_key,
           "run", str(path)]
    state = root / "runs" / "es-resume-fixed" / "early_stopping.json"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 400
        while time.time() < deadline:
            if state.exists():
                try:
                    if json.loads(state.read_text()).get("stopped"):
                        break
                except ValueError:
                    pass
            assert proc.poll() is None, "the study ended before a configuration was stopped"
            time.sleep(0.05)
        else:
            raise AssertionError("no configuration stopped within 400 s")
        # the second driver: the same `harness run`, in this process (refused at once)
        for key, value in knobs.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        assert main(["run", str(path)]) == 2
        line = capsys.readouterr().err.strip()
        assert proc.poll() is None, "the first driver ended before the second was tried"
        assert "\n" not in line
        assert line.startswith(f"harness: error: study 'es-resume' is already being run by pid {proc.pid} on host ")
        assert f"run `harness run {path} --resume` after " in line
        assert "(at once, once that pid has exited)" in line
        # ... and the same study from another directory (its own storage path, so its own storage
        # lease) on the same tracking store: refused by the lease on the experiment, nothing written.
        other = tmp_path / "elsewhere"
        other.mkdir()
        monkeypatch.chdir(other)
        elsewhere = write_study(other, "es-resume", **{**ES, "storage_path": "runs"})
        client = MlflowClient(uri)
        before_runs = len(client.search_runs([client.get_experiment_by_name("es-resume").experiment_id]))
        assert main(["run", str(elsewhere)]) == 2
        line = capsys.readouterr().err.strip()
        assert "\n" not in line and proc.poll() is None
        assert line.startswith(f"harness: error: study 'es-resume' is already being run by pid {proc.pid} on host ")
        assert f"(from any working directory: the lease is tag {C.TAG_DRIVER} of MLflow experiment 'es-resume'" in line
        assert not list((other / "runs").glob("es-resume-*"))  # no Tune state
        assert len(client.search_runs([client.get_experiment_by_name("es-resume").experiment_id])) == before_runs
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert json.loads(lease.read_text())["pid"] == proc.pid  # the killed driver's lease stays ...
    stopped_id = next(iter(json.loads(state.read_text())["stopped"]))
    before = log.read_text().splitlines()
    finished_before = {ln.split()[0] for ln in before if " end " in ln}
    assert finished_before and ls_key not in finished_before, before
    gate.touch()
    # `harness run --resume` with the same hooks, in this process (on the session's Ray)
    capsys.readouterr()
    assert hooked_run(cmd[3:] + ["--resume"]) == 0  # ... and does not block --resume
    assert f"lease: taking over study 'es-resume' from pid {proc.pid}" in capsys.readouterr().err
    assert not lease.exists()
    assert C.TAG_DRIVER not in MlflowClient(uri).get_experiment_by_name("es-resume").tags  # released
    lines = log.read_text().splitlines()
    after = lines[len(before):]
    # no finished trial is trained again; the stopped configuration never trains past its rung;
    # the resumed driver finished ls's held seed
    assert not {ln.split()[0] for ln in after if " start " in ln} & finished_before, after
    assert not [ln for ln in lines if ln.startswith(stopped_id) and " end " in ln], lines
    assert any(ln.startswith(f"{ls_key} end ") for ln in after), lines
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("es-resume")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    trials = [r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL]
    keys = [r.data.tags[C.TAG_TRIAL_KEY] for r in trials]
    assert len(keys) == len(set(keys))  # no duplicate seed run
    assert len([r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG]) == 3
    assert len([r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY]) == 1
    done = [r for r in trials if r.data.tags[C.TAG_CONFIG_ID] != stopped_id]
    assert len(done) == 4 and all(r.info.status == "FINISHED" for r in done)
    bad = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_CONFIG
               and r.data.tags.get(C.TAG_CONFIG_ID) == stopped_id)
    assert bad.info.run_name == "diverging-lr" and bad.data.tags[C.TAG_STOPPED] == "1"
    for r in trials:
        if r.data.tags[C.TAG_CONFIG_ID] == stopped_id:
            assert r.data.tags.get(C.TAG_STOPPED) == "1"
            hist = client.get_metric_history(r.info.run_id, "dev_map")
            assert not hist or max(m.step for m in hist) <= 5
    study = next(r for r in runs if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    table = Path(client.download_artifacts(study.info.run_id, "tables/seeds.md", str(tmp_path))).read_text()
    assert "diverging-lr (at step 5:" in table and "| diverging-lr" not in table
    # A damaged early-stopping state on --resume of the finished study: refused in one line before
    # anything is recorded, so every run stays as it was (the study run ended FAILED before).
    statuses = {r.info.run_id: (r.info.status, r.info.end_time) for r in runs}
    good = state.read_bytes()
    state.write_bytes(good[: len(good) // 2])
    try:
        capsys.readouterr()
        assert main(["run", str(path), "--resume", "--tracking-uri", uri]) == 2
        err = capsys.readouterr().err
    finally:
        state.write_bytes(good)
    assert err.startswith(f"harness: error: early stopping state {state}: not JSON") and len(err.splitlines()) == 1, err
    assert {r.info.run_id: (r.info.status, r.info.end_time)
            for r in client.search_runs([exp.experiment_id], max_results=1000)} == statuses
