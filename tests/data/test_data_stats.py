"""Table 4 statistics on a hand-computed fixture."""

from __future__ import annotations

import pytest

from harness.data.records import Candidate, Query, Splits
from harness.data.stats import data_stats, format_stats, split_stats


def _q(qid: str, context: tuple[str, ...], candidates: tuple[str, ...]) -> Query:
    return Query(qid=qid, context=context, group=qid, candidates=tuple(
        Candidate(f"{qid}-{i}", text, int(i == 0)) for i, text in enumerate(candidates)))


TRAIN = (
    _q("a", ("one two three", "four"), ("r one", "r two words", "x")),  # u words 3+1, r words 2+3+1
    _q("b", ("five six",), ("alpha beta gamma delta", "e")),            # u words 2, r words 4+1
)


def test_split_stats_equal_hand_computed_values() -> None:
    s = split_stats(TRAIN)
    assert s.contexts == 2
    assert s.pairs == 5
    assert s.candidates_per_context == 2.5
    assert s.avg_turns == 1.5                       # (2 + 1) / 2
    assert s.avg_words_per_utterance == 2.0         # (3 + 1 + 2) / 3
    assert s.avg_words_per_response == pytest.approx(11 / 5)


def test_empty_split_and_table_format() -> None:
    stats = data_stats(Splits(train=TRAIN, dev=TRAIN[:1], test=(), fingerprint="x"))
    assert stats.test.contexts == 0 and stats.test.avg_turns == 0.0
    assert stats.dev.pairs == 3
    table = format_stats(stats, title="fixture")
    lines = table.splitlines()
    assert lines[0] == "fixture"
    assert lines[1].split() == ["Train", "Valid", "Test"]
    assert lines[2].split()[-3:] == ["5", "3", "0"]
    assert "Number of candidates per U" in table and "2.5" in table
    assert len({len(line) for line in lines[2:]}) == 1  # aligned columns
