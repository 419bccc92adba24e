"""What a submitted study job gets: its runtime environment, env vars and entrypoint.

Settings travel to the cluster as env vars of the Ray runtime_env, never inside the study file:

- ``MLFLOW_TRACKING_URI``: where the job's driver writes MLflow records (an http(s) MLflow server
  works exactly like the local SQLite default);
- MLflow credentials (``MLFLOW_TRACKING_USERNAME``/``PASSWORD``/``TOKEN`` ...): taken from this
  process's environment or an env file, forwarded to the job, shown as ``***`` in anything printed;
- ``HARNESS_STUDY_TEXT``: the exact text of the study file validated before submission, so the job
  runs what was checked, wherever the file lives;
- ``HARNESS_STORAGE_PATH``: overrides the study's ``storage_path`` (shared storage: a path every node
  sees, or ``s3://...``), so a retried job can resume.

Ray's own token (``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``/``RAY_AUTH_MODE``) authenticates this
client to the job server and is never forwarded: the cluster has its own.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.errors import ConfigError, HarnessError
from harness.redact import SECRET_MARKERS, redact_uri

STUDY_TEXT_ENV = "HARNESS_STUDY_TEXT"
STORAGE_ENV = "HARNESS_STORAGE_PATH"
TRACKING_ENV = "MLFLOW_TRACKING_URI"
# MLflow client settings forwarded from this process's environment when set (as MLflow users expect).
MLFLOW_CLIENT_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN",
                     "MLFLOW_TRACKING_INSECURE_TLS", "MLFLOW_TRACKING_SERVER_CERT_PATH",
                     "MLFLOW_TRACKING_CLIENT_CERT_PATH", "MLFLOW_TRACKING_AWS_SIGV4")
# Read by this client only (job server address and token); never shipped to the job.
CLIENT_ONLY_ENV = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN",
                   "RAY_AUTH_TOKEN_PATH")
# Set by harness submit itself; an env file or --env may not override them.
RESERVED_ENV = (STUDY_TEXT_ENV, STORAGE_ENV, TRACKING_ENV)
RUNTIME_ENV_FILE = Path("jobs") / "runtime_env.yaml"
ENTRYPOINT_SCRIPT = "jobs/entrypoint.py"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What marks an env var as secret: SECRET_MARKERS (what TrackingStore keeps out of MLflow params) as
# whole "_"-separated words, so TOKENIZERS_PARALLELISM is not one, plus a few unmistakable substrings.
_SECRET_WORDS = frozenset((*SECRET_MARKERS, "key", "apikey", "pat", "username"))
_SECRET_PARTS = ("password", "passwd", "secret", "credential")


def is_secret(key: str) -> bool:
    """An env var whose value is never printed: MLFLOW_TRACKING_PASSWORD/USERNAME/TOKEN,
    RAY_AUTH_TOKEN, AWS_SECRET_ACCESS_KEY, HF_TOKEN ..."""
    k = key.lower()
    return any(w in _SECRET_WORDS for w in k.split("_")) or any(p in k for p in _SECRET_PARTS)


def describe_env(env: Mapping[str, str], skip: Iterable[str] = (STUDY_TEXT_ENV,)) -> str:
    """``KEY=value`` pairs for printing, secrets as ``***`` and URLs without their credentials."""
    hidden = set(skip)
    shown = [f"{k}={'***' if is_secret(k) else redact_uri(v)}" for k, v in sorted(env.items()) if k not in hidden]
    return ", ".join(shown) or "(none)"


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``export`` prefix, quotes and ``#`` comments allowed); errors name the line."""
    from harness.textfile import read_utf8

    if not path.exists():
        raise HarnessError(f"{path}: env file not found")
    out: dict[str, str] = {}
    for n, raw in enumerate(read_utf8(path, "env file", ConfigError).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not _KEY.match(key):
            raise ConfigError(f"{path}:{n}: expected KEY=VALUE")
        value = _unquote(value)
        out[key] = value
    return out


def _unquote(value: str) -> str:
    """An env file's value: inside matching quotes taken as written (a ``#`` there is part of it),
    then a `` #`` comment after it dropped; unquoted, everything before a `` #`` comment."""
    if value[:1] in ("'", '"'):
        end = value.find(value[0], 1)
        if end > 0 and (value[end + 1:].strip() == "" or value[end + 1:].lstrip().startswith("#")):
            return value[1:end]
    if " #" in value:
        value = value.split(" #", 1)[0].rstrip()
    return value


def parse_env_assignments(items: Sequence[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` settings for the job. Secrets are refused: a command line ends up in shell
    history and process lists; they belong in the environment or an env file."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise ConfigError(f"--env expects KEY=VALUE, got {item!r}")
        if is_secret(key):
            raise ConfigError(f"--env {key}: secrets do not go on the command line; put {key} in the "
                              "environment or in an --env-file")
        out[key] = value
    return out


def job_env(*, local: Mapping[str, str], env_file: Mapping[str, str], cli: Mapping[str, str]) -> dict[str, str]:
    """The job's env vars from MLflow client settings in this process's environment, then the env
    file, then ``--env`` (later wins). Client-only keys (Ray address and token) stay here, and so
    does an env file's MLFLOW_TRACKING_URI (a source for the tracking URI harness submit sets)."""
    out = {k: local[k] for k in MLFLOW_CLIENT_ENV if local.get(k)}
    for source, values in (("env file", env_file), ("--env", cli)):
        for key, value in values.items():
            if key in RESERVED_ENV and not (source == "env file" and key == TRACKING_ENV):
                raise ConfigError(f"{source}: {key} is set by harness submit itself "
                                  f"(use --tracking-uri / --storage-path)")
            if key not in CLIENT_ONLY_ENV and key != TRACKING_ENV:
                out[key] = value
    return out


def project_root(working_dir: Path | None = None) -> Path:
    """The project tree a job ships: ``working_dir`` or the checkout the running harness comes from."""
    root = (working_dir or Path(__file__).resolve().parents[2]).resolve()
    if not (root / ENTRYPOINT_SCRIPT).is_file() or not (root / "harness").is_dir():
        raise HarnessError(f"{root} is not a harness project checkout (no {ENTRYPOINT_SCRIPT}); "
                           "harness submit ships the source tree: run it from a checkout "
                           "(pip install -e .) or give --working-dir")
    return root


def base_runtime_env(root: Path) -> dict[str, Any]:
    """``jobs/runtime_env.yaml`` of the shipped project (excludes and default env vars)."""
    from harness.config import read_yaml

    path = root / RUNTIME_ENV_FILE
    if not path.is_file():
        return {}
    raw = read_yaml(path, "runtime environment file")[0] or {}
    if not isinstance(raw, dict) or not isinstance(raw.get("excludes", []), list) \
            or not isinstance(raw.get("env_vars", {}), dict):
        raise ConfigError(f"{path}: expected a mapping with an excludes list and an env_vars mapping")
    return raw


def local_excludes(root: Path, paths: Iterable[str | None]) -> list[str]:
    """Exclude patterns for local paths inside the shipped tree (a data cache, a Tune storage dir)."""
    out = []
    for p in paths:
        if not p or "://" in p:
            continue
        try:
            rel = Path(p).resolve().relative_to(root)
        except ValueError:
            continue
        if rel.parts:
            out.append(f"/{rel.as_posix()}/")
    return out


def build_runtime_env(root: Path, env_vars: Mapping[str, str], extra_excludes: Sequence[str] = ()) -> dict[str, Any]:
    """working_dir = the project root, excludes from jobs/runtime_env.yaml (+ ``extra_excludes``),
    env vars = the file's defaults updated with ``env_vars``."""
    base = base_runtime_env(root)
    env = {str(k): str(v) for k, v in (base.get("env_vars") or {}).items()}
    env.update(env_vars)
    excludes = list(dict.fromkeys([*(base.get("excludes") or []), *extra_excludes]))
    out = {k: v for k, v in base.items() if k not in ("excludes", "env_vars", "working_dir")}
    return {**out, "working_dir": str(root), "excludes": excludes, "env_vars": env}


def entrypoint(*, python: str, study_file: str, smoke: bool, resume: bool, assign: Sequence[str],
               driver_gpu: bool, verbose: bool = False) -> str:
    """The job's shell command: the cluster's ``python`` runs jobs/entrypoint.py from the shipped tree
    (``verbose``: with the libraries' own output, as `harness -v submit` asks)."""
    args = [python, ENTRYPOINT_SCRIPT, study_file]
    args += ["--smoke"] * smoke + ["--resume"] * resume + ["--driver-gpu"] * driver_gpu + ["--verbose"] * verbose
    for item in assign:
        args += ["--set", item]
    return shlex.join(args)
