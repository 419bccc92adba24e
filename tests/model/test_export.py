"""Exported rankers score as the harness does: a real tiny study (real Ray, real MLflow in SQLite),
then `harness export` loaded by sentence-transformers and transformers, and the MLflow pyfunc model
logged at the end of the study, against the harness's own scorer on a test query."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from harness.cli import main
from harness.config import TrialConfig
from harness.data.load import load_splits
from harness.driver.runner import run_study
from harness.model.collate import PairCollator, context_text
from harness.model.export import _ranker, load_cascade, load_seed_model
from harness.model.mlflow_model import TAG_MODEL_URI, log_study_models, models_to_log
from harness.model.scoring import score_candidates
from harness.study.spec import load_spec
from harness.tracking import conventions as C
from tests.study.conftest import write_study

# heavy: a study of its own (three configurations, two seeds, logged models); the loaders themselves
# are tested without Ray in test_export_loaders.py, which `make test` runs
pytestmark = [pytest.mark.slow, pytest.mark.heavy]


@pytest.fixture(scope="module")
def study(ray_root):
    # models: the template's "none" removed, so that the study logs its best configuration's models
    path = write_study(ray_root, "exported", data={"max_test_queries": 8}, model={"max_length": 64}, configs={
        "ls": {"smoothing.method": "LS", "smoothing.epsilon": 0.2},
        "cascade": {"cascade.enabled": True, "cascade.alpha": [0.3]}}, models=None)
    uri = f"sqlite:///{ray_root / 'mlruns' / 'mlflow.db'}"
    out = run_study(load_spec(path), tracking_uri=uri, progress=lambda m: None)
    client = MlflowClient(uri)
    runs = client.search_runs([out["experiment_id"]], max_results=1000)
    return ray_root, uri, out["experiment_id"], client, runs


def _of(runs, kind: str, name: str | None = None):
    return [r for r in runs if r.data.tags.get(C.TAG_KIND) == kind
            and (name is None or r.info.run_name.startswith(name))]


def _test_query(flat: dict) -> tuple[TrialConfig, object]:
    cfg = TrialConfig.from_flat(dict(flat))
    return cfg, load_splits(cfg.data).test[0]


def _harness_scores(seed_model) -> tuple[object, np.ndarray]:
    """The harness's own scorer (score_candidates) on the first test query, best-dev weights."""
    cfg, query = _test_query(seed_model.flat)
    from harness.model.encoder import load_tokenizer

    collator = PairCollator(load_tokenizer(cfg.model), cfg.model.max_length)
    model = _ranker(seed_model)
    (scores,) = score_candidates(model, collator, [query], collator.tokenize_queries([query]), batch_size=7,
                              device=torch.device("cpu"), autocast=False)
    return query, scores


def _frame(query) -> pd.DataFrame:
    return pd.DataFrame({"qid": query.qid, "query": context_text(query.context),
                         "docno": [c.doc_id for c in query.candidates],
                         "text": [c.text for c in query.candidates]})


def test_cross_encoder_from_the_export_scores_as_the_harness(study, tmp_path, capsys):
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, BertForSequenceClassification

    _, uri, _, _, runs = study
    seed = _of(runs, C.KIND_TRIAL, "baseline")[0]
    out = tmp_path / "model"
    assert main(["export", seed.info.run_id, "--to", str(out), "--tracking-uri", uri]) == 0
    seed_model = load_seed_model(seed.info.run_id, uri)
    query, ours = _harness_scores(seed_model)
    assert len(ours) >= 5 and np.ptp(ours) > 3e-4  # a real ranking to compare

    hf, info = AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True,
                                                                  trust_remote_code=True)
    assert not any(info.values()), info  # every weight mapped 1:1, none initialised afresh
    assert isinstance(hf, BertForSequenceClassification) and hf.config.num_labels == 1
    with pytest.raises(ValueError, match="trust_remote_code"):  # refused, not scored otherwise
        AutoModelForSequenceClassification.from_pretrained(out)

    pairs = [(context_text(query.context), c.text) for c in query.candidates]
    assert f'CrossEncoder("{out}", trust_remote_code=True)' in capsys.readouterr().out  # what to call
    theirs = CrossEncoder(str(out), device="cpu", trust_remote_code=True).predict(pairs, batch_size=4)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-4)
    assert list(np.argsort(-theirs, kind="stable")) == list(np.argsort(-ours, kind="stable"))

    card = (out / "README.md").read_text()
    assert "exported" in card and "baseline" in card and f"seed **{seed_model.seed}**" in card
    assert f"{seed.data.metrics['test_map']:.4f}" in card
    assert json.loads((out / "harness_export.json").read_text())["run_id"] == seed.info.run_id


def test_configuration_run_exports_its_best_dev_seed(study, tmp_path):
    _, uri, _, _, runs = study
    config = _of(runs, C.KIND_CONFIG, "ls")[0]
    seeds = [r for r in _of(runs, C.KIND_TRIAL) if r.data.tags["mlflow.parentRunId"] == config.info.run_id]
    best = max(seeds, key=lambda r: (r.data.metrics["objective"], -int(r.data.tags[C.TAG_SEED])))
    assert main(["export", config.info.run_id, "--to", str(tmp_path / "m"), "--tracking-uri", uri]) == 0
    info = json.loads((tmp_path / "m" / "harness_export.json").read_text())
    assert info["run_id"] == best.info.run_id and info["configuration"] == "ls"


def test_cascade_export_keeps_every_exit(study, tmp_path):
    _, uri, _, _, runs = study
    seed = _of(runs, C.KIND_TRIAL, "cascade")[0]
    assert main(["export", seed.info.run_id, "--to", str(tmp_path / "c"), "--tracking-uri", uri]) == 0
    query, ours = _harness_scores(load_seed_model(seed.info.run_id, uri))
    model = load_cascade(tmp_path / "c")
    assert model.exits == (2, 3, 4) and "exits after layers [2, 3, 4]" in (tmp_path / "c" / "README.md").read_text()
    cfg, _ = _test_query(load_seed_model(seed.info.run_id, uri).flat)
    from harness.model.encoder import load_tokenizer

    collator = PairCollator(load_tokenizer(cfg.model), cfg.model.max_length)
    (theirs,) = score_candidates(model, collator, [query], collator.tokenize_queries([query]), batch_size=32,
                              device=torch.device("cpu"), autocast=False)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)


def test_study_models_are_mlflow_pyfunc_models_that_score_as_the_harness(study):
    import mlflow

    _, uri, exp_id, client, runs = study
    mlflow.set_tracking_uri(uri)
    logged = log_study_models(uri, exp_id, "best")
    objective = {}
    for r in _of(runs, C.KIND_TRIAL):
        objective.setdefault(r.data.tags[C.TAG_CONFIG_ID], []).append(r.data.metrics["objective"])
    best = max(sorted(objective), key=lambda c: sum(objective[c]) / len(objective[c]))  # ties: lowest id
    assert sorted(logged) == sorted(r.info.run_id for r in _of(runs, C.KIND_TRIAL)
                                    if r.data.tags[C.TAG_CONFIG_ID] == best)
    models = mlflow.search_logged_models(experiment_ids=[exp_id], output_format="list")
    assert {f"models:/{m.model_id}" for m in models} == set(logged.values())  # the UI's Models view
    assert log_study_models(uri, exp_id, "best") == logged  # again: no duplicates
    assert len(mlflow.search_logged_models(experiment_ids=[exp_id], output_format="list")) == len(logged)

    run_id, model_uri = min(logged.items())
    assert client.get_run(run_id).data.tags[TAG_MODEL_URI] == model_uri
    query, ours = _harness_scores(load_seed_model(run_id, uri, logged=False))  # the Tune checkpoint
    pyfunc = mlflow.pyfunc.load_model(model_uri)
    out = pyfunc.predict(_frame(query))
    assert list(out.columns) == ["qid", "docno", "score", "rank"]
    assert list(out["docno"]) == [c.doc_id for c in query.candidates]
    np.testing.assert_allclose(out["score"].to_numpy(), ours, rtol=0, atol=1e-4)
    assert list(out.sort_values("rank")["docno"]) == [query.candidates[i].doc_id
                                                       for i in np.argsort(-ours, kind="stable")]


def test_only_the_studys_own_configurations_compete_for_its_models(study):
    # An experiment can hold configurations the study no longer has (an earlier version of the study
    # file or of a config default, recorded in a reused store): the study passes its own ids.
    _, _, exp_id, client, runs = study
    objective: dict[str, list[float]] = {}
    for r in _of(runs, C.KIND_TRIAL):
        objective.setdefault(r.data.tags[C.TAG_CONFIG_ID], []).append(r.data.metrics["objective"])
    ranking = sorted(sorted(objective), key=lambda c: -sum(objective[c]) / len(objective[c]))
    best, runner_up = ranking[0], ranking[1]

    def configs(run_ids):
        return {client.get_run(r).data.tags[C.TAG_CONFIG_ID] for r in run_ids}

    assert configs(models_to_log(client, exp_id, "best")) == {best}
    # the study, at its end, logged the models of its best configuration (its phases' config ids)
    assert {r.data.tags[C.TAG_CONFIG_ID] for r in _of(runs, C.KIND_TRIAL) if TAG_MODEL_URI in r.data.tags} == {best}
    assert configs(models_to_log(client, exp_id, "best", config_ids=set(ranking[1:]))) == {runner_up}
    assert len(models_to_log(client, exp_id, "all", config_ids={runner_up})) == len(objective[runner_up])
    assert models_to_log(client, exp_id, "best", config_ids={"not-in-this-experiment"}) == []


def test_bad_exports_fail_in_one_line(study, tmp_path, capsys):
    _, uri, _, _, runs = study
    study_run = _of(runs, C.KIND_STUDY)[0]
    seed = _of(runs, C.KIND_TRIAL)[0]
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    cases = [([study_run.info.run_id, "--to", str(tmp_path / "a")], "not a seed run"),
             ([seed.info.run_id, "--to", str(full)], "exists and is not an empty directory"),
             (["0" * 32, "--to", str(tmp_path / "b")], "no such MLflow run")]
    for argv, message in cases:
        capsys.readouterr()
        assert main(["export", *argv, "--tracking-uri", uri]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "a").exists() and (full / "x").read_text() == "x"


def test_export_cli_help_lists_the_command() -> None:
    from harness.cli import build_parser

    assert "export" in build_parser().format_help()


def test_pyterrier_reranker_over_an_export_scores_as_the_harness(study, tmp_path):
    pt = pytest.importorskip("pyterrier")
    from harness.model.pyterrier_ranker import HarnessReRanker

    _, uri, _, _, runs = study
    seed = _of(runs, C.KIND_TRIAL, "ls")[0]
    assert main(["export", seed.info.run_id, "--to", str(tmp_path / "m"), "--tracking-uri", uri]) == 0
    query, ours = _harness_scores(load_seed_model(seed.info.run_id, uri))
    out = HarnessReRanker(tmp_path / "m")(_frame(query))
    assert isinstance(HarnessReRanker(tmp_path / "m"), pt.Transformer)
    np.testing.assert_allclose(out["score"].to_numpy(), ours, rtol=0, atol=1e-4)
    assert list(out.sort_values("rank")["docno"]) == [query.candidates[i].doc_id
                                                       for i in np.argsort(-ours, kind="stable")]
    assert not pt.java.started()  # no JVM was needed


def test_a_real_study_logs_run_files_and_qrels_that_give_mlflow_test_metrics(study, tmp_path, capsys):
    """Every seed run of a finished study holds runs/dev.trec and runs/test.trec, the study run the
    qrels; `harness runs export` collects them, and ir_measures on the files gives exactly the test
    MAP, RR@10, nDCG@10 and P@1 MLflow holds for each seed run."""
    import csv

    import ir_measures

    from harness.metrics.measures import MEASURES

    _, uri, _, _, runs = study
    trials = [r for r in _of(runs, C.KIND_TRIAL) if r.info.status == "FINISHED"]
    assert main(["runs", "export", "--experiment", "exported", "--tracking-uri", uri,
                 "--to", str(tmp_path / "out")]) == 0
    manifest = list(csv.DictReader((tmp_path / "out" / "manifest.csv").open()))
    assert {(r["run_id"], r["split"]) for r in manifest} == {(t.info.run_id, s) for t in trials
                                                            for s in ("dev", "test")}
    qrels = list(ir_measures.read_trec_qrels(str(tmp_path / "out" / "qrels" / "test.qrels")))
    keys = ("map", "mrr_10", "ndcg_10", "p_1")  # AP, RR@10, nDCG@10, P@1
    measures = [MEASURES[k] for k in keys]
    by_id = {t.info.run_id: t for t in trials}
    for row in (r for r in manifest if r["split"] == "test"):
        run = list(ir_measures.read_trec_run(str(tmp_path / "out" / row["file"])))
        got = ir_measures.calc_aggregate(measures, qrels, run)
        logged = by_id[row["run_id"]].data.metrics
        for key, measure in zip(keys, measures, strict=True):
            assert got[measure] == logged[f"{C.TEST_PREFIX}{key}"], (row["config"], row["seed"], key)
    # the study logged its best configuration's models (study key models: best, the default)
    logged_models = [t for t in trials if TAG_MODEL_URI in t.data.tags]
    assert logged_models and len({t.data.tags[C.TAG_CONFIG_ID] for t in logged_models}) == 1
