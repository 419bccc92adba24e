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

First stage (``harness.data.first_stage``, the numbers the study's reference line reports): the
MAP of the BM25 ranking of the candidates (pessimistic ties), the expected MAP of a uniformly
random order of the same candidates, and where the positive r+ ranks under BM25 (mean rank, the
share ranked first and last, and the whole distribution in a second table). A split whose
candidates carry no first-stage score (MSDialog/MANtIS TSV) shows n/a there.

>>> from harness.records import Candidate, Query
>>> q = Query(qid="q", context=("a b", "c"), candidates=(Candidate("d", "x y z", 1),))
>>> split_stats([q]).avg_words_per_utterance
1.5
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.data._splits import SPLIT_NAMES
from harness.data.first_stage import FirstStage, first_stage
from harness.records import Query, Splits


@dataclass(frozen=True, kw_only=True)
class SplitStats:
    contexts: int
    pairs: int
    candidates_per_context: float
    avg_turns: float
    avg_words_per_utterance: float
    avg_words_per_response: float
    first_stage: FirstStage


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
                      avg_words_per_response=_mean(r_words, pairs),
                      first_stage=first_stage(queries))


def data_stats(splits: Splits) -> DataStats:
    return DataStats(**{name: split_stats(splits.split(name)) for name in SPLIT_NAMES})


def _number(fmt: str) -> Callable[[SplitStats, str], str]:
    return lambda stats, attr: fmt.format(getattr(stats, attr))


def _first(fmt: str) -> Callable[[SplitStats, str], str]:
    def cell(stats: SplitStats, attr: str) -> str:
        value = getattr(stats.first_stage, attr)
        return "n/a" if value is None else fmt.format(value)
    return cell


def _share(rank: int | str) -> Callable[[SplitStats, str], str]:
    def cell(stats: SplitStats, _attr: str) -> str:
        fs = stats.first_stage
        value = fs.last_share if rank == "last" else fs.share(int(rank))
        return "n/a" if value is None else f"{100 * value:.1f}%"
    return cell


_ROWS: tuple[tuple[str, str, Callable[[SplitStats, str], str]], ...] = (
    ("Number of (U, r) pairs", "pairs", _number("{:,}")),
    ("Number of contexts U", "contexts", _number("{:,}")),
    ("Number of candidates per U", "candidates_per_context", _number("{:.1f}")),
    ("Average number of turns", "avg_turns", _number("{:.1f}")),
    ("Average number of words per u", "avg_words_per_utterance", _number("{:.1f}")),
    ("Average number of words per r", "avg_words_per_response", _number("{:.1f}")),
    ("First-stage BM25 MAP", "bm25_map", _first("{:.4f}")),
    ("Random-order MAP (expected)", "random_map", _first("{:.4f}")),
    ("Mean BM25 rank of r+", "mean_rank", _first("{:.2f}")),
    ("r+ ranked first by BM25", "", _share(1)),
    ("r+ ranked last by BM25", "", _share("last")),
)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join([r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:], widths[1:])]).rstrip()
            for r in rows]


def format_stats(stats: DataStats, *, title: str = "") -> str:
    """Aligned plain-text tables, one column per split (Train, Valid, Test as in the paper): the
    statistics, then the share of contexts per BM25 rank of r+ (where the candidates are scored)."""
    header = ["", "Train", "Valid", "Test"]
    splits = [stats.split(s) for s in SPLIT_NAMES]
    lines = [title] if title else []
    lines += _table([header] + [[label] + [cell(s, attr) for s in splits] for label, attr, cell in _ROWS])
    deepest = max(len(s.first_stage.rank_counts or ()) for s in splits)
    if deepest:
        lines += ["", "BM25 rank of r+ (share of contexts)"]
        lines += _table([header] + [[f"rank {r}"] + [_share(r)(s, "") for s in splits]
                                    for r in range(1, deepest + 1)])
    return "\n".join(lines)
