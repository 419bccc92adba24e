"""No study file makes `harness validate` use more than 1 GiB (docs/reliability.md, "Input bounds").

The hostile inputs of issue 41 (a seed schedule to 10^9, a 10M-point grid, 10^9 variants of a search
space, a 10^9 confirmation, aliases of aliases, numbers of 400 digits) go through the real command
line in one child process whose address space is capped at 1 GiB (``RLIMIT_AS``): each must be
refused in one line, with a non-zero exit, and none may meet the cap (a ``MemoryError`` or a
traceback would say it did). Before the bounds, the first of them allocated 22.7 GB. The sweep of
messages is tests/test_bad_input_sweep.py; this file holds the memory cap only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_bad_input import STUDY

GIB = 2**30
BASE = STUDY.format(name="s", seeds="[1, 2]", storage="runs")
ONE = "configs: [{name: c, set: {curriculum.delta: 0.5}}]\n"

HOSTILE = {
    "seed-schedule-to-1e9": BASE.replace("seeds: [1, 2]", "seeds: {start: 4, step: 1, max: 1000000000}") + ONE,
    "seed-schedule-999-rounds": BASE.replace("seeds: [1, 2]", "seeds: {start: 4, step: 1, max: 1000}") + ONE,
    "confirm-1e9-seeds": BASE + ONE + "confirm: {top: 1, seeds: 1000000000}\n",
    "grid-10M-points": BASE + "search:\n  searcher: grid\n  space:\n" + "".join(
        f"    {k}: {{int: [1, {n}]}}\n" for k, n in
        (("train.batch_size", 100), ("train.eval_every", 100), ("data.max_train_queries", 1000))),
    "search-1e9-variants": BASE + "search: {searcher: tpe, space: {data.max_train_queries: {int: [1, 1000000000]}}}\n",
    "search-1e9-proposals": BASE + "search: {searcher: tpe, num_configs: 1000000000, space: "
                                   "{curriculum.delta: {uniform: [0.1, 0.9]}}}\n",
    "aliases-of-aliases": "a0: &a0 [1, 1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 60))
                          + BASE,
    "steps-10-to-the-400": BASE + "defaults: {train.steps: 1" + "0" * 400 + "}\n",
    "lr-10-to-the-400": BASE + "defaults: {train.lr: 1" + "0" * 400 + "}\n",
    "file-of-200k-seeds": BASE.replace("seeds: [1, 2]", "seeds: [" + ", ".join(map(str, range(200_000))) + "]"),
}
# Valid, and large only in what they describe: accepted, within the same cap (an int range of a
# search space is checked by its bounds, never listed).
LARGE_BUT_VALID = {
    "tpe-over-1e9-steps": BASE + "search: {searcher: tpe, num_configs: 2, space: {train.steps: {int: [1, 1000000000]}}}\n",
    "1000-seeds": BASE.replace("seeds: [1, 2]", "seeds: [" + ", ".join(map(str, range(1000))) + "]"),
}

# The child: caps its address space, then runs each study through harness.cli.main and reports
# (exit code, stderr) per study as JSON on stdout.
CHILD = """
import contextlib, io, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from harness.cli import main
out = {{}}
for path in sys.argv[1:]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = main(["validate", path, "--no-model"])
        except BaseException as exc:  # what escapes main is a failure of the test, reported as such
            rc, err = -1, io.StringIO(f"escaped: {{type(exc).__name__}}: {{exc}}")
    out[path] = [rc, err.getvalue()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    root = tmp_path_factory.mktemp("bounds")
    paths = {}
    for name, text in {**HOSTILE, **LARGE_BUT_VALID}.items():
        (root / name).mkdir()
        paths[name] = root / name / "study.yaml"
        paths[name].write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-c", CHILD.format(cap=GIB), *map(str, paths.values())],
                          check=False, capture_output=True, text=True, cwd=root, timeout=900,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root}/mlflow.db"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: tuple(got[str(p)]) for name, p in paths.items()}  # type: ignore[misc]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_refused_in_one_line_within_1_gib(name: str, outcomes: dict[str, tuple[int, str]]) -> None:
    rc, err = outcomes[name]
    lines = err.strip().splitlines()
    assert rc not in (0, -1) and len(lines) == 1 and lines[0].startswith("harness: error: "), err[-2000:]
    assert "MemoryError" not in err and "Traceback" not in err


@pytest.mark.parametrize("name", sorted(LARGE_BUT_VALID))
def test_large_but_valid_is_accepted_within_1_gib(name: str, outcomes: dict[str, tuple[int, str]]) -> None:
    rc, err = outcomes[name]
    assert rc == 0, err[-2000:]


def test_the_cap_bites(tmp_path: Path) -> None:
    """The child's cap is real: under it, allocating 2 GiB fails (so a study that needed that much
    would fail the tests above, not pass them)."""
    code = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({GIB}, {GIB}))\n"
            "try:\n    b = bytearray(2 * 2**30)\nexcept MemoryError:\n    print('capped')\n")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "capped"
