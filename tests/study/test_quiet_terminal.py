"""A quiet terminal (issue 40): `harness run` on a real small study (local Ray, MLflow SQLite, the
tiny model) prints the harness's own progress and results, and none of the libraries' output
around them: no Ray Tune "Configuration for experiment" box or TensorBoard hint, no MLflow INFO
lines, no tqdm bars (MLflow's artifact downloads, transformers' "Loading weights" / "Writing model
shards"). `harness -v` gives them back (harness.cli.QUIET_ENV)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.study.conftest import write_study

NOISE = [r"Configuration for experiment", r"tensorboard", r"INFO mlflow", r"\d+it/s\]",
         r"Loading weights", r"Writing model shards", r"Downloading artifacts"]


@pytest.mark.heavy
def test_a_small_study_prints_the_harness_output_only(tmp_path: Path) -> None:
    path = write_study(tmp_path, "quiet", seeds=[1, 2], concurrency=1)
    ray_tmp = Path(tempfile.mkdtemp(prefix="quiet-", dir="/tmp"))  # Ray's socket paths must be short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", *_QUIET_KEYS)}
    env.update(RAY_TMPDIR=str(ray_tmp), MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(path)], env=env,
                              capture_output=True, text=True, timeout=900, check=False)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    found = [p for p in NOISE if re.search(p, out, re.IGNORECASE)]
    assert not found, (found, out[-3000:])
    assert "reference on the same test queries: bm25 MAP" in out  # the results are there (the driver prints on stderr)


_QUIET_KEYS = ("MLFLOW_LOGGING_LEVEL", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "HF_HUB_DISABLE_PROGRESS_BARS",
               "TRANSFORMERS_VERBOSITY", "TQDM_DISABLE", "RAY_AIR_NEW_OUTPUT", "RAY_DEDUP_LOGS",
               "TUNE_PRINT_ALL_TRIAL_ERRORS", "RAY_DEDUP_LOGS_SKIP_REGEX")


def test_the_quiet_keys_are_the_clis() -> None:
    from harness.cli import QUIET_ENV

    assert set(_QUIET_KEYS) == set(QUIET_ENV)
