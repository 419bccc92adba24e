"""The MLflow UI on a study store, opening on training runs and verdicts (``harness ui``).

MLflow's UI (3.17, 3.18) decides between its GenAI side (an overview of traces, judges, a "Detect
Issues" pop-up) and its model-training side from the address's ``workflowType`` query parameter, else
from the choice the browser remembers in ``localStorage`` (key ``mlflow.workflowType_v1``), else
GenAI; the experiment tag ``mlflow.experimentKind`` no longer decides it. A browser that never
chose therefore opens every experiment and run page of a study on the GenAI side, whatever link
it followed. So ``harness ui`` serves MLflow's own server (``mlflow ui``, all its options and
checks) with one change: the UI's page (``/``, ``/index.html``) carries a short script that, run
before the UI starts,

- makes model training the remembered choice where the browser has none (a choice made with the
  UI's own switch is kept);
- where the choice is model training, sends the bare address (``http://host:port/``) to the
  newest study's verdict view, and a study's bare experiment or runs address to its verdict view
  (``conventions.runs_page``).

docs/storage.md describes what a researcher sees.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from typing import Any

from harness.tracking import conventions as C

WORKFLOW_KEY = "mlflow.workflowType_v1"  # MLflow's useLocalStorage key: f"{key}_v{version}"
TRAINING = "machine_learning"
URI_ENV = "HARNESS_UI_TRACKING_URI"  # the store the page's script reads, set by ``main``
QUIET_ENV = "HARNESS_UI_QUIET"  # "1": MLflow's start-up notes (on stdout) are not printed (``harness ui`` without -v)
PAGES = ("/", "/index.html")


def study_pages(uri: str) -> list[tuple[str, str]]:
    """(experiment, runs page address) of every study in the store, the most recently updated
    first: its verdict view where it has one, else its runs table, both on the model-training side
    of the UI (``conventions.runs_page``); none where the store cannot be read (the UI says why)."""
    from mlflow.exceptions import MlflowException

    try:
        experiments = _client(uri).search_experiments(max_results=1000)
    except (MlflowException, OSError):
        return []
    experiments = sorted(experiments, key=lambda e: -(e.last_update_time or e.creation_time or 0))
    return [(e.name, C.runs_page(e.experiment_id, verdicts=C.TAG_VERDICT_VIEW in e.tags)) for e in experiments
            if C.TAG_VERDICT_VIEW in e.tags or e.tags.get(C.TAG_EXPERIMENT_KIND) == C.EXPERIMENT_KIND]


@functools.lru_cache(maxsize=4)
def _client(uri: str) -> Any:
    """One client per store: the UI's page asks at each load, and opening a store costs more than
    the query."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def landing_script(pages: list[tuple[str, str]]) -> str:
    """The script the UI's page runs first (see the module docstring); ``pages`` as ``study_pages``."""
    views = {}
    for _, page in pages:
        exp = page.split("/experiments/", 1)[1].split("/", 1)[0]
        views[exp] = page[1:]  # "#/experiments/..."
    first = pages[0][1][1:] if pages else None
    script = ("(function(){var k=@KEY,mine=true;try{if(localStorage.getItem(k)===null)localStorage.setItem(k,@VALUE);"
              "mine=localStorage.getItem(k)===@VALUE}catch(e){}if(!mine)return;"
              "var views=@VIEWS,first=@FIRST,h=location.hash,to=null;"
              "if(!h||h==='#'||h==='#/'){to=first}else{"
              "var m=/^#\\/experiments\\/([^\\/?]+)(\\/runs)?\\/?$/.exec(h);"
              "if(m&&Object.prototype.hasOwnProperty.call(views,m[1]))to=views[m[1]]}"
              "if(to)history.replaceState(null,'',location.pathname+location.search+to)})();")
    for name, value in (("@KEY", WORKFLOW_KEY), ("@VALUE", json.dumps(TRAINING)), ("@VIEWS", views),
                        ("@FIRST", first)):
        script = script.replace(name, json.dumps(value))
    return script


def with_script(html: bytes, script: str) -> bytes:
    """``html`` with ``script`` as the first thing its head runs."""
    tag = b"<head>"
    at = html.find(tag)
    if at < 0:
        return html
    at += len(tag)
    return html[:at] + b"<script>" + script.encode() + b"</script>" + html[at:]


class LandingPage:
    """ASGI middleware: MLflow's app, its page served with ``landing_script`` (the store's studies
    read at each load, so a study that started after the UI is found too). Headers that would let a
    browser reuse a copy without the script (ETag, Last-Modified) are dropped."""

    def __init__(self, app: Any, uri: str) -> None:
        self.app, self.uri = app, uri

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET" or scope.get("path") not in PAGES:
            await self.app(scope, receive, send)
            return
        scope = dict(scope, headers=[(k, v) for k, v in scope.get("headers", [])
                                     if k.lower() not in (b"if-none-match", b"if-modified-since")])
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            headers = [(k, v) for k, v in start.get("headers", [])
                       if k.lower() not in (b"content-length", b"etag", b"last-modified")]
            kind = {k.lower(): v for k, v in headers}.get(b"content-type", b"")
            if start.get("status") == 200 and kind.startswith(b"text/html"):
                body = with_script(body, landing_script(study_pages(self.uri)))
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-cache"))
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)


def __getattr__(name: str) -> Any:
    """``app``, the ASGI app the UI's server runs (built on first use: importing MLflow's server is
    for the server's process only)."""
    if name != "app":
        raise AttributeError(name)
    from mlflow.server.fastapi_app import app as mlflow_app

    # MLflow's handlers import its auth module at each runs search, in a server thread, while MLflow
    # 3.18's Assistant route reads that module from sys.modules in another: found half-imported, the
    # route answers 500 with a traceback in the terminal. Without MLflow's auth extra (Flask-WTF)
    # the import fails, so each search imports it again. It is imported once here, before the
    # first request; where it fails, sys.modules records it as absent (None: a later import fails
    # at once without running the module again, and the Assistant reads "no auth").
    try:
        import mlflow.server.auth  # noqa: F401
    except ImportError:
        sys.modules["mlflow.server.auth"] = None  # type: ignore[assignment]

    app = LandingPage(mlflow_app, os.environ.get(URI_ENV, ""))
    globals()["app"] = app
    return app


MLFLOW_APP = "mlflow.server.fastapi_app:app"
APP = "harness.tracking.ui:app"  # by name: run as ``python -m``, this module is __main__


# MLflow's notes on stderr that say only what harness ui's own lines say (the server is local)
QUIET_NOTES = ("[MLflow] Security middleware enabled with default settings (localhost-only)",)


class _Without:
    """A text stream that writes what ``stream`` gets, except writes that start with one of
    ``notes`` (click writes a message and its newline at once)."""

    def __init__(self, stream: Any, notes: tuple[str, ...]) -> None:
        self.stream, self.notes = stream, notes

    def write(self, text: str) -> int:
        if text.startswith(self.notes):
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str]) -> int:
    """``mlflow ui ARGV`` serving ``app`` in place of MLflow's app (its server command is built by
    ``mlflow.server._build_uvicorn_command``, which this wraps for this process only)."""
    from mlflow import server
    from mlflow.cli import cli

    build = getattr(server, "_build_uvicorn_command", None)
    if build is None:  # another MLflow's server: served unchanged, GenAI side by default
        print("harness: warning: this MLflow's server cannot be wrapped; open the study addresses "
              "printed above (they carry workflowType)", file=sys.stderr, flush=True)
    else:
        def ours(uvicorn_opts: Any, host: Any, port: Any, workers: Any, app_name: str, *rest: Any,
                 **kw: Any) -> Any:
            app = APP if app_name == MLFLOW_APP else app_name
            return build(uvicorn_opts, host, port, workers, app, *rest, **kw)

        server._build_uvicorn_command = ours
    # MLflow's command waits for its server process and exits 0 whatever that process ended with
    # (a port taken between harness ui's check and the bind): the process is kept to answer.
    started: list[Any] = []
    exec_cmd = getattr(server, "_exec_cmd", None)
    if exec_cmd is not None:
        def kept(*args: Any, **kw: Any) -> Any:
            started.append(exec_cmd(*args, **kw))
            return started[-1]

        server._exec_cmd = kept
    quiet = os.environ.get(QUIET_ENV) == "1"
    try:
        # MLflow's command echoes its notes ("Registry store URI not provided...") to stdout and the
        # default security setting to stderr, beside its errors; the server it starts writes to the
        # terminal's own descriptors.
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull if quiet else sys.stdout), \
                contextlib.redirect_stderr(_Without(sys.stderr, QUIET_NOTES) if quiet else sys.stderr):
            cli.main(["ui", *argv], prog_name="mlflow", standalone_mode=True)
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    else:
        code = 0
    served = started[-1].returncode if started else None
    # the server's own failure (uvicorn's non-zero status when it cannot bind); a signal's stop is no failure
    return code or (served if served and served > 0 else 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
