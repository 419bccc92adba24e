"""Table 4 statistics and the first-stage reference (BM25 vs random MAP, the positive's BM25 rank)
on hand-computed fixtures."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from harness.data.first_stage import (
    expected_random_ap,
    first_stage,
    positive_ranks,
    random_map,
    reference_maps,
)
from harness.data.stats import data_stats, format_stats, split_stats
from harness.errors import DataError
from harness.records import Candidate, Query, Splits


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
    assert len({len(line) for line in lines[2:13]}) == 1  # aligned columns
    bm25 = next(line for line in lines if line.startswith("First-stage BM25 MAP"))
    assert bm25.split()[-3:] == ["n/a"] * 3  # no first-stage scores
    assert "BM25 rank of r+ (share of contexts)" not in table


def _scored(qid: str, scores: list[float], labels: list[int]) -> Query:
    return Query(qid=qid, context=("u",), group=qid, candidates=tuple(
        Candidate(f"{qid}-{i}", "r", label, score) for i, (score, label) in enumerate(zip(scores, labels))))


SCORED = (
    _scored("a", [3.0, 2.0, 1.0, 0.5], [1, 0, 0, 0]),  # positive first: AP 1
    _scored("b", [1.0, 2.0, 1.0, 0.5], [1, 0, 0, 0]),  # tied with a negative: pessimistic rank 3
    _scored("c", [0.0, 0.0, 0.0, 0.0], [1, 0, 0, 0]),  # no information: last, AP 1/4
)


def _ap(labels: list[int]) -> float:
    hits = np.cumsum(labels)
    return float(sum(hits[i] / (i + 1) for i, rel in enumerate(labels) if rel) / max(sum(labels), 1))


@pytest.mark.parametrize(("n", "relevant"), [(n, r) for n in range(1, 7) for r in range(n + 1)])
def test_expected_random_ap_is_the_mean_over_every_order(n: int, relevant: int) -> None:
    orders = set(itertools.permutations([1] * relevant + [0] * (n - relevant)))
    exact = np.mean([_ap(list(order)) for order in orders])
    assert expected_random_ap(n, relevant) == pytest.approx(exact, abs=1e-12)


def test_first_stage_by_hand() -> None:
    assert positive_ranks(SCORED) == [1, 3, 4]
    fs = first_stage(SCORED)
    assert fs.bm25_map == pytest.approx((1 + 1 / 3 + 1 / 4) / 3)
    assert fs.random_map == random_map(SCORED) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert fs.rank_counts == (1, 0, 1, 1) and fs.last == 1 and fs.last_share == pytest.approx(1 / 3)
    assert fs.mean_rank == pytest.approx(8 / 3) and fs.share(1) == pytest.approx(1 / 3)
    assert reference_maps(SCORED) == {"random": fs.random_map, "bm25": fs.bm25_map}
    unscored = (Query(qid="u", context=("x",), candidates=(Candidate("d", "t", 1),)),)
    assert reference_maps(unscored) == {"random": 1.0}
    assert first_stage(unscored).bm25_map is None
    with pytest.raises(DataError, match="query u has candidates without a first-stage score"):
        positive_ranks(unscored)


def test_reference_maps_equal_the_trainers_metrics() -> None:
    """The study's reference line and the stats share one implementation; its BM25 MAP is the MAP
    the trainer's evaluation gives the same scores."""
    from harness.model.scoring import metrics_of
    from harness.training.baselines import bm25_scores
    from harness.training.baselines import reference_maps as from_training

    assert from_training is reference_maps
    assert from_training(SCORED)["bm25"] == metrics_of(SCORED, bm25_scores(SCORED)).means["map"]


def test_stats_table_shows_the_first_stage() -> None:
    table = format_stats(data_stats(Splits(train=SCORED, dev=SCORED[:1], test=SCORED[2:],
                                           fingerprint="x"))).splitlines()
    row = {line.rsplit(None, 3)[0]: line.split()[-3:] for line in table if line and "  " in line}
    assert row["First-stage BM25 MAP"] == ["0.5278", "1.0000", "0.2500"]
    assert row["Random-order MAP (expected)"] == ["0.5208"] * 3
    assert row["r+ ranked last by BM25"] == ["33.3%", "0.0%", "100.0%"]
    assert row["rank 4"] == ["33.3%", "0.0%", "100.0%"]


@pytest.mark.parametrize(("gap", "said"), [(0.1, "beats BM25 by 0.1000 MAP"), (-0.1, "trails BM25 by 0.1000 MAP"),
                                           (0.0, "ties with BM25\n")])
def test_train_s_verdict_against_bm25_reads_plainly(gap: float, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    # It said "does NOT beat BM25 by -0.2591 MAP": a double negative.
    from harness.cli.train import _print_baselines

    _print_baselines(SCORED, reference_maps(SCORED)["bm25"] + gap)
    assert f"the trained ranker {said}" in capsys.readouterr().out
