"""`harness runs export` is whole or absent: a run file refused midway (malformed) leaves no part of
the export behind, so the same command runs again once the file is fixed. It checked and copied
file by file, so a refusal left the files before it (11 of them here), and the rerun was refused
"the folder is not empty"."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.tracking import conventions as C
from tests.results.test_runs_export import _log_files
from tests.synthetic import synthetic_records, write_study_records

pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]
NAMES = {"base": "baseline", "better": "better", "same": "same", "worse": "worse"}
GOOD = "".join(f"q{i:03d} Q0 d{j} {j + 1} {1.0 - 0.1 * j} t\n" for i in range(8) for j in range(3))


def _store_with_a_bad_run_file(tmp_path: Path) -> tuple[str, str]:
    """A finished study whose last seed run (in export order) holds a malformed runs/test.trec."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    write_study_records(uri, "ex", synthetic_records(queries=8), NAMES, failed=False)
    _log_files(uri, "ex")
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("ex")
    worse = [r for r in client.search_runs([exp.experiment_id])
             if r.data.tags.get(C.TAG_KIND) == C.KIND_TRIAL and r.info.run_name.startswith("worse")]
    bad = max(worse, key=lambda r: int(r.data.tags[C.TAG_SEED])).info.run_id
    client.log_text(bad, "q Q0 d 1 0.5\n", "runs/test.trec")
    return uri, bad


def _refusal(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli("runs", "export", *argv)
    lines = [line for line in err.strip().splitlines() if "mlflow" not in line]
    assert rc == 2 and out == "" and len(lines) == 1, err
    return lines[0]


def test_a_refused_export_writes_nothing_and_runs_again(tmp_path: Path, run_cli: Cli) -> None:
    uri, bad = _store_with_a_bad_run_file(tmp_path)
    work = tmp_path / "work"
    (work / "empty").mkdir(parents=True)
    for to in (work / "new", work / "empty", work / "deeper" / "new"):
        argv = ("--tracking-uri", uri, "--to", str(to))
        first = _refusal(run_cli, *argv)
        assert first.endswith(f"seed run {bad} runs/test.trec:1: expected 6 columns (qid Q0 docno rank score "
                              "tag), found 5"), first
        assert _refusal(run_cli, *argv) == first  # again the file, not "the folder is not empty"
    # nothing written: no export, no parent made, no hidden folder left behind
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["empty"]

    from mlflow.tracking import MlflowClient

    MlflowClient(uri).log_text(bad, GOOD, "runs/test.trec")  # the cause gone, the same command succeeds
    for to in (work / "new", work / "empty", work / "deeper" / "new"):
        rc, out, err = run_cli("runs", "export", "--tracking-uri", uri, "--to", str(to))
        assert rc == 0 and out.startswith("exported 12 run file(s) of 12 seed run(s)"), err
        assert sorted(p.name for p in to.iterdir()) == ["manifest.csv", "per_query.csv", "qrels", "runs"]
        assert len(list((to / "runs" / "test").iterdir())) == 12
    assert not [p for p in work.rglob(".*")]
