"""The Ray Job side of ``harness submit``: run one study as the job's driver (``jobs/entrypoint.py``).

    python jobs/entrypoint.py STUDY.yaml [--smoke] [--resume] [--set KEY=VALUE ...] [--driver-gpu]

STUDY.yaml is read from disk (an image or shared volume, as in jobs/rayjob.yaml) unless
``HARNESS_STUDY_TEXT`` holds the study text (``harness submit`` ships it so the job runs exactly the
file validated on the submitting machine; STUDY.yaml is then only its name). ``MLFLOW_TRACKING_URI``
says where to record; ``HARNESS_STORAGE_PATH`` replaces the study's storage_path. Inside a Ray Job
``RAY_ADDRESS`` is set, so the study's ``ray.init()`` attaches to this cluster.

``--resume`` finishes the study from its Tune state and MLflow records when there are any and starts
it otherwise; a job that may be retried (KubeRay ``backoffLimit``) should always pass it.

The driver stays off the GPU unless ``--driver-gpu``: with ``entrypoint_num_gpus=0`` Ray reserves no
GPU for the entrypoint yet leaves every GPU visible to it, so a driver-side preparation step (a
BERT_pred teacher) would share a GPU with the trials Ray placed there.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.driver.quiet import quiet_libraries
from harness.errors import HarnessError
from harness.jobs.env import STORAGE_ENV, STUDY_TEXT_ENV, TRACKING_ENV, redact_uri

ERROR_PREFIX = "harness job: error:"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/entrypoint.py",
                                description="Run a harness study as the driver of a Ray Job.")
    p.add_argument("study", help="the study file (only its name when HARNESS_STUDY_TEXT is set)")
    p.add_argument("--smoke", action="store_true", help="apply the study's smoke: overrides")
    p.add_argument("--resume", action="store_true", help="finish earlier work of this study if there is any")
    p.add_argument("--set", dest="assign", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--driver-gpu", action="store_true",
                   help="let the driver see the GPUs (submit with entrypoint_num_gpus > 0)")
    p.add_argument("--verbose", action="store_true",
                   help="the libraries' own output too (MLflow INFO lines, progress bars), as harness -v")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.driver_gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    if not args.verbose:  # the job's log as quiet as `harness run`'s terminal (Ray's workers inherit it)
        quiet_libraries()
    try:
        return run(args)
    except HarnessError as exc:
        print(f"{ERROR_PREFIX} {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt as exc:
        # `harness jobs stop` (SIGTERM) or a signal to the job's driver: the study has ended its
        # runs KILLED; one line, the exit status 128 + the signal's number, as `harness run` does.
        signum = int(getattr(exc, "signum", 2))
        name = "SIGINT" if signum == 2 else str(exc)
        print(f"{ERROR_PREFIX} interrupted ({name}); finish the study with: {resume_command(args)}",
              file=sys.stderr, flush=True)
        return 128 + signum


def resume_command(args: argparse.Namespace) -> str:
    """The `harness submit` line that finishes this job's study with the same settings, from the
    machine it was submitted from (the study file there has the name this job was given)."""
    argv = ["harness", "submit", Path(args.study).name or "STUDY.yaml", "--resume"]
    argv += ["--smoke"] * bool(args.smoke) + [a for kv in args.assign for a in ("--set", kv)]
    if os.environ.get(TRACKING_ENV):
        argv += ["--tracking-uri", redact_uri(os.environ[TRACKING_ENV])]
    if os.environ.get(STORAGE_ENV):
        argv += ["--storage-path", os.environ[STORAGE_ENV]]
    return shlex.join(argv)


def entry() -> int:
    """jobs/entrypoint.py: ``main``, then the heap left out of the interpreter's exit collections
    (harness.heap)."""
    from harness.heap import then_exit

    return then_exit(main)


def run(args: argparse.Namespace) -> int:
    from harness.study.validate import check_tracking_uri, load

    text = os.environ.get(STUDY_TEXT_ENV)
    with tempfile.TemporaryDirectory(prefix="harness-job-") as tmp:
        path = Path(args.study)
        if text is not None:
            path = Path(tmp) / (path.name or "study.yaml")
            path.write_text(text)
        spec = load(path, args.smoke, args.assign)
        storage = os.environ.get(STORAGE_ENV)
        if storage:
            spec = dataclasses.replace(spec, storage_path=storage)
        uri = os.environ.get(TRACKING_ENV) or spec.tracking_uri
        if not uri:
            raise HarnessError("no tracking URI for the job: set MLFLOW_TRACKING_URI (harness submit "
                               "--tracking-uri); the default ./mlruns would vanish with the job's working dir")
        check_tracking_uri(uri)
        print(f"harness job: study {spec.name} on Ray at {os.environ.get('RAY_ADDRESS', 'local')}; "
              f"tracking {redact_uri(uri)}; Tune storage {spec.storage_path}; "
              f"driver GPUs {'visible' if args.driver_gpu else 'hidden'}", file=sys.stderr, flush=True)
        from harness.driver.runner import run_study

        run_study(spec, resume=args.resume, tracking_uri=uri, resume_command=resume_command(args))
    return 0
