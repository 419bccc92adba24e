"""One evaluation set per study, on real Ray and real MLflow: a configuration trained with random
negatives and a baseline trained with BM25 negatives are evaluated on identical dev and test
candidates, and every seed run records that evaluation set's fingerprint."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from harness.driver.runner import run_study
from harness.study.spec import load_spec
from harness.study.variants import prepare_study, variant_key
from harness.tracking import conventions as C
from tests.study.conftest import write_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study(ray_root):
    path = write_study(ray_root, "fair", train={"steps": 4, "eval_every": 2}, baseline={"train.sampler": "bm25"},
                       configs={"random-negatives": {"train.sampler": "random"}}, failure={"max_retries": 0})
    spec = load_spec(path)
    uri = f"sqlite:///{ray_root / 'mlruns' / 'mlflow.db'}"
    out = run_study(spec, tracking_uri=uri, progress=lambda m: None)
    prepared = prepare_study(spec, progress=lambda m: None)
    return spec, uri, out, prepared


def test_training_sampler_changes_training_candidates_only(study) -> None:
    spec, _, _, prepared = study
    base = prepared[variant_key(spec.baseline.config)].splits
    rand = prepared[variant_key(spec.configs[0].config)].splits
    assert base is not rand
    for split in ("dev", "test"):
        assert [(q.qid, [c.doc_id for c in q.candidates]) for q in base.split(split)] == \
               [(q.qid, [c.doc_id for c in q.candidates]) for q in rand.split(split)]
    assert base.evaluation == rand.evaluation
    assert [q.qid for q in base.train] == [q.qid for q in rand.train]
    assert [[c.doc_id for c in q.candidates] for q in base.train] != \
           [[c.doc_id for c in q.candidates] for q in rand.train]


def test_every_seed_run_records_the_one_evaluation_set_and_the_table_pairs_them(study) -> None:
    spec, uri, out, prepared = study
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fair")
    trials = client.search_runs([exp.experiment_id], f"tags.`{C.TAG_KIND}` = '{C.KIND_TRIAL}'")
    assert len(trials) == 4
    fingerprint = prepared[variant_key(spec.baseline.config)].splits.evaluation
    assert {t.data.tags[C.TAG_EVAL_FINGERPRINT] for t in trials} == {fingerprint}
    # The significance report ran: the candidate's config run got its test against the baseline.
    assert "map_p" in out["configs"]["random-negatives"]
