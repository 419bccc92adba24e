"""Ray Job entrypoint: run a harness study as the job's driver (see jobs/README.md).

    python jobs/entrypoint.py STUDY.yaml [--smoke] [--resume] [--set KEY=VALUE ...] [--driver-gpu]

The project root (this file's parent's parent: the job's working_dir, or the project baked into an
image) goes first on sys.path, so the harness shipped with the job is the one imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.jobs.driver import entry

if __name__ == "__main__":
    sys.exit(entry())
