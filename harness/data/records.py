"""Query/candidate records shared by every data source (embedded set, MSDialog TSV, TREC files).

A ``Query`` is one ranking problem: a context (the utterances of a conversation so far, oldest
first; a single element for an ad-hoc query) and its candidates, each with a binary relevance
label and the negative sampler's score (``None`` where the source has none, e.g. the positive of a
conversation set, or a random negative). ``group`` names the source conversation or topic so
splits and negative sampling can be checked for leakage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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


@dataclass(frozen=True, slots=True)
class Splits:
    """Train/dev/test queries plus the content fingerprint that identifies this exact data."""

    train: tuple[Query, ...]
    dev: tuple[Query, ...]
    test: tuple[Query, ...]
    fingerprint: str

    def split(self, name: str) -> tuple[Query, ...]:
        if name not in ("train", "dev", "test"):
            raise ValueError(f"unknown split {name!r}; valid: train, dev, test")
        return getattr(self, name)  # type: ignore[no-any-return]


def qrels_of(queries: Sequence[Query]) -> dict[str, dict[str, int]]:
    """Relevance judgements {qid: {doc_id: label}} of the given queries."""
    return {q.qid: {c.doc_id: int(c.label) for c in q.candidates} for q in queries}
