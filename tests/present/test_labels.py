"""A display label per configuration (issue 40): the study file's ``label`` on a config, recorded
on its config run as the tag harness.label (real MLflow), names it in every renderer."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.results.mlflow_reader import read_experiment
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from harness.tracking.store import default_tracking_uri
from tests.study.conftest import write_study
from tests.synthetic import synthetic_records, write_study_records


def test_a_config_label_is_parsed_and_checked(tmp_path: Path) -> None:
    path = write_study(tmp_path, "labelled", configs={"curriculum-uwords-root_2": {"curriculum.pacing": "root_n"}})
    text = path.read_text().replace("- name: curriculum-uwords-root_2",
                                    "- name: curriculum-uwords-root_2\n  label: 'CL (#Uwords, root_2)'")
    path.write_text(text)
    spec = load_spec(path)
    assert [(nc.name, nc.label) for nc in spec.configs] == [("curriculum-uwords-root_2", "CL (#Uwords, root_2)")]
    path.write_text(text.replace("label: 'CL (#Uwords, root_2)'", "label: 3"))
    with pytest.raises(ConfigError, match=r"configs\[0\]\.label must be a one-line text"):
        load_spec(path)


@pytest.mark.slow
def test_the_label_tag_names_the_configuration_in_every_renderer(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from harness.analysis import StudyAnalysis
    from harness.present.html_report import report_html
    from harness.present.report import study_report

    uri = default_tracking_uri(tmp_path)
    records = synthetic_records(queries=12, effects={"base": 0.0, "cl": 0.06})
    write_study_records(uri, "labels", records, {"base": "baseline", "cl": "curriculum-uwords-root_2"})
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("labels")
    (run,) = [r for r in client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_CONFIG}'")
              if r.info.run_name == "curriculum-uwords-root_2"]
    client.set_tag(run.info.run_id, C.TAG_LABEL, "CL (#Uwords, root_2)")
    results = read_experiment("labels", tracking_uri=uri)
    assert results.configs == ("baseline", "CL (#Uwords, root_2)")
    analysis = StudyAnalysis(results=results)
    for fmt in ("md", "latex", "csv", "html"):
        text = analysis.table().render(fmt)
        assert "curriculum-uwords-root_2" not in text and "root" in text, fmt
    page = report_html(study_report(results, formats=("html",)))
    assert "CL (#Uwords, root_2)" in page and "curriculum-uwords-root_2" not in page
