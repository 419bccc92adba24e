"""Turn a study file into a Ray Job submission, validating everything locally first.

``plan_submission`` loads the study and checks it with ``validate_study``, as ``harness run`` and
``harness validate`` do (keys, ranges, names, the search space, the tracking URI, cascade exits
against the encoder's depth; not the data paths, which are the cluster's), and builds the job's
runtime_env and entrypoint. It contacts nothing but the MLflow server's REST API (experiments/search): a study that fails here submits
nothing.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError, HarnessError
from harness.jobs import env as E
from harness.redact import redact_uri, uri_has_credentials


@dataclass(frozen=True, kw_only=True)
class SubmitPlan:
    """Everything ``Jobs.submit`` sends, plus what to tell the user (never a secret)."""

    study_name: str
    trials: int
    submission_id: str
    entrypoint: str
    runtime_env: dict[str, Any] = field(repr=False)
    metadata: dict[str, str]
    num_gpus: float
    tracking_uri: str
    storage_path: str
    warnings: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        """Lines for the terminal: secrets as ***, URLs without credentials, no study text."""
        env = self.runtime_env["env_vars"]
        return [f"  tracking: {redact_uri(self.tracking_uri)}; Tune storage: {self.storage_path}",
                f"  entrypoint: {self.entrypoint}",
                f"  working_dir: {self.runtime_env['working_dir']}",
                f"  env: {E.describe_env(env)}"]


def plan_submission(study: Path, *, smoke: bool = False, resume: bool = False,
                    assign: Sequence[str] = (), tracking_uri: str | None = None,
                    storage_path: str | None = None, env: Mapping[str, str],
                    env_file: Mapping[str, str] | None = None, cli_env: Sequence[str] = (),
                    python: str = "python", driver_gpus: float = 0.0, working_dir: Path | None = None,
                    check_tracking: bool = True, verbose: bool = False) -> SubmitPlan:
    """Validate ``study`` and build its submission. ``env`` is this process's environment."""
    from harness.study.validate import load, validate_study
    from harness.study.variants import trial_count

    if not math.isfinite(driver_gpus) or driver_gpus < 0:  # nan or inf: no JSON number to send
        raise ConfigError(f"--driver-gpus must be a finite number >= 0, got {driver_gpus}")
    env_file = dict(env_file or {})
    job_vars = E.job_env(local=env, env_file=env_file, cli=E.parse_env_assignments(cli_env))
    spec = load(study, smoke, list(assign))
    if spec.tracking_uri and uri_has_credentials(str(spec.tracking_uri)):
        raise ConfigError(f"{study}: tracking_uri carries credentials; a study file is logged as an "
                          "artifact: put MLFLOW_TRACKING_USERNAME/PASSWORD in the environment or an --env-file")
    uri = tracking_uri or spec.tracking_uri or env_file.get(E.TRACKING_ENV) or env.get(E.TRACKING_ENV)
    if not uri:
        raise HarnessError("harness submit needs a tracking URI the cluster can reach: --tracking-uri "
                           "http://MLFLOW-HOST:5000 (or MLFLOW_TRACKING_URI, or tracking_uri in the study)")
    if uri_has_credentials(uri):
        raise HarnessError(f"tracking URI {redact_uri(uri)} carries credentials: put them in "
                           "MLFLOW_TRACKING_USERNAME/PASSWORD (environment or --env-file)")
    # What `harness validate` checks but data paths (the cluster's) and building the model.
    validate_study(spec, tracking_uri=uri, check_tracking=check_tracking, data=False)

    warnings: list[str] = []
    storage = storage_path or spec.storage_path
    if storage_path:
        if "://" not in storage_path and not Path(storage_path).is_absolute():
            raise ConfigError(f"--storage-path {storage_path}: give an absolute path every node sees, "
                              "or a URI (s3://bucket/prefix)")
    elif _relative_storage(spec.text):
        storage = "<job working dir>/" + str(_raw_storage(spec.text) or "runs")
        warnings.append(f"storage_path of {spec.name} is relative: Ray Tune state stays in the job's "
                        "working dir on the cluster and a retried job cannot resume; give --storage-path "
                        "(shared path or s3://...)")

    root = E.project_root(working_dir)
    job_vars.update({E.TRACKING_ENV: uri, E.STUDY_TEXT_ENV: spec.text})
    if storage_path:
        job_vars[E.STORAGE_ENV] = storage_path
    excludes = E.local_excludes(root, [job_vars.get("HARNESS_CACHE"), env.get("HARNESS_CACHE"),
                                       storage_path, spec.storage_path])
    runtime_env = E.build_runtime_env(root, job_vars, excludes)
    command = E.entrypoint(python=python, study_file=Path(study).name, smoke=smoke, resume=resume,
                           assign=assign, driver_gpu=driver_gpus > 0, verbose=verbose)
    return SubmitPlan(
        study_name=spec.name, trials=trial_count(spec), submission_id=submission_id(spec.name),
        entrypoint=command, runtime_env=runtime_env,
        metadata={"harness.study": spec.name, "harness.smoke": str(smoke).lower()},
        num_gpus=driver_gpus, tracking_uri=uri, storage_path=storage, warnings=tuple(warnings))


def submission_id(study_name: str) -> str:
    """``harness-<study>-<UTC time>-<4 hex>``: readable in `harness jobs list`, unique per submission."""
    slug = re.sub(r"[^a-z0-9]+", "-", study_name.lower()).strip("-")[:40] or "study"
    return f"harness-{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def _raw_storage(text: str) -> Any:
    raw = yaml.safe_load(text)
    return raw.get("storage_path", "runs") if isinstance(raw, dict) else "runs"


def _relative_storage(text: str) -> bool:
    value = str(_raw_storage(text))
    return "://" not in value and not Path(value).expanduser().is_absolute()
