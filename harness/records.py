"""Query/candidate records shared by every data source (embedded set, MSDialog TSV, TREC files).

A ``Query`` is one ranking problem: a context (the utterances of a conversation so far, oldest
first; a single element for an ad-hoc query) and its candidates, each with a binary relevance
label and its first-stage score: the same ranker scores every candidate of a query, the positive
included (the embedded set: BM25 of the context; TREC files: the run's score). ``None`` where the
source has none (MSDialog/MANtIS TSV). ``group`` names the source conversation or topic so splits
and negative sampling can be checked for leakage.

Two fingerprints identify a ``Splits``: ``fingerprint`` names the exact whole data (train
included; set by whoever builds it), ``evaluation`` names the evaluation set only, computed from
the dev and test queries themselves (``evaluation_fingerprint``). Training-only knobs (the
training-negative sampler, a train cap) leave ``evaluation`` unchanged, so results are paired
exactly when they were evaluated on the same queries and candidates.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Candidate:
    doc_id: str
    text: str
    label: int
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Query:
    qid: str
    context: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    group: str = ""

    @property
    def positives(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.label > 0)

    @property
    def negatives(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.label <= 0)


def evaluation_fingerprint(dev: Sequence[Query], test: Sequence[Query]) -> str:
    """sha256 (hex) over the dev and test queries' content that evaluation reads: per split, per
    query in order, its qid and its candidates' doc_ids (in order) and labels. Texts and scores are
    left out: they follow from the doc_ids of one source.

    >>> q = Query(qid="q", context=("hi",), candidates=(Candidate("d", "yo", 1),))
    >>> evaluation_fingerprint([q], []) == evaluation_fingerprint([], [q])
    False
    """
    content = {name: [[q.qid, [c.doc_id for c in q.candidates], [int(c.label) for c in q.candidates]]
                      for q in queries] for name, queries in (("dev", dev), ("test", test))}
    blob = json.dumps(content, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Splits:
    """Train/dev/test queries, the fingerprint that identifies this exact data, and the
    evaluation-set fingerprint (see the module docstring), computed on construction so that no
    constructor (a build, a reader, the cache, a cap, ``dataclasses.replace``) can leave it stale."""

    train: tuple[Query, ...]
    dev: tuple[Query, ...]
    test: tuple[Query, ...]
    fingerprint: str
    evaluation: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evaluation", evaluation_fingerprint(self.dev, self.test))

    def split(self, name: str) -> tuple[Query, ...]:
        if name not in ("train", "dev", "test"):
            raise ValueError(f"unknown split {name!r}; valid: train, dev, test")
        return getattr(self, name)  # type: ignore[no-any-return]


def qrels_of(queries: Sequence[Query]) -> dict[str, dict[str, int]]:
    """Relevance judgements {qid: {doc_id: label}} of the given queries."""
    return {q.qid: {c.doc_id: int(c.label) for c in q.candidates} for q in queries}
