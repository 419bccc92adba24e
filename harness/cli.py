"""The ``harness`` command. Thin: parse, dispatch to an area's handler, turn HarnessError into one
line on stderr and a non-zero exit.

Each area owns its subcommands in a ``commands`` module exposing ``register(subparsers)``, which adds
parsers whose ``func`` default is a handler ``(args: argparse.Namespace) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from harness import __version__
from harness.errors import HarnessError

# Areas that contribute subcommands, in --help order. A module that is not there yet is skipped.
COMMAND_MODULES = (
    "harness.study.commands",       # run, validate, demo, ui
    "harness.jobs.commands",  # submit, jobs list|logs|stop
    "harness.training.commands",    # train
    "harness.data.commands",        # data build|stats
    "harness.curriculum.commands",  # pacing
    "harness.model.commands",       # cascade cost, export
    "harness.evaluation.commands",  # table, power
    "harness.evaluation.trec_commands",  # runs export
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Hyperparameter studies for neural rankers: Ray Tune trials, Optuna searchers, "
        "seeded baselines, MLflow records and paired significance tests.",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HarnessError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130


def entry() -> int:
    """The console script: ``main``, then the heap left out of the interpreter's exit collections
    (harness.heap; 2-3 s after a study)."""
    from harness.heap import then_exit

    return then_exit(main)


if __name__ == "__main__":
    sys.exit(entry())
