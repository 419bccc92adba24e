"""Shared fixtures: a learnable toy ranking task as real Query records, and a tiny-model config."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # One compute thread per worker (`make test` runs a worker per core): torch's OpenMP threads and
    # numpy's OpenBLAS threads, two workers of two each on two cores, spin against each other and
    # run many times slower. Set before numpy is imported (below): OpenBLAS reads it as it loads.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # after the thread settings above

from harness.config import TrialConfig
from harness.records import Candidate, Query, Splits

TOPICS = ["pizza", "guitar", "soccer", "rain", "coffee", "movie", "train", "garden", "winter", "music",
          "beach", "puppy", "exam", "dinner", "concert", "mountain"]
GOOD = ["sure", "great", "yes", "love", "absolutely"]
BAD = ["no", "never", "hate", "boring", "nope"]
FILLER = ["i", "think", "that", "really", "maybe", "we", "should", "talk", "about", "the", "today"]


def _query(qid: str, group: str, rng: np.random.Generator, n_cands: int) -> Query:
    """Context mentions a topic twice; the positive reply mentions the same topic with an agreeing
    word, negatives other topics with a dismissive word: learnable from a few hundred pairs."""
    topic, *others = rng.choice(TOPICS, size=n_cands, replace=False).tolist()
    def words(k: int) -> str:
        return " ".join(rng.choice(FILLER, size=k).tolist())
    context = (f"{words(3)} {topic} {words(2)}", f"{words(2)} {topic} {words(3)}")
    good, bad = rng.choice(GOOD), rng.choice(BAD, size=len(others))
    cands = [Candidate(f"{qid}-d0", f"{words(2)} {good} {topic} {words(2)}", 1, float(rng.random() * 5))]
    for j, (o, b) in enumerate(zip(others, bad, strict=True), 1):
        cands.append(Candidate(f"{qid}-d{j}", f"{words(2)} {b} {o} {words(2)}", 0, float(rng.random() * 5)))
    return Query(qid, context, tuple(cands), group)


def toy_splits(n_train: int = 120, n_dev: int = 24, n_test: int = 24, n_cands: int = 5,
               seed: int = 0) -> Splits:
    rng = np.random.default_rng(seed)
    make = lambda p, n: tuple(_query(f"{p}{i}", f"{p}g{i}", rng, n_cands) for i in range(n))
    return Splits(make("tr", n_train), make("dv", n_dev), make("te", n_test), fingerprint=f"toy{seed}")


@pytest.fixture(scope="session")
def toy() -> Splits:
    return toy_splits()


def tiny_config(**flat: object) -> TrialConfig:
    base = {"model.name": "tiny", "model.max_length": 32, "train.steps": 40, "train.batch_size": 16,
            "train.eval_every": 20, "train.lr": 1e-3, "train.warmup": 0.0, "train.device": "cpu",
            "train.eval_batch_size": 64}
    base.update(flat)
    return TrialConfig.from_flat(base)


def pytest_configure(config: pytest.Config) -> None:
    """Every data build of the session (in this process, in CLI subprocesses, Ray workers and Ray
    jobs started from it) goes to one throwaway cache, never the user's ~/.cache/harness: studies
    of the same data set load what the first one built, as a user's do. Tests of the cache itself,
    and tests that must see a cold build, set a cache of their own."""
    from tests.study.conftest import shared_cache

    os.environ["HARNESS_CACHE"] = shared_cache()
    # The key that signs Ray Tune state (harness.driver._state_trust): one per session, shared by
    # every driver it starts, never the user's ~/.config/harness/state.key.
    import secrets

    os.environ.setdefault("HARNESS_STATE_KEY", secrets.token_hex(32))


# Fixtures that start studies on the session's Ray: a test using one is `slow` (docs/testing.md)
# whether or not it says so, since it runs the shared study or a study of its own.
STUDY_FIXTURES = {"finished_study", "ray_root"}


# The files that take longest under `make test` (two workers, `--dist loadfile`
# --no-loadscope-reorder), longest chain first, so that both workers end together: the finished
# study's builder first, the studies of their own next (then the short file on the session's Ray,
# while a worker's Ray is up: it stops after the last module that needs it), the finished study's
# other readers after it is made. Only an order: every test runs wherever its file is, listed or not.
LONG_FILES_FIRST = (
    "tests/study/test_run.py",
    "tests/study/test_resume_trust.py",
    "tests/study/test_interrupted_driver.py",
    "tests/benchmarks/test_device_run.py",
    "tests/test_reliability.py",
    "tests/tracking/test_ui_landing.py",
    "tests/data/test_chitchat.py",
    "tests/stats/test_verdict_agreement.py",
    "tests/stats/test_sequential.py",
    "tests/stats/test_maxt.py",
    "tests/study/test_fair_study.py",
    "tests/study/test_ui_stop.py",
    "tests/training/test_precision.py",
    "tests/training/test_train_stops.py",
    "tests/results/test_damaged_stores.py",
    "tests/study/test_spec.py",
)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on the session's Ray is marked `slow` (``STUDY_FIXTURES``); the files of
    ``LONG_FILES_FIRST`` go first, in its order (a stable sort: the rest keep pytest's)."""
    for item in items:
        if STUDY_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    rank = {path: i for i, path in enumerate(LONG_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After a module of tests on the session's Ray, when the next test (this process's next
    module) needs none (``STUDY_FIXTURES``), the Ray stops: an idle Ray's processes (GCS, raylet,
    agents, idle workers) keep a few percent of a core busy, which every later test of the process
    would share its cores with. A later test that needs it starts it again (``ray_root``)."""
    yield
    if nextitem is not None and (getattr(nextitem, "module", None) is getattr(item, "module", None)
                                 or STUDY_FIXTURES & set(getattr(nextitem, "fixturenames", ()))):
        return
    from tests.study.conftest import stop_session_ray

    stop_session_ray()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session's Ray (tests/study/conftest.py's ``local_ray``), if a test started it."""
    from tests.study.conftest import stop_session_ray

    stop_session_ray()


@pytest.fixture(scope="module")
def ray_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory for this module's in-process studies (each with its own name and storage), on the
    session's local Ray (tests/study/conftest.py's ``local_ray``). Here, not in tests/study, so that
    tests/model sees it too. Module scope, not session: a study that needs a Ray of its own
    (``local_ray(..., own=True)``) stops the session's, and the next module's studies start it again.

    Like the hooks above, it imports ``tests.study.conftest`` by that name: pytest imports the
    conftest files under names of its own as well, and the session's Ray is recorded in one module."""
    from tests.study.conftest import local_ray

    with local_ray(tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])) as root:
        yield root


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory: pytest.TempPathFactory):
    """One study run to its end through real Ray Tune and real MLflow, once per test session, for
    every test that only reads a finished study: tests/study/conftest.py's ``SHARED`` (the baseline,
    ``curriculum`` and ``ls`` over seeds 1, 2, 3; the template's tiny budget), as a
    ``FinishedStudy``: ``.uri`` (its MLflow store), ``.name``, ``.path`` (its study file),
    ``.root``, ``.out`` (``run_study``'s return), ``.progress`` (its progress lines), ``.spec()``,
    ``.client`` and ``.runs(kind)`` (its runs by ``conventions.KIND_*``).

    Use it instead of running a study of your own whenever the assertion holds for any finished
    study; read it, never write to it (no runs, tags or artifacts in its experiment, nothing in
    its Tune storage): every test of the session sees the same records. A test that needs a study
    of its own beside it (a variant to compare with it) runs that study under its own root
    (``ray_root``) and reads this one by ``.uri``. Prefer counting from ``.spec()`` over literal
    numbers, so that adding a configuration here does not break unrelated tests."""
    from tests.study.conftest import run_finished_study

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return run_finished_study(tmp_path_factory.mktemp("finished-study"))
    # Under pytest-xdist (`make test`: two workers, `--dist loadfile`) the readers are in several
    # files, so on both workers: the first to ask runs the study in the workers' common temporary
    # folder, the other waits for it and reads the same store and files.
    import fcntl
    import pickle

    common = tmp_path_factory.getbasetemp().parent
    with open(common / "finished-study.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        done = common / "finished-study.pickle"
        if done.is_file():
            return pickle.loads(done.read_bytes())
        (common / "finished-study").mkdir(exist_ok=True)
        study = run_finished_study(common / "finished-study")
        tmp = done.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(study))
        tmp.replace(done)
        return study


@pytest.fixture(scope="session", autouse=True)
def _mlflow_schema_made_once(tmp_path_factory: pytest.TempPathFactory):
    """A new SQLite tracking store gets its schema from MLflow's ~50 migrations, ~2.4 s a store.
    The harness makes an empty store once per MLflow version in its cache (the shared test cache
    here, so both workers use one) and starts the stores it creates as copies of it; this fixture
    has MLflow in this process start every other new SQLite store from the same schema (SQLite's
    backup API), so tests that open a store through MLflow directly skip the migrations too. The
    copy leaves out the template's Default experiment: MLflow makes each store's own, with that
    store's artifact folder. Stores made by other processes (CLI subprocesses) go through the
    harness's copy. The schema's path is the fixture's value (the cluster tests' tracking server
    starts on a copy)."""
    import sqlite3
    from contextlib import closing

    import sqlalchemy
    from mlflow.store.db import utils

    from harness.tracking.store import _empty_store_template

    template = _empty_store_template()
    assert template is not None, "the test cache cannot hold MLflow's empty-store template"
    schema = tmp_path_factory.mktemp("mlflow-schema") / "schema.db"
    with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(schema)) as target:
        source.backup(target)
        with target:
            target.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
            target.execute("DELETE FROM experiments WHERE experiment_id = 0")
    original = utils._initialize_tables

    def initialize(engine: sqlalchemy.engine.Engine) -> None:
        path = engine.url.database
        if engine.url.get_backend_name() != "sqlite" or not path or path == ":memory:":
            original(engine)
            return
        with closing(sqlite3.connect(schema)) as source, closing(sqlite3.connect(path)) as target:
            source.backup(target)

    utils._initialize_tables = initialize
    yield schema
    utils._initialize_tables = original


@pytest.fixture
def records():
    """Synthetic study results (tests/synthetic.py): a baseline and three candidates over 3 seeds."""
    from tests.synthetic import synthetic_records

    return synthetic_records()


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run the ``harness`` command line in this process: ``run_cli("table", ...)`` returns (exit code,
    stdout, stderr)."""
    from harness.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run
