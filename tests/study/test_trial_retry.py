"""A trial that fails is retried from its last checkpoint and ends as if it never failed: a study
on real local Ray (the module's ``ray_root``) whose every trial fails once, compared with the
session's finished study (tests/conftest.py's ``finished_study``). Its own file, so that its study
runs on one pytest-xdist worker while the other runs the finished study."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import TrialHooks, run_study
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import SHARED, write_study


def _test_maps(uri: str, name: str) -> dict[str, float]:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return {r.data.tags[C.TAG_TRIAL_KEY]: r.data.metrics["test_map"]
            for r in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")}


@pytest.mark.slow
def test_injected_failure_is_retried_from_checkpoint_with_same_metrics(ray_root, tmp_path, request):
    """The trial of a study (the finished study's baseline, seed 3) fails once after its step-3
    checkpoint, is retried from it, and ends with the test MAP of the uninterrupted trial."""
    fail_dir = tmp_path / "fail"
    fail_dir.mkdir()
    log = tmp_path / "trials.log"
    plain = {**SHARED, "models": "none"}
    failing = {**plain, "configs": {}, "seeds": [3]}
    uri = f"sqlite:///{ray_root / 'mlruns' / 'mlflow.db'}"
    run_study(load_spec(write_study(ray_root, "failing", **failing)), tracking_uri=uri, progress=lambda m: None,
              hooks=TrialHooks(fail_once_dir=str(fail_dir), trial_log=str(log)))
    assert len(list(fail_dir.iterdir())) == 1  # the trial failed once
    restarts = [ln for ln in log.read_text().splitlines() if " start 3" in ln]
    assert len(restarts) == 1  # ... and was resumed from its step-3 checkpoint
    # The finished study asked for only now: under xdist the other worker runs it meanwhile.
    finished = request.getfixturevalue("finished_study")
    failing_maps, plain_maps = _test_maps(uri, "failing"), _test_maps(finished.uri, finished.name)
    assert len(failing_maps) == 1 and failing_maps == {key: plain_maps[key] for key in failing_maps}
