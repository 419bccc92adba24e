"""Issue 41's classes of defect, through the real command line and real MLflow/SQLite (no Ray: the
interrupted driver and planted Tune state are tests/study/test_interrupted_driver.py and
tests/study/test_resume_trust.py). docs/reliability.md.

- outputs: every file written whole or not at all (harness.textfile.write_atomic); every output
  error one line and a non-zero exit, the existing file intact;
- secrets: credentials in a tracking URI never printed, never sent by the reachability probe; the
  probe tells an MLflow server from another HTTP server; `harness ui` stays on loopback unless told;
- strict numbers in long CSVs; spreadsheet formulas neutralised in CSV output;
- stores: a damaged or empty SQLite store under `harness table` is one line and is left as it was;
  RAY_ADDRESS is probed, bounded, before MLflow (drivers racing to create new stores all get them:
  tests/tracking/test_store.py);
- files that are not what they should be (FIFO, directory, symlink loop, deep JSON, lone surrogate).
"""

from __future__ import annotations

import http.server
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from harness.cli import main
from harness.errors import HarnessError

CSV = "config,seed,metric,value,query\n" + "".join(
    f"{c},{s},map,{v + 0.01 * s + 0.02 * i:.4f},q{i}\n"
    for c, v in (("base", 0.3), ("=HYPERLINK(\"http://x\")", 0.5)) for s in (1, 2) for i in range(6))


def _harness(*argv: str, stdout: object = subprocess.PIPE, limit_bytes: int | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`python -m harness ARGV` in a subprocess; ``limit_bytes``: the largest file it may write
    (RLIMIT_FSIZE, SIGXFSZ ignored), a disk that fills up after that many bytes."""
    def limit() -> None:
        if limit_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          preexec_fn=limit, env=env, timeout=120, check=False)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> subprocess.CompletedProcess[bytes]:
    """`harness ARGV` in this process (harness.cli.main), as a finished process's record."""
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(list(argv), rc, out.encode(), err.encode())


def _one_line_error(proc: subprocess.CompletedProcess[bytes], *parts: str, progress: bool = False) -> str:
    """The error line of a failed command (``progress``: after the progress lines a study prints)."""
    err = proc.stderr.decode()
    assert proc.returncode not in (0, None), err
    assert "Traceback" not in err and err.endswith("\n"), err
    line = err.splitlines()[-1] if progress else err
    assert line.count("\n") <= 1 and line.startswith("harness: error: "), err
    for p in parts:
        assert p in line, err
    return line


@pytest.fixture
def results_csv(tmp_path: Path) -> Path:
    path = tmp_path / "results.csv"
    path.write_text(CSV)
    return path


# -- outputs -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_full_disk_leaves_the_previous_table_whole_and_says_so_in_one_line(tmp_path, results_csv):
    out = tmp_path / "table.md"
    assert _harness("table", "--from", str(results_csv), "--output", str(out)).returncode == 0
    before = out.read_bytes()
    assert len(before) > 1000
    proc = _harness("table", "--from", str(results_csv), "--output", str(out), "--decimals", "6",
                    limit_bytes=512)
    _one_line_error(proc, str(out), "cannot write the output")
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".table.md.")] == []  # no temp file left


@pytest.mark.parametrize("target", ["/", "/dev/full", "DIR", "RO"])
def test_every_output_target_that_cannot_be_written_is_one_line(tmp_path, results_csv, target, capsys):
    if target == "DIR":
        target = str(tmp_path)
    elif target == "RO":
        ro = tmp_path / "ro.md"
        ro.write_text("keep me\n")
        ro.chmod(0o444)
        target = str(ro)
    proc = _cli(capsys, "table", "--from", str(results_csv), "--output", target)
    _one_line_error(proc, target)
    if target.endswith("ro.md"):
        assert Path(target).read_text() == "keep me\n"


def test_stdout_on_a_full_device_is_one_line(results_csv):
    with open("/dev/full", "wb") as full:
        proc = _harness("table", "--from", str(results_csv), stdout=full)
    _one_line_error(proc, "standard output", "No space left on device")


@pytest.mark.slow
def test_plots_into_a_file_and_a_full_disk_are_one_line(tmp_path, results_csv):
    blocker = tmp_path / "plots"
    blocker.write_text("a file where the folder should be\n")
    _one_line_error(_harness("table", "--from", str(results_csv), "--plots", str(blocker)), str(blocker))
    folder = tmp_path / "pngs"
    folder.mkdir()
    (folder / "map.png").write_bytes(b"old plot")
    proc = _harness("table", "--from", str(results_csv), "--plots", str(folder), limit_bytes=2048)
    _one_line_error(proc, str(folder / "map.png"))
    assert (folder / "map.png").read_bytes() == b"old plot"


def test_write_atomic_replaces_whole_keeps_the_mode_and_writes_a_fifo_in_place(tmp_path):
    from harness.textfile import write_atomic

    target = tmp_path / "a.txt"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new text", "thing")
    assert target.read_text() == "new text" and (target.stat().st_mode & 0o777) == 0o640
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_atomic(fifo, "through the pipe", "thing")
    reader.join(10)
    assert got == [b"through the pipe"] and fifo.is_fifo()


def test_csv_output_neutralises_spreadsheet_formulas_in_names(results_csv, capsys):
    proc = _cli(capsys, "table", "--from", str(results_csv), "--format", "csv")
    assert proc.returncode == 0, proc.stderr.decode()
    text = proc.stdout.decode()
    assert "HYPERLINK" in text
    import csv
    import io

    cells = [c for row in csv.reader(io.StringIO(text)) for c in row]
    assert not [c for c in cells if c.startswith(("=", "+", "@"))], [c for c in cells if "HYPERLINK" in c]
    assert any(c.startswith("'=HYPERLINK") for c in cells)


# -- strict numbers in long CSVs -------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "says"), [
    ("1e308", "outside its range [0, 1]"), ("1.5", "outside its range [0, 1]"), ("-0.2", "outside its range"),
    ("7", "outside its range"), ("0_5", "is not a decimal number"), ("inf", "is not finite"),
    ("0x1p-2", "is not a decimal number"),
])
def test_long_csv_values_are_strict_numbers_in_the_metrics_range(tmp_path, value, says, capsys):
    path = tmp_path / "r.csv"
    path.write_text("config,seed,metric,value\na,1,map,0.5\nb,1,map,0.6\n"
                    f"a,2,map,0.4\nb,2,map,{value}\n")
    _one_line_error(_cli(capsys, "table", "--from", str(path)), f"{path}:5:", says)


def test_an_unbounded_measure_is_bounded_so_means_stay_finite(tmp_path, capsys):
    path = tmp_path / "r.csv"
    path.write_text("config,seed,metric,value,query\n" + "".join(
        f"{c},{s},cost,{v},q{i}\n" for c in "ab" for s in (1, 2) for i, v in enumerate(("1e308", "1e308"))))
    _one_line_error(_cli(capsys, "table", "--from", str(path)), f"{path}:2:", "beyond")


# -- secrets and exposure ------------------------------------------------------------------------------

class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []
    body = b"<html>not mlflow</html>"

    def do_GET(self) -> None:
        type(self).seen.append(f"{self.path} {self.headers.get('Authorization')}")
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[str]:
    """A plain HTTP server (not MLflow) on loopback that records what it is asked."""
    _Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_web_server_that_is_not_mlflow_is_refused_and_gets_no_credentials(web_server, tmp_path, capsys):
    uri = f"http://alice:pw-s3cret@{web_server}"
    for argv in (["table", "--experiment", "x", "--tracking-uri", uri],
                 ["ui", "--tracking-uri", uri, "--port", "1"]):
        err = _one_line_error(_cli(capsys, *argv), "is not an MLflow tracking server", f"http://***@{web_server}")
        assert "pw-s3cret" not in err and "alice" not in err
    assert _Recorder.seen and all("None" in s.split()[-1] for s in _Recorder.seen), _Recorder.seen


def test_an_unreachable_server_with_credentials_is_named_without_them(capsys):
    port = _free_port()
    err = _one_line_error(_cli(capsys, "table", "--experiment", "x", "--tracking-uri",
                                   f"http://bob:hunter2@127.0.0.1:{port}/"), "is not reachable")
    assert "hunter2" not in err and "bob" not in err and f"http://***@127.0.0.1:{port}" in err


def test_every_error_line_redacts_credentials_in_uris(capsys):
    from harness.cli import dispatch

    def fails(_args: object) -> int:
        raise HarnessError("cannot reach postgresql://dbuser:topsecret@db.example:5432/mlflow now")

    assert dispatch(fails, None) == 2  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert "topsecret" not in err and "postgresql://***@db.example:5432/mlflow" in err


def test_ui_refuses_a_non_loopback_host_and_a_port_out_of_range(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _one_line_error(_cli(capsys, "ui", "--tracking-uri", uri, "--host", "0.0.0.0"), "--allow-remote",
                    "not a loopback address")
    _one_line_error(_cli(capsys, "ui", "--tracking-uri", uri, "--port", "70000"), "--port must be a TCP port in "
                    "1-65535, got 70000")
    assert not (tmp_path / "mlflow.db").exists()


def test_ui_and_export_refuse_a_store_that_is_not_there_and_create_nothing(tmp_path, capsys):
    """A mistyped store is one line, never a new store (nor its folder) that the UI then serves
    empty; a folder store (file:, which MLflow 3 refuses) is one line, not MLflow's traceback."""
    uri = f"sqlite:///{tmp_path / 'typo' / 'mlflow.db'}"
    _one_line_error(_cli(capsys, "ui", "--tracking-uri", uri), f"no MLflow store at {tmp_path / 'typo' / 'mlflow.db'}")
    _one_line_error(_cli(capsys, "export", "0123abcd", "--to", str(tmp_path / "m"), "--tracking-uri", uri),
                    "no MLflow store at")
    assert not (tmp_path / "typo").exists() and not (tmp_path / "m").exists()
    (tmp_path / "folder").mkdir()
    for argv in (["export", "0123abcd", "--to", str(tmp_path / "m")], ["ui"], ["table", "--experiment", "x"]):
        for folder in ((tmp_path / "folder").as_uri(), str(tmp_path / "folder")):  # file: or a bare path
            _one_line_error(_cli(capsys, *argv, "--tracking-uri", folder), "a folder store, which MLflow 3 keeps")


def test_ui_refuses_a_port_in_use(tmp_path, capsys):
    """A second server on a busy port would fail behind an address printed as the UI's."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        _one_line_error(_cli(capsys, "ui", "--tracking-uri", uri, "--port", str(port)),
                        f"--port {port}: already in use on 127.0.0.1")


def test_ui_with_allow_remote_warns_before_serving(tmp_path):
    """--allow-remote on 0.0.0.0: the warning, then the server (stopped at once)."""
    from mlflow.tracking import MlflowClient

    MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()  # a store to serve
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ui", "--tracking-uri",
                             f"sqlite:///{tmp_path / 'mlflow.db'}", "--host", "0.0.0.0", "--port", str(port),
                             "--allow-remote"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        line = proc.stderr.readline().decode()
        assert line.startswith("harness: warning: serving the MLflow UI on 0.0.0.0"), line
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- stores and connections -----------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "directory", "not-mlflow"])
def test_a_damaged_store_under_table_is_one_line_and_left_as_it_was(tmp_path, damage, capsys):
    import sqlite3

    from harness.tracking.store import TrackingStore

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    if damage in ("truncated", "garbage"):
        TrackingStore(uri).experiment("s")
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"\x00junk" * 5000)
    elif damage == "empty":
        db.touch()
    elif damage == "directory":
        db.mkdir()
    else:
        sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.commit()
    before = db.read_bytes() if db.is_file() else None
    _one_line_error(_cli(capsys, "table", "--experiment", "s", "--tracking-uri", uri), str(db))
    assert (db.read_bytes() if db.is_file() else None) == before  # never rewritten (no tables made in it)


@pytest.mark.parametrize(("address", "says"), [
    ("127.0.0.1:1", "no Ray cluster answers there"), ("bogus", "is not host:port"),
    ("ray://127.0.0.1:1", "no Ray cluster answers there")])
def test_an_unreachable_ray_address_is_one_line_before_mlflow_writes_anything(tmp_path, monkeypatch, capsys,
                                                                               address, says):
    from tests.test_bad_input import study

    path = study(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", address)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _one_line_error(_cli(capsys, "run", str(path)), f"RAY_ADDRESS={address}", says)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("server", ["http", "silent"])
def test_a_ray_address_where_something_else_answers_is_one_line_not_minutes_of_retries(
        tmp_path, monkeypatch, capsys, server):
    """RAY_ADDRESS=HEAD:8265 (the dashboard's port, not the GCS's) passed the connection check and
    ray.init retried for minutes. The port must answer as a gRPC server does; a web server is named
    as not a Ray cluster, and a port that takes the connection and says nothing is no answer."""
    from tests.test_bad_input import study

    path = study(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    if server == "http":
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # its request log would share stderr with harness's line
                pass

        web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
        threading.Thread(target=web.serve_forever, daemon=True).start()
        address = f"127.0.0.1:{web.server_address[1]}"
        says = ("something answers there, but not a Ray cluster", "default port 6379")
    else:
        web = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: the kernel completes the connection
        address = f"127.0.0.1:{web.getsockname()[1]}"
        says = ("no Ray cluster answers there (timed out, within 5 s)",)
    monkeypatch.setenv("RAY_ADDRESS", address)
    start = time.monotonic()
    try:
        _one_line_error(_cli(capsys, "run", str(path)), f"RAY_ADDRESS={address}", *says)
    finally:
        if server == "http":
            web.shutdown()
        web.server_close() if server == "http" else web.close()
    assert time.monotonic() - start < 30
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_job_server_address_in_ray_address_is_refused_by_run(tmp_path, monkeypatch, capsys, scheme):
    """docs/cluster.md has users set RAY_ADDRESS=http://HEAD:8265 for harness jobs; harness run
    connected to that port as a GCS, recorded a study run and ended in ray.init's traceback."""
    import socket

    from tests.test_bad_input import study

    path = study(tmp_path)
    monkeypatch.chdir(tmp_path)
    with socket.create_server(("127.0.0.1", 0)) as server:  # something answers there, as a dashboard would
        address = f"{scheme}://127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setenv("RAY_ADDRESS", address)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
        _one_line_error(_cli(capsys, "run", str(path)), f"RAY_ADDRESS={address}", "harness run needs the "
                        "cluster's address", "ray://", "http:// addresses are for harness submit and harness jobs")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


# -- files that are not what they should be -----------------------------------------------------------

def test_a_fifo_or_directory_where_a_file_is_expected_is_named_as_such(tmp_path, capsys):
    fifo = tmp_path / "study.yaml"
    os.mkfifo(fifo)
    _one_line_error(_cli(capsys, "validate", str(fifo)), "FIFO")
    results = tmp_path / "results.csv"
    results.mkdir()
    _one_line_error(_cli(capsys, "table", "--from", str(results)), "a directory")
    pipe = tmp_path / "r2.csv"
    os.mkfifo(pipe)
    _one_line_error(_cli(capsys, "table", "--from", str(pipe)), "FIFO")


def test_a_symlink_loop_or_deeply_nested_json_as_chitchat_data_is_one_line(tmp_path, monkeypatch, capsys):
    from tests.test_bad_input import study

    loop = tmp_path / "loop.json"
    loop.symlink_to(tmp_path / "loop.json")
    path = study(tmp_path)
    path.write_text(path.read_text().replace("data: {", f"data: {{path: {loop}, "))
    _one_line_error(_cli(capsys, "validate", "--no-model", str(path)), "symlink loop")
    deep = tmp_path / "deep.json"
    deep.write_text('{"c": {"messages": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    path.write_text(path.read_text().replace(str(loop), str(deep)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    _one_line_error(_cli(capsys, "run", str(path)), str(deep), "nested too deeply", progress=True)


def test_a_lone_surrogate_in_a_path_argument_is_one_line(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/study-\xff.yaml"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "validate", name], capture_output=True,
                          timeout=60, check=False)
    _one_line_error(proc, "not valid UTF-8")


# -- trust in Tune's state (the rule without Ray; through Ray: tests/study/test_resume_trust.py) -----------

def test_tune_state_verifies_only_as_its_driver_signed_it(tmp_path, monkeypatch):
    import pickle

    from harness.driver import _state_trust as trust
    from harness.tracking import conventions as C
    from harness.tracking.store import TrackingStore

    monkeypatch.delenv(trust.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    store = TrackingStore(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = store.start_run(store.experiment("s"), "s", {C.TAG_KIND: C.KIND_STUDY})
    state = tmp_path / "runs" / "s-fixed"
    state.mkdir(parents=True)
    signer = trust.Signer(store, run, "fixed")
    for version in range(4):  # four saves: the last KEEP=3 verify, the first no longer does
        (state / "tuner.pkl").write_bytes(f"genuine {version}".encode())
        trust.sign_storage(signer, str(state))
    key = tmp_path / "config" / "harness" / "state.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 64
    for version in (1, 2, 3):
        (state / "tuner.pkl").write_bytes(f"genuine {version}".encode())
        assert trust.verify(store, run, "fixed", str(state))["tuner.pkl"]
    refused = {
        "an old save": lambda: (state / "tuner.pkl").write_bytes(b"genuine 0"),
        "a planted pickle": lambda: (state / "tuner.pkl").write_bytes(pickle.dumps(print)),
        "an added file": lambda: (state / "searcher-state-x.pkl").write_bytes(b"x"),
    }
    for what, plant in refused.items():
        plant()
        with pytest.raises(HarnessError, match="is not one the study's driver wrote") as info:
            trust.verify(store, run, "fixed", str(state))
        assert "so it is refused; delete" in str(info.value), what
        (state / "searcher-state-x.pkl").unlink(missing_ok=True)
        (state / "tuner.pkl").write_bytes(b"genuine 3")
    with pytest.raises(HarnessError, match="carries no signature"):
        trust.verify(store, run, "search", str(state))
    monkeypatch.setenv(trust.KEY_ENV, "another key")
    with pytest.raises(HarnessError, match="does not verify under this driver's key"):
        trust.verify(store, run, "fixed", str(state))


@pytest.mark.parametrize("command", [["table", "--output"], ["power", "--output"], ["report", "--to"]])
def test_an_output_path_that_is_the_mlflow_store_is_refused_and_the_store_kept(tmp_path, capsys, command):
    """`harness report --experiment s --to mlruns/mlflow.db` replaced the whole store (every study in
    it) with one page, exit 0; `table --output` and `power --output` with one table. A harness
    output never goes over an SQLite database."""
    from tests.synthetic import synthetic_records, write_study_records

    db = tmp_path / "mlflow.db"
    uri = f"sqlite:///{db}"
    write_study_records(uri, "s", synthetic_records(queries=6, effects={"base": 0.0, "better": 0.1}),
                        {"base": "baseline", "better": "ls"}, failed=False)
    before = db.read_bytes()
    _one_line_error(_cli(capsys, command[0], "--experiment", "s", "--tracking-uri", uri, command[1], str(db)),
                    str(db), "it is an SQLite database (an MLflow store?)")
    assert db.read_bytes() == before
    assert _cli(capsys, "table", "--experiment", "s", "--tracking-uri", uri).returncode == 0


def test_a_databricks_uri_without_credentials_is_one_line(tmp_path, monkeypatch, capsys):
    """MLflow's Databricks client logged a WARNING (its fallback to legacy authentication) before the
    harness's error: two lines. Without -v the warning is not printed; the error says why."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.databrickscfg
    for key in [k for k in os.environ if k.startswith("DATABRICKS_")]:
        monkeypatch.delenv(key)
    _one_line_error(_cli(capsys, "table", "--experiment", "s", "--tracking-uri", "databricks"),
                    "tracking URI databricks", "Databricks")
