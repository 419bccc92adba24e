"""Stores as real life leaves them: runs deleted in the MLflow UI, a tag lost, an artifact removed,
an experiment in the trash. A store written as a study writes it (tests/synthetic.py, real MLflow)
is damaged through MLflow's own client, then read by `harness table`, `power` and `runs export`:
each damage that would change what the table tests or marks is refused in one line naming the run
(each passed silently before, and a table that lost a configuration corrected over fewer
comparisons, so markers appeared)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.tracking import conventions as C
from tests.results.test_runs_export import _log_files
from tests.synthetic import synthetic_records, write_collections_records, write_study_records

mlflow = pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]
NAMES = {"base": "baseline", "better": "ls", "same": "same", "worse": "worse"}
pytestmark = pytest.mark.slow  # a store of its own per test: seconds


def _store(tmp_path: Path) -> tuple[str, object]:
    """A finished study "s" of four configurations x 3 seeds, with run files (an export needs them)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    write_study_records(uri, "s", synthetic_records(queries=8), NAMES, failed=False)
    _log_files(uri, "s")
    return uri, MlflowClient(uri)


def _collections_store(tmp_path: Path) -> tuple[str, object]:
    """A finished study "s" over the collections msd and mantis (no run files)."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    write_collections_records(uri, "s", {c: synthetic_records(queries=8) for c in ("msd", "mantis")}, NAMES,
                              failed=False)
    return uri, MlflowClient(uri)


def _runs(client: object, kind: str, name: str = "") -> list:
    exp = client.get_experiment_by_name("s")
    return [r for r in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{kind}'")
            if r.info.run_name.startswith(name)]


def _refused(run_cli: Cli, *argv: str) -> str:
    rc, out, err = run_cli(*argv)
    lines = err.strip().splitlines()
    assert rc == 2 and not out and len(lines) == 1 and lines[0].startswith("harness: error: "), (rc, err)
    return lines[0]


def test_a_configuration_whose_seed_runs_were_deleted_is_not_dropped_from_the_family(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    rc, out, _ = run_cli("table", "--experiment", "s", "--tracking-uri", uri)
    assert rc == 0
    config = next(r for r in _runs(client, C.KIND_CONFIG) if r.info.run_name == "same")
    for run in _runs(client, C.KIND_TRIAL, "same"):
        client.delete_run(run.info.run_id)
    for command in ("table", "power"):
        line = _refused(run_cli, command, "--experiment", "s", "--tracking-uri", uri)
        assert (f"configuration 'same' (config run {config.info.run_id}) has no finished seed run in a finished "
                "study (its seed runs deleted?)") in line
    # Deleting its config run too leaves it out, as the user meant.
    client.delete_run(config.info.run_id)
    rc, out, _ = run_cli("table", "--experiment", "s", "--tracking-uri", uri, "--form", "configs")
    assert rc == 0 and "same" not in out


def test_a_baseline_whose_seed_runs_were_deleted_is_named(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    for run in _runs(client, C.KIND_TRIAL, "baseline"):
        client.delete_run(run.info.run_id)
    # It said: no configuration has role baseline, name one with --baseline (a candidate, then).
    assert "configuration 'baseline' (config run " in _refused(run_cli, "table", "--experiment", "s",
                                                                "--tracking-uri", uri)


def test_a_missing_per_query_artifact_is_named_not_a_silent_change_of_test(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    run = next(r for r in _runs(client, C.KIND_TRIAL, "ls") if r.data.tags[C.TAG_SEED] == "2")
    artifact = Path(run.info.artifact_uri.removeprefix("file://")) / C.PER_QUERY_ARTIFACT
    artifact.unlink()
    # The table fell back to the across-seeds test for every configuration without a word.
    for command in ("table", "power"):
        line = _refused(run_cli, command, "--experiment", "s", "--tracking-uri", uri)
        assert f"seed run {run.info.run_id} (ls, seed 2) has no {C.PER_QUERY_ARTIFACT}, while 11 of the 12" in line


def test_a_config_run_that_lost_its_collection_is_named(tmp_path, run_cli):
    uri, client = _collections_store(tmp_path)
    lost = next(r for r in _runs(client, C.KIND_CONFIG, "worse") if r.data.tags[C.TAG_COLLECTION] == "mantis")
    client.delete_tag(lost.info.run_id, C.TAG_COLLECTION)
    line = _refused(run_cli, "table", "--experiment", "s", "--tracking-uri", uri)
    assert f"config run {lost.info.run_id} (worse) has no {C.TAG_COLLECTION} tag" in line


def test_a_store_copied_without_its_artifacts_is_refused(tmp_path, run_cli):
    from harness.tracking.records import local_artifact

    uri, client = _store(tmp_path)
    run = _runs(client, C.KIND_TRIAL, "ls")[0]
    root = local_artifact(run.info.artifact_uri, "")
    experiment_folder = root.parent.parent  # <artifact root>/<experiment id>/<run id>/artifacts
    experiment_folder.rename(tmp_path / "elsewhere")
    # Read as per-run values only, the table ran the across-seeds test and said nothing.
    for command in ("table", "power"):
        line = _refused(run_cli, command, "--experiment", "s", "--tracking-uri", uri)
        assert f"has no {C.PER_QUERY_ARTIFACT}, which the harness logs with every finished seed run (12 of the 12" in line
        assert "is not there (the store was copied or moved without it?)" in line
    (tmp_path / "elsewhere").rename(experiment_folder)
    rc, out, _ = run_cli("table", "--experiment", "s", "--tracking-uri", uri)
    assert rc == 0 and "crossed" in out


def test_a_collection_tag_a_table_cannot_show_is_refused(tmp_path, run_cli):
    uri, client = _collections_store(tmp_path)
    edited = next(r for r in _runs(client, C.KIND_CONFIG, "worse") if r.data.tags[C.TAG_COLLECTION] == "mantis")
    client.set_tag(edited.info.run_id, C.TAG_COLLECTION, "man\ttis")
    line = _refused(run_cli, "table", "--experiment", "s", "--tracking-uri", uri)
    assert (f"config run {edited.info.run_id} (worse): its {C.TAG_COLLECTION} tag 'man\\ttis' holds a control "
            "character (U+0009) at position 3") in line


def test_a_seed_named_like_a_table_row_is_refused(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    for run in _runs(client, C.KIND_TRIAL):
        if run.data.tags[C.TAG_SEED] == "3":
            client.set_tag(run.info.run_id, C.TAG_SEED, "SD")
    # Its rows and the SD row shared a name in every table.
    assert "seed 'SD' is the name of a table's mean or SD row" in _refused(
        run_cli, "table", "--experiment", "s", "--tracking-uri", uri)


@pytest.mark.parametrize(("name", "said"), [("a|b\nc", "its name 'a|b\\nc' holds a line break"),
                                           ("x\x1b[31m", ("its name 'x\\x1b[31m' holds a control character "
                                                          "(U+001B) at position 1"))])
def test_a_name_a_table_cannot_show_is_refused(tmp_path, run_cli, name, said):
    # An escape sequence in a run name (MLflow UI) reached the terminal and the tables as it was.
    uri, client = _store(tmp_path)
    config = next(r for r in _runs(client, C.KIND_CONFIG) if r.info.run_name == "same")
    client.set_tag(config.info.run_id, "mlflow.runName", name)
    assert said in _refused(run_cli, "table", "--experiment", "s", "--tracking-uri", uri)


def test_a_deleted_experiment_is_not_read_as_live(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    client.delete_experiment(client.get_experiment_by_name("s").experiment_id)
    for argv in (("table", "--experiment", "s"), ("power", "--experiment", "s"),
                 ("runs", "export", "--experiment", "s", "--to", str(tmp_path / "out"))):
        assert "MLflow experiment 's' at" in (line := _refused(run_cli, *argv, "--tracking-uri", uri))
        assert "is deleted (in MLflow's trash); restore it" in line
    assert not (tmp_path / "out").exists()


def test_an_export_reads_back_as_the_table_of_a_study_with_a_stopped_configuration(tmp_path, run_cli):
    """per_query.csv holds what `harness table --experiment` tabulates: a configuration stopped
    early is left out of both (the export held its finished seeds, and `table --from` refused the
    file: a configuration missing seeds)."""
    uri, client = _store(tmp_path)
    config = next(r for r in _runs(client, C.KIND_CONFIG) if r.info.run_name == "worse")
    client.set_tag(config.info.run_id, C.TAG_STOPPED, "1")
    for run in _runs(client, C.KIND_TRIAL, "worse"):
        if run.data.tags[C.TAG_SEED] != "1":
            client.set_tag(run.info.run_id, C.TAG_STOPPED, "1")
            client.set_terminated(run.info.run_id, "KILLED")
    out = tmp_path / "out"
    rc, _, err = run_cli("runs", "export", "--experiment", "s", "--tracking-uri", uri, "--to", str(out))
    assert rc == 0, err
    assert {r["config"] for r in csv.DictReader((out / "per_query.csv").open())} == {"baseline", "ls", "same"}
    tables = [run_cli("table", *source, "--tracking-uri", uri, "--format", "csv", "--form", "configs")
              if source[0] == "--experiment" else run_cli("table", *source, "--format", "csv", "--form", "configs")
              for source in (("--experiment", "s"), ("--from", str(out / "per_query.csv")))]
    assert [rc for rc, _, _ in tables] == [0, 0]
    rows = [[row[:3] for row in csv.reader(text.splitlines()[1:])] for _, text, _ in tables]
    assert rows[0] == rows[1] and rows[0]


def test_an_export_of_an_unfinished_study_says_so_and_reads_back_as_its_table(tmp_path, run_cli):
    uri, client = _store(tmp_path)
    running = next(r for r in _runs(client, C.KIND_TRIAL, "same") if r.data.tags[C.TAG_SEED] == "2")
    client.update_run(running.info.run_id, "RUNNING")
    out = tmp_path / "out"
    rc, _, err = run_cli("runs", "export", "--experiment", "s", "--tracking-uri", uri, "--to", str(out))
    assert rc == 3 and err.startswith("harness: warning: INCOMPLETE study: 1 of 12 seed runs did not finish"), err
    # the part the table pairs: 'same' is left out until it is resumed, in the export as in the table
    assert {r["config"] for r in csv.DictReader((out / "per_query.csv").open())} == {"baseline", "ls", "worse"}
    rc, text, _ = run_cli("table", "--from", str(out / "per_query.csv"), "--format", "csv", "--form", "configs")
    assert rc == 0 and "same" not in text


def test_an_export_into_a_folder_that_holds_files_is_refused(tmp_path, run_cli):
    """An earlier export's files the new one does not write stayed beside its manifest, and its
    per_query.csv (another study's) was read by `table --from` as this one's."""
    uri, _ = _store(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    assert run_cli("runs", "export", "--experiment", "s", "--tracking-uri", uri, "--to", str(out))[0] == 0
    line = _refused(run_cli, "runs", "export", "--experiment", "s", "--tracking-uri", uri, "--to", str(out))
    assert f"--to {out}: the folder is not empty (an earlier export?)" in line
