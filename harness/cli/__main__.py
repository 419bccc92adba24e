"""``python -m harness.cli``: the console script."""

import sys

from harness.cli import entry

sys.exit(entry())
