"""A study whose storage_path is s3:// (a real S3 API: moto's server on this machine, reached
through pyarrow and Ray Tune exactly as a bucket would be): trial checkpoints, per-query files and
the early-stopping state live in the bucket, the study run reports where and how much, and a second
`harness run` without --resume sees the state there and refuses. The study is the early-stopping one
(tests/study/test_early_stop_study.py's ES), and its early stopping is checked here too."""

from __future__ import annotations

import os

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.errors import HarnessError
from harness.study.protocol import PER_QUERY_FILE
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import local_ray, write_study
from tests.study.test_early_stop_study import (
    ES,
    check_the_configuration_that_cannot_learn_is_stopped_at_the_first_rung,
)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch):
    """A bucket ``harness-runs`` on a local S3 server; the AWS variables pyarrow and Ray's workers read."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3")
    client.create_bucket(Bucket="harness-runs")
    try:
        yield client
    finally:
        server.stop()


@pytest.mark.heavy
def test_a_study_on_s3_keeps_checkpoints_and_state_in_the_bucket(tmp_path, s3):
    lines: list[str] = []
    with local_ray(tmp_path, own=True) as root:  # its workers read the AWS variables set above
        path = write_study(root, "es-s3", **ES, storage_path="s3://harness-runs/studies")
        uri = f"sqlite:///{root / 'mlflow.db'}"
        out = run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
        with pytest.raises(HarnessError, match="already has Ray Tune state at s3://harness-runs/studies/es-s3-fixed"):
            run_study(load_spec(path), tracking_uri=uri, progress=lines.append)
    assert set(out["configs"]) == {"baseline", "ls"}  # diverging-lr stopped, as on a local path
    # ... and everything early stopping leaves in MLflow (the one run of this study in the suite)
    check_the_configuration_that_cannot_learn_is_stopped_at_the_first_rung(uri, "es-s3", out, lines, tmp_path)
    listed = [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket="harness-runs", Prefix="studies/")
              for o in page.get("Contents", [])]
    keys = [o["Key"] for o in listed]
    assert "studies/es-s3-fixed/early_stopping.json" in keys
    # every finished trial's outcome checkpoint, with its per-query values, is in the bucket
    per_query = [k for k in keys if k.startswith("studies/es-s3-fixed/") and k.endswith("/" + PER_QUERY_FILE)]
    assert len(per_query) == 4, keys  # baseline and ls, 2 seeds each
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("es-s3")
    study = next(r for r in client.search_runs([exp.experiment_id], max_results=1000)
                 if r.data.tags.get(C.TAG_KIND) == C.KIND_STUDY)
    assert study.data.tags[C.TAG_STORAGE] == "s3://harness-runs/studies/es-s3-fixed"
    assert study.data.metrics[C.METRIC_STORAGE_BYTES] == sum(o["Size"] for o in listed
                                                             if o["Key"].startswith("studies/es-s3-fixed/"))
    assert any("storage: " in ln and "s3://harness-runs/studies/es-s3-fixed" in ln for ln in lines)
    assert os.environ["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


def test_exists_usage_and_remove_on_a_local_path_and_on_s3(tmp_path, s3):
    """The storage helpers behind the state check, `harness demo`'s fresh start and the storage
    report give the same answers on a local path and in a bucket."""
    import pyarrow.fs as pafs

    from harness.driver import _storage as storage

    local = tmp_path / "runs" / "s-fixed"
    (local / "trial").mkdir(parents=True)
    (local / "trial" / "result.json").write_bytes(b"12345")
    fs, _ = pafs.FileSystem.from_uri("s3://harness-runs/x")
    with fs.open_output_stream("harness-runs/runs/s-fixed/trial/result.json") as fh:
        fh.write(b"12345")
    for where in (str(local), "s3://harness-runs/runs/s-fixed"):
        assert storage.exists(where) and storage.usage(where) == (5, 1)
        storage.remove(where)
        assert not storage.exists(where) and storage.usage(where) == (0, 0)
        storage.remove(where)  # nothing there: no error


def test_a_phase_in_a_bucket_is_restorable_as_one_on_a_local_path(tmp_path, s3):
    """Resume restores a phase that holds Tune's experiment state: found through pyarrow in a bucket
    as on a local path (a local glob of the URI found nothing, so every phase of a study on s3
    started anew on --resume); tuner.pkl alone (a driver stopped before Tune's first state) is not
    restorable."""
    import pyarrow.fs as pafs

    from harness.driver._orchestrate import restorable
    from harness.driver._storage import file_names

    fs, _ = pafs.FileSystem.from_uri("s3://harness-runs/x")
    local = tmp_path / "runs" / "s-fixed"
    local.mkdir(parents=True)
    for where, write in ((str(local), lambda name: (local / name).write_bytes(b"{}")),
                         ("s3://harness-runs/runs/s-fixed",
                          lambda name: fs.open_output_stream(f"harness-runs/runs/s-fixed/{name}").close())):
        assert file_names(where) == [] and not restorable(where)
        write("tuner.pkl")
        assert file_names(where) == ["tuner.pkl"] and not restorable(where)
        write("experiment_state-2026-12-07_10-00-00.json")
        assert restorable(where), where
