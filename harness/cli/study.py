"""``harness run``, ``harness validate``, ``harness demo`` and ``harness ui``.

``run`` and ``validate`` (and ``harness submit``) check a study with the one ``validate_study``
(harness/study/validate.py) before anything is spent; ``validate`` also builds the model.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from harness.study.validate import check_tracking_uri, load, validate_study
from harness.tracking import conventions as C
from harness.tracking.store import DEFAULT_STORE

__all__ = ["cmd_run", "cmd_validate", "register"]

QUICKSTART = Path(__file__).resolve().parents[2] / "search_spaces" / "quickstart.yaml"
# `harness demo --collections`: the quickstart's baseline and WSLS over two collections, one table.
QUICKSTART_COLLECTIONS = QUICKSTART.with_name("quickstart_collections.yaml")


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run a study (local Ray by default; a cluster when RAY_ADDRESS is set)",
        description="Run every configuration of a study file with every study seed as Ray Tune "
        "trials, record them in MLflow (study run > config run > seed run) and finish with paired "
        "significance tests against the seeded baseline. One driver per study: a second `harness "
        "run` of a running study is refused; exits non-zero when the report could not be produced.")
    run.add_argument("study", type=Path, help="the study file (YAML)")
    run.add_argument("--resume", action="store_true", help="finish an interrupted study without re-running finished trials")
    run.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: the study file's tracking_uri, else {DEFAULT_STORE})")
    run.add_argument("--smoke", action="store_true", help="apply the study's smoke: overrides (a tiny budget)")
    run.add_argument("--set", dest="assign", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key in every configuration (repeatable)")
    run.set_defaults(func=cmd_run)

    val = sub.add_parser("validate", help="check a study file and print what it will run",
                         description="Check keys, ranges, names, paths, the tracking URI and that the "
                         "model builds, then print configurations x seeds, trials and resources. "
                         "Writes nothing.")
    val.add_argument("study", type=Path)
    val.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: the study file's tracking_uri, else {DEFAULT_STORE})")
    val.add_argument("--smoke", action="store_true")
    val.add_argument("--set", dest="assign", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key in every configuration, as `harness run --set` (repeatable)")
    val.add_argument("--no-model", action="store_true", help="skip building the model (faster)")
    val.add_argument("--gpu-memory", type=float, metavar="GIB",
                     help="memory of one GPU of the cluster, in GiB: warn when the trials sharing a GPU "
                     "would not fit (default: the local CUDA device's, if any)")
    val.set_defaults(func=cmd_validate)

    demo = sub.add_parser("demo", help="run the quickstart study end to end and print its results",
                          description=f"Runs {QUICKSTART.name}: baseline vs a curriculum and a "
                          "smoothing configuration, 3 seeds each, on the embedded data set with the "
                          "packaged encoder, on local Ray, recorded in ./mlruns.")
    demo.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: {DEFAULT_STORE})")
    demo.add_argument("--collections", action="store_true",
                      help=f"run {QUICKSTART_COLLECTIONS.name} instead: baseline vs WSLS on the embedded "
                      "set and the shipped Cranfield collection, ending with one table over both")
    demo.set_defaults(func=cmd_demo)

    ui = sub.add_parser("ui", help="start the MLflow UI on the study store and print its URL",
                        description="Serve the MLflow UI (and with it the store's whole read and write "
                        "API, unauthenticated) on this machine's loopback address. Another address "
                        "needs --allow-remote.")
    ui.add_argument("--tracking-uri", metavar="URI", help=f"MLflow store (default: {DEFAULT_STORE})")
    ui.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; a non-loopback one needs --allow-remote)")
    ui.add_argument("--port", type=int, default=5000, help="TCP port, 1-65535 (default 5000)")
    ui.add_argument("--allow-remote", action="store_true",
                    help="listen on a non-loopback --host: anyone who reaches it can read and change "
                    "every study in the store")
    ui.set_defaults(func=cmd_ui)


def cmd_run(args: argparse.Namespace, hooks: Any = None) -> int:
    """``hooks``: the trainable's test hooks (harness.driver._trainable.TrialHooks), for tests that
    drive `harness run` in a subprocess."""
    spec = load(args.study, args.smoke, args.assign)
    # Everything validate checks but building the model, before any data is prepared or teacher trained.
    validate_study(spec, tracking_uri=args.tracking_uri, build_model=False)
    from harness.driver.runner import TrialHooks, run_study

    run_study(spec, resume=args.resume, tracking_uri=args.tracking_uri, resume_command=resume_command(args),
              hooks=hooks or TrialHooks())
    return 0


def resume_command(args: argparse.Namespace) -> str:
    """The `harness run` line that finishes this study with the same overrides."""
    import shlex

    argv = ["harness", "run", str(args.study), "--resume"] + ["--smoke"] * bool(args.smoke)
    argv += [a for kv in args.assign for a in ("--set", kv)]
    if args.tracking_uri:
        argv += ["--tracking-uri", args.tracking_uri]
    return shlex.join(argv)


def cmd_demo(args: argparse.Namespace) -> int:
    spec = load(QUICKSTART_COLLECTIONS if args.collections else QUICKSTART, smoke=False)
    validate_study(spec, tracking_uri=args.tracking_uri)
    from harness.driver.runner import run_study

    # The demo is meant to be run again and again: Tune's state of the last one goes (under the
    # study's lease, so never from under a running demo); trials already recorded in MLflow are
    # replayed from there, not retrained.
    run_study(spec, tracking_uri=args.tracking_uri, fresh=True,
              resume_command="harness demo" + " --collections" * args.collections)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    import math

    from harness.errors import ConfigError
    from harness.study.validate import confirm_plan, gpu_plan, ray_trials
    from harness.study.variants import (
        confirm_trials,
        possible_configs,
        trial_count,
        trial_count_word,
        variant_key,
    )

    gpu_memory = getattr(args, "gpu_memory", None)
    if gpu_memory is not None and not (math.isfinite(gpu_memory) and gpu_memory > 0):
        raise ConfigError(f"--gpu-memory must be a number of GiB > 0, got {gpu_memory:g}")
    spec = load(args.study, args.smoke, getattr(args, "assign", None))
    uri = validate_study(spec, tracking_uri=args.tracking_uri, build_model=not args.no_model)
    configs = possible_configs(spec)
    n_fixed = len(spec.fixed_configs()) // max(1, len(spec.collections))  # per collection
    print(f"study {spec.name}: OK ({args.study})")
    print(f"  configurations: {n_fixed} fixed (baseline + {n_fixed - 1})"
          + (f" + {spec.search.num_configs} proposed by {spec.search.searcher}" if spec.search else "")
          + (f", each on {len(spec.collections)} collections" if spec.collections else ""))
    for nc in spec.fixed_configs():
        changed = _diff(spec.defaults.to_flat(), nc.config.to_flat())
        print(f"    {nc.role:9s} {nc.name}: {changed or 'the defaults'}")
    if spec.collections:
        from harness.study.validate import collections_plan

        print("\n".join(collections_plan(spec, progress=lambda m: print(f"harness validate: {m}", file=sys.stderr,
                                                                         flush=True))))
    if spec.search:
        print(f"  search space: {', '.join(spec.search.space)}; objectives: "
              f"{', '.join(f'{m}/{md}' for m, md in spec.search.objectives)}")
    if spec.seed_schedule is not None:
        from harness.study.validate import schedule_plan

        print("\n".join(schedule_plan(spec)))
    else:
        print(f"  seeds: {list(spec.seeds)}  ->  {trial_count_word(spec)}{trial_count(spec) - confirm_trials(spec)} "
              "trials")
    if spec.early_stopping is not None:
        from harness.study.early_stop import rung_steps

        es = spec.early_stopping
        base = spec.baseline.config.train
        print(f"  early stopping: at steps {list(rung_steps(es, base.steps, base.eval_every))} of "
              f"{base.steps} (the baseline's), a configuration outside the top 1/{es.reduction_factor:g} "
              f"by its seeds' mean dev {es.metric} stops with its seeds; the baseline never stops")
    if spec.seeds_per_trial > 1:
        print(f"  seeds per Ray trial: up to {spec.seeds_per_trial} seeds of a configuration in one trial  ->  "
              f"{trial_count_word(spec)}{ray_trials(spec)} Ray trials (one seed run per seed)")
    if spec.confirm is not None:
        print("\n".join(confirm_plan(spec)))
    elif spec.search is not None:
        print("  confirmation: none (confirm: false); the study's tables are exploratory")
    print(f"  resources per trial: {spec.cpus:g} CPU, {spec.gpus:g} GPU; concurrency {spec.concurrency}; "
          f"retries {spec.max_retries}")
    print("\n".join(gpu_plan(spec, gpu_memory)))
    print(f"  data variants to prepare: {len({variant_key(c) for c in configs})}")
    from harness.redact import redact_uri

    print(f"  tracking: {redact_uri(uri)}; Tune storage: {spec.storage_path}")
    return 0


def _diff(base: dict[str, Any], flat: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in flat.items() if base.get(k) != v and k != "train.seed")


def is_loopback(host: str) -> bool:
    """``host`` names this machine's loopback interface only (localhost, 127.0.0.0/8, ::1)."""
    import ipaddress

    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return False


# A host name as RFC 1123 writes one: dot-separated labels of 1-63 letters, digits and hyphens, no
# hyphen at either end of a label, at most 253 characters, a final dot allowed; and an underscore,
# which /etc/hosts and container networks take in names the resolver finds.
_LABEL = r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)"
_HOSTNAME = rf"(?=.{{1,253}}\.?$){_LABEL}(?:\.{_LABEL})*\.?"


def listen_host(host: str) -> str:
    """The address ``--host`` names, as the server binds it (an IPv6 literal without its brackets),
    refused in one line unless it is an IP address or a syntactically valid host name. Checked
    before anything starts: ``999.1.1.1`` or ``bad host`` printed the UI's addresses, started the
    server and ended 15 s later on MLflow's own errors. A name whose last label is a number reads as
    an IPv4 address (RFC 1123, 2.1) and must be one."""
    import ipaddress
    import re
    import socket

    from harness.errors import refuse

    rule = "an IP address or a host name"
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        if bare != host:
            raise refuse("--host", host, "an IPv6 address inside [brackets]") from None
        if re.fullmatch(r"[0-9]+", host.rstrip(".").rpartition(".")[2]):
            try:
                socket.inet_aton(host)  # the shorthands the C library takes ("0", "127.1") bind too
                return host
            except OSError:
                pass
            try:
                ipaddress.IPv4Address(host)
                reason = "not an address"
            except ValueError as exc:  # its reason without the address it repeats whole ("... in '999.1.1.1'")
                reason = str(exc).partition(" in ")[0]
            raise refuse("--host", host, rule, why=f"it reads as an IPv4 address and is none "
                         f"({reason[:1].lower()}{reason[1:]})") from None
        if not re.fullmatch(_HOSTNAME, host):
            raise refuse("--host", host, rule, why="a name is dot-separated labels of at most 63 letters, "
                         "digits, hyphens and underscores") from None
        return host
    if bare != host and address.version != 6:
        raise refuse("--host", host, "an IPv6 address inside [brackets]")
    return bare


def cmd_ui(args: argparse.Namespace) -> int:
    from harness.errors import ConfigError
    from harness.redact import redact_uri

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port must be a TCP port in 1-65535, got {args.port}")
    args.host = listen_host(args.host)
    if not is_loopback(args.host) and not getattr(args, "allow_remote", False):
        raise ConfigError(f"--host {args.host} is not a loopback address: the MLflow UI serves the store's "
                          "whole write API without authentication to anyone who reaches it; use "
                          "--host 127.0.0.1 (and an SSH tunnel), or pass --allow-remote to serve it anyway")
    from harness.tracking import ui
    from harness.tracking.store import check_existing_store

    uri = check_tracking_uri(args.tracking_uri)
    check_existing_store(uri)  # the UI shows a store's studies: a mistyped one is refused, not created
    _check_port_free(args.host, args.port)
    if not is_loopback(args.host):
        print(f"harness: warning: serving the MLflow UI on {args.host}: anyone who reaches port {args.port} "
              "can read, change and delete every study in this store (no authentication)",
              file=sys.stderr, flush=True)
    url = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"
    pages = ui.study_pages(uri)
    # The address to open is a study's runs table on the model-training side of the UI: MLflow's
    # root opens on its GenAI side, whose experiment page is an overview of traces.
    landing = f"{url}{pages[0][1]}" if pages else url
    print(f"MLflow UI for {redact_uri(uri)} at {url} (Ctrl-C stops it): open {landing}", flush=True)
    for name, page in pages:
        what = "each configuration's verdict" if C.VERDICT_VIEW in page else "its runs"
        print(f"  study {name}: {what} at {url}{page}", flush=True)
    # MLflow's own server, its page opening on training runs and verdicts (harness.tracking.ui)
    os.environ[ui.URI_ENV] = uri
    # MLflow's server also starts its job runner (seven worker processes that poll without pause,
    # for GenAI jobs: scorers, judges, trace roll-ups), which a study's runs never use; off unless
    # the user turned it on
    os.environ.setdefault(JOB_EXECUTION_ENV, "false")
    cmd = [sys.executable, "-m", ui.__name__, "--backend-store-uri", uri, "--host", args.host,
           "--port", str(args.port), "--workers", "1"]
    if not getattr(args, "verbose", False):
        # The terminal keeps the addresses above and the server's warnings and errors: not MLflow's
        # start-up notes, uvicorn's INFO lines or the deprecation warnings of its web stack (-v: all).
        os.environ[ui.QUIET_ENV] = "1"
        # starlette's is a UserWarning about MLflow's own import (starlette.middleware.wsgi)
        os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning,"
                                                "ignore:starlette.middleware.wsgi is deprecated")
        cmd += ["--uvicorn-opts", "--log-level warning"]
    rc = run_forwarding_signals(cmd)
    if rc:  # its own error is above (the port taken meanwhile, the store); the addresses printed serve nothing
        from harness.errors import HarnessError

        raise HarnessError(f"the MLflow UI's server stopped (exit status {rc}): nothing serves {url}; see its "
                           "error above")
    return 0


def _check_port_free(host: str, port: int) -> None:
    """The UI's port is free on ``host``: else the server would fail behind an address this command
    printed, which may serve another store."""
    import errno
    import socket

    from harness.errors import ConfigError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the server names a host it cannot resolve
    for family, kind, proto, _, address in infos:  # the server binds every address the host names
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(f"--port {port}: already in use on {host} (another `harness ui` or "
                                      "MLflow server?); stop it, or pick another --port") from None


STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
JOB_EXECUTION_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"  # mlflow.environment_variables


def run_forwarding_signals(cmd: list[str], grace_s: float = 10.0) -> int:
    """Run ``cmd`` in a process group of its own until it exits; SIGTERM, SIGINT (Ctrl-C) and SIGHUP
    sent to this process are passed on to that whole group (mlflow ui runs its web server as a
    process of its own), so ``kill`` on this process stops the server too. Returns the command's
    exit status, 0 when it was stopped by such a signal. Whatever of the group is left when the
    command ends, or ``grace_s`` after this process itself is interrupted otherwise, is ended; if
    this process is killed outright, the reaper (harness.study.start_reaper) ends the command."""
    import contextlib
    import os
    import signal
    import subprocess

    from harness.driver import start_reaper

    start_reaper()  # a SIGKILLed harness ui (no handler runs) leaves no server either
    proc = subprocess.Popen(cmd, start_new_session=True)
    stopped: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopped.append(signum)
        # The group gets SIGTERM for each: SIGHUP (a closed terminal) means stop here, but a web
        # server's master takes it as "reload your workers" and keeps serving; uvicorn stops on
        # SIGTERM as on SIGINT, without the KeyboardInterrupt traceback SIGINT leaves behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)

    sigs = [getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name)]
    previous = {sig: signal.signal(sig, forward) for sig in sigs}
    try:
        rc = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(ProcessLookupError):  # the server processes the command left
            os.killpg(proc.pid, signal.SIGTERM)
    return 0 if stopped else rc
