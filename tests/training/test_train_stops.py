"""`harness train` refuses what it cannot finish before it builds data or opens an MLflow run, and
every way it stops ends the runs it opened: none stays RUNNING (a table of the experiment then
called a finished study "still running", and `harness train --resume` found its run open)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.tracking import conventions as C

REPO = Path(__file__).resolve().parents[2]
TINY = ["--set", "model.name=tiny", "--set", "model.max_length=32", "--set", "data.conversations=30",
        "--set", "data.max_dev_queries=8", "--set", "data.max_test_queries=8", "--set", "train.eval_every=2",
        "--set", "train.batch_size=8"]


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("harness: error: "), err
    return err[0]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory and data cache: a refusal before data leaves both empty."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_a_cuda_device_without_a_gpu_is_refused_before_the_data(here, capsys):
    # It was an AssertionError traceback from torch once the data was built.
    assert main(["train", *TINY, "--set", "train.device=cuda", "--no-mlflow"]) == 2
    assert ("train.device=cuda: this machine has no CUDA GPU (or a torch built without CUDA); use "
            "train.device=cpu or auto") in _one_line(capsys)
    assert not (here / "cache").exists()


@pytest.mark.parametrize("make, argv, message", [
    # a folder that cannot be made failed at the first evaluation, after the data and training
    (lambda d: (d / "afile").write_text(""), ["--checkpoint-dir", "afile/sub"],
     "--checkpoint-dir afile/sub: afile is a file, not a directory"),
    # another run's resumable checkpoint was replaced without a word
    (lambda d: ((d / "ck").mkdir(), (d / "ck" / "trainer.pt").write_bytes(b"x")), ["--checkpoint-dir", "ck"],
     "--checkpoint-dir ck holds a checkpoint (trainer.pt): pass --resume to continue it, or choose another folder"),
    # an empty folder to resume from failed once the data was built, with the study run left RUNNING
    (lambda d: (d / "ck").mkdir(), ["--checkpoint-dir", "ck", "--resume"],
     "--checkpoint-dir ck: no checkpoint (trainer.pt) there to resume"),
])
def test_a_checkpoint_folder_it_cannot_use_is_refused_before_the_data(here, capsys, make, argv, message):
    make(here)
    before = sorted(p.name for p in here.iterdir())
    assert main(["train", *TINY, *argv]) == 2
    assert message in _one_line(capsys)
    assert sorted(p.name for p in here.iterdir()) == before  # no data cache, no MLflow store


def test_data_that_does_not_load_leaves_no_run_open(here, capsys):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{here / 'mlflow.db'}"
    (here / "empty").mkdir()  # a folder without the data set's files (/nonexistent is a folder on some machines)
    assert main(["train", "--set", "model.name=tiny", "--set", "data.source=msdialog", "--set",
                 f"data.path={here / 'empty'}", "--experiment", "e1", "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"harness: error: {here / 'empty'}: missing train.tsv", err
    exp = MlflowClient(uri).get_experiment_by_name("e1")
    assert MlflowClient(uri).search_runs([exp.experiment_id]) == []  # the study run was left RUNNING


@pytest.mark.slow  # builds a tiny data set and trains until the signal
# SIGHUP takes the same handler (harness.driver.interrupts): the heavy tests hold it
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, id="SIGTERM"),
                                 pytest.param(signal.SIGHUP, id="SIGHUP", marks=pytest.mark.heavy)])
def test_a_stop_signal_ends_its_runs_killed(tmp_path: Path, sig: signal.Signals) -> None:
    """`kill` (or a closed terminal) during training: exit 128 + the signal, the study, config and
    seed runs KILLED (the seed run with the stop as its error tag), none RUNNING, as a study's driver
    ends its runs when stopped. It died at once, all three left RUNNING; then the seed run ended
    FAILED, so a table called the stop a failure of training."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    log = tmp_path / "err.log"
    with log.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "train", *TINY, "--set", "train.steps=4000",
                                 "--experiment", "stop", "--tracking-uri", uri], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
        try:
            deadline = time.monotonic() + 300
            while "dev  @" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
            proc.send_signal(sig)
            rc = proc.wait(120)
        finally:
            if proc.poll() is None:
                proc.kill()
    lines = log.read_text().splitlines()
    assert rc == 128 + sig, lines
    assert lines[-1] == f"harness: interrupted ({sig.name})", lines
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("stop").experiment_id])
    status = {r.data.tags[C.TAG_KIND]: r.info.status for r in runs}
    assert status == {C.KIND_STUDY: "KILLED", C.KIND_CONFIG: "KILLED", C.KIND_TRIAL: "KILLED"}, status
    seed = next(r for r in runs if r.data.tags[C.TAG_KIND] == C.KIND_TRIAL)
    assert seed.data.tags[C.TAG_ERROR] == f"StudyInterrupted: {sig.name}"
