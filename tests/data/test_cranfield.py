"""data.source=cranfield: the shipped Cranfield files, read by the trec source, against an
independent reading of the same files (ir_datasets' own Cranfield parser over the gzip files, and
rank_bm25 for the candidates), with the statistics docs/data.md quotes; the study files that use it
validate."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from ir_datasets.datasets.cranfield import CranfieldDocs, CranfieldQrels, CranfieldQueries
from ir_datasets.util import GzipExtract, LocalDownload
from rank_bm25 import BM25Okapi

from harness.cli import main
from harness.config import DataConfig, TrialConfig
from harness.data.load import load_splits
from harness.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "harness" / "data" / "cranfield"
DOCS = ROOT / "docs" / "data.md"


def _gz(name: str) -> GzipExtract:
    return GzipExtract(LocalDownload(SHIPPED / name))


@pytest.fixture(scope="module")
def irds() -> tuple[dict[str, str], dict[str, str], dict[tuple[str, str], int]]:
    """Docs, queries and qrels as ir_datasets parses the shipped files, texts whitespace-joined."""
    docs = {d.doc_id: " ".join(d.default_text().split())
            for d in CranfieldDocs(_gz("cran.all.1400.gz")).docs_iter()}
    queries = {q.query_id: " ".join(q.text.split())
               for q in CranfieldQueries(_gz("cran.qry.gz")).queries_iter()}
    qrels = {(r.query_id, r.doc_id): r.relevance for r in CranfieldQrels(_gz("cranqrel.gz")).qrels_iter()}
    return docs, queries, qrels


@pytest.fixture(scope="module")
def splits():  # type: ignore[no-untyped-def]
    return load_splits(DataConfig(source="cranfield", depth=30))


def test_shipped_files_are_small_and_counts_are_the_documented_ones(irds) -> None:  # type: ignore[no-untyped-def]
    assert sum(p.stat().st_size for p in SHIPPED.iterdir()) < 1_000_000
    docs, queries, qrels = irds
    # Counted by hand from the raw text too, so neither parser is trusted alone.
    raw = {n: gzip.decompress((SHIPPED / n).read_bytes()).decode("ascii")
           for n in ("cran.all.1400.gz", "cran.qry.gz", "cranqrel.gz")}
    assert len(re.findall(r"^\.I ", raw["cran.all.1400.gz"], re.MULTILINE)) == len(docs) == 1400
    assert len(re.findall(r"^\.I ", raw["cran.qry.gz"], re.MULTILINE)) == len(queries) == 225
    assert len(raw["cranqrel.gz"].splitlines()) == len(qrels) == 1837
    relevant = sum(rel > 0 for rel in qrels.values())
    assert (relevant, sum(rel == -1 for rel in qrels.values())) == (1612, 225)
    text = DOCS.read_text()
    for figure in ("1,400", "225", "1,837", "1,612", "181", "22"):
        assert figure in text.split("## Cranfield")[1].split("\n## ")[0], figure


def test_queries_documents_and_labels_equal_ir_datasets(splits, irds) -> None:  # type: ignore[no-untyped-def]
    docs, queries, qrels = irds
    seen: set[str] = set()
    for name, want in (("train", 181), ("dev", 22), ("test", 22)):
        split = splits.split(name)
        assert len(split) == want, name
        for q in split:
            assert q.qid not in seen
            seen.add(q.qid)
            assert q.context == (queries[q.qid],) and q.group == q.qid
            assert len(q.candidates) == 30
            for c in q.candidates:
                assert c.text == docs[c.doc_id]
                assert c.label == int(qrels.get((q.qid, c.doc_id), 0) > 0)
    assert seen == set(queries)


def test_candidates_are_rank_bm25s_top_documents(splits, irds) -> None:  # type: ignore[no-untyped-def]
    docs, _, _ = irds
    ids = list(docs)
    bm25 = BM25Okapi([re.findall(r"\w+", docs[d].lower()) for d in ids])
    for q in splits.test + splits.dev[:5]:
        scores = bm25.get_scores(re.findall(r"\w+", q.context[0].lower()))
        ranked = sorted(range(len(ids)), key=lambda i: -scores[i])[:30]
        assert [c.doc_id for c in q.candidates] == [ids[i] for i in ranked], q.qid
        assert [c.score for c in q.candidates] == [scores[i] for i in ranked], q.qid


@pytest.mark.slow
def test_split_rule_depth_and_fingerprint(splits) -> None:  # type: ignore[no-untyped-def]
    again = load_splits(DataConfig(source="cranfield", depth=30))
    assert again.fingerprint == splits.fingerprint
    other = load_splits(DataConfig(source="cranfield", depth=30, split_seed=14))
    assert other.fingerprint != splits.fingerprint
    assert {q.qid for q in other.test} != {q.qid for q in splits.test}
    assert {q.qid for s in ("train", "dev", "test") for q in other.split(s)} == \
        {q.qid for s in ("train", "dev", "test") for q in splits.split(s)}
    capped = load_splits(DataConfig(source="cranfield", depth=10, max_train_queries=5))
    assert len(capped.train) == 5 and {len(q.candidates) for q in capped.dev} == {10}


def test_its_candidates_come_with_it() -> None:
    with pytest.raises(ConfigError, match="train.sampler must be dataset for data.source=cranfield"):
        TrialConfig.from_flat({"data.source": "cranfield", "train.sampler": "bm25"})


@pytest.mark.slow
def test_the_collections_demo_validates_with_both_plans(capsys: pytest.CaptureFixture[str]) -> None:
    # Every shipped study validates in tests/study/test_spec.py; this one's plan must show Cranfield's
    # split as docs/data.md gives it (the dev split capped at 12 by the study).
    assert main(["validate", str(ROOT / "search_spaces" / "quickstart_collections.yaml"), "--no-model"]) == 0
    out = capsys.readouterr().out
    assert "cranfield: data.source cranfield; 181 train / 12 dev / 22 test queries, 30.0 candidates" in out
    assert "chitchat: data.source chitchat;" in out


@pytest.mark.slow
def test_a_pool_too_shallow_for_the_negatives_is_refused_before_any_trial(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Cranfield's top 20 leaves query 132 (11 relevant documents) 9 negatives, fewer than one per
    positive: `harness validate` and the study's driver (before any trial loads a model) say so,
    naming the collection, with the very rule and words training applies."""
    import numpy as np

    from harness.study.spec import load_spec
    from harness.study.variants import prepare_study
    from harness.training import check_negatives
    from harness.training._instances import build_instances

    text = (ROOT / "search_spaces" / "quickstart_collections.yaml").read_text()
    assert "depth: 30" in text
    study = tmp_path / "shallow.yaml"
    study.write_text(text.replace("depth: 30", "depth: 20"))
    assert main(["validate", str(study), "--smoke", "--no-model"]) == 2
    err = capsys.readouterr().err
    want = "train.negatives_per_positive=1 needs 11 negatives but query 132 has a pool of 9"
    # one error line, last; before it at most the progress of building chitchat's data (validate
    # says what it builds when a load takes over a second)
    *before, last = err.splitlines()
    assert f"collection 'cranfield': {want}" in last and last.startswith("harness: error: "), err
    assert all(line.startswith("harness validate: chitchat: ") for line in before), err
    with pytest.raises(ConfigError, match=f"^collection 'cranfield': {want}$"):
        spec = load_spec(study)
        prepare_study(spec.with_overrides(spec.smoke), progress=lambda m: None)
    train = load_splits(DataConfig(source="cranfield", depth=20)).train
    with pytest.raises(ConfigError) as checked:
        check_negatives(train, 1)
    with pytest.raises(ConfigError) as trained:
        build_instances(train, negatives_per_positive=1, pairwise=False, rng=np.random.default_rng(0))
    assert str(checked.value) == str(trained.value) == want
    check_negatives(load_splits(DataConfig(source="cranfield", depth=30)).train, 1)  # the shipped depth fits
