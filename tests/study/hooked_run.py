"""`harness run` with the trainable's test hooks injected, for tests that drive a study in a
subprocess: ``python -m tests.study.hooked_run TRIAL_LOG [--hold FILE KEY] run STUDY.yaml [--resume]``
(``--hold``: the trial KEY waits after its first checkpointed evaluation until FILE exists). The hooks
are passed to the driver as an argument (harness.driver._trainable.TrialHooks), never through the
environment of a production run."""

from __future__ import annotations

import sys

from harness.cli import build_parser
from harness.cli.study import cmd_run
from harness.driver.runner import TrialHooks
from harness.errors import HarnessError


def main(argv: list[str]) -> int:
    trial_log, rest = argv[0], argv[1:]
    hold = None
    if rest[:1] == ["--hold"]:
        hold, rest = (rest[1], rest[2]), rest[3:]
    args = build_parser().parse_args(rest)
    try:
        return cmd_run(args, hooks=TrialHooks(trial_log=trial_log, hold=hold))
    except HarnessError as exc:
        print(f"harness: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
