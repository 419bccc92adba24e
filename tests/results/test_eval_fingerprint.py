"""Runs evaluated on different dev/test candidates are never paired: a hand-made MLflow experiment
whose seed runs carry two evaluation fingerprints is refused by `harness table --experiment`,
naming the configurations and seeds; one fingerprint is tabulated as usual."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import DataError
from harness.results.stored import EvaluationMismatch, StudyResults
from harness.tracking import conventions as C
from tests.synthetic import log_seed_results, synthetic_records

mlflow = pytest.importorskip("mlflow")

SAME, OTHER = "a" * 64, "b" * 64


def _experiment(uri: str, name: str, fingerprints: dict[str, str]) -> None:
    """A study whose seed runs of each configuration carry ``fingerprints[config]``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    root = Path(uri[len("sqlite:///"):]).parent / "artifacts" / name
    exp = client.create_experiment(name, artifact_location=root.as_uri())
    for rec in synthetic_records(queries=10, seeds=(1, 2), effects={"base": 0.0, "rand-neg": 0.05}):
        role = C.ROLE_BASELINE if rec.config == "base" else C.ROLE_CANDIDATE
        run = client.create_run(exp, run_name=f"{rec.config}-seed{rec.seed}", tags={
            C.TAG_KIND: C.KIND_TRIAL, C.TAG_CONFIG_ID: rec.config, C.TAG_SEED: rec.seed, C.TAG_ROLE: role,
            C.TAG_EVAL_FINGERPRINT: fingerprints[rec.config]})
        log_seed_results(client, run.info.run_id, rec)
        client.set_terminated(run.info.run_id)


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = tmp_path_factory.mktemp("mlruns") / "mlflow.db"
    uri = f"sqlite:///{db.resolve()}"
    _experiment(uri, "mixed", {"base": SAME, "rand-neg": OTHER})
    _experiment(uri, "fair", {"base": SAME, "rand-neg": SAME})
    return uri


def test_table_refuses_runs_from_different_evaluation_sets(uri: str, capsys) -> None:
    assert main(["table", "--experiment", "mixed", "--tracking-uri", uri]) == 2
    out = capsys.readouterr()
    err = out.err.strip().splitlines()
    assert out.out == "" and len(err) == 1
    assert "2 different evaluation sets" in err[0]
    assert f"evaluation set {SAME[:12]}: 'base' seeds 1, 2" in err[0]
    assert f"evaluation set {OTHER[:12]}: 'rand-neg' seeds 1, 2" in err[0]


def test_table_pairs_runs_of_one_evaluation_set(uri: str, capsys) -> None:
    assert main(["table", "--experiment", "fair", "--tracking-uri", uri]) == 0
    assert "rand-neg" in capsys.readouterr().out


def test_mismatch_is_a_data_error_naming_each_run() -> None:
    recs = synthetic_records(queries=5, seeds=(1, 2), effects={"base": 0.0, "x": 0.1})
    import dataclasses

    recs = [dataclasses.replace(r, evaluation=OTHER if (r.config, r.seed) == ("x", "2") else SAME)
            for r in recs]
    with pytest.raises(EvaluationMismatch, match=r"'base' seeds 1, 2; 'x' seeds 1 \|.*'x' seeds 2"):
        StudyResults.build(recs, baseline="base")
    assert issubclass(EvaluationMismatch, DataError)
