"""Trust in Ray Tune's state on resume (docs/reliability.md, "Resume and storage trust").

Tune keeps a phase's driver-side state as pickles (``tuner.pkl``, the searcher's and callbacks'
state) and JSON that may embed pickles (``experiment_state-*.json``) at the top of
``<storage_path>/<study>-<phase>/``; ``Tuner.restore`` unpickles them, which runs whatever code a
planted file names. Storage may be shared (NFS, ``s3://``), so the driver signs what it writes and
verifies it before any restore:

- after each save of Tune's experiment state (``TuneController.save_to_dir``, wrapped here, into
  the driver's local staging folder, before Tune copies it to storage) and after the Tuner is made,
  the SHA-256 of every top-level file is recorded, with an HMAC over the list under a key kept
  locally (``$HARNESS_STATE_KEY``, else ``~/.config/harness/state.key``, made 0600 on first use),
  as tag ``harness.tune_state.<phase>`` of the study run in MLflow, which only the driver writes;
  the last ``KEEP`` digests of each file count, as storage may lag the newest save;
- ``--resume`` first checks the tag's HMAC and that every top-level file there has a recorded
  digest; anything else (a planted or altered file, state from another key or an older harness)
  is refused in one line naming the file, and Tune's state is never opened. Deleting that folder
  resumes from MLflow alone: finished trials are replayed from their records, the others train
  again from their start.

Trial checkpoints are read by the trainable itself (``trainer.pt`` with ``weights_only``, outcomes
as JSON), never unpickled.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.driver._storage import EARLY_STOP_STATE
from harness.errors import HarnessError
from harness.tracking import conventions as C

KEY_ENV = "HARNESS_STATE_KEY"
KEEP = 3  # digests kept per file: storage may still hold one of the saves before the newest
MAX_FILES = 40  # names kept in a manifest (each resume adds a session's state files)
_ACTIVE: dict[str, Signer] = {}  # staging folder's phase name -> its signer, while a phase runs


def state_key() -> bytes:
    """The HMAC key: ``$HARNESS_STATE_KEY`` (give the same to every driver that may resume the
    study, e.g. a Ray Job's retries), else the local key file, made on first use."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode()
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "harness"
    path = base / "state.key"
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise HarnessError(f"cannot read the Tune state key {path}: {exc.strerror or exc}") from None
    try:
        base.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_hex(32).encode())
    except FileExistsError:  # another driver made it first
        pass
    except OSError as exc:
        raise HarnessError(f"cannot make the Tune state key {path}: {exc.strerror or exc} (or set "
                           f"{KEY_ENV})") from None
    return path.read_bytes()


def _mac(files: dict[str, list[str]], key: bytes) -> str:
    body = json.dumps(files, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


# The harness's own state beside Tune's: plain JSON that the harness parses and checks itself (the
# early-stopping scheduler's), never unpickled and not a name Tune restores; it is rewritten between
# Tune's saves, so it has no digest to match.
OWN_FILES = frozenset({EARLY_STOP_STATE})


def _top_files(fs: Any, path: str) -> dict[str, str]:
    """name -> SHA-256 of every regular file directly under ``path`` of pyarrow filesystem ``fs``,
    but hidden ones (Tune reads no state from them: its ``.validate_storage_marker``, an empty
    file made in storage at each start, is only looked for; none matches a name it restores) and
    the harness's own JSON (``OWN_FILES``)."""
    import pyarrow.fs as pafs

    out = {}
    for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
        if (info.type == pafs.FileType.File and not info.base_name.startswith(".")
                and info.base_name not in OWN_FILES):
            with fs.open_input_stream(info.path) as fh:
                out[info.base_name] = hashlib.sha256(fh.read()).hexdigest()
    return out


class Signer:
    """Records the digests of one phase's Tune state on the study run (module docstring)."""

    def __init__(self, store: Any, study_run: str, phase: str, files: dict[str, list[str]] | None = None) -> None:
        self.store, self.study_run, self.phase = store, study_run, phase
        self.key = state_key()
        self.files: dict[str, list[str]] = dict(files or {})

    def sign(self, fs: Any, path: str) -> None:
        changed = False
        for name, digest in _top_files(fs, path).items():
            kept = self.files.get(name, [])
            if digest not in kept:
                self.files[name] = [digest, *kept][:KEEP]
                changed = True
        if not changed:
            return
        while len(self.files) > MAX_FILES:
            self.files.pop(next(iter(self.files)))
        record = {"files": self.files, "hmac": _mac(self.files, self.key)}
        self.store.set_tags(self.study_run, {C.TAG_TUNE_STATE_PREFIX + self.phase: json.dumps(record)})

    def sign_local(self, path: str) -> None:
        import pyarrow.fs as pafs

        self.sign(pafs.LocalFileSystem(), path)


def recorded(store: Any, study_run: str, phase: str) -> dict[str, list[str]] | None:
    """The verified manifest of ``phase`` on the study run; None where none is recorded; a
    HarnessError where its HMAC does not match this driver's key."""
    run = store.client.get_run(study_run)
    text = run.data.tags.get(C.TAG_TUNE_STATE_PREFIX + phase)
    if text is None:
        return None
    try:
        record = json.loads(text)
        files = {str(k): [str(d) for d in v] for k, v in record["files"].items()}
        good = hmac.compare_digest(str(record["hmac"]), _mac(files, state_key()))
    except (ValueError, KeyError, TypeError, AttributeError):
        good = False
    if not good:
        raise HarnessError(f"the record of phase {phase}'s Ray Tune state on study run {study_run} does not "
                           f"verify under this driver's key ({KEY_ENV} or ~/.config/harness/state.key): it "
                           "was written with another key or altered; resume where the study started, with its "
                           f"key, or see docs/reliability.md")
    return files


def verify(store: Any, study_run: str, phase: str, uri: str) -> dict[str, list[str]]:
    """Refuse (one line) unless every top-level file of the Tune state at ``uri`` has a digest the
    driver recorded for ``phase``; returns the verified manifest. Reads the files' bytes only."""
    from harness.driver._storage import _filesystem

    fix = (f"delete {uri} and run --resume again: trials recorded as finished in MLflow are replayed "
           "from there, the others train again from their start (docs/reliability.md)")
    files = recorded(store, study_run, phase)
    if files is None:
        raise HarnessError(f"Ray Tune state at {uri} carries no signature of this study's driver (written by "
                           f"another store's study or an older harness); resuming would unpickle it, so it is "
                           f"refused; {fix}")
    fs, path = _filesystem(uri)
    for name, digest in sorted(_top_files(fs, path).items()):
        if digest not in files.get(name, []):
            raise HarnessError(f"Ray Tune state file {uri.rstrip('/')}/{name} is not one the study's driver wrote "
                               f"(changed or planted since); resuming would unpickle it, so it is refused; {fix}")
    return files


@contextlib.contextmanager
def signing(signer: Signer, uri: str) -> Iterator[None]:
    """While the block runs a phase: each save of Tune's experiment state is signed in the staging
    folder as it is written, and the state in storage at the block's end."""
    _patch_tune()
    name = uri.rstrip("/").rpartition("/")[2]
    _ACTIVE[name] = signer
    try:
        yield
    finally:
        _ACTIVE.pop(name, None)
        with contextlib.suppress(Exception):  # the phase's own error matters more
            from harness.driver._storage import _filesystem

            signer.sign(*_filesystem(uri))


def sign_storage(signer: Signer, uri: str) -> None:
    """Sign what is in storage now (``tuner.pkl``, written there directly when the Tuner is made)."""
    from harness.driver._storage import _filesystem

    signer.sign(*_filesystem(uri))


@functools.cache
def _patch_tune() -> None:
    """Wrap ``TuneController.save_to_dir`` once: after Tune writes its experiment state into the
    driver's staging folder, the phase's signer records it, before Tune copies it to storage."""
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController.save_to_dir

    @functools.wraps(original)
    def save_to_dir(self: Any) -> None:
        original(self)
        staging = self._storage.experiment_driver_staging_path
        signer = _ACTIVE.get(str(self._storage.experiment_dir_name))
        if signer is not None:
            signer.sign_local(staging)

    TuneController.save_to_dir = save_to_dir
