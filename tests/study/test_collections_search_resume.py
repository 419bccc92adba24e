"""A search over two collections whose driver is killed mid-search and resumed (`harness run
--resume`), on real local Ray Tune and real MLflow (tiny model, the smallest budget: two seeds,
two proposals, no confirmation): no finished trial trains again, Optuna's proposals continue where
they were (two proposals in all, none proposed twice, each on both collections), and the table
equals one computed by hand from the exported per-query values of each collection."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import runs_by_kind, write_study
from tests.study.test_collections_study import COLLECTIONS, _exported_ap

PROPOSALS = 2
SEEDS = ("1", "2")
STUDY = {"configs": None, "seeds": [int(s) for s in SEEDS], "collections": COLLECTIONS, "concurrency": 1, "confirm": False,
         "search": {"searcher": "random", "num_configs": PROPOSALS,
                    "space": {"smoothing.method": {"choice": ["LS"]},
                              "smoothing.epsilon": {"uniform": [0.05, 0.3]}}}}


def _search_lines(log: Path, fixed: set[str], event: str) -> list[str]:
    """The trial keys of the search phase's ``event`` lines ("start", "end") in the trial log."""
    if not log.exists():
        return []
    words = [ln.split() for ln in log.read_text().splitlines()]
    return [w[0] for w in words if len(w) > 1 and w[1] == event and w[0].rsplit("-seed", 1)[0] not in fixed]


@pytest.mark.slow
@pytest.mark.heavy  # over a minute: 12 trials, two drivers (the killed one starts its own Ray)
def test_a_search_over_two_collections_killed_and_resumed(tmp_path: Path, ray_root: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.study.hooked_run import main as hooked_run

    root = tmp_path
    path = write_study(root, "search2", **STUDY)
    fixed = {nc.config.config_id() for nc in load_spec(path).fixed_configs()}
    log = root / "trials.log"
    uri = f"sqlite:///{root / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HARNESS_LEASE_TIMEOUT_S": "5"}
    cmd = [sys.executable, "-m", "tests.study.hooked_run", str(log), "run", str(path)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        # Killed as the second proposal's first trial starts: one trial at a time, so the first
        # proposal's trials (one per collection and seed) are done and recorded, the second's not.
        per_proposal = len(COLLECTIONS) * len(SEEDS)
        deadline = time.time() + 900
        while len(_search_lines(log, fixed, "start")) <= per_proposal:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "driver ended"
            assert time.time() < deadline, "the second proposal did not start"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its Ray, mid-search
        proc.wait()
    before = log.read_text().splitlines()
    finished_before = {ln.split()[0] for ln in before if " end " in ln}
    assert len(set(_search_lines(log, fixed, "end"))) == per_proposal
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("HARNESS_LEASE_TIMEOUT_S", "5")
    assert hooked_run(cmd[3:] + ["--resume"]) == 0
    after = log.read_text().splitlines()[len(before):]
    # No finished trial trained again.
    assert not {ln.split()[0] for ln in after if " start " in ln} & finished_before, after

    # Optuna's proposals continued: two in all, each once, on both collections.
    client = MlflowClient(uri)
    runs = runs_by_kind(client, "search2")
    searched = [r for r in runs[C.KIND_CONFIG] if r.data.tags[C.TAG_PHASE] == C.PHASE_SEARCH]
    proposals: dict[str, set[str]] = {}
    epsilons: dict[str, set[str]] = {}
    for r in searched:
        proposals.setdefault(r.info.run_name, set()).add(r.data.tags[C.TAG_COLLECTION])
        epsilons.setdefault(r.info.run_name, set()).add(r.data.params["smoothing.epsilon"])
    assert len(proposals) == PROPOSALS and all(v == {"talk-a", "talk-b"} for v in proposals.values())
    assert all(len(v) == 1 for v in epsilons.values()) and len(set().union(*epsilons.values())) == PROPOSALS
    trials = runs[C.KIND_TRIAL]
    keys = [t.data.tags[C.TAG_TRIAL_KEY] for t in trials]
    assert len(keys) == len(set(keys)) == (1 + PROPOSALS) * per_proposal  # no duplicate seed run
    assert all(t.info.status == "FINISHED" for t in trials)
    assert runs[C.KIND_STUDY][0].info.status == "FINISHED"

    # The table, from the exported per-query values of each collection, by hand.
    capsys.readouterr()
    assert main(["table", "--experiment", "search2", "--tracking-uri", uri, "--format", "csv", "--metric", "map"]) == 0
    table = list(csv.DictReader(capsys.readouterr().out.splitlines()))
    assert main(["runs", "export", "--experiment", "search2", "--tracking-uri", uri, "--to", str(root / "export")]) == 0
    per_query = _exported_ap(root / "export")
    for name in proposals:
        diffs = []
        for collection in ("talk-a", "talk-b"):
            base = np.array([per_query[(collection, "baseline", s)] for s in SEEDS])  # seeds x queries
            mine = np.array([per_query[(collection, name, s)] for s in SEEDS])
            for config, values in (("baseline", base), (name, mine)):
                cell = next(r for r in table if r["collection"] == collection and r["row"] == config)
                assert float(cell["value"]) == pytest.approx(values.mean(), abs=1e-6)
                assert float(cell["sd"]) == pytest.approx(values.mean(axis=1).std(ddof=1), abs=1e-6)
            diffs.append((mine - base).mean())
        comb = next(r for r in table if r["collection"] == "combined" and r["row"] == name)
        assert float(comb["mean_diff"]) == pytest.approx(np.mean(diffs), abs=1e-6)
