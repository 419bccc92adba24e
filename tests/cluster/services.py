"""Real services on loopback for the cluster tests: a Ray head with token auth, an MLflow tracking
server, the `harness ui`. Each runs in its own process group, with its own ports (chosen free) and
directories, and is stopped through that group: never `ray stop`, which stops every Ray on the machine.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_block(n: int, lo: int = 20000, hi: int = 30000) -> int:
    """First port of ``n`` consecutive free ports (Ray's worker port range)."""
    for _ in range(50):
        base = random.randrange(lo, hi - n)
        socks = []
        try:
            for port in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports in [{lo}, {hi})")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Ray address or Ray auth setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_ADDRESS", "RAY_API_SERVER", "RAY_AUTH", "MLFLOW_TRACKING"))}
    env.update(extra)
    return env


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""

    def wait_http(self, url: str, timeout: float, headers: dict[str, str] | None = None) -> None:
        def up() -> bool:
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5):
                    return True
            except (urllib.error.URLError, OSError):
                return False

        self._wait(up, url, timeout, every=0.5)

    def wait_port(self, host: str, port: int, timeout: float) -> None:
        """Until something accepts TCP connections on ``host:port`` (a gRPC server, say)."""
        def up() -> bool:
            with socket.socket() as sock:
                sock.settimeout(1)
                return sock.connect_ex((host, port)) == 0

        self._wait(up, f"{host}:{port}", timeout, every=0.2)

    def _wait(self, up: Callable[[], bool], where: str, timeout: float, every: float) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            if up():
                return
            time.sleep(every)
        raise RuntimeError(f"{self.name} not ready at {where} after {timeout:.0f}s:\n{self.tail()}")

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM to the process group, SIGKILL to what is left after ``grace`` seconds."""
        pgid = self.proc.pid  # start_new_session=True: the leader's pid is the group id
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(pgid):
                break


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def answers(url: str) -> bool:
    """Whether ``url`` answers at all (any HTTP status)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def signal_stops_ui(proc: subprocess.Popen[bytes], port: int, sig: signal.Signals) -> None:
    """`harness ui` (``proc``, its MLflow server listening on ``port``) sent ``sig`` alone, as `kill
    PID` does: it exits (0 when stopped on request) and leaves no server process behind (under
    SIGKILL no handler runs: the reaper, harness.driver's, ends the server)."""
    import psutil

    server = psutil.Process(proc.pid).children(recursive=True)
    assert server and any(c.status == psutil.CONN_LISTEN and c.laddr.port == port
                          for p in server for c in p.net_connections(kind="inet")), server
    os.kill(proc.pid, sig)
    # generous deadlines (not timings): a loaded machine (two test workers on 2 cores) is slow to
    # end a web server's workers
    proc.wait(timeout=60)
    _, alive = psutil.wait_procs(server, timeout=60)
    assert not alive, [(p.pid, " ".join(p.cmdline())[:80]) for p in alive]
    assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
    assert not answers(f"http://127.0.0.1:{port}/health")


def spawn(name: str, cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> Service:
    fh = open(log, "wb")  # noqa: SIM115 (the child owns it for its lifetime)
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True)
    fh.close()
    return Service(name, proc, log)


@dataclass
class RayHead:
    service: Service
    address: str
    token: str = field(repr=False)
    temp_dir: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        self.service.stop(grace=10.0)
        sweep(self.temp_dir)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_ray_head(root: Path, token: str, num_cpus: int = 2) -> RayHead:
    """`ray start --head --block` on 127.0.0.1 with token auth, every port chosen free, its own
    --temp-dir (short: Ray's unix socket paths must stay under 107 characters)."""
    temp_dir = Path(tempfile.mkdtemp(prefix="hray", dir="/tmp"))
    ports = {k: free_port() for k in ("port", "dashboard-port", "ray-client-server-port",
                                      "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                                      "runtime-env-agent-port", "metrics-export-port",
                                      "node-manager-port", "object-manager-port")}
    workers = free_port_block(100)
    cmd = [str(VENV_BIN / "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
           "--dashboard-host", "127.0.0.1", "--include-dashboard", "true", "--temp-dir", str(temp_dir),
           "--num-cpus", str(num_cpus), "--num-gpus", "0", "--object-store-memory", str(300 * 2**20),
           "--min-worker-port", str(workers), "--max-worker-port", str(workers + 99),
           "--disable-usage-stats"]
    for k, v in ports.items():
        cmd += [f"--{k}", str(v)]
    env = clean_env(
        RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
        # Ray replaces a loopback --node-ip-address with the host's routable address unless it
        # believes it is on a one-node (Windows/macOS) setup: keep every Ray socket on 127.0.0.1.
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="0", RAY_USAGE_STATS_ENABLED="0",
        # The job entrypoint runs `python ...`: the cluster's python is this virtualenv's.
        PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    service = spawn("ray head", cmd, root / "ray-head.log", env, root)
    head = RayHead(service, f"http://127.0.0.1:{ports['dashboard-port']}", token, temp_dir)
    try:
        service.wait_http(f"{head.address}/api/version", 90, head.headers)
        service.wait_http(f"{head.address}/api/jobs/", 30, head.headers)
    except BaseException:
        head.stop()
        raise
    return head


def sweep(temp_dir: Path) -> None:
    """Kill what a stopped head left behind: job drivers run in their own session, so the head's
    process group does not hold them; they are found by the head's temp dir (their cwd)."""
    marker = str(temp_dir)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if marker in cmdline or cwd.startswith(marker):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass
class MlflowServer:
    service: Service
    url: str
    backend_uri: str
    root: Path

    def ready(self) -> None:
        try:
            self.service.wait_http(f"{self.url}/health", 90)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        self.service.stop()


def start_mlflow_server(root: Path, schema: Path | None = None, wait: bool = True) -> MlflowServer:
    """`mlflow server` on 127.0.0.1: SQLite backend, artifacts served from a local directory.
    ``schema``: an empty SQLite store with MLflow's current schema, copied in as the backend (the
    server then skips the migrations); ``wait=False``: return at once, ``MlflowServer.ready()``
    waits (so that it starts while something else does)."""
    root.mkdir(parents=True, exist_ok=True)
    if schema is not None:
        shutil.copyfile(schema, root / "mlflow.db")
    port = free_port()
    backend = f"sqlite:///{root / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend,
           "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
           "--workers", "1"]
    # without MLflow's GenAI job runner (worker processes that poll without pause), as `harness ui`
    service = spawn("mlflow server", cmd, root / "mlflow-server.log",
                    clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false"), root)
    server = MlflowServer(service, f"http://127.0.0.1:{port}", backend, root)
    if wait:
        server.ready()
    return server


def start_harness_ui(root: Path, tracking_uri: str) -> tuple[Service, str]:
    """`harness ui` (mlflow ui, one worker) on a free loopback port."""
    port = free_port()
    cmd = [sys.executable, "-m", "harness.cli", "ui", "--tracking-uri", tracking_uri, "--port", str(port)]
    service = spawn("harness ui", cmd, root / "harness-ui.log", clean_env(), REPO)
    url = f"http://127.0.0.1:{port}"
    try:
        service.wait_http(f"{url}/health", 90)
    except BaseException:
        service.stop()
        raise
    return service, url
