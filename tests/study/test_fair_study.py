"""One evaluation set per study, on real Ray and real MLflow (the session's shared finished study,
tests/conftest.py's ``finished_study``): a configuration trained with random negatives and a
baseline trained with BM25 negatives are evaluated on identical dev and test candidates, and every
seed run records that evaluation set's fingerprint."""

from __future__ import annotations

import pytest

from harness.study.variants import prepare_study, variant_key
from harness.tracking import conventions as C

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study(finished_study):
    spec = finished_study.spec()
    assert spec.baseline.config.train.sampler == "bm25"
    prepared = prepare_study(spec, progress=lambda m: None)
    return spec, finished_study, prepared


def _random_negatives(spec):
    return next(nc for nc in spec.configs if nc.name == "random-negatives")


def test_training_sampler_changes_training_candidates_only(study) -> None:
    spec, _, prepared = study
    assert _random_negatives(spec).config.train.sampler == "random"
    base = prepared[variant_key(spec.baseline.config)].splits
    rand = prepared[variant_key(_random_negatives(spec).config)].splits
    assert base is not rand
    for split in ("dev", "test"):
        assert [(q.qid, [c.doc_id for c in q.candidates]) for q in base.split(split)] == \
               [(q.qid, [c.doc_id for c in q.candidates]) for q in rand.split(split)]
    assert base.evaluation == rand.evaluation
    assert [q.qid for q in base.train] == [q.qid for q in rand.train]
    assert [[c.doc_id for c in q.candidates] for q in base.train] != \
           [[c.doc_id for c in q.candidates] for q in rand.train]


def test_every_seed_run_records_the_one_evaluation_set_and_the_table_pairs_them(study) -> None:
    spec, finished, prepared = study
    trials = finished.runs(C.KIND_TRIAL)
    assert len(trials) == len(spec.fixed_configs()) * len(spec.seeds)
    fingerprint = prepared[variant_key(spec.baseline.config)].splits.evaluation
    assert {t.data.tags[C.TAG_EVAL_FINGERPRINT] for t in trials} == {fingerprint}
    # The significance report ran: the candidate's config run got its test against the baseline.
    assert "map_p" in finished.out["configs"]["random-negatives"]
