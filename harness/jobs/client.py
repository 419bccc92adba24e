"""A Ray Jobs client for studies: find the job server, authenticate, submit, list, follow, stop.

Talks to the head node's job server (the dashboard's HTTP API, port 8265 by default) through Ray's
``JobSubmissionClient``. Every failure a user can cause (wrong address, missing or rejected token, an
unknown job id) becomes one ``HarnessError`` line, checked before anything is sent: a probe of
``GET /api/version`` tells an unreachable address, a missing token (401) and a rejected one (403) apart.

Authentication (Ray >= 2.52 token mode): the token comes from ``RAY_AUTH_TOKEN`` or the file named by
``RAY_AUTH_TOKEN_PATH`` (in this process's environment or an env file), else, when ``RAY_AUTH_MODE=token``,
from Ray's default ``~/.ray/auth_token``. It is sent as ``Authorization: Bearer ...`` and never shipped
to the job. A cluster without token auth ignores it.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
DEFAULT_PORT = 8265
_PROBE_TIMEOUT_S = 10.0
# Ray's job client sends its requests without a timeout: a server that took the connection and never
# answered (a stalled head, a proxy holding it) left `harness jobs list` waiting for ever. Each
# request now waits at most this long to connect and this long for an answer.
REQUEST_TIMEOUT_S = (10.0, 120.0)


@dataclass(frozen=True, kw_only=True)
class JobServer:
    """A Ray job server and how to authenticate to it (``token_source`` names where the token came
    from, for error messages; the token itself is never printed)."""

    address: str
    token: str | None = field(default=None, repr=False)
    token_source: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass(frozen=True, kw_only=True)
class JobRow:
    """One job as ``harness jobs list`` shows it."""

    submission_id: str
    status: str
    study: str
    start_time: float | None
    end_time: float | None
    message: str


def resolve_address(address: str | None, env: Mapping[str, str]) -> str:
    """``--address``, else ``RAY_API_SERVER_ADDRESS``, else an http(s) ``RAY_ADDRESS``; ``host:port``
    gets ``http://``. A GCS address (``host:6379``) or ``ray://`` is not a job server address. The
    URL is checked here (host, port, no spaces): a refusal names where the address came from."""
    if address is not None:
        addr, source = address, "--address"
    elif env.get("RAY_API_SERVER_ADDRESS"):
        addr, source = env["RAY_API_SERVER_ADDRESS"], "RAY_API_SERVER_ADDRESS"
    elif env.get("RAY_ADDRESS", "").strip().lower().startswith(("http://", "https://")):
        addr, source = env["RAY_ADDRESS"], "RAY_ADDRESS"
    else:
        raise HarnessError("no Ray job server address: give --address http://HEAD:8265 "
                           "(or set RAY_API_SERVER_ADDRESS)")
    addr = addr.strip()
    if not addr:
        raise HarnessError(f"{source} is blank: give the job server's address, http://HEAD:8265")
    if addr.startswith("ray://"):
        raise HarnessError(f"{source} {addr}: give the job server's http address (http://HEAD:8265), "
                           "not a Ray Client address")
    if "://" not in addr:
        addr = f"http://{addr}"
    if not addr.lower().startswith(("http://", "https://")):
        raise HarnessError(f"{source} {addr}: expected http://HOST:PORT")
    return _checked_url(addr.rstrip("/"), source)


def _checked_url(addr: str, source: str) -> str:
    """``addr`` when it is a usable http(s) URL (a host, a port in 1..65535 if given, no spaces or
    control characters); else one line naming ``source``."""
    from urllib.parse import urlsplit

    def refuse(why: str) -> HarnessError:
        return HarnessError(f"{source} {addr!r} is not a job server address ({why}); "
                            "expected http://HOST:PORT, e.g. http://127.0.0.1:8265")

    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in addr):
        raise refuse("it contains a space or control character")
    try:
        parts = urlsplit(addr)
        port = parts.port
    except ValueError as exc:
        raise refuse(str(exc) or "malformed URL") from None
    if not parts.hostname:
        raise refuse("no host")
    if port == 0:
        raise refuse("port 0")
    return addr


def resolve_token(env: Mapping[str, str], home: Path | None = None) -> tuple[str | None, str | None]:
    """(token, where it came from), following Ray's precedence: RAY_AUTH_TOKEN, the file in
    RAY_AUTH_TOKEN_PATH, then ~/.ray/auth_token when RAY_AUTH_MODE=token."""
    if env.get("RAY_AUTH_TOKEN", "").strip():
        return env["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path_s = env.get("RAY_AUTH_TOKEN_PATH")
    if path_s:
        path = Path(path_s).expanduser()
        try:
            token = path.read_bytes()
        except OSError as exc:
            raise HarnessError(f"RAY_AUTH_TOKEN_PATH={path}: cannot read the token ({exc.strerror})") from None
        token = _token_text(token, f"RAY_AUTH_TOKEN_PATH={path}")
        if not token:
            raise HarnessError(f"RAY_AUTH_TOKEN_PATH={path}: the token file is empty")
        return token, f"RAY_AUTH_TOKEN_PATH={path}"
    if env.get("RAY_AUTH_MODE", "").lower() == "token":
        path = (home or Path.home()) / ".ray" / "auth_token"
        token = _token_text(path.read_bytes(), str(path)) if path.is_file() else ""
        if token:
            return token, str(path)
        raise HarnessError("RAY_AUTH_MODE=token but no token: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                           "(environment or --env-file)")
    return None, None


def _token_text(data: bytes, source: str) -> str:
    """A token file's text, stripped; one line naming ``source`` where it is not UTF-8."""
    try:
        return data.decode("utf-8-sig").strip()
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise HarnessError(f"{source}: line {line}: the token file is not UTF-8 text (byte "
                           f"0x{data[exc.start]:02x} at offset {exc.start})") from None


def server_from(address: str | None, env: Mapping[str, str]) -> JobServer:
    token, source = resolve_token(env)
    return JobServer(address=resolve_address(address, env), token=token, token_source=source)


def probe(server: JobServer, timeout: float = _PROBE_TIMEOUT_S) -> str:
    """The cluster's Ray version, or one line saying why the job server cannot be used."""
    req = urllib.request.Request(f"{server.address}/api/version", headers=server.headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise HarnessError(f"Ray job server at {server.address} requires a token (token auth is on): "
                               "set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (environment or --env-file)") from None
        if exc.code == 403:
            raise HarnessError(f"Ray job server at {server.address} rejected the token from "
                               f"{server.token_source} (403): use the cluster's token") from None
        raise HarnessError(f"{server.address} is not a Ray job server (GET /api/version answered "
                           f"{exc.code}); give the head's dashboard address, http://HEAD:8265") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise HarnessError(f"Ray job server at {server.address} is not reachable ({reason}); check "
                           "--address (the head's dashboard port, 8265 by default)") from None
    try:
        return str(json.loads(body)["ray_version"])
    except (ValueError, KeyError, TypeError):
        raise HarnessError(f"{server.address} is not a Ray job server (GET /api/version returned no "
                           "ray_version); give the head's dashboard address, http://HEAD:8265") from None


def _quiet_ray_client_logs() -> None:
    """Ray's client logs every packaging step at INFO and warns that .git/.venv are skipped (our
    excludes skip them anyway); keep real warnings such as an oversized working_dir."""
    for name in ("ray.dashboard.modules.dashboard_sdk", "ray.dashboard.modules.job.sdk",
                 "ray._private.runtime_env.packaging"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("ray._private.runtime_env.working_dir").setLevel(logging.ERROR)


@contextmanager
def _without_address_env() -> Iterator[None]:
    """JobSubmissionClient lets RAY_ADDRESS / RAY_API_SERVER_ADDRESS override its address argument;
    an explicit --address must win."""
    saved = {k: os.environ.pop(k) for k in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS") if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class Jobs:
    """The job server of one cluster. Constructing it probes the server (one-line errors)."""

    def __init__(self, server: JobServer, timeout_s: tuple[float, float] = REQUEST_TIMEOUT_S) -> None:
        self.server, self.timeout_s = server, timeout_s
        self.ray_version = probe(server)
        try:
            from ray.job_submission import JobSubmissionClient
        except ImportError:
            raise HarnessError("Ray job submission needs ray[default]: pip install 'ray[default]'") from None
        _quiet_ray_client_logs()

        class TimedClient(JobSubmissionClient):  # type: ignore[misc, valid-type]
            """Ray's client, each request bounded by ``timeout_s`` (its own keyword for requests)."""

            def _do_request(self, method: str, endpoint: str, **kw: Any) -> Any:
                kw.setdefault("timeout", timeout_s)
                return super()._do_request(method, endpoint, **kw)

        with _without_address_env(), self._errors("connecting to the job server"):
            # Raises RuntimeError naming `pip install 'ray[default]'` when requests/aiohttp are missing.
            self.client = TimedClient(server.address, headers=server.headers)

    @contextmanager
    def _errors(self, what: str, job_id: str | None = None) -> Iterator[None]:
        try:  # Ray's job client sends with requests (without it, the client says how to install it)
            from requests.exceptions import RequestException, Timeout
        except ImportError:
            RequestException = Timeout = ConnectionError  # type: ignore[misc, assignment]
        try:
            yield
        except Timeout:
            raise HarnessError(f"{what} at {self.server.address} failed: no answer within "
                               f"{self.timeout_s[1]:g} s (is the head overloaded?)") from None
        except (RuntimeError, ConnectionError, RequestException) as exc:
            text = str(exc)
            if job_id and ("does not exist" in text or "404" in text):
                raise HarnessError(f"no job {job_id} on the Ray cluster at {self.server.address}") from None
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise HarnessError(f"{what} at {self.server.address} failed: {first[:300]}") from None

    def submit(self, *, entrypoint: str, runtime_env: dict[str, Any], metadata: dict[str, str],
               submission_id: str, num_gpus: float) -> str:
        with self._errors("job submission"):
            return str(self.client.submit_job(
                entrypoint=entrypoint, runtime_env=runtime_env, metadata=metadata,
                submission_id=submission_id, entrypoint_num_gpus=num_gpus or None))

    def status(self, job_id: str) -> str:
        with self._errors("job status", job_id):
            return str(self.client.get_job_status(job_id).value)

    def message(self, job_id: str) -> str:
        with self._errors("job info", job_id):
            return str(self.client.get_job_info(job_id).message or "")

    def logs(self, job_id: str) -> str:
        with self._errors("job logs", job_id):
            return str(self.client.get_job_logs(job_id))

    def stop(self, job_id: str) -> bool:
        with self._errors("job stop", job_id):
            return bool(self.client.stop_job(job_id))

    def list(self) -> list[JobRow]:
        with self._errors("job list"):
            jobs = self.client.list_jobs()
        rows = []
        for j in jobs:
            if not j.submission_id:
                continue  # drivers started without the Jobs API (ray.init scripts)
            meta = j.metadata or {}
            rows.append(JobRow(submission_id=j.submission_id, status=str(j.status.value),
                               study=meta.get("harness.study", "-"),
                               start_time=j.start_time / 1000 if j.start_time else None,
                               end_time=j.end_time / 1000 if j.end_time else None,
                               message=(j.message or "").strip().splitlines()[0][:120] if j.message else ""))
        return sorted(rows, key=lambda r: r.start_time or 0.0)

    def follow(self, job_id: str, write: Callable[[str], None], poll_s: float = 1.0) -> str:
        """Stream the job's logs until it ends; returns its final status."""
        import asyncio

        written = 0

        async def tail() -> None:
            nonlocal written
            async for chunk in self.client.tail_job_logs(job_id):
                write(chunk)
                written += len(chunk)

        self.status(job_id)  # an unknown id is one clear error, not a websocket failure
        try:
            from aiohttp import ClientError  # Ray's client streams the logs over aiohttp
        except ImportError:
            ClientError = ConnectionError  # no aiohttp: nothing of it can be raised
        try:
            asyncio.run(tail())
        except (RuntimeError, OSError, ConnectionError, ClientError):
            # the log stream broke or could not be opened (a proxy refusing the websocket):
            # fall back to polling below
            pass
        while (status := self.status(job_id)) not in TERMINAL:
            time.sleep(poll_s)
        rest = self.logs(job_id)
        if len(rest) > written:
            write(rest[written:])
        return status
