"""The trainer keeps the runs of its best-dev checkpoint (FinalRecord.runs); written as TREC files
(evaluation/trec.py), ir_measures on them gives the trainer's own dev and test metrics exactly."""

from __future__ import annotations

from pathlib import Path

import ir_measures
import pytest

from harness.metrics.measures import MEASURES
from harness.metrics.trec import qrels_artifacts, run_file_artifacts, run_tag
from harness.records import qrels_of
from harness.training.loop import EvalRecord, FinalRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import tiny_config, toy_splits

CFG = {"train.steps": 4, "train.eval_every": 2}


@pytest.fixture(scope="module")
def prepared():
    splits = toy_splits(n_train=32, n_dev=12, n_test=16)
    return prepare_data(splits, tiny_config().model)


def _final(trainer: Trainer) -> FinalRecord:
    *_, last = trainer.run()
    assert isinstance(last, FinalRecord)
    return last


def test_run_files_reproduce_the_trainers_metrics(prepared, tmp_path: Path) -> None:
    rec = _final(Trainer(tiny_config(**CFG), prepared))
    splits = prepared.splits
    assert set(rec.runs) == {"dev", "test"}
    assert {q: set(d) for q, d in rec.runs["test"].items()} == \
        {q.qid: {c.doc_id for c in q.candidates} for q in splits.test}
    qrels = {s: qrels_of(splits.split(s)) for s in ("dev", "test")}
    run_file_artifacts(tmp_path, runs=rec.runs, qrels=qrels, tag=run_tag("tiny", 1))
    qrels_artifacts(tmp_path, qrels)
    for split, expected in (("dev", rec.dev), ("test", rec.metrics)):
        got = ir_measures.calc_aggregate(
            list(MEASURES.values()), ir_measures.read_trec_qrels(str(tmp_path / "qrels" / f"{split}.qrels")),
            ir_measures.read_trec_run(str(tmp_path / "runs" / f"{split}.trec")))
        assert {k: got[m] for k, m in MEASURES.items()} == expected, split  # to the bit


@pytest.mark.slow
def test_resumed_trainer_keeps_the_best_dev_run(prepared, tmp_path: Path) -> None:
    cfg = tiny_config(**{**CFG, "train.steps": 6})
    full = _final(Trainer(cfg, prepared))
    first = Trainer(cfg, prepared)
    for rec in first.run():
        if isinstance(rec, EvalRecord) and rec.step == 4:
            first.save(tmp_path)
            break
    resumed = Trainer(cfg, prepared)
    resumed.restore(tmp_path)
    assert resumed.best_dev_run == first.best_dev_run != {}
    assert _final(resumed).runs == full.runs
