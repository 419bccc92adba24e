"""``harness submit`` and ``harness jobs list|logs|stop``: studies as Ray Jobs on a cluster."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from harness.jobs.client import TERMINAL, Jobs, JobServer, server_from
from harness.jobs.driver import ERROR_PREFIX
from harness.jobs.env import read_env_file

ADDRESS_HELP = "the Ray job server, http://HEAD:8265 (default: $RAY_API_SERVER_ADDRESS)"
ENV_FILE_HELP = ("KEY=VALUE file: RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH for the job server, MLflow "
                 "credentials and other settings for the job (secret values are never printed)")


def register(sub: Any) -> None:
    s = sub.add_parser(
        "submit", help="submit a study to a Ray cluster as a Ray Job",
        description="Validate the study here, then run it as a Ray Job: the project tree is shipped as "
        "the job's working_dir, the study text, tracking URI and settings as env vars; the cluster's "
        "python runs jobs/entrypoint.py. Prints the job id; --wait streams the logs and exits with the "
        "job's status (0 succeeded, 1 failed or stopped).")
    s.add_argument("study", type=Path, help="the study file (YAML)")
    _server_args(s)
    s.add_argument("--wait", action="store_true", help="stream the job's logs until it ends; exit with its status")
    s.add_argument("--smoke", action="store_true", help="apply the study's smoke: overrides (a tiny budget)")
    s.add_argument("--resume", action="store_true",
                   help="finish earlier work of this study (Tune state at its storage path, MLflow runs)")
    s.add_argument("--set", dest="assign", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key in every configuration (repeatable)")
    s.add_argument("--tracking-uri", help="MLflow tracking URI the cluster can reach (default: the "
                   "study's tracking_uri, else $MLFLOW_TRACKING_URI)")
    s.add_argument("--skip-tracking-check", action="store_true",
                   help="do not check the tracking URI from here (it resolves only inside the cluster)")
    s.add_argument("--storage-path", help="Ray Tune storage for the job: an absolute path every node "
                   "sees or s3://bucket/prefix (default: the study's storage_path)")
    s.add_argument("--env", dest="env", action="append", default=[], metavar="KEY=VALUE",
                   help="an env var for the job, e.g. HARNESS_CACHE=/data/cache (repeatable; no secrets)")
    s.add_argument("--python", default="python", help="the cluster's Python command (default: python)")
    s.add_argument("--driver-gpus", type=float, default=0.0,
                   help="GPUs reserved for the job's driver (default 0: the driver stays off the GPU)")
    s.add_argument("--working-dir", type=Path, help="the project tree to ship (default: this checkout)")
    s.set_defaults(func=cmd_submit)

    jobs = sub.add_parser("jobs", help="list, follow or stop study jobs on a Ray cluster")
    jsub = jobs.add_subparsers(dest="jobs_command", metavar="ACTION")
    ls = jsub.add_parser("list", help="jobs on the cluster, oldest first")
    _server_args(ls)
    ls.set_defaults(func=cmd_list)
    logs = jsub.add_parser("logs", help="print a job's logs")
    logs.add_argument("job_id")
    logs.add_argument("--follow", "-f", action="store_true", help="stream until the job ends; exit with its status")
    _server_args(logs)
    logs.set_defaults(func=cmd_logs)
    stop = jsub.add_parser("stop", help="stop a running job")
    stop.add_argument("job_id")
    stop.add_argument("--wait", action="store_true", help="wait until the job has stopped")
    _server_args(stop)
    stop.set_defaults(func=cmd_stop)
    jobs.set_defaults(func=lambda args: _usage(jobs))


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help=ADDRESS_HELP)
    p.add_argument("--env-file", type=Path, help=ENV_FILE_HELP)


def _usage(p: argparse.ArgumentParser) -> int:
    p.print_help()
    return 2


def _env_file(args: argparse.Namespace) -> dict[str, str]:
    return read_env_file(args.env_file) if args.env_file else {}


def _server(args: argparse.Namespace, env_file: dict[str, str]) -> JobServer:
    return server_from(args.address, {**os.environ, **env_file})


def cmd_submit(args: argparse.Namespace) -> int:
    from harness.jobs.submit import plan_submission

    env_file = _env_file(args)
    server = _server(args, env_file)  # a missing address fails before anything else
    plan = plan_submission(
        args.study, smoke=args.smoke, resume=args.resume, assign=args.assign,
        tracking_uri=args.tracking_uri, storage_path=args.storage_path, env=dict(os.environ),
        env_file=env_file, cli_env=args.env, python=args.python, driver_gpus=args.driver_gpus,
        working_dir=args.working_dir, check_tracking=not args.skip_tracking_check,
        verbose=bool(getattr(args, "verbose", False)))
    for w in plan.warnings:
        print(f"harness: warning: {w}", file=sys.stderr)
    print(f"study {plan.study_name}: OK ({plan.trials} trials{', smoke' if args.smoke else ''})", file=sys.stderr)
    jobs = Jobs(server)
    job_id = jobs.submit(entrypoint=plan.entrypoint, runtime_env=plan.runtime_env, metadata=plan.metadata,
                         submission_id=plan.submission_id, num_gpus=plan.num_gpus)
    print(f"submitted job {job_id} to {server.address} (Ray {jobs.ray_version})", flush=True)
    for line in plan.describe():
        print(line, file=sys.stderr)
    if not args.wait:
        print(f"  follow: harness jobs logs {job_id} --follow --address {server.address}", file=sys.stderr)
        return 0
    return _follow(jobs, job_id)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _follow(jobs: Jobs, job_id: str) -> int:
    try:
        status = jobs.follow(job_id, _write)
    except KeyboardInterrupt:
        print(f"harness: stopped following; job {job_id} keeps running "
              f"(harness jobs stop {job_id} --address {jobs.server.address})", file=sys.stderr)
        return 130
    if status == "SUCCEEDED":
        print(f"job {job_id} SUCCEEDED", file=sys.stderr)
        return 0
    print(f"harness: job {job_id} {status}: {_reason(jobs, job_id)}", file=sys.stderr)
    return 1


def _reason(jobs: Jobs, job_id: str) -> str:
    """The job's own one-line error when it printed one, else Ray's message."""
    errors = [ln for ln in jobs.logs(job_id).splitlines() if ln.startswith(ERROR_PREFIX)]
    if errors:
        return errors[-1][len(ERROR_PREFIX):].strip()[:300]
    message = jobs.message(job_id).strip().splitlines()
    return message[0][:300] if message else "no message"


def cmd_list(args: argparse.Namespace) -> int:
    jobs = Jobs(_server(args, _env_file(args)))
    rows = jobs.list()
    if not rows:
        print(f"no jobs on {jobs.server.address}")
        return 0
    print(f"{'JOB':44s} {'STATUS':10s} {'STUDY':20s} {'STARTED':19s} {'DURATION':>9s}  MESSAGE")
    for r in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.start_time)) if r.start_time else "-"
        end = r.end_time or (time.time() if r.start_time else None)
        dur = f"{end - r.start_time:.0f}s" if r.start_time and end else "-"
        print(f"{r.submission_id:44s} {r.status:10s} {r.study:20s} {started:19s} {dur:>9s}  {r.message}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    jobs = Jobs(_server(args, _env_file(args)))
    if args.follow:
        return _follow(jobs, args.job_id)
    sys.stdout.write(jobs.logs(args.job_id))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    jobs = Jobs(_server(args, _env_file(args)))
    if not jobs.stop(args.job_id):
        print(f"job {args.job_id} is not running ({jobs.status(args.job_id)})")
        return 0
    print(f"stopping job {args.job_id}")
    if args.wait:
        while (status := jobs.status(args.job_id)) not in TERMINAL:
            time.sleep(1.0)
        print(f"job {args.job_id} {status}")
    return 0
