"""Seeds added in rounds (a study's seed schedule, ``seeds: {start, step, max}``), as data: each
comparison's group-sequential design and which round trains which seed. Running the rounds is the
driver's (harness.driver._rounds).
"""

from __future__ import annotations

from harness.stats.sequential import GroupSequential
from harness.study.spec import StudySpec
from harness.tracking.conventions import ROLE_BASELINE

FAMILY_ALPHA = 0.05  # the family-wise level of the verdicts: the tables' first marker level


def comparisons(spec: StudySpec) -> int:
    """The comparisons a seed schedule settles: every candidate against its collection's baseline,
    on each collection (the candidates of a one-collection study)."""
    return sum(nc.role != ROLE_BASELINE for nc in spec.configs)


def design(spec: StudySpec) -> GroupSequential:
    """Each comparison's design: the schedule's looks at 0.05 / ``comparisons(spec)`` (over several
    collections, every (candidate, collection) comparison is one of the family)."""
    if spec.seed_schedule is None:
        raise ValueError(f"study {spec.name!r} has no seed schedule")
    return GroupSequential.for_family(spec.seed_schedule.looks, FAMILY_ALPHA, comparisons(spec))


def round_of(spec: StudySpec, seed: int) -> int | None:
    """The round that trains ``seed`` (None without a schedule)."""
    if spec.seed_schedule is None or seed not in spec.seeds:
        return None
    return spec.seed_schedule.round_of(spec.seeds.index(seed))


def seeds_through(spec: StudySpec, seed: int) -> list[int]:
    """The seeds of every round up to ``seed``'s: what a configuration that trains ``seed`` has had
    by the end of that round (every study seed without a schedule)."""
    if spec.confirm is not None and seed in spec.confirm.seeds:  # harness.driver._confirm
        return list(spec.confirm.seeds)
    k = round_of(spec, seed)
    if k is None or spec.seed_schedule is None:
        return list(spec.seeds)
    return list(spec.seeds[:spec.seed_schedule.looks[k - 1]])
