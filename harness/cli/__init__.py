"""The ``harness`` command. Thin: parse, dispatch to an area's handler, turn HarnessError into one
line on stderr and a non-zero exit.

Each area owns its subcommands in a module of this package exposing ``register(subparsers)``, which
adds parsers whose ``func`` default is a handler ``(args: argparse.Namespace) -> int``; ``AREAS``
names each area's commands, so a command run imports its own area alone. Nothing below this package
imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import NoReturn

from harness import __version__
from harness.driver.quiet import QUIET_ENV, quiet_libraries  # noqa: F401 (QUIET_ENV: harness.cli's name too)
from harness.errors import HarnessError

__all__ = ["build_parser", "dispatch", "entry", "main"]


# Each area's commands, in --help order. A command run imports its own area alone (an area imports
# the libraries its commands need); --help, no command or an unknown one import every area.
# tests/test_cli_areas.py checks this table against what each area registers.
AREAS: dict[str, tuple[str, ...]] = {
    "study": ("run", "validate", "demo", "ui"),
    "jobs": ("submit", "jobs"),
    "train": ("train",),
    "data": ("data",),
    "curriculum": ("pacing",),
    "model": ("cascade", "export"),
    "evaluation": ("table", "power"),
    "report": ("report",),
    "runs": ("runs",),
}


def _areas(command: str | None = None) -> tuple[ModuleType, ...]:
    """The modules that contribute subcommands, in --help order: ``command``'s alone where an area
    lists it, else all."""
    import importlib

    names = [a for a, commands in AREAS.items() if command in commands] or list(AREAS)
    return tuple(importlib.import_module(f"harness.cli.{name}") for name in names)


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose errors (an unknown option, a bad choice, a missing argument) are one
    line, as the harness's own: ``harness: error: table: argument --format: ...``, exit 2, and where
    to read the usage; the subcommands' parsers are of this class too (``add_subparsers``)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("harness").strip()
        where = f"{command}: " if command else ""
        self.exit(2, f"harness: error: {where}{message} (`{self.prog} -h` lists the options)\n")

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        """argparse's, but words no parser took are refused by the command they were given to
        (``harness table: unrecognized arguments: --to``, and its help), not by ``harness``."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> _Parser:
        """The deepest (sub)command parser ``parsed`` went through."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(getattr(parsed, action.dest, None) or "")
                if isinstance(sub, _Parser):
                    return sub._chosen(parsed)
        return self


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``harness`` parser: with ``command``, only the subcommands of its area (what parsing
    that command needs)."""
    parser = _Parser(
        prog="harness",
        description="Hyperparameter studies for neural rankers: Ray Tune trials, Optuna searchers, "
        "seeded baselines, MLflow records and paired significance tests.",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show the libraries' own output: MLflow INFO lines, progress bars of "
                        "MLflow and transformers, Ray Tune's status (default: the harness's own lines only)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for area in _areas(command):
        area.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    text = _cli_text(argv)
    if text is None:
        return 2
    parser = build_parser(_command(text))
    args = parser.parse_args(text)
    if not args.verbose:
        quiet_libraries()
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return dispatch(args.func, args)


def _command(text: Sequence[str]) -> str | None:
    """The command: the first word that is not an option (the global options take no value); None
    where a help option comes first (the help lists every command)."""
    for word in text:
        if word in ("-h", "--help"):
            return None
        if not word.startswith("-"):
            return word
    return None


def _cli_text(argv: Sequence[str] | None) -> list[str] | None:
    """The arguments as text every later step can encode; None (after one line on stderr) when an
    argument is not valid text in the file system's encoding (a lone surrogate from undecodable
    bytes), named with its option where it follows one."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, a in enumerate(argv):
        try:
            a.encode("utf-8")
        except UnicodeEncodeError:
            from harness.config import text_problem

            option = f"{argv[i - 1]} " if i and argv[i - 1].startswith("-") else ""
            shown = a.encode("utf-8", "backslashreplace").decode()
            print(f"harness: error: {option}argument {shown!r} is not valid UTF-8 text ({text_problem(a)}: "
                  "undecodable bytes in a path?); rename it or pass another path", file=sys.stderr)
            return None
    return argv


def dispatch(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run a handler the way the command does: its exit status, every error a single line on stderr
    (credentials in URIs redacted), an interrupt 128 + the signal's number."""
    try:
        rc = int(func(args) or 0)
        sys.stdout.flush()  # a closed pipe or a full device shows here, not at interpreter exit
        return rc
    except BrokenPipeError:
        # The reader went away (`harness validate X | head -1`): stop quietly, as a shell tool does,
        # and point stdout at /dev/null so that the exit's own flush has nowhere to fail.
        _silence_stdout()
        return 141  # 128 + SIGPIPE
    except HarnessError as exc:
        _error(str(exc))
        return 2
    except OSError as exc:
        # An output that cannot be written (a full device behind stdout, a file the handler did not
        # anticipate): what failed and why, never a traceback.
        where = exc.filename if exc.filename is not None else "standard output"
        _error(f"{where}: {exc.strerror or exc}")
        _silence_stdout()
        return 1
    except KeyboardInterrupt as exc:
        # Ctrl-C (SIGINT) exits 130 as a shell's commands do; a driver stopped by SIGTERM or SIGHUP
        # (harness.driver._orchestrate.StudyInterrupted carries the signal) 128 + its number.
        signum = int(getattr(exc, "signum", 2))
        _error(f"interrupted ({'SIGINT' if signum == 2 else exc})", prefix="harness: ")
        return 128 + signum


# The exit of a command that wrote what a study has recorded, marked, while the study is not
# finished (interrupted, failed or still running): `harness table`, `power`, `report` and `runs export`.
INCOMPLETE_EXIT = 3


def finished_exit(incomplete: str) -> int:
    """0, or, where ``incomplete`` (harness.results.mlflow_reader.incomplete_note's sentence) says
    the study is not finished, that sentence as a warning and INCOMPLETE_EXIT."""
    if not incomplete:
        return 0
    print(f"harness: warning: {incomplete}", file=sys.stderr)
    return INCOMPLETE_EXIT


def _error(message: str, prefix: str = "harness: error: ") -> None:
    from harness.redact import redact_text

    line = " ".join(redact_text(message).split("\n")) if message else "(no message)"
    print(f"{prefix}{line}", file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, its unwritten buffer dropped, so that the interpreter's exit flush
    has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def entry() -> int:
    """The console script: ``main``, then the heap left out of the interpreter's exit collections
    (harness.heap; benchmarks/results/driver_exit.md)."""
    from harness.heap import then_exit

    return then_exit(main)


if __name__ == "__main__":
    sys.exit(entry())
