"""Job submission without a cluster: env files, secrets, the runtime_env, the entrypoint, address and
token resolution, and study validation before submission (fast; the real cluster is in test_submit)."""

from __future__ import annotations

import json
import os
import shlex
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness.errors import ConfigError, HarnessError
from harness.jobs import env as E
from harness.jobs.client import JobServer, probe, resolve_address, resolve_token
from harness.jobs.driver import build_parser
from harness.jobs.submit import SubmitPlan, plan_submission, submission_id

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "search_spaces" / "quickstart.yaml"


def test_env_file_parsing(tmp_path: Path) -> None:
    f = tmp_path / "x.env"
    f.write_text("# comment\n\nexport RAY_AUTH_TOKEN=abc\nMLFLOW_TRACKING_PASSWORD='p w#1'\n"
                 "HARNESS_CACHE=/data/cache  # where\nEMPTY=\nQUOTED=\"/data/cache\" # shared cache\n"
                 "SINGLE='a # b'  # note\nODD='a' b\n")
    assert E.read_env_file(f) == {"RAY_AUTH_TOKEN": "abc", "MLFLOW_TRACKING_PASSWORD": "p w#1",
                                  "HARNESS_CACHE": "/data/cache", "EMPTY": "", "QUOTED": "/data/cache",
                                  "SINGLE": "a # b", "ODD": "'a' b"}
    f.write_text("OK=1\nnot a line\n")
    with pytest.raises(ConfigError, match=r"x.env:2: expected KEY=VALUE"):
        E.read_env_file(f)
    with pytest.raises(HarnessError, match="env file not found"):
        E.read_env_file(tmp_path / "missing.env")


@pytest.mark.parametrize("key", ["MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME",
                                 "RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "DBPASSWORD"])
def test_secret_keys(key: str) -> None:
    assert E.is_secret(key)


@pytest.mark.parametrize("key", ["TOKENIZERS_PARALLELISM", "HARNESS_CACHE", "MLFLOW_TRACKING_URI", "HF_HUB_OFFLINE"])
def test_plain_keys(key: str) -> None:
    assert not E.is_secret(key)


def test_printed_env_hides_secrets_credentials_and_the_study_text() -> None:
    env = {"MLFLOW_TRACKING_PASSWORD": "hunter2", "MLFLOW_TRACKING_URI": "https://u:pw@mlflow:5000/x",
           "HARNESS_CACHE": "/c", E.STUDY_TEXT_ENV: "name: s"}
    text = E.describe_env(env)
    assert "hunter2" not in text and "pw" not in text and "name: s" not in text
    assert "MLFLOW_TRACKING_PASSWORD=***" in text and "https://***@mlflow:5000/x" in text
    assert E.redact_uri("http://mlflow:5000") == "http://mlflow:5000"


def test_secrets_are_refused_on_the_command_line() -> None:
    assert E.parse_env_assignments(["HARNESS_CACHE=/c", "A=b=c"]) == {"HARNESS_CACHE": "/c", "A": "b=c"}
    with pytest.raises(ConfigError, match="--env MLFLOW_TRACKING_PASSWORD: secrets do not go on the command line"):
        E.parse_env_assignments(["MLFLOW_TRACKING_PASSWORD=x"])
    with pytest.raises(ConfigError, match="--env expects KEY=VALUE"):
        E.parse_env_assignments(["nope"])


def test_job_env_sources_and_client_only_keys() -> None:
    env = E.job_env(local={"MLFLOW_TRACKING_TOKEN": "t0", "HOME": "/root", "RAY_AUTH_TOKEN": "r"},
                    env_file={"MLFLOW_TRACKING_TOKEN": "t1", "RAY_AUTH_TOKEN": "r", "AWS_REGION": "eu"},
                    cli={"HARNESS_CACHE": "/c"})
    assert env == {"MLFLOW_TRACKING_TOKEN": "t1", "AWS_REGION": "eu", "HARNESS_CACHE": "/c"}
    with pytest.raises(ConfigError, match="--env: MLFLOW_TRACKING_URI is set by harness submit itself"):
        E.job_env(local={}, env_file={}, cli={"MLFLOW_TRACKING_URI": "x"})
    with pytest.raises(ConfigError, match="env file: HARNESS_STUDY_TEXT is set by harness submit itself"):
        E.job_env(local={}, env_file={"HARNESS_STUDY_TEXT": "x"}, cli={})


def test_runtime_env_ships_the_project_without_caches_venvs_or_results(tmp_path: Path) -> None:
    """Package the working_dir the way Ray does (without .gitignore, so our excludes alone decide)."""
    from ray._private import ray_constants
    from ray._private.runtime_env.packaging import create_package

    root = E.project_root()
    renv = E.build_runtime_env(root, {"HARNESS_CACHE": "/c"}, E.local_excludes(root, [str(root / "cachedir")]))
    assert renv["working_dir"] == str(root)
    assert renv["env_vars"]["HARNESS_CACHE"] == "/c" and renv["env_vars"]["HF_HUB_OFFLINE"] == "1"
    assert "/cachedir/" in renv["excludes"]
    pkg = tmp_path / "pkg.zip"
    create_package(str(root), pkg, include_gitignore=False,
                   excludes=ray_constants.get_runtime_env_default_excludes() + renv["excludes"])
    names = zipfile.ZipFile(pkg).namelist()
    assert {"harness/cli/__init__.py", "harness/jobs/driver.py", "jobs/entrypoint.py", "jobs/runtime_env.yaml",
            "search_spaces/quickstart.yaml"} <= set(names)
    for bad in (".git/", ".venv/", "mlruns/", "runs/", ".mypy_cache/", ".harness_cache/", "__pycache__/"):
        assert not any(n.startswith(bad) or f"/{bad}" in n for n in names), bad
    assert pkg.stat().st_size < 20 * 2**20


def test_a_malformed_runtime_env_file_is_one_line_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "runtime_env.yaml").write_text("excludes: [.venv]\nenv_vars: {A: 2020-13-45}\n")
    with pytest.raises(ConfigError) as exc:
        E.base_runtime_env(tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'jobs' / 'runtime_env.yaml'}:2: malformed YAML: '2020-13-45'")
    (tmp_path / "jobs" / "runtime_env.yaml").write_text("excludes: [.venv\n")
    with pytest.raises(ConfigError, match="runtime_env.yaml:2: malformed YAML"):
        E.base_runtime_env(tmp_path)


def test_entrypoint_is_one_quoted_shell_command() -> None:
    cmd = E.entrypoint(python="python", study_file="my study.yaml", smoke=True, resume=True,
                       assign=["train.lr=1e-4", "model.name=tiny x"], driver_gpu=False)
    argv = shlex.split(cmd)
    assert argv[:3] == ["python", "jobs/entrypoint.py", "my study.yaml"]
    args = build_parser().parse_args(argv[2:])
    assert args.smoke and args.resume and not args.driver_gpu
    assert args.assign == ["train.lr=1e-4", "model.name=tiny x"]


def test_address_resolution() -> None:
    assert resolve_address("127.0.0.1:8265", {}) == "http://127.0.0.1:8265"
    assert resolve_address(None, {"RAY_API_SERVER_ADDRESS": "http://h:1/"}) == "http://h:1"
    assert resolve_address(None, {"RAY_ADDRESS": "https://h:2"}) == "https://h:2"
    assert resolve_address("http://x:3", {"RAY_API_SERVER_ADDRESS": "http://h:1"}) == "http://x:3"
    with pytest.raises(HarnessError, match="no Ray job server address"):
        resolve_address(None, {"RAY_ADDRESS": "10.0.0.1:6379"})
    with pytest.raises(HarnessError, match="not a Ray Client address"):
        resolve_address("ray://h:10001", {})


@pytest.mark.parametrize(("address", "env", "says"), [
    ("http://127.0.0.1:notaport", {}, "--address 'http://127.0.0.1:notaport' is not a job server address"),
    ("http://[::1", {}, "--address 'http://[::1' is not a job server address (Invalid IPv6 URL)"),
    ("http:// spaces/", {}, "--address 'http:// spaces' is not a job server address (it contains a space"),
    ("http://h:70000", {}, "--address 'http://h:70000' is not a job server address"),
    ("http://:8265", {}, "(no host)"),
    (None, {"RAY_API_SERVER_ADDRESS": " "}, "RAY_API_SERVER_ADDRESS is blank"),
    (None, {"RAY_API_SERVER_ADDRESS": "h:x"}, "RAY_API_SERVER_ADDRESS 'http://h:x' is not a job server address"),
    (None, {"RAY_ADDRESS": "http://[::1"}, "RAY_ADDRESS 'http://[::1' is not a job server address"),
])
def test_a_malformed_address_is_one_line_naming_its_source(address, env, says, run_cli, monkeypatch) -> None:
    """Each of these was a traceback (InvalidURL, ValueError) from the probe or Ray's client."""
    with pytest.raises(HarnessError) as info:
        resolve_address(address, env)
    assert says in str(info.value)
    for key in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    rc, _, err = run_cli("jobs", "list", *(["--address", address] if address is not None else []))
    assert rc == 2 and err.count("\n") == 1 and err.startswith("harness: error: ") and says in err, err
    assert resolve_address("http://[::1]:8265", {}) == "http://[::1]:8265"


def test_token_resolution(tmp_path: Path) -> None:
    tok = tmp_path / "tok"
    tok.write_text("from-file\n")
    assert resolve_token({"RAY_AUTH_TOKEN": "t", "RAY_AUTH_TOKEN_PATH": str(tok)}) == ("t", "RAY_AUTH_TOKEN")
    assert resolve_token({"RAY_AUTH_TOKEN_PATH": str(tok)})[0] == "from-file"
    assert resolve_token({}, home=tmp_path) == (None, None)
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token")
    assert resolve_token({"RAY_AUTH_MODE": "token"}, home=tmp_path)[0] == "home-token"
    assert resolve_token({}, home=tmp_path) == (None, None)  # not without RAY_AUTH_MODE=token
    with pytest.raises(HarnessError, match="cannot read the token"):
        resolve_token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "nope")})
    assert "secret-t" not in repr(JobServer(address="http://h", token="secret-t", token_source="x"))


def test_probe_of_a_closed_port_is_one_line() -> None:
    from .services import free_port

    with pytest.raises(HarnessError, match=r"is not reachable \(.*refused.*\); check --address"):
        probe(JobServer(address=f"http://127.0.0.1:{free_port()}"), timeout=5)


class _ProxiedJobServer(BaseHTTPRequestHandler):
    """A job server behind a proxy that does not pass websockets: /logs/tail answers 404, the rest of
    the Jobs API answers as Ray's does for one finished job, J."""

    def do_GET(self) -> None:  # http.server's name for a GET handler
        body = {"/api/version": {"ray_version": "2.52.0", "version": "4", "session_name": "s"},
                "/api/jobs/J": {"type": "SUBMISSION", "submission_id": "J", "status": "SUCCEEDED",
                                "entrypoint": "python jobs/entrypoint.py study.yaml"},
                "/api/jobs/J/logs": {"logs": "trial 1 done\nstudy done\n"}}.get(self.path)
        data = json.dumps(body).encode() if body is not None else b"not found"
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json" if body is not None else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_follow_falls_back_to_polling_when_the_log_websocket_cannot_be_opened(run_cli) -> None:
    """aiohttp's WSServerHandshakeError (a 404 on /logs/tail) was a traceback of jobs logs --follow
    and submit --wait; the job's logs come by polling instead."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ProxiedJobServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc, out, err = run_cli("jobs", "logs", "J", "--follow", "--address",
                               f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in err and rc == 0, err
    assert out == "trial 1 done\nstudy done\n" and "job J SUCCEEDED" in err


def _plan(tmp_path: Path, study: Path = QUICKSTART, **kw: Any) -> SubmitPlan:
    args: dict[str, Any] = {"smoke": True, "tracking_uri": "http://mlflow:5000", "env": {}, "check_tracking": False}
    args.update(kw)
    return plan_submission(study, **args)


def test_plan_carries_the_validated_study_and_settings(tmp_path: Path) -> None:
    plan = _plan(tmp_path, storage_path="s3://bucket/runs", cli_env=["HARNESS_CACHE=/data"],
                 env_file={"MLFLOW_TRACKING_PASSWORD": "pw"}, resume=True)
    env = plan.runtime_env["env_vars"]
    assert env[E.STUDY_TEXT_ENV] == QUICKSTART.read_text()
    assert env[E.TRACKING_ENV] == "http://mlflow:5000" and env[E.STORAGE_ENV] == "s3://bucket/runs"
    assert env["HARNESS_CACHE"] == "/data" and env["MLFLOW_TRACKING_PASSWORD"] == "pw"
    assert plan.entrypoint == "python jobs/entrypoint.py quickstart.yaml --smoke --resume"
    assert plan.trials == 9 and plan.num_gpus == 0 and not plan.warnings
    assert plan.metadata == {"harness.study": "quickstart", "harness.smoke": "true"}
    printed = "\n".join(plan.describe())
    assert "pw" not in printed.replace("MLFLOW_TRACKING_PASSWORD", "") and "name: quickstart" not in printed


def test_plan_warns_about_relative_storage_and_refuses_bad_input(tmp_path: Path) -> None:
    assert "relative" in _plan(tmp_path).warnings[0]
    with pytest.raises(ConfigError, match="--storage-path runs: give an absolute path"):
        _plan(tmp_path, storage_path="runs")
    with pytest.raises(HarnessError, match="needs a tracking URI the cluster can reach"):
        _plan(tmp_path, tracking_uri=None)
    with pytest.raises(HarnessError, match="carries credentials"):
        _plan(tmp_path, tracking_uri="https://me:pw@mlflow")
    with pytest.raises(ConfigError, match="--driver-gpus must be a finite number >= 0"):
        _plan(tmp_path, driver_gpus=-1)
    creds = tmp_path / "creds.yaml"
    creds.write_text(QUICKSTART.read_text() + "tracking_uri: https://me:pw@mlflow:5000\n")
    with pytest.raises(ConfigError, match="tracking_uri carries credentials"):
        _plan(tmp_path, study=creds)
    bad = tmp_path / "bad.yaml"
    bad.write_text(QUICKSTART.read_text().replace("seeds: [1, 2, 3]", "seeds: [1, 1]"))
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: seeds must be a list of distinct integers"):
        _plan(tmp_path, study=bad)


def test_plan_takes_the_tracking_uri_from_the_environment(tmp_path: Path) -> None:
    plan = _plan(tmp_path, tracking_uri=None, env={"MLFLOW_TRACKING_URI": "http://env:5000"})
    assert plan.tracking_uri == "http://env:5000"
    plan = _plan(tmp_path, tracking_uri=None, env={"MLFLOW_TRACKING_URI": "http://env:5000"},
                 env_file={"MLFLOW_TRACKING_URI": "http://file:5000"})
    assert plan.tracking_uri == plan.runtime_env["env_vars"][E.TRACKING_ENV] == "http://file:5000"


def test_submission_ids_are_readable_and_unique() -> None:
    a, b = submission_id("My Study/v2"), submission_id("My Study/v2")
    assert a.startswith("harness-my-study-v2-") and a != b


def test_rayjob_manifest_runs_the_entrypoint_with_resume_and_ships_no_secret() -> None:
    import yaml

    docs = yaml.safe_load((REPO / "jobs" / "rayjob.yaml").read_text())
    spec = docs["spec"]
    argv = shlex.split(spec["entrypoint"])
    assert argv[1] == "/home/ray/harness/jobs/entrypoint.py"
    study = Path(argv[2]).relative_to("/home/ray/harness")
    assert (REPO / study).is_file()
    assert build_parser().parse_args(argv[2:]).resume  # a retried job finishes, never restarts
    assert spec["entrypointNumGpus"] == 0 and spec["backoffLimit"] >= 1
    env = yaml.safe_load(spec["runtimeEnvYAML"])["env_vars"]
    assert {E.TRACKING_ENV, E.STORAGE_ENV} <= set(env) and "://" in env[E.STORAGE_ENV]
    assert not [k for k in env if E.is_secret(k)]
    assert spec["rayClusterSpec"]["authOptions"]["mode"] == "token"
    workers = spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" in workers["resources"]["limits"]
    # The study it submits uses those GPUs: its trials ask for a share of one, and the trials that can
    # share a GPU fit a worker's CPUs.
    from harness.study.spec import load_spec

    submitted = load_spec(REPO / study)
    gpus = int(workers["resources"]["limits"]["nvidia.com/gpu"])
    assert 0 < submitted.gpus <= gpus and submitted.seeds_per_trial > 1
    sharing = min(int(1 / submitted.gpus), submitted.concurrency)
    assert sharing * submitted.cpus <= int(workers["resources"]["limits"]["cpu"])


@pytest.mark.parametrize("verbose", [False, True])
def test_a_submitted_jobs_driver_is_as_quiet_as_harness_run(verbose: bool, monkeypatch, tmp_path, capsys) -> None:
    """A job's log held 39 artifact progress bars, MLflow INFO lines and Tune's configuration box:
    its driver never set what `harness run` sets without -v (harness.driver.quiet.QUIET_ENV, which
    Ray's workers inherit). It now does; `harness -v submit` passes --verbose, which leaves them."""
    from harness.driver.quiet import QUIET_ENV
    from harness.jobs.driver import main as job_main

    # recorded, so the test leaves the environment as it found it: the driver hides the GPUs
    # (CUDA_VISIBLE_DEVICES=""), which made the next module's Ray on this worker fail to start
    for key in (*QUIET_ENV, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    cmd = E.entrypoint(python="python", study_file="s.yaml", smoke=False, resume=False, assign=[],
                       driver_gpu=False, verbose=verbose)
    argv = shlex.split(cmd)[2:]
    assert ("--verbose" in argv) is verbose
    monkeypatch.delenv(E.STUDY_TEXT_ENV, raising=False)
    # a study file that is not there: the driver stops in one line, its environment already set
    assert job_main([str(tmp_path / "absent.yaml"), *argv[1:]]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert all((os.environ.get(k) == v) is not verbose for k, v in QUIET_ENV.items())


@pytest.mark.parametrize("uri, why", [("sqlite:///mlruns/mlflow.db", "an absolute path"),
                                      ("mlruns", "a folder store"), ("nosuch://x", "an unsupported scheme")])
def test_skipping_the_tracking_check_still_refuses_a_uri_no_cluster_can_use(tmp_path: Path, uri: str,
                                                                             why: str) -> None:
    """--skip-tracking-check (a server only the cluster resolves) skipped the URI's form too: a
    relative SQLite path was submitted and failed on the cluster. Only reaching it is skipped now;
    a server this machine cannot reach still passes."""
    with pytest.raises(HarnessError, match=why):
        _plan(tmp_path, tracking_uri=uri, check_tracking=False)
    assert _plan(tmp_path, tracking_uri="http://mlflow.cluster.internal:5000", check_tracking=False).trials == 9


class _StalledJobServer(BaseHTTPRequestHandler):
    """A job server whose head answers /api/version and then stalls: every other request is taken
    and never answered."""

    def do_GET(self) -> None:  # http.server's name for a GET handler
        if self.path != "/api/version":
            time.sleep(30)
            return
        data = json.dumps({"ray_version": "2.60.0", "version": "4", "session_name": "s"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_job_server_that_never_answers_is_an_error_after_the_timeout_not_a_wait_for_ever() -> None:
    """Ray's job client sends without a timeout: `harness jobs list` against a head that answered
    the version probe and then stalled waited for ever. Each request is now bounded, and its end is
    one line."""
    from harness.jobs.client import Jobs

    server = ThreadingHTTPServer(("127.0.0.1", 0), _StalledJobServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        jobs = Jobs(JobServer(address=address), timeout_s=(5.0, 1.0))
        start = time.monotonic()
        with pytest.raises(HarnessError) as err:
            jobs.list()
    finally:
        server.shutdown()
        server.server_close()
    assert time.monotonic() - start < 20
    assert str(err.value) == f"job list at {address} failed: no answer within 1 s (is the head overloaded?)"
