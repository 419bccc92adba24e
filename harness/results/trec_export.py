"""``harness runs export``: every TREC run file of a study, and its qrels, from MLflow to a folder.

Reads what the study logged (evaluation/trec.py): ``runs/dev.trec`` and ``runs/test.trec`` of every
FINISHED seed run (tag harness.kind=trial) and ``qrels/dev.qrels``, ``qrels/test.qrels`` of the
study run (harness.kind=study; of the latest one that has them). Layout of DIR:

    DIR/qrels/dev.qrels, DIR/qrels/test.qrels
    DIR/runs/dev/<config>.seed<seed>.trec, DIR/runs/test/<config>.seed<seed>.trec
    DIR/manifest.csv   config, config_id, seed, split, file, run_id (one row per run file)
    DIR/per_query.csv  config, seed, metric, value, query, measure, split, config_id, run_id: one
                       row per (configuration, seed, query, metric), the per-query test values
                       (per_query/test.csv artifacts) of the seed runs `harness table --experiment`
                       tabulates, read by its reader (_table_rows); absent when no run has any.
                       The baseline's rows first, then the others in study order

``<config>`` is the configuration's label as ``harness table`` shows it (the config run's name),
with any character outside ``A-Z a-z 0-9 . _ + = @ # -`` replaced by ``_``. One folder per split
holds one file per configuration and seed, so a whole split evaluates in one call:

    ir_measures DIR/qrels/test.qrels DIR/runs/test/<config>.seed1.trec AP RR@10 nDCG@10 P@1
    trec_eval -m map -m recip_rank DIR/qrels/test.qrels DIR/runs/test/<config>.seed1.trec

A study over several collections (runs tagged harness.collection) exports each collection into
its own folder, ``DIR/<collection>/qrels/`` and ``DIR/<collection>/runs/<split>/`` (the name made
safe as ``<config>`` is, with a hash where two would share a folder: ``collection_folders``), and
manifest.csv and per_query.csv gain a ``collection`` column.

per_query.csv is the long results format (longcsv.py) with a few more columns, so
``harness table --from DIR/per_query.csv`` gives the study's table from the export alone (its
baseline the first configuration, the study's; a name guarded against spreadsheet formulas,
``'=x``, read back as ``=x``: textfile.csv_text), and pandas, R or a spreadsheet read the per-query
values as they are: ``metric`` is the harness key
(map), ``measure`` ir-measures' name (AP), the value as MLflow holds it.

Files are copied as logged, after a check that each parses (a malformed one fails the export,
naming the run). A seed run without run files (logged before run files existed) is skipped with a
note; an experiment with none at all is an error. The export is whole or absent: it is written into
a hidden folder beside DIR (inside DIR where DIR is an empty folder already) and moved into place
once every file is there, so a refusal midway (a malformed run file) leaves DIR as it was, and the
same command runs again once the cause is gone.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import DataError
from harness.metrics.measures import canonical_name
from harness.metrics.trec import QRELS_ARTIFACT, RUN_ARTIFACT, SPLITS, read_qrels, read_run
from harness.results.mlflow_reader import (
    FAST_FAIL_ENV,
    _env_defaults,
    _labels,
    experiment_named,
    open_store,
)
from harness.textfile import csv_cell, fsync_dir, umask, write_atomic
from harness.tracking import conventions as C
from harness.tracking.records import SeedRun
from harness.tracking.records import iter_runs as _runs

MANIFEST = "manifest.csv"
MANIFEST_COLUMNS = ("config", "config_id", "seed", "split", "file", "run_id")
PER_QUERY = "per_query.csv"
PER_QUERY_COLUMNS = ("config", "seed", "metric", "value", "query", "measure", "split", "config_id", "run_id")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@#-]")


@dataclass
class Export:
    """What an export wrote (paths relative to its folder) and what it skipped, in words."""

    folder: Path
    experiment: str
    run_files: list[str] = field(default_factory=list)
    qrels_files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    per_query_rows: int = 0  # rows of per_query.csv (0: not written)
    # incomplete_note's sentence where the study is not finished (its per_query.csv: the table's part)
    incomplete: str = ""

    def summary(self) -> str:
        # a seed run's files: [<collection>/]runs/<split>/<stem>.trec, one per split
        seeds = len({(*parts[:-2], parts[-1]) for parts in (f.split("/") for f in self.run_files)})
        qrels = f"{len(self.qrels_files)} qrels file(s)" if self.qrels_files else "no qrels (the study run has none)"
        per_query = (f", {self.per_query_rows} per-query value(s) in {PER_QUERY}" if self.per_query_rows
                     else ", no per-query values (no seed run logged any)")
        return (f"exported {len(self.run_files)} run file(s) of {seeds} seed run(s){per_query} and {qrels} "
                f"of experiment {self.experiment!r} to {self.folder}")


def file_stem(label: str, seed: str) -> str:
    """The file name (without .trec) of a seed run's run files.

    >>> file_stem("baseline (no CL)", "3")
    'baseline__no_CL_.seed3'
    """
    return _UNSAFE.sub("_", f"{label}.seed{seed}")


def export_runs(folder: str | Path, *, experiment: str | None = None,
                tracking_uri: str | None = None, baseline: str | None = None) -> Export:
    """Copy every run file and the qrels of ``experiment`` (default: the store's only study) into
    ``folder`` (module docstring); ``baseline`` as `harness table` takes it (per_query.csv's read)."""
    from mlflow.exceptions import MlflowException

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise DataError(f"--to {folder}: exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        # Files of an earlier export that this one does not write would stay beside its manifest,
        # and per_query.csv could be another study's.
        raise DataError(f"--to {folder}: the folder is not empty (an earlier export?); export into a new "
                        "or empty folder")
    client, uri = open_store(tracking_uri)
    with _env_defaults(**FAST_FAIL_ENV, MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false"):
        staging: Path | None = None
        try:
            exp = _experiment(client, experiment, uri)
            staging = _staging(folder)
            out = _export(client, exp, staging, uri, baseline)
            _into_place(staging, folder)
            staging = None
            out.folder = folder
            return out
        except MlflowException as exc:
            raise DataError(f"tracking URI {uri}: {str(exc).splitlines()[0]}") from None
        except OSError as exc:
            where = _named(str(exc.filename or folder), staging, folder)
            raise DataError(f"cannot write {where}: {exc.strerror or exc}") from None
        except DataError as exc:  # write_atomic's, naming the file as it will be, not the hidden folder's
            raise DataError(_named(str(exc), staging, folder)) from None
        finally:
            if staging is not None:  # refused or failed midway: nothing of it stays
                shutil.rmtree(staging, ignore_errors=True)


def _staging(folder: Path) -> Path:
    """A new hidden folder on ``folder``'s file system to write the export into: inside ``folder``
    where it is an (empty) folder already (a mount point, perhaps, or a shell's working folder, which
    a rename over it would leave orphaned), else beside it, in its nearest existing ancestor."""
    if folder.is_dir():
        return Path(tempfile.mkdtemp(prefix=".harness-export-", dir=folder))
    anchor = folder.absolute().parent
    while not anchor.exists():
        anchor = anchor.parent
    return Path(tempfile.mkdtemp(prefix=f".{folder.name or 'export'}.harness-export-", dir=anchor))


def _into_place(staging: Path, folder: Path) -> None:
    """Move the finished export from ``staging`` to ``folder``: one rename of the whole folder (its
    mode the umask's, not mkdtemp's private one) where ``folder`` is new, else a rename per entry of
    the export's top level into the existing folder, and the emptied ``staging`` removed."""
    if os.path.abspath(staging.parent) == os.path.abspath(folder):
        for entry in sorted(staging.iterdir()):
            os.replace(entry, folder / entry.name)
        staging.rmdir()
        return
    os.chmod(staging, 0o777 & ~umask())
    folder.parent.mkdir(parents=True, exist_ok=True)
    os.rename(staging, folder)
    fsync_dir(folder.parent)  # the rename on disk


def _named(text: str, staging: Path | None, folder: Path) -> str:
    """``text`` with the hidden folder's path read as ``folder``'s."""
    return text.replace(str(staging), str(folder)) if staging is not None else text


def _experiment(client: Any, name: str | None, uri: str) -> Any:
    if name is not None:
        return experiment_named(client, name, uri)
    studies = [e for e in client.search_experiments()
               if client.search_runs([e.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_STUDY}'",
                                     max_results=1)]
    if len(studies) != 1:
        names = ", ".join(sorted(e.name for e in studies)) or "none"
        raise DataError(f"{uri} holds {len(studies)} studies ({names}); name one with --experiment")
    return studies[0]


def _export(client: Any, exp: Any, folder: Path, uri: str, baseline: str | None = None) -> Export:
    source = f"MLflow experiment {exp.name!r}"
    out = Export(folder=folder, experiment=exp.name)
    configs = {r.data.tags.get(C.TAG_CONFIG_ID, r.info.run_id): r
               for r in _runs(client, exp.experiment_id, C.KIND_CONFIG)}
    trials = [r for r in _runs(client, exp.experiment_id, C.KIND_TRIAL) if r.info.status == "FINISHED"]
    if not trials:
        raise DataError(f"{source} has no finished seed runs ({C.TAG_KIND}={C.KIND_TRIAL}); nothing to export")
    for run in trials:
        if not run.data.tags.get(C.TAG_CONFIG_ID) or run.data.tags.get(C.TAG_SEED) is None:
            raise DataError(f"{source}: seed run {run.info.run_id} lacks the {C.TAG_CONFIG_ID} or "
                            f"{C.TAG_SEED} tag")
    def collection(run: Any) -> str:
        return str(run.data.tags.get(C.TAG_COLLECTION, ""))

    # Labels per collection: each collection's configurations carry the study's names.
    labels: dict[str, str] = {}
    groups: dict[str, list[Any]] = {}
    for t in trials:
        groups.setdefault(collection(t), []).append(t)
    for group in groups.values():
        labels.update(_labels(configs, [SeedRun.of(t) for t in group]))
    several = set(groups) != {""}
    # read (and refused) before a file is written: a refusal leaves no half export behind
    per_query_rows, out.incomplete = _table_rows(exp.name, uri, several, baseline)
    folders = collection_folders(groups) if several else {"": ""}
    order = _study_order(configs, trials, labels)
    stems: dict[str, str] = {}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in sorted(trials, key=lambda r: (collection(r), order[r.data.tags[C.TAG_CONFIG_ID]], _seed_key(r))):
            config_id, seed = run.data.tags[C.TAG_CONFIG_ID], run.data.tags[C.TAG_SEED]
            prefix = f"{folders[collection(run)]}/" if several else ""
            tail = (collection(run),) if several else ()
            stem = prefix + file_stem(labels[config_id], seed)
            if stems.get(stem, run.info.run_id) != run.info.run_id:  # two labels alike once made safe
                stem = prefix + file_stem(f"{labels[config_id]}-{config_id[:8]}", seed)
            stems[stem] = run.info.run_id
            logged = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "runs")}
            found = [s for s in SPLITS if Path(RUN_ARTIFACT.format(split=s)).name in logged]
            if not found:
                out.skipped.append(f"seed run {run.info.run_id} ({labels[config_id]}, seed {seed}) "
                                   f"has no run files")
                continue
            for split in found:
                artifact = RUN_ARTIFACT.format(split=split)
                local = Path(client.download_artifacts(run.info.run_id, artifact, str(Path(tmp) / run.info.run_id)))
                _check(read_run, local, f"{source}: seed run {run.info.run_id} {artifact}")
                rel = (f"{prefix}runs/{split}/{stem.removeprefix(prefix)}.trec")
                _copy(local, folder / rel)
                out.run_files.append(rel)
                rows.append((labels[config_id], config_id, seed, split, rel, run.info.run_id, *tail))
        if not out.run_files:
            raise DataError(f"{source}: none of its {len(trials)} finished seed runs holds run files "
                            f"({RUN_ARTIFACT.format(split='test')}); nothing to export")
        study = _study_with_qrels(client, exp.experiment_id)
        for name in (sorted(groups) if several else [""]):
            if study is None:
                break
            # a collection's qrels are logged under qrels/<collection>/ (harness.driver._orchestrate)
            sub = f"qrels/{name}" if several else "qrels"
            logged = {Path(a.path).name for a in client.list_artifacts(study.info.run_id, sub)}
            for split in SPLITS:
                artifact = QRELS_ARTIFACT.format(split=split)
                if Path(artifact).name not in logged:
                    continue
                logged_at = f"{sub}/{Path(artifact).name}"
                local = Path(client.download_artifacts(study.info.run_id, logged_at, str(Path(tmp) / "study" / name)))
                _check(read_qrels, local, f"{source}: study run {study.info.run_id} {logged_at}")
                rel = f"{folders[name]}/{artifact}" if several else artifact
                _copy(local, folder / rel)
                out.qrels_files.append(rel)
    manifest_columns = (*MANIFEST_COLUMNS, "collection") if several else MANIFEST_COLUMNS
    write_atomic(folder / MANIFEST, _csv_text(manifest_columns, rows), "manifest")
    if per_query_rows:
        per_query_columns = (*PER_QUERY_COLUMNS, "collection") if several else PER_QUERY_COLUMNS
        write_atomic(folder / PER_QUERY, _csv_text(per_query_columns, per_query_rows), "per-query values")
        out.per_query_rows = len(per_query_rows)
    return out


def _table_rows(name: str, uri: str, several: bool, baseline: str | None = None) -> tuple[list[tuple[str, ...]], str]:
    """per_query.csv's rows: the per-query test values of the seed runs ``harness table --experiment``
    reads (one reader: mlflow_reader), so that ``table --from`` gives its table. A configuration
    stopped early, the exploratory runs of a confirmation study and, in an unfinished study, what
    cannot be paired yet are left out as the table leaves them out; with the incomplete_note
    sentence of an unfinished study ("" when finished)."""
    from harness.results.mlflow_reader import incomplete_note, one_read, read_experiment_collections

    with one_read():
        collections = read_experiment_collections(name, tracking_uri=uri, baseline=baseline)
        incomplete = incomplete_note(name, tracking_uri=uri)
    rows = []
    for collection, results in collections.items():
        tail = (collection,) if several else ()
        for (config, seed), rec in results.runs.items():
            rows += [(config, seed, metric, repr(value), qid, canonical_name(metric), "test",
                      rec.config_id or "", rec.run_id or "", *tail)
                     for metric, values in rec.per_query.items() for qid, value in values.items()]
    return rows, incomplete


def _study_order(configs: dict[str, Any], trials: list[Any], labels: dict[str, str]) -> dict[str, tuple]:
    """config_id -> its place in the run files and the manifest: the baseline (role tag
    ``baseline``) first, then the configurations in study order (when each first ran), as
    ``harness table --experiment`` orders them (and per_query.csv, which its reader writes)."""
    roles: dict[str, str | None] = {}
    started: dict[str, int] = {}
    for t in trials:
        config_id = t.data.tags[C.TAG_CONFIG_ID]
        config_run = configs.get(config_id)
        roles[config_id] = ((config_run.data.tags.get(C.TAG_ROLE) if config_run else None)
                            or t.data.tags.get(C.TAG_ROLE))
        first = ((config_run.info.start_time or 0) if config_run else (t.info.start_time or 0))
        started[config_id] = min(started.get(config_id, first), first)
    return {i: (roles[i] != C.ROLE_BASELINE, started[i], labels[i]) for i in roles}


def collection_folders(names: Any) -> dict[str, str]:
    """collection -> its folder in the export: the name with every character outside
    ``A-Z a-z 0-9 . _ + = @ # -`` replaced by ``_``; where that folder is another collection's too
    (``c&1`` and ``c_1``; ``A`` and ``a`` on a case-insensitive file system) or only dots (``..``
    would leave DIR; nothing), it gets ``-`` and 8 hex digits of the name's SHA-256, so no collection's
    files land in another's.

    >>> collection_folders(["c&1", "c_1", "msdialog", ".."])
    {'c&1': 'c_1-42ebeb41', 'c_1': 'c_1-2ceb4df5', 'msdialog': 'msdialog', '..': '__-5ec1f7e7'}
    """
    import hashlib

    made = {n: _UNSAFE.sub("_", n) for n in names}
    safe = {n: "_" * max(len(f), 1) if set(f) <= {"."} else f for n, f in made.items()}
    taken: dict[str, int] = {}
    for f in safe.values():
        taken[f.casefold()] = taken.get(f.casefold(), 0) + 1
    return {n: f if taken[f.casefold()] == 1 and f == made[n]
            else f"{f}-{hashlib.sha256(n.encode()).hexdigest()[:8]}" for n, f in safe.items()}


def _csv_text(header: Any, rows: Any) -> str:
    """CSV text, every cell that a spreadsheet would run as a formula neutralised (csv_cell)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([csv_cell(c) for c in row] for row in rows)
    return buf.getvalue()


def _seed_key(run: Any) -> tuple[int, str]:
    seed = str(run.data.tags.get(C.TAG_SEED))
    return (int(seed), "") if seed.lstrip("-").isdigit() else (0, seed)


def _study_with_qrels(client: Any, exp_id: str) -> Any:
    studies = sorted(_runs(client, exp_id, C.KIND_STUDY), key=lambda r: r.info.start_time or 0, reverse=True)
    for run in studies:
        if client.list_artifacts(run.info.run_id, "qrels"):
            return run
    return None


def _check(reader: Any, path: Path, where: str) -> None:
    """Parse a downloaded file; an error names the run and artifact instead of the temporary path."""
    try:
        reader(path)
    except DataError as exc:
        raise DataError(str(exc).replace(str(path), where)) from None


def _copy(src: Path, dst: Path) -> None:
    write_atomic(dst, src.read_bytes(), "exported file")
