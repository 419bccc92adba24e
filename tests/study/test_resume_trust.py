"""Resume trusts only Tune state the study's driver signed (harness.driver._state_trust), through real
Ray and MLflow: a planted ``tuner.pkl`` whose unpickling would run code is refused, never opened;
state without the driver's signature is refused; a wiped store is said, not "every trial recorded";
deleting the refused state resumes from MLflow's records alone. docs/reliability.md.

The study runs from a directory whose name is no URI (a space, a non-ASCII letter, ``<`` and
``%``) on the defaults, which put everything under the working directory (Tune storage ``runs``,
the MLflow store ``mlruns``): every path the harness hands to Tune, pyarrow, SQLite and MLflow
holds these characters, and its table is read back from the same store. Its one trial fails once
after its step-3 checkpoint (the trainable's test hooks), is retried from it, and ends as if it
never failed: with the test MAP of the session's finished study's same trial (the baseline, seed 1;
tests/conftest.py's ``finished_study``)."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.tracking import conventions as C
from harness.tracking.store import default_tracking_uri
from tests.study.conftest import SHARED, write_study


class _Planted:
    """What an attacker writes as tuner.pkl: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


ODD = "my runs ü<%"


@pytest.fixture(scope="module")
def study(ray_root: Path) -> Iterator[tuple[Path, str]]:
    """A finished study of the finished study's baseline at seed 1 (its Tune state signed as the
    driver wrote it), run by `harness run` from the directory ``ODD`` on the default storage and
    store, its trial failing once (``ODD/fail`` marks it, ``ODD/trials.log`` has its starts); the
    module's tests run there."""
    from harness.cli import build_parser, dispatch
    from harness.cli.study import cmd_run
    from harness.driver.runner import TrialHooks

    odd = ray_root / ODD
    (odd / "fail").mkdir(parents=True)
    hooks = TrialHooks(fail_once_dir=str(odd / "fail"), trial_log=str(odd / "trials.log"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(odd)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        path = write_study(odd, "trust", storage_path="runs",
                           **{**SHARED, "models": "none", "configs": {}, "seeds": [1]})
        assert dispatch(lambda a: cmd_run(a, hooks=hooks), build_parser().parse_args(["run", str(path)])) == 0
        yield path, default_tracking_uri()


def _test_maps(uri: str, name: str) -> dict[str, float]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return {r.data.tags[C.TAG_TRIAL_KEY]: r.data.metrics["test_map"]
            for r in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")}


@pytest.mark.slow
def test_a_study_runs_from_a_directory_with_a_space_a_letter_and_percent(study, capsys):
    path, uri = study
    odd = path.parent
    assert uri == f"sqlite:///{odd / 'mlruns' / 'mlflow.db'}"
    assert (odd / "runs" / "trust-fixed").is_dir()
    assert (odd / "mlruns" / "mlflow.db").is_file()
    assert any((odd / "mlruns" / "artifacts" / "trust").rglob("per_query/test.csv"))
    capsys.readouterr()
    assert main(["table", "--experiment", "trust", "--format", "csv"]) == 0
    assert "baseline" in capsys.readouterr().out


def _statuses(uri: str) -> dict[str, tuple[str, int]]:
    """Every run of the study: its status and end time."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trust")
    return {r.info.run_id: (r.info.status, r.info.end_time) for r in client.search_runs([exp.experiment_id])}


def _resume(path: Path, uri: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["run", str(path), "--tracking-uri", uri, "--resume"])
    return rc, capsys.readouterr().err


@pytest.mark.slow
def test_resume_of_signed_state_goes_on_and_replays(study, capsys):
    path, uri = study
    rc, err = _resume(path, uri, capsys)
    assert rc == 0, err


@pytest.mark.slow
def test_a_resume_with_other_overrides_is_refused_and_changes_nothing(study, tmp_path, capsys):
    """Tune would replay the recorded trials under a configuration the changed file does not have:
    the resume is refused in one line before it writes, naming the changed keys (a default a newer
    harness changed shows the same way), and the finished study stays finished."""
    path, uri = study
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trust")
    runs = {r.info.run_id: (r.info.status, r.info.end_time) for r in client.search_runs([exp.experiment_id])}
    capsys.readouterr()
    rc = main(["run", str(path), "--tracking-uri", uri, "--resume", "--set", "train.lr=0.0001"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("harness: error: study 'trust': 1 of the configurations it recorded "
                                      "are not in this study file with these overrides"), err
    assert "(train.lr: recorded 0.001, now 0.0001)" in err, err  # what changed, to set it back
    assert len(err.strip().splitlines()) == 1
    # A new run of the changed file into the same store, with no Tune state (another storage path,
    # as after a newer harness changed a default): refused alike, not a second baseline beside it.
    other = write_study(tmp_path, "trust", storage_path=tmp_path / "runs",
                        **{**SHARED, "models": "none", "configs": {}, "seeds": [1]})
    rc = main(["run", str(other), "--tracking-uri", uri, "--set", "train.lr=0.0001"])
    err = capsys.readouterr().err
    assert rc == 2 and "(train.lr: recorded 0.001, now 0.0001)" in err and len(err.strip().splitlines()) == 1, err
    assert {r.info.run_id: (r.info.status, r.info.end_time)
            for r in client.search_runs([exp.experiment_id])} == runs


@pytest.mark.slow
def test_a_resume_or_a_new_run_with_other_seeds_is_refused_and_changes_nothing(study, tmp_path, capsys):
    """The configurations alone were compared: a resume with seeds [1, 2] ended "finished" without
    seed 2, and a new run into the store with seeds [2] made a table over seeds 1 and 2 while the
    study run said 1. Both are refused in one line naming the seeds; nothing changes."""
    path, uri = study
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trust")
    runs = {r.info.run_id: (r.info.status, r.info.end_time) for r in client.search_runs([exp.experiment_id])}
    capsys.readouterr()
    two = write_study(tmp_path, "trust", storage_path=path.parent / "runs",
                      **{**SHARED, "models": "none", "configs": {}, "seeds": [1, 2]})
    (tmp_path / "other").mkdir()
    other = write_study(tmp_path / "other", "trust", storage_path=tmp_path / "runs",
                        **{**SHARED, "models": "none", "configs": {}, "seeds": [2]})
    for argv, now in ((["run", str(two), "--resume"], "1,2"), (["run", str(other)], "2")):
        rc = main([*argv, "--tracking-uri", uri])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith("harness: error: study 'trust': its MLflow study run recorded another "
                                          f"plan (seeds: recorded 1, now {now}"), err
        assert len(err.strip().splitlines()) == 1, err
    assert {r.info.run_id: (r.info.status, r.info.end_time)
            for r in client.search_runs([exp.experiment_id])} == runs


@pytest.mark.slow
def test_a_planted_tuner_pkl_is_refused_and_never_unpickled(study, tmp_path, capsys):
    path, uri = study
    state = path.parent / "runs" / "trust-fixed"
    marker = tmp_path / "pwned"
    original = (state / "tuner.pkl").read_bytes()
    (state / "tuner.pkl").write_bytes(pickle.dumps(_Planted(marker)))
    before = _statuses(uri)
    try:
        rc, err = _resume(path, uri, capsys)
    finally:
        (state / "tuner.pkl").write_bytes(original)
    assert not marker.exists()  # the code in the planted pickle never ran
    assert rc == 2 and err.endswith("\n") and "Traceback" not in err, err
    # refused before the resume records anything: the finished study stays FINISHED (it ended FAILED)
    assert _statuses(uri) == before and before and {s for s, _ in before.values()} == {"FINISHED"}
    assert len(err.strip().splitlines()) == 1, err
    assert f"Ray Tune state file {state}/tuner.pkl is not one the study's driver wrote" in err
    assert "so it is refused; delete" in err


@pytest.mark.slow
def test_an_added_state_file_and_a_forged_signature_are_refused(study, capsys):
    path, uri = study
    state = path.parent / "runs" / "trust-fixed"
    extra = state / "experiment_state-2099-01-01_00-00-00.json"
    extra.write_text("{}")
    before = _statuses(uri)
    try:
        rc, err = _resume(path, uri, capsys)
    finally:
        extra.unlink()
    assert rc == 2 and "experiment_state-2099-01-01_00-00-00.json is not one the study's driver wrote" in err
    assert _statuses(uri) == before
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("trust")
    study_run = client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = 'study'")[0]
    tag = C.TAG_TUNE_STATE_PREFIX + "fixed"
    signed = study_run.data.tags[tag]
    client.set_tag(study_run.info.run_id, tag, signed.replace('"hmac": "', '"hmac": "0'))
    try:
        rc, err = _resume(path, uri, capsys)
    finally:
        client.set_tag(study_run.info.run_id, tag, signed)
    assert rc == 2 and "does not verify under this driver's key" in err, err


@pytest.mark.slow
def test_a_wiped_store_is_said_and_deleting_the_state_resumes_from_mlflow(study, tmp_path, capsys):
    path, _ = study
    wiped = f"sqlite:///{tmp_path / 'new.db'}"
    rc, err = _resume(path, wiped, capsys)
    assert rc == 2 and "has no record of it (wiped, or another --tracking-uri?)" in err, err
    assert "recorded" not in err.split("has no record")[0]
    # the way out the refusals name: without Tune's state, resume replays the recorded trials
    import shutil

    _, uri = study
    before = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("trust").experiment_id])
    shutil.rmtree(path.parent / "runs" / "trust-fixed")
    rc, err = _resume(path, uri, capsys)
    assert rc == 0, err
    after = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("trust").experiment_id])
    assert len(after) == len(before)  # no trial trained or recorded twice


@pytest.mark.slow
def test_the_suites_own_ray_listens_on_loopback_only(ray_root):
    """The session's Ray (tests/study/conftest.py) binds 127.0.0.1, as a study's does."""
    import psutil
    import ray

    assert ray.nodes()[0]["NodeManagerAddress"] == "127.0.0.1"
    me = psutil.Process()
    ray_procs = [p for p in me.children(recursive=True) if p.name() in ("gcs_server", "raylet")]
    assert {p.name() for p in ray_procs} == {"gcs_server", "raylet"}
    listening = [(p.name(), c.laddr.ip) for p in ray_procs for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(_loopback(ip) for _, ip in listening), listening


def _loopback(ip: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(ip)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return (mapped or address).is_loopback


@pytest.mark.slow
def test_a_failed_trial_is_retried_from_its_checkpoint_and_ends_as_if_it_never_failed(study, request):
    """Last in the module: it waits for the finished study, which the other worker builds meanwhile."""
    path, uri = study
    assert len(list((path.parent / "fail").iterdir())) == 1  # the trial failed once
    restarts = [ln for ln in (path.parent / "trials.log").read_text().splitlines() if " start 3" in ln]
    assert len(restarts) == 1  # ... and was resumed from its step-3 checkpoint
    # The finished study asked for only now: under xdist the other worker runs it meanwhile.
    finished = request.getfixturevalue("finished_study")
    retried, plain = _test_maps(uri, "trust"), _test_maps(finished.uri, finished.name)
    assert len(retried) == 1 and retried == {key: plain[key] for key in retried}
