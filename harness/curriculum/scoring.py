"""Scoring functions: one difficulty value per training context, used to sort the training set.

Penha & Hauff, "Curriculum Learning Strategies for IR" (ECIR 2020), Section 3 and Table 2. Each
function maps the training queries (dialogue context U, candidates R, labels Y) to one value per
query; ``sorts_descending(name)`` says which end is easy. Only ``bert_pred`` sorts descending (as in
the authors' code); every other function puts low values (easy) first.

name        value per context (Table 2)                            needs
random      Uniform(0, 1) from ctx.rng: no curriculum order        ctx.rng
turns       #turns = |U|, the number of context utterances         -
uwords      #Uwords = sum_u word_count(u) / |U|                    -
rwords      #Rwords = sum_r word_count(r) / |R|                    -
sigma_sm    population SD over r of SM(U, r)                       ctx.embed
sigma_bm25  population SD over r of BM25(U, r)                     Candidate.score
bert_pred   mean P(rel|U, r+) - mean P(rel|U, r-)   (descending)   ctx.teacher
bert_loss   mean over r of the teacher's loss on (U, r)            ctx.teacher

Table 2 as printed garbles #turns/#Uwords (both read |U| / sum words); we use the definitions of
the paper's prose: more turns and longer utterances spread the information (harder). The table
writes the sample SD (|R| - 1); we use the population SD (numpy's default), which orders contexts
identically whenever they have the same number of candidates. Table 2 writes
BERT_pred with a leading minus sign (ascending = easy first); we keep the margin positive and sort
descending, the authors' convention: "the higher the difference the easier the instance".

    >>> from harness.records import Candidate, Query
    >>> q = Query(qid="q1", context=("hi there", "how are you"),
    ...           candidates=(Candidate("d1", "fine thanks", 1), Candidate("d2", "no", 0)))
    >>> ctx = ScoringContext(rng=np.random.default_rng(0))
    >>> SCORING.get("uwords")([q], ctx).tolist(), SCORING.get("rwords")([q], ctx).tolist()
    ([2.5], [1.5])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np

from harness.errors import ConfigError, DataError
from harness.records import Query
from harness.registry import Registry


@dataclass(frozen=True, kw_only=True)
class TeacherScores:
    """A fine-tuned teacher's output on the training set (for bert_pred / bert_loss):
    ``prob[qid][doc_id]`` = P(relevant | U, r) and ``loss[qid][doc_id]`` = its loss on (U, r)."""

    prob: Mapping[str, Mapping[str, float]]
    loss: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True, kw_only=True)
class ScoringContext:
    """Everything a scoring function may use besides the queries.

    ``rng``: the only source of randomness (``random``). ``embed``: text -> one word-embedding row
    per whitespace word (sigma_sm; see harness.curriculum.embeddings). ``teacher``: teacher scores
    (bert_pred, bert_loss). ``sm_words``: k, SM compares the last k words of U (the most recent
    ones, as the authors' code truncates the context) and the first k words of r (the paper: k = 20).
    """

    rng: np.random.Generator
    embed: Callable[[str], np.ndarray] | None = None
    teacher: TeacherScores | None = None
    sm_words: int = 20

    def __post_init__(self) -> None:
        if self.sm_words < 1:
            raise ConfigError(f"sm_words must be >= 1, got {self.sm_words!r}")


class ScoringFn(Protocol):
    def __call__(self, queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray: ...


SCORING: Registry[ScoringFn] = Registry("curriculum.scoring")
_DESCENDING: dict[str, bool] = {}
DESCENDING: Mapping[str, bool] = MappingProxyType(_DESCENDING)
"""Default sort direction per scoring function: True = high values are easy (sorted first)."""


def scoring_function(name: str, *, descending: bool = False) -> Callable[[ScoringFn], ScoringFn]:
    """Register a scoring function under ``name`` together with its easy-first sort direction."""
    register = SCORING.register(name)

    def decorate(fn: ScoringFn) -> ScoringFn:
        register(fn)  # refuses a duplicate before the direction table is touched
        _DESCENDING[name] = descending
        return fn

    return decorate


def sorts_descending(name: str, override: bool | None = None) -> bool:
    """The direction to sort ``name``'s values so easy comes first (``override`` wins if set)."""
    SCORING.get(name)
    return _DESCENDING[name] if override is None else override


def score_queries(queries: Sequence[Query], name: str, ctx: ScoringContext) -> np.ndarray:
    """Run the scoring function ``name``; checks one finite value per query."""
    values = np.asarray(SCORING.get(name)(queries, ctx), dtype=float)
    if values.shape != (len(queries),) or not np.isfinite(values).all():
        raise ValueError(f"curriculum.scoring {name!r} must give one finite value per query")
    return values


def _words(text: str) -> int:
    return len(text.split())


@scoring_function("random")
def random_scores(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """f = Uniform(0, 1) per context, from ctx.rng: sorting by it is a uniform permutation."""
    return ctx.rng.random(len(queries))


@scoring_function("turns")
def turns(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """#turns = |U|: more utterances, more places for the information need to hide."""
    return np.array([len(q.context) for q in queries], dtype=float)


@scoring_function("uwords")
def uwords(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """#Uwords = sum_{u in U} word_count(u) / |U| (0 for an empty context)."""
    return np.array([sum(_words(u) for u in q.context) / len(q.context) if q.context else 0.0
                     for q in queries], dtype=float)


@scoring_function("rwords")
def rwords(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """#Rwords = sum_{r in R} word_count(r) / |R|: long responses distract (0 without candidates)."""
    return np.array([sum(_words(c.text) for c in q.candidates) / len(q.candidates)
                     if q.candidates else 0.0 for q in queries], dtype=float)


def semantic_match(u: np.ndarray, r: np.ndarray) -> float:
    """SM: the average cosine similarity over all pairs of word vectors of U and r (0 when either
    side has no words; a zero vector has similarity 0).

    >>> semantic_match(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, 2.0]]))
    0.5
    """
    if len(u) == 0 or len(r) == 0:
        return 0.0

    def unit(m: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        return np.divide(m, norms, out=np.zeros_like(m, dtype=float), where=norms > 0)

    return float((unit(u) @ unit(r).T).mean())


@scoring_function("sigma_sm")
def sigma_sm(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """sigma_SM = SD over r in R of SM(U, r), SM on the last k words of U (utterances joined; the
    paper's prose says the first k, the authors' code keeps the end of the context, the words
    nearest the response) and the first k words of r. Heterogeneous
    candidate lists are hard. The paper embeds words with fastText (300-d); we
    use the input word-piece embeddings of the packaged encoder (ctx.embed), averaged per word."""
    if ctx.embed is None:
        raise ConfigError("curriculum.scoring 'sigma_sm' needs word embeddings (ScoringContext.embed);"
                          " none given")
    k = ctx.sm_words
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        u = ctx.embed(" ".join(" ".join(q.context).split()[-k:]))
        sims = [semantic_match(u, ctx.embed(" ".join(c.text.split()[:k]))) for c in q.candidates]
        out[i] = float(np.std(sims)) if sims else 0.0
    return out


@scoring_function("sigma_bm25")
def sigma_bm25(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """sigma_BM25 = population SD over r in R of BM25(U, r) (the negative sampler's scores, the
    whole context as query, ``Candidate.score``); homogeneous lists are easy."""
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        missing = [c.doc_id for c in q.candidates if c.score is None]
        if missing:
            raise DataError(f"curriculum.scoring 'sigma_bm25' needs the negative sampler's score of "
                            f"every candidate; query {q.qid!r} has none for {missing[:3]}")
        out[i] = float(np.std([float(c.score) for c in q.candidates])) if q.candidates else 0.0
    return out


def _teacher_values(q: Query, table: Mapping[str, Mapping[str, float]], name: str) -> np.ndarray:
    per_doc = table.get(q.qid)
    if per_doc is None:
        raise DataError(f"curriculum.scoring {name!r}: the teacher has no scores for query {q.qid!r}")
    try:
        return np.array([float(per_doc[c.doc_id]) for c in q.candidates], dtype=float)
    except KeyError as exc:
        raise DataError(f"curriculum.scoring {name!r}: the teacher has no score for candidate "
                        f"{exc.args[0]!r} of query {q.qid!r}") from None


def _teacher(ctx: ScoringContext, name: str) -> TeacherScores:
    if ctx.teacher is None:
        raise ConfigError(f"curriculum.scoring {name!r} needs teacher predictions "
                          "(ScoringContext.teacher); none given")
    return ctx.teacher


@scoring_function("bert_pred", descending=True)
def bert_pred(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """BERT_pred = mean P(rel|U, r+) - mean P(rel|U, r-) over the context's positives and negatives:
    the teacher's confidence margin. Sorted descending: the larger the margin, the easier."""
    teacher = _teacher(ctx, "bert_pred")
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        probs = _teacher_values(q, teacher.prob, "bert_pred")
        rel = np.array([c.label > 0 for c in q.candidates], dtype=bool)
        if not rel.any() or rel.all():
            raise DataError(f"curriculum.scoring 'bert_pred' needs a relevant and a non-relevant "
                            f"candidate; query {q.qid!r} lacks one")
        out[i] = float(probs[rel].mean() - probs[~rel].mean())
    return out


@scoring_function("bert_loss")
def bert_loss(queries: Sequence[Query], ctx: ScoringContext) -> np.ndarray:
    """BERT_loss = sum_{r in R} loss(U, r) / |R|: the teacher's average loss on the context."""
    teacher = _teacher(ctx, "bert_loss")
    out = np.empty(len(queries))
    for i, q in enumerate(queries):
        losses = _teacher_values(q, teacher.loss, "bert_loss")
        out[i] = float(losses.mean()) if losses.size else 0.0
    return out
