"""`harness run` with the trainable's test hooks injected, for tests that drive a study in a
subprocess: ``python -m tests.study.hooked_run TRIAL_LOG [--hold FILE KEY] run STUDY.yaml [--resume]``
(``--hold``: the trial KEY waits after its first checkpointed evaluation until FILE exists; ``--die
KEY``: the worker process of trial KEY is killed as each attempt starts). The hooks
are passed to the driver as an argument (harness.driver._trainable.TrialHooks), never through the
environment of a production run."""

from __future__ import annotations

import sys

from harness.cli import build_parser, dispatch, quiet_libraries
from harness.cli.study import cmd_run


def main(argv: list[str]) -> int:
    trial_log, rest = argv[0], argv[1:]
    hold, die = None, ()
    if rest[:1] == ["--hold"]:
        hold, rest = (rest[1], rest[2]), rest[3:]
    if rest[:1] == ["--die"]:
        die, rest = (rest[1],), rest[2:]
    args = build_parser().parse_args(rest)
    if not args.verbose:  # as `harness run` is: the libraries' own output off unless -v
        quiet_libraries()
    # imported after the quiet settings, as `harness run` imports Ray: some are read as Ray is imported
    from harness.driver.runner import TrialHooks

    hooks = TrialHooks(trial_log=trial_log, hold=hold, die_always=die)
    # as `harness run` ends: one line and its exit status for an error or an interrupt
    return dispatch(lambda a: cmd_run(a, hooks=hooks), args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
