"""Shared by every test that runs a study (here, in tests/model and tests/cluster): one data cache
and one local Ray (2 CPUs) for the session, and one study factory, ``write_study``. Test modules
import them from ``tests.study.conftest``; tests/conftest.py gives the Ray to every directory as the
``ray_root`` fixture, and the session's shared finished study (``run_finished_study`` below) as the
``finished_study`` fixture."""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@functools.cache
def shared_cache() -> str:
    """The data cache of this test session (removed at exit; tests/conftest.py makes it the
    session's HARNESS_CACHE). Entries are keyed by the data set's fingerprint, so studies of the
    same set load what the first one built instead of each building it again; the tests of the
    cache itself use caches of their own. Under pytest-xdist the workers of one run share it (one
    worker loads what the other built; two building one entry at once each write it whole, by
    rename), and the last worker to leave removes it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        path = tempfile.mkdtemp(prefix="harness-test-cache-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        return path
    shared = Path(tempfile.gettempdir()) / f"harness-test-cache-{run}"
    shared.mkdir(exist_ok=True)
    _users(shared, +1)
    atexit.register(_leave, shared)
    return str(shared)


def _users(path: Path, step: int) -> int:
    """Add ``step`` to the count of workers using ``path`` (a file beside it, under a lock)."""
    import fcntl

    with open(f"{path}.users", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.seek(0)
        count = int(fh.read() or 0) + step
        fh.seek(0)
        fh.truncate()
        fh.write(str(count))
        return count


def _leave(path: Path) -> None:
    if _users(path, -1) <= 0:
        shutil.rmtree(path, ignore_errors=True)
        Path(f"{path}.users").unlink(missing_ok=True)


_SESSION_RAY: dict[str, bool] = {"running": False}


@contextlib.contextmanager
def local_ray(root: Path, own: bool = False) -> Iterator[Path]:
    """Ray on this machine (2 CPUs, and one logical GPU so that fractional-GPU trials can be packed)
    for the duration. One Ray serves the studies of the session, as one cluster serves a user's
    studies: it starts on first use and stays up while the tests that follow need it
    (``stop_session_ray`` stops it; tests/conftest.py calls it after a module when the next test
    needs no Ray, and when the session ends), so each study does not pay Ray's start and stop. ``own``: a
    Ray of this block's own, stopped after it, for a study whose workers must see environment
    variables set just before (Ray's worker processes inherit the environment of ``ray.init``)."""
    import ray

    if own:
        stop_session_ray()
        _init()
        try:
            yield root
        finally:
            ray.shutdown()
        return
    if not (_SESSION_RAY["running"] and ray.is_initialized()):
        _init()
        _SESSION_RAY["running"] = True
    yield root


def _init() -> None:
    import ray

    from harness.driver.runner import init_local_ray

    if ray.is_initialized():  # a Ray that other code in this process left running
        ray.shutdown()
    # on loopback only, as a study's own Ray: nothing of the suite is reachable from another host
    init_local_ray(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)


def stop_session_ray() -> None:
    import ray

    if _SESSION_RAY["running"]:
        _SESSION_RAY["running"] = False
        ray.shutdown()


# The study every test study starts from, so that a test states only what differs: the small
# budget (the tiny model, a few steps, small dev and test sets) on the 30-conversation data set,
# which the session's cache builds once for all of them. ``configs`` maps a configuration's name to
# the settings it changes.
STUDY: dict[str, Any] = {
    "data": {"conversations": 30, "max_dev_queries": 8, "max_test_queries": 16},
    "model": {"name": "tiny", "max_length": 32},
    "train": {"steps": 6, "batch_size": 8, "eval_every": 3, "eval_batch_size": 32, "lr": 1.0e-3},
    "baseline": {},
    "configs": {},
    "seeds": [1, 2],
    "resources": {"cpus": 1, "gpus": 0},
    "concurrency": 2,
    "models": "none",  # no MLflow models at the end: SHARED and tests/model log them
}


def write_study(root: Path, name: str, **overrides: Any) -> Path:
    """Write ``root/<name>.yaml``: study ``name`` from ``STUDY`` with ``overrides`` (study keys: a
    mapping is merged into the template's mapping, ``None`` removes the key), its Tune storage under
    ``root/runs`` unless ``storage_path`` says otherwise. Returns the file's path."""
    import yaml

    study: dict[str, Any] = {"name": name, **copy.deepcopy(STUDY), "storage_path": root / "runs"}
    for key, value in overrides.items():
        if value is None:
            study.pop(key, None)
        elif isinstance(value, dict) and isinstance(study.get(key), dict):
            study[key] = {**study[key], **value}
        else:
            study[key] = value
    if study.get("configs"):
        study["configs"] = [{"name": n, "set": s} for n, s in study["configs"].items()]
    else:  # a study of the baseline alone (or a search) has no configs key
        study.pop("configs", None)
    study["storage_path"] = str(study["storage_path"])
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False, default_flow_style=None))
    return path


# The session's shared finished study (tests/conftest.py's ``finished_study`` fixture), run once per
# test session through real Ray Tune and real MLflow: the baseline (BM25 training negatives) and
# four candidates over seeds 1-3 (a curriculum, label smoothing, random training negatives and a
# cascade ranker), at the template's small budget with 64-token pairs; its best configuration's
# seed runs log MLflow models. Tests read it; they never write to its experiment or its Tune
# storage (a study of their own goes to a root of their own, e.g. ``ray_root``, and may be
# compared with this one by reading it).
SHARED_NAME = "shared"
SHARED: dict[str, Any] = {
    "model": {"max_length": 64},
    "baseline": {"train.sampler": "bm25"},
    "configs": {"curriculum": {"curriculum.scoring": "uwords", "curriculum.pacing": "root_n", "curriculum.n": 2},
                "ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2},
                "random-negatives": {"train.sampler": "random"},
                "cascade": {"cascade.enabled": True, "cascade.alpha": [0.3]}},
    "seeds": [1, 2, 3],
    "failure": {"max_retries": 2},
    "models": None,  # the default (the best configuration's models), not the template's "none"
}


@dataclass(frozen=True)
class FinishedStudy:
    """A study that has run to its end, as `harness run` leaves it: its study file ``path`` (under
    ``root``), its Tune storage (``root/runs``), its MLflow store (SQLite, ``uri``) with the study
    run, one config run per configuration and one seed run per configuration and seed (per-query
    values, run files, tables, power), ``out`` (what ``run_study`` returned) and ``progress`` (the
    progress lines it printed). Read-only: see ``SHARED`` above."""

    root: Path
    name: str
    path: Path
    uri: str
    out: dict[str, Any]
    progress: tuple[str, ...]

    @property
    def client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri)

    @property
    def experiment_id(self) -> str:
        return str(self.out["experiment_id"])

    def spec(self) -> Any:
        """The study as ``harness.study.load_spec`` parses it (its configurations, seeds...)."""
        from harness.study.spec import load_spec

        return load_spec(self.path)

    def runs(self, kind: str | None = None) -> Any:
        """The experiment's runs by kind (``harness.tracking.conventions.KIND_STUDY``, ``KIND_CONFIG``,
        ``KIND_TRIAL``): a dict kind -> runs, or with ``kind`` that kind's list."""
        from harness.tracking import conventions as C

        by_kind: dict[str, list[Any]] = {}
        for r in self.client.search_runs([self.experiment_id], max_results=1000):
            by_kind.setdefault(r.data.tags.get(C.TAG_KIND), []).append(r)
        return by_kind if kind is None else by_kind.get(kind, [])


def run_finished_study(root: Path) -> FinishedStudy:
    """Run the shared study under ``root`` on the session's Ray; MLflow's process-wide tracking URI
    is put back afterwards, so that the tests after it see the default they set up."""
    import pytest
    from mlflow.tracking._tracking_service import utils as mlflow_tracking

    from harness.driver.runner import run_study
    from harness.study.spec import load_spec

    path = write_study(root, SHARED_NAME, **SHARED)
    uri = f"sqlite:///{root / 'mlruns' / 'mlflow.db'}"
    progress: list[str] = []
    with local_ray(root), pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.setattr(mlflow_tracking, "_tracking_uri", mlflow_tracking._tracking_uri)
        out = run_study(load_spec(path), tracking_uri=uri, progress=progress.append)
    return FinishedStudy(root, SHARED_NAME, path, uri, out, tuple(progress))


def runs_by_kind(client: Any, name: str) -> dict[str, list]:
    """Study ``name``'s MLflow runs (an ``MlflowClient``'s) grouped by their kind tag (study,
    config, trial)."""
    from harness.tracking import conventions as C

    exp = client.get_experiment_by_name(name)
    out: dict[str, list] = {}
    for r in client.search_runs([exp.experiment_id], max_results=1000):
        out.setdefault(r.data.tags.get(C.TAG_KIND), []).append(r)
    return out
