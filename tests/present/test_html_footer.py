"""The report page's footer time makes the page reproducible: SOURCE_DATE_EPOCH where it is set
(the reproducible-builds.org convention), else the study run's end as the store holds it, else
now. It was always now, so the same study gave a different page every minute."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cli import main
from tests.synthetic import synthetic_records, write_study_records

pytest.importorskip("mlflow")

Cli = Callable[..., tuple[int, str, str]]
NAMES = {"base": "baseline", "better": "better"}


@pytest.fixture
def finished(tmp_path: Path) -> str:
    uri = f"sqlite:///{(tmp_path / 'db' / 'mlflow.db').resolve()}"
    # one comparison, one level: the page's power curves draw few critical tables
    records = synthetic_records(queries=8, effects={"base": 0.0, "better": 0.06}, metrics=("map",))
    write_study_records(uri, "study", records, NAMES, failed=False)
    return uri


@pytest.mark.slow
def test_source_date_epoch_makes_the_page_byte_reproducible(finished: str, tmp_path: Path, run_cli: Cli,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # 2023-11-14 22:13:20 UTC
    pages = []
    for name in ("a.html", "b.html"):
        rc, _, err = run_cli("report", "--experiment", "study", "--tracking-uri", finished,
                             "--to", str(tmp_path / name))
        assert rc == 0, err
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1]
    assert b"; made 2023-11-14 22:13 UTC</footer>" in pages[0]

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")  # the convention: refused, not read as now
    rc, out, err = run_cli("report", "--experiment", "study", "--tracking-uri", finished,
                           "--to", str(tmp_path / "c.html"))
    lines = [line for line in err.strip().splitlines() if "mlflow" not in line]
    assert rc == 2 and out == "" and len(lines) == 1, err
    assert lines[0].startswith("harness: error: SOURCE_DATE_EPOCH='yesterday': expected the report's time as "
                               "whole seconds since 1970-01-01 UTC")
    assert not (tmp_path / "c.html").exists()


@pytest.mark.slow
def test_without_source_date_epoch_the_page_gives_the_study_runs_end(finished: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from harness.present.html_report import study_page
    from harness.present.report import study_report
    from harness.results.mlflow_reader import read_experiment
    from harness.tracking import conventions as C

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    client = MlflowClient(finished)
    exp = client.get_experiment_by_name("study")
    [run] = client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_STUDY}'")
    client.set_terminated(run.info.run_id, "FINISHED", end_time=1609556640000)  # 2021-01-02 03:04 UTC
    report = study_report(read_experiment("study", tracking_uri=finished), formats=("html",))
    page = study_page(report, "study", tracking_uri=finished)
    assert "; made 2021-01-02 03:04 UTC</footer>" in page
    assert study_page(report, "study", tracking_uri=finished) == page
    # `harness report` gives the same time: a finished study's page, the same bytes every time
    for name in ("a.html", "b.html"):
        assert main(["report", "--experiment", "study", "--tracking-uri", finished, "--to", str(tmp_path / name)]) == 0
    assert "; made 2021-01-02 03:04 UTC</footer>" in (tmp_path / "a.html").read_text()
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
