"""Cold build of the embedded data set (every candidate's first-stage score included), old vs new.

Each side runs ``harness data build`` in its own process against an empty temporary
``HARNESS_CACHE`` and ``NUMBA_CACHE_DIR`` (so nothing is loaded from a cache, and compiled kernels
are compiled within the run, as on a fresh machine), with ``PYTHONPATH`` pointing at its source
tree: this checkout ("new") and, with ``--old REF``, a ``git worktree`` of REF ("old"). The sides
alternate ``--repeats`` times. Recorded per run: wall seconds, CPU seconds (user + system of the
child), the 1-minute load average before and after (the machine may be shared: compare CPU seconds
there), the fingerprint it printed and the sha256 of the cache file it wrote (every split's
queries, candidates, labels and float64 scores), so the two sides are seen to build the same bytes. Results go to benchmarks/results/data_build.{json,md} with the machine line.

    python benchmarks/data_build.py [--old main] [--repeats 1] [--conversations N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def build_once(tree: Path, conversations: int | None) -> dict[str, object]:
    """One cold ``harness data build`` with the code of ``tree``; wall, CPU, load, output."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-cache-") as cache:
        # An empty numba cache too: a run pays the kernels' compilation, as a first build does.
        extra = os.environ.get("BENCH_EXTRA_PATH")  # packages a bare machine lacks
        path = f"{tree}{os.pathsep}{extra}" if extra else str(tree)
        env = {**os.environ, "PYTHONPATH": path, "HARNESS_CACHE": cache,
               "NUMBA_CACHE_DIR": str(Path(cache, "numba")), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        code = ("import sys, harness; print('harness from', harness.__file__, file=sys.stderr); "
                "from harness.cli import main; sys.exit(main())")
        cmd = [sys.executable, "-c", code, "data", "build", "--cache-dir", cache]
        if conversations:
            cmd += ["--conversations", str(conversations)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        # cwd=tree: `python -c` puts the working directory first on sys.path, ahead of PYTHONPATH,
        # so run from elsewhere a side would import that directory's harness, not its own.
        proc = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        built = sorted(p for p in Path(cache, "data").iterdir() if p.suffix in (".splits", ".pkl"))  # .pkl: older trees
        digest = hashlib.sha256(built[0].read_bytes()).hexdigest() if built else ""
    if proc.returncode:
        raise SystemExit(f"data build with {tree} failed:\n{proc.stderr[-2000:]}")
    imported = proc.stderr.split("harness from ", 1)[-1].split("\n", 1)[0]
    if not Path(imported).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the side of {tree} imported harness from {imported}")
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines() if line.strip())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "load_before": round(load_before, 2),
            "load_after": round(os.getloadavg()[0], 2), "fingerprint": lines.get("fingerprint", "").strip(),
            "evaluation": lines.get("evaluation", "").strip(), "file_sha256": digest}


def markdown(res: dict[str, object]) -> str:
    m = res["machine"]
    out = ["# Cold data build (harness data build, empty cache)", "",
           (f"Machine: {m['cpu']}, {m['cores']} cores ({m.get('cpus_usable', m['cores'])} usable), Python {m['python']}, numpy {m['numpy']}, "
           f"numba {m.get('numba', '?')}; "
           f"{'all conversations' if not res['conversations'] else str(res['conversations']) + ' conversations'} "
           f"(response protocol, depth 1000, 9 negatives). 1-minute load average before/after each run: "
           f"a shared machine inflates wall time, CPU seconds less so."), "",
           "| side | code | run | wall s | CPU s | load before | load after | cache file sha256 |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in res["runs"]:  # type: ignore[attr-defined]
        out.append(f"| {r['side']} | {r['code']} | {r['run']} | {r['wall_s']} | {r['cpu_s']} | "
                   f"{r['load_before']} | {r['load_after']} | {r['file_sha256'][:16]} |")
    out += ["", "| side | median wall s | median CPU s |", "|---|---:|---:|"]
    for side, s in res["summary"].items():  # type: ignore[attr-defined]
        out.append(f"| {side} | {s['wall_s']} | {s['cpu_s']} |")
    if res.get("identical") is not None:
        out += ["", f"Same fingerprint and byte-identical cache file on both sides: {res['identical']}."]
    if res.get("notes"):
        out += ["", *res["notes"]]  # type: ignore[misc]
    return "\n".join(out) + "\n"


def _code(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default=None, help="git ref of the old side (default: none)")
    parser.add_argument("--old-tree", type=Path, default=None,
                        help="or a source tree of the old side (a folder holding harness/)")
    parser.add_argument("--old-label", default=None, help="the old tree's commit, for the table")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--conversations", type=int, default=None, help="subset (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS / "data_build")
    args = parser.parse_args()
    sides = {"new": ROOT}
    worktree = None
    if args.old:
        worktree = Path(tempfile.mkdtemp(prefix="harness-old-"))
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(worktree), args.old],
                       check=True)
        sides = {"old": worktree, "new": ROOT}
    elif args.old_tree:
        sides = {"old": args.old_tree.resolve(), "new": ROOT}
    runs = []
    try:
        for rep in range(args.repeats):
            for side, tree in sides.items():
                code = args.old_label if side == "old" and args.old_label else _code(tree)
                r = {"side": side, "code": code, "run": rep + 1, **build_once(tree, args.conversations)}
                print(json.dumps(r), flush=True)
                runs.append(r)
    finally:
        if worktree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False)
    summary = {side: {k: round(statistics.median(r[k] for r in runs if r["side"] == side), 1)
                      for k in ("wall_s", "cpu_s")} for side in sides}
    identical = None
    if len(sides) == 2:
        identical = len({(r["fingerprint"], r["file_sha256"]) for r in runs}) == 1
    machine = describe("numpy", "numba")
    machine["cpus_usable"] = len(os.sched_getaffinity(0))  # a taskset'ed run: the cores it may use
    res = {"machine": machine, "conversations": args.conversations,
           "runs": runs, "summary": summary, "identical": identical}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
