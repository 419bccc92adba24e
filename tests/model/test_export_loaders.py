"""Every loader an exported ranker names reproduces the run it came from, truncated pairs included:
a tiny ranker trained here (no Ray) at a max_length that truncates almost every pair, exported with
``write_model``, then scored through sentence-transformers' CrossEncoder, transformers'
AutoModelForSequenceClassification with the folder's tokenizer, the MLflow pyfunc and the PyTerrier
re-ranker: each gives the trainer's test scores (within 1e-6) and its test MAP exactly. The
tokenizer's pair truncation is checked id for id against the harness's collator."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from harness.config import TrialConfig
from harness.model.collate import PairCollator, context_text
from harness.model.encoder import load_tokenizer
from harness.model.export import SeedModel, usage, write_model
from harness.model.scoring import metrics_of
from harness.training.loop import FinalRecord, Trainer
from harness.training.tokenized import prepare_data
from tests.conftest import toy_splits

# slow: its fixture trains a toy ranker, and each loader loads it (seconds each)
pytestmark = pytest.mark.slow

# max_length 16: budget 13 (odd, where "longest_first" would give its spare token to the longer
# text); the toy contexts are about 12 tokens and the responses 6, so nearly every pair is cut.
FLAT = {"model.name": "tiny", "model.max_length": 16, "train.steps": 20, "train.batch_size": 16,
        "train.eval_every": 10, "train.lr": 1e-3, "train.warmup": 0.0, "train.device": "cpu",
        "train.eval_batch_size": 64, "train.seed": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The trainer's test record and the folder ``write_model`` makes of its best-dev weights."""
    splits = toy_splits(n_train=48, n_dev=12, n_test=16)
    cfg = TrialConfig.from_flat(dict(FLAT))
    trainer = Trainer(cfg, prepare_data(splits, cfg.model))
    *_, final = trainer.run()
    assert isinstance(final, FinalRecord) and trainer.best_state is not None
    seed_model = SeedModel(run_id="0" * 32, study="loaders", config_name="baseline", config_id="c0",
                           role="baseline", seed=3, flat=dict(FLAT), state=trainer.best_state,
                           best_step=final.best_step, test=dict(final.metrics), objective=None,
                           tracking_uri="sqlite:///unused.db")
    folder = write_model(seed_model, tmp_path_factory.mktemp("export") / "model")
    queries = splits.test
    pairs = [(context_text(q.context), c.text) for q in queries for c in q.candidates]
    run = np.array([final.runs["test"][q.qid][c.doc_id] for q in queries for c in q.candidates])
    collator = PairCollator(load_tokenizer(cfg.model), cfg.model.max_length)
    tokens = collator.tokenize_queries(queries)
    cut = sum(len(collator.pair_ids(a, b)[0]) < 3 + len(a) + len(b)
              for a, cands in zip(tokens.contexts, tokens.candidates, strict=True) for b in cands)
    assert cut >= 0.9 * len(pairs)  # the comparison is about truncated pairs
    # a trained ranking whose scores spread over a hundred times the tolerance of _same_run
    assert final.metrics["map"] > 0.5 and np.ptp(run) > 1e-4
    return folder, queries, pairs, run, final.metrics["map"]


def _per_query(queries, flat_scores: np.ndarray) -> list[np.ndarray]:
    sizes = np.cumsum([len(q.candidates) for q in queries])[:-1]
    return np.split(np.asarray(flat_scores, dtype=np.float64), sizes)


def _same_run(queries, scores: np.ndarray, run: np.ndarray, run_map: float) -> None:
    np.testing.assert_allclose(scores, run, rtol=0, atol=1e-6)  # float32 logits, other padding
    assert metrics_of(queries, _per_query(queries, scores)).means["map"] == run_map


def test_cross_encoder_reproduces_the_run(trained) -> None:
    from sentence_transformers import CrossEncoder

    folder, queries, pairs, run, run_map = trained
    scores = CrossEncoder(str(folder), device="cpu", trust_remote_code=True).predict(pairs, batch_size=7)
    _same_run(queries, scores, run, run_map)
    # the call `harness export` prints (export.usage), as printed
    _same_run(queries, eval(_printed(folder, "sentence-transformers"), {"CrossEncoder": CrossEncoder,
                                                                       "pairs": pairs}), run, run_map)


@pytest.mark.parametrize("trust", [None, False])
def test_plain_loaders_refuse_the_folder_without_its_code(trained, trust) -> None:
    """Without trust_remote_code (not given, or False) no loader scores the folder with
    transformers' own truncation (the plain BertTokenizer keeps the OLDEST context): each refuses it
    and names trust_remote_code or the folder's model type. AutoTokenizer too: told False, it finds
    the auto_map's class and no class of its own named by tokenizer_class (HarnessBertTokenizer),
    and raises transformers' "contains custom code" error rather than a generic tokenizer."""
    from sentence_transformers import CrossEncoder
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    folder, _, pairs, *_ = trained
    kwargs = {} if trust is None else {"trust_remote_code": trust}
    loaders = [lambda: AutoConfig.from_pretrained(folder, **kwargs),
               lambda: AutoModelForSequenceClassification.from_pretrained(folder, **kwargs),
               lambda: CrossEncoder(str(folder), device="cpu", **kwargs)]
    loaders.append(lambda: AutoTokenizer.from_pretrained(folder, **kwargs))
    for load in loaders:
        with pytest.raises(ValueError, match="trust_remote_code|harness_bert"):
            load()
    # what those loaders would have scored with: another truncation for nearly every pair
    plain = load_tokenizer(TrialConfig.from_flat(dict(FLAT)).model)
    ours = PairCollator(plain, FLAT["model.max_length"])
    ids = [ours.pair_ids(*ours.tokenize([a, b]))[0].tolist() for a, b in pairs]
    theirs = plain([a for a, _ in pairs], [b for _, b in pairs], truncation=True,
                   max_length=FLAT["model.max_length"])["input_ids"]
    assert sum(x != y for x, y in zip(ids, theirs, strict=True)) >= 0.9 * len(pairs)


def test_the_tokenizer_config_has_one_length_and_loads_without_a_length_warning(trained, caplog) -> None:
    """model_max_length is the trial's pair length, no stale max_length beside it, and scoring
    long pairs logs no "Token indices sequence length" warning (the harness cuts them itself)."""
    import json
    import logging

    from transformers import AutoTokenizer

    folder, _, pairs, *_ = trained
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["model_max_length"] == FLAT["model.max_length"]
    assert not {"max_length", "truncation", "stride"} & set(config)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    long = [(" ".join([a] * 8), b) for a, b in pairs[:4]]
    with caplog.at_level(logging.WARNING, logger="transformers"):
        enc = tokenizer([a for a, _ in long], [b for _, b in long], truncation=True)
    assert all(len(ids) <= FLAT["model.max_length"] for ids in enc["input_ids"])
    assert "Token indices sequence length" not in caplog.text


def _printed(folder, loader: str) -> str:
    """The expression ``usage`` prints for ``loader``."""
    (line,) = [x for x in usage(folder) if x.startswith(f"{loader}: ")]
    return line.split(": ", 1)[1]


def test_transformers_with_the_folders_tokenizer_reproduces_the_run(trained) -> None:
    import transformers

    folder, queries, pairs, run, run_map = trained
    model_call, tokenizer_call = _printed(folder, "transformers").split(" + ")
    model = eval(model_call, vars(transformers)).eval()
    tokenizer = eval(tokenizer_call, vars(transformers))
    scores = []
    for i in range(0, len(pairs), 16):
        chunk = pairs[i:i + 16]
        batch = tokenizer([a for a, _ in chunk], [b for _, b in chunk], truncation=True, padding=True,
                          return_tensors="pt")
        with torch.no_grad():
            scores.append(model(**batch).logits[:, 0].numpy())
    _same_run(queries, np.concatenate(scores), run, run_map)


def _frame(queries) -> pd.DataFrame:
    return pd.DataFrame([{"qid": q.qid, "query": context_text(q.context), "docno": c.doc_id, "text": c.text}
                         for q in queries for c in q.candidates])


@pytest.mark.filterwarnings("ignore:.*input example")  # the signature is explicit
def test_mlflow_pyfunc_reproduces_the_run(trained, tmp_path) -> None:
    import mlflow

    from harness.model.mlflow_model import _pyfunc_file, _signature

    folder, queries, _, run, run_map = trained
    mlflow.pyfunc.save_model(str(tmp_path / "pyfunc"), python_model=_pyfunc_file(),
                             artifacts={"ranker": str(folder)}, signature=_signature(), pip_requirements=[])
    out = mlflow.pyfunc.load_model(str(tmp_path / "pyfunc")).predict(_frame(queries))
    _same_run(queries, out["score"].to_numpy(), run, run_map)


def test_pyterrier_reranker_reproduces_the_run(trained) -> None:
    pytest.importorskip("pyterrier", reason="python-terrier is not installed")
    import harness.model.pyterrier_ranker
    from harness.model.pyterrier_ranker import HarnessReRanker

    folder, queries, _, run, run_map = trained
    out = HarnessReRanker(folder)(_frame(queries))
    _same_run(queries, out["score"].to_numpy(), run, run_map)
    out = eval(_printed(folder, "PyTerrier"), {"harness": harness})(_frame(queries))
    _same_run(queries, out["score"].to_numpy(), run, run_map)


def test_the_folders_tokenizer_truncates_pairs_as_the_collator_at_every_length(trained) -> None:
    from transformers import AutoTokenizer

    folder, *_ = trained
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    rng = np.random.default_rng(0)
    words = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "was", "for", "on", "are", "with", "they", "at", "be", "this", "have", "from"]
    texts = [" ".join(rng.choice(words, size=n)) for n in range(30)]
    for max_length in range(6, 34):
        collator = PairCollator(tokenizer, max_length)
        ids = collator.tokenize(texts)
        enc = tokenizer(texts[::-1], texts, truncation=True, max_length=max_length)
        for a, b, got, types in zip(ids[::-1], ids, enc["input_ids"], enc["token_type_ids"], strict=True):
            want, first = collator.pair_ids(a, b)
            assert got == want.tolist(), (max_length, len(a), len(b))
            assert types == [0] * first + [1] * (len(want) - first)


def test_no_truncation_strategy_of_transformers_reproduces_the_harness(trained) -> None:
    """Why the folder carries its own tokenizer: each strategy and side of the plain BertTokenizer
    builds some pair other than the collator's (too long, or cut elsewhere)."""
    from transformers import AutoTokenizer

    folder, *_ = trained
    plain = AutoTokenizer.from_pretrained(folder, tokenizer_type="bert")
    assert type(plain).__name__ == "BertTokenizer"
    texts = [" ".join(["word"] * n) for n in range(1, 20)]
    pairs = [(a, b) for a in texts for b in texts]
    collator = PairCollator(plain, 16)
    want = [collator.pair_ids(*collator.tokenize([a, b]))[0].tolist() for a, b in pairs]
    for side in ("right", "left"):
        plain.truncation_side = side
        for strategy in ("longest_first", "only_first", "only_second"):
            got = [_ids(plain, a, b, strategy) for a, b in pairs]
            assert got != want, (side, strategy)


def _ids(tokenizer, a: str, b: str, strategy: str) -> list[int] | None:
    try:
        return tokenizer(a, b, truncation=strategy, max_length=16)["input_ids"]
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception: the one text cannot give up enough tokens
        assert "Truncation error" in str(exc)
        return None


def test_a_folder_exported_without_the_tokenizer_is_refused_not_scored_otherwise(trained, tmp_path) -> None:
    import json
    import shutil

    from harness.model.pyfunc_ranker import ExportedRanker

    folder, *_ = trained
    old = shutil.copytree(folder, tmp_path / "old")
    (old / "tokenization_harness.py").unlink()
    config = json.loads((old / "tokenizer_config.json").read_text())
    del config["auto_map"]
    (old / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="exported without the harness's tokenizer"):
        ExportedRanker(old)
