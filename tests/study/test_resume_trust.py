"""Resume trusts only Tune state the study's driver signed (harness.driver._state_trust), through real
Ray and MLflow: a planted ``tuner.pkl`` whose unpickling would run code is refused, never opened;
state without the driver's signature is refused; a wiped store is said, not "every trial recorded";
deleting the refused state resumes from MLflow's records alone. docs/reliability.md.

The study runs from a directory whose name is no URI (a space, a non-ASCII letter, ``<`` and
``%``) on the defaults, which put everything under the working directory (Tune storage ``runs``,
the MLflow store ``mlruns``): every path the harness hands to Tune, pyarrow, SQLite and MLflow
holds these characters, and its table is read back from the same store."""

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
from tests.study.conftest import write_study


class _Planted:
    """What an attacker writes as tuner.pkl: unpickling it runs a shell command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


ODD = "my runs ü<%"


@pytest.fixture(scope="module")
def study(ray_root: Path) -> Iterator[tuple[Path, str]]:
    """A finished one-seed study (its Tune state signed as the driver wrote it), run from the
    directory ``ODD`` on the default storage and store; the module's tests run there."""
    odd = ray_root / ODD
    odd.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(odd)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        path = write_study(odd, "trust", storage_path="runs", seeds=[1])
        assert main(["run", str(path)]) == 0
        yield path, default_tracking_uri()


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
def test_a_planted_tuner_pkl_is_refused_and_never_unpickled(study, tmp_path, capsys):
    path, uri = study
    state = path.parent / "runs" / "trust-fixed"
    marker = tmp_path / "pwned"
    original = (state / "tuner.pkl").read_bytes()
    (state / "tuner.pkl").write_bytes(pickle.dumps(_Planted(marker)))
    try:
        rc, err = _resume(path, uri, capsys)
    finally:
        (state / "tuner.pkl").write_bytes(original)
    assert not marker.exists()  # the code in the planted pickle never ran
    assert rc == 2 and err.endswith("\n") and "Traceback" not in err, err
    err = err.splitlines()[-1]  # the refusal: the last line, one line (progress lines come before it)
    assert f"Ray Tune state file {state}/tuner.pkl is not one the study's driver wrote" in err
    assert "so it is refused; delete" in err


@pytest.mark.slow
def test_an_added_state_file_and_a_forged_signature_are_refused(study, capsys):
    path, uri = study
    state = path.parent / "runs" / "trust-fixed"
    extra = state / "experiment_state-2099-01-01_00-00-00.json"
    extra.write_text("{}")
    try:
        rc, err = _resume(path, uri, capsys)
    finally:
        extra.unlink()
    assert rc == 2 and "experiment_state-2099-01-01_00-00-00.json is not one the study's driver wrote" in err
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
