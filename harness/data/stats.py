"""Data set statistics per split, as in Table 4 of Penha & Hauff (ECIR 2020).

Per split, over its queries (contexts U) and their candidates r:

- contexts: the number of U;
- pairs: the number of (U, r) pairs, i.e. of candidates over all contexts;
- candidates per U: pairs / contexts;
- average number of turns: mean number of utterances in a context;
- average words per u: mean words of a context utterance, over every utterance of every context
  (an utterance in several contexts counts each time, as it is seen in training);
- average words per r: mean words of a candidate, positives and negatives.

Words are whitespace-separated tokens (``str.split``).

>>> from harness.data.records import Candidate, Query
>>> q = Query(qid="q", context=("a b", "c"), candidates=(Candidate("d", "x y z", 1),))
>>> split_stats([q]).avg_words_per_utterance
1.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.data.records import Query, Splits
from harness.data.splits import SPLIT_NAMES


@dataclass(frozen=True, kw_only=True)
class SplitStats:
    contexts: int
    pairs: int
    candidates_per_context: float
    avg_turns: float
    avg_words_per_utterance: float
    avg_words_per_response: float


@dataclass(frozen=True, kw_only=True)
class DataStats:
    train: SplitStats
    dev: SplitStats
    test: SplitStats

    def split(self, name: str) -> SplitStats:
        if name not in SPLIT_NAMES:
            raise ValueError(f"unknown split {name!r}; valid: {', '.join(SPLIT_NAMES)}")
        return getattr(self, name)  # type: ignore[no-any-return]


def _mean(total: int, count: int) -> float:
    return total / count if count else 0.0


def split_stats(queries: Sequence[Query]) -> SplitStats:
    """The statistics of one split (see the module docstring); zeros for an empty split."""
    turns = sum(len(q.context) for q in queries)
    pairs = sum(len(q.candidates) for q in queries)
    u_words = sum(len(u.split()) for q in queries for u in q.context)
    r_words = sum(len(c.text.split()) for q in queries for c in q.candidates)
    return SplitStats(contexts=len(queries), pairs=pairs,
                      candidates_per_context=_mean(pairs, len(queries)),
                      avg_turns=_mean(turns, len(queries)),
                      avg_words_per_utterance=_mean(u_words, turns),
                      avg_words_per_response=_mean(r_words, pairs))


def data_stats(splits: Splits) -> DataStats:
    return DataStats(**{name: split_stats(splits.split(name)) for name in SPLIT_NAMES})


_ROWS = (
    ("Number of (U, r) pairs", "pairs", "{:,}"),
    ("Number of contexts U", "contexts", "{:,}"),
    ("Number of candidates per U", "candidates_per_context", "{:.1f}"),
    ("Average number of turns", "avg_turns", "{:.1f}"),
    ("Average number of words per u", "avg_words_per_utterance", "{:.1f}"),
    ("Average number of words per r", "avg_words_per_response", "{:.1f}"),
)


def format_stats(stats: DataStats, *, title: str = "") -> str:
    """An aligned plain-text table: one row per statistic, one column per split (Train, Valid, Test
    as in the paper)."""
    header = ["", "Train", "Valid", "Test"]
    rows = [header] + [[label] + [fmt.format(getattr(stats.split(s), attr)) for s in SPLIT_NAMES]
                       for label, attr, fmt in _ROWS]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [title] if title else []
    for r in rows:
        lines.append("  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])])
                     .rstrip())
    return "\n".join(lines)
