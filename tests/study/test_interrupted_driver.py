"""An interrupted driver, through real Ray and MLflow (harness.driver._orchestrate.interrupts): SIGINT
to the driver's process group (as a terminal sends Ctrl-C) or SIGTERM to the driver ends the
study's runs KILLED, says how to resume and exits 130 or 143; `harness table` of that study marks
the table incomplete and exits 3; `--resume` then finishes it. docs/reliability.md."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.study import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

ROOT = Path(__file__).resolve().parents[2]  # the repository: where `-m tests.study.hooked_run` is found


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """The driver's RAY_TMPDIR: short, as Ray's socket paths must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="int-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _drive(root: Path, ray_tmp: Path, name: str, *extra: str) -> tuple[subprocess.Popen[bytes], list[str], Path, str]:
    """`harness run` of a two-seed study (the baseline and one candidate, one trial at a time) in a
    subprocess (a session and a Ray of its own), the baseline's seed 2 held after its first
    evaluation until ``root/go`` exists (seed 1 has finished by then); returns (driver, its argv, trial log, the held trial's key)."""
    path = write_study(root, name, seeds=[1, 2], concurrency=1, configs={"ls": {"smoothing.method": "LS"}})
    key = f"{load_spec(path).baseline.config.config_id()}-seed2"
    log = root / "trials.log"
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "--hold", str(root / "go"), key,
           "run", str(path), *extra]
    env = {**os.environ, "RAY_TMPDIR": str(ray_tmp), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    env.pop("RAY_ADDRESS", None)
    # the driver's stderr to a file: a pipe nobody reads while it runs could fill and stall it
    err = (root / "driver.err").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, cwd=ROOT)
    return proc, cmd, log, key


def _wait_started(proc: subprocess.Popen[bytes], log: Path, key: str, timeout: float = 900) -> None:
    deadline = time.time() + timeout
    err = log.parent / "driver.err"
    while time.time() < deadline:
        if log.exists() and f"{key} start" in log.read_text():
            time.sleep(3)  # past the first evaluation: the trial is held, its seed run RUNNING
            return
        assert proc.poll() is None, err.read_text()
        time.sleep(0.2)
    raise AssertionError(f"trial {key} did not start within {timeout} s: {err.read_text()[-3000:]}")


def _statuses(uri: str, name: str) -> dict[str, list[str]]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    out: dict[str, list[str]] = {}
    for r in client.search_runs([exp.experiment_id], max_results=100):
        out.setdefault(r.data.tags[C.TAG_KIND], []).append(r.info.status)
    return out


def _interrupt(tmp_path: Path, ray_tmp: Path, name: str, sig: signal.Signals, group: bool) -> tuple[int, str, list[str]]:
    proc, cmd, log, key = _drive(tmp_path, ray_tmp, name)
    try:
        _wait_started(proc, log, key)
        if group:
            os.killpg(proc.pid, sig)  # the whole process group, as a terminal's Ctrl-C
        else:
            os.kill(proc.pid, sig)
        proc.wait(timeout=300)
    finally:
        (tmp_path / "go").touch()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, (tmp_path / "driver.err").read_text(), cmd


@pytest.mark.heavy
def test_ctrl_c_ends_the_study_killed_says_how_to_resume_and_the_table_says_incomplete(tmp_path, ray_tmp, capsys,
                                                                                       monkeypatch):
    rc, err, cmd = _interrupt(tmp_path, ray_tmp, "ctrl-c", signal.SIGINT, group=True)
    driver_err = err
    assert rc == 130, err
    assert "finished; tables" not in err and "interrupted before its end; finish it with: " in err, err
    assert "--resume" in err.splitlines()[-2] or "--resume" in err, err
    assert "Traceback" not in err, err
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = _statuses(uri, "ctrl-c")
    # nothing looks finished but what finished: no FINISHED study or config run, nothing RUNNING
    assert runs[C.KIND_STUDY] == ["KILLED"] and set(runs[C.KIND_CONFIG]) == {"KILLED"}, runs
    assert "RUNNING" not in runs[C.KIND_TRIAL] and "KILLED" in runs[C.KIND_TRIAL], runs
    # the held seed never finished: a table of the study is refused as complete
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    rc = main(["table", "--experiment", "ctrl-c", "--tracking-uri", uri])
    out, err = capsys.readouterr()
    if rc == 2:  # no seed run finished: nothing to tabulate, said in one line
        assert "no finished seed runs" in err
    else:
        assert rc == 3 and "INCOMPLETE study" in out and "harness: warning: INCOMPLETE study" in err, (out, err)
    # --resume finishes it; the table is then complete
    (tmp_path / "go").touch()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([*cmd, "--resume"], check=False, env=env, capture_output=True, timeout=600,
                          start_new_session=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    runs = _statuses(uri, "ctrl-c")
    assert runs[C.KIND_STUDY] == ["FINISHED"] and runs[C.KIND_TRIAL].count("FINISHED") == 4, runs
    # the candidate's config run, made by the callback Tune restored, ends with its verdict too
    assert runs[C.KIND_CONFIG] == ["FINISHED", "FINISHED"], runs
    client = MlflowClient(uri)
    ls = client.search_runs([client.get_experiment_by_name("ctrl-c").experiment_id],
                            f"tags.{C.TAG_KIND} = '{C.KIND_CONFIG}' and tags.{C.TAG_ROLE} = 'candidate'")
    assert len(ls) == 1 and f"{C.TAG_MARKER_PREFIX}map" in ls[0].data.tags, ls
    # the resumed driver's summary of the baseline counts seed 1, which the first driver finished
    assert "baseline seed 1: done" in driver_err, driver_err
    line = next(x for x in done.stderr.decode().splitlines() if x.startswith("[config] baseline:"))
    assert "+-" in line and "over seeds [1, 2]" in line, line
    assert main(["table", "--experiment", "ctrl-c", "--tracking-uri", uri]) == 0
    assert "INCOMPLETE" not in capsys.readouterr().out


@pytest.mark.heavy
def test_sigterm_ends_the_study_killed_and_exits_143(tmp_path, ray_tmp):
    rc, err, _ = _interrupt(tmp_path, ray_tmp, "sigterm", signal.SIGTERM, group=False)
    assert rc == 143, err
    assert "Traceback" not in err and "interrupted before its end; finish it with: " in err, err
    runs = _statuses(f"sqlite:///{tmp_path / 'mlflow.db'}", "sigterm")
    assert runs[C.KIND_STUDY] == ["KILLED"] and all("RUNNING" not in s for s in runs.values()), runs


@pytest.mark.slow
def test_a_stop_signal_during_ray_get_keeps_its_number(ray_root):
    """Ray's blocking calls turn a handler's StudyInterrupted into a plain KeyboardInterrupt; the
    driver still knows the signal (harness.driver._signals.stopped_by), so SIGTERM exits 143."""
    import threading

    import ray

    from harness.driver._signals import StudyInterrupted, install_stop_handlers, interrupts, stopped_by

    @ray.remote(num_cpus=0)
    def wait() -> None:
        time.sleep(60)

    with interrupts():
        install_stop_handlers()
        ref = wait.remote()
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        with pytest.raises(KeyboardInterrupt) as got:
            ray.get(ref, timeout=30)
    ray.cancel(ref, force=True)
    stop = stopped_by(got.value)
    assert isinstance(stop, StudyInterrupted) and stop.signum == signal.SIGTERM
    assert stopped_by(ValueError("x")).__class__ is ValueError


def test_a_stop_inside_a_store_query_prints_no_traceback(caplog):
    """A stop signal that lands inside a store query (the driver reads the store while it waits):
    SQLAlchemy drops that connection, then cannot close the query's cursor and logs that as an
    ERROR with a traceback; after a stop nothing of it is printed, and the stop still comes out as
    StudyInterrupted (found by the device study's rehearsal, benchmarks/device_study.py). Real
    SQLAlchemy ORM over sqlite3, as MLflow's store reads."""
    import logging
    import sqlite3

    import sqlalchemy as sa
    from sqlalchemy.orm import DeclarativeBase, Session

    from harness.driver._signals import StudyInterrupted, interrupts

    armed: list[bool] = []

    class Cursor(sqlite3.Cursor):
        def fetchall(self):  # the signal arrives while rows are fetched
            if armed:
                armed.clear()
                os.kill(os.getpid(), signal.SIGINT)
            return super().fetchall()

    class Connection(sqlite3.Connection):
        def cursor(self, factory=Cursor):
            return super().cursor(factory)

    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = "rows"
        id = sa.Column(sa.Integer, primary_key=True)

    engine = sa.create_engine("sqlite://", creator=lambda: sqlite3.connect(":memory:", factory=Connection))
    Base.metadata.create_all(engine)
    pool_logger = logging.getLogger("sqlalchemy.pool")
    level = pool_logger.level
    try:
        with pytest.raises(StudyInterrupted) as got, interrupts(), Session(engine) as session:
            session.add(Row(id=1))
            session.commit()
            armed.append(True)
            session.query(Row).all()
    finally:
        engine.dispose()
    assert got.value.signum == signal.SIGINT
    assert pool_logger.level == level  # put back when the block ends
    # the log records a terminal would print (pytest collects them instead)
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged == [], logged


@pytest.mark.heavy  # a real Ray job driver stopped mid-study (about a minute): with the other stop scenarios
def test_a_stopped_job_s_driver_ends_in_one_line_advising_harness_submit_resume(tmp_path, ray_tmp):
    """`harness jobs stop` sends the job's driver (jobs/entrypoint.py) SIGTERM: its log ended in a
    StudyInterrupted traceback advising `harness run` of the job's deleted temporary study file."""
    path = write_study(tmp_path, "job-stop", train={"steps": 100000, "eval_every": 50}, seeds=[1])
    env = {**os.environ, "HARNESS_STUDY_TEXT": path.read_text(), "RAY_TMPDIR": str(ray_tmp),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "HARNESS_STORAGE_PATH": str(tmp_path / "runs")}
    env.pop("RAY_ADDRESS", None)
    log = tmp_path / "driver.err"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "jobs/entrypoint.py", "study.yaml", "--set", "train.lr=0.001"],
                                env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True, cwd=ROOT)
    try:
        deadline = time.time() + 300
        while "[trial] baseline seed 1: running" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 143 and "Traceback" not in text, text[-3000:]
    resume = (f"harness submit study.yaml --resume --set train.lr=0.001 --tracking-uri "
              f"sqlite:///{tmp_path / 'mlflow.db'} --storage-path {tmp_path / 'runs'}")
    assert text.splitlines()[-1] == f"harness job: error: interrupted (SIGTERM); finish the study with: {resume}", text
    assert "harness run" not in text and "harness-job-" not in text, text
