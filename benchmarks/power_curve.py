"""The power model below its default 0.8: `harness power`'s figure (harness.stats.power.power_of)
against the rate at which the table's own crossed test detects the difference, by seeded
simulation, from no difference up to the printed MDE.

The crossed model is tests/stats/test_power_sim.py's ranker-like one (training SD 0.02 per run,
interaction SD 0.03, residual variance 0.022, 50 queries). At each design (seeds, level alpha / m)
the true difference runs over 0, 0.3, 0.5, 0.7 and 1 times the MDE at power 0.8; a study is
detected where the test's two-sided p-value is below the level (either direction, as power_of
counts).

    python benchmarks/power_curve.py [--studies 8000] > benchmarks/results/power_curve.md
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from machine import in_words

from harness.stats.crossed import VarianceComponents, crossed_batch
from harness.stats.power import mde, power_of

QUERIES = 50
COMPS = VarianceComponents(seed=2 * 0.02 ** 2, query=0.03 ** 2, resid=0.022)
DESIGNS = ((2, 1), (3, 1), (5, 8), (10, 30))  # (seeds, family m): level 0.05 / m
FRACTIONS = (0.0, 0.3, 0.5, 0.7, 1.0)


def detected(seeds: int, effect: float, level: float, studies: int, seed: int, batch: int = 4000) -> float:
    """How often the crossed test rejects at ``level`` over ``studies`` simulated studies."""
    g = np.random.default_rng(seed)
    hits = 0
    for start in range(0, studies, batch):
        n = min(batch, studies - start)
        d = (effect + g.normal(0, np.sqrt(COMPS.seed), (n, seeds, 1))
             + g.normal(0, np.sqrt(COMPS.query), (n, 1, QUERIES))
             + g.normal(0, np.sqrt(COMPS.resid), (n, seeds, QUERIES)))
        hits += int(np.sum(crossed_batch(d).p_value < level))
    return hits / studies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=8000)
    args = ap.parse_args()
    start = time.time()
    print(f"# The power model below 0.8: predicted vs simulated\n\n{args.studies} simulated studies per row "
          f"(seeded); {QUERIES} queries; components seed {COMPS.seed:g}, query {COMPS.query:g}, residual "
          f"{COMPS.resid:g}; {in_words()}.\n")
    print("| seeds | level | effect / MDE | effect | predicted | simulated | predicted - simulated | binomial SE |")
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    worst = 0.0
    for seeds, family in DESIGNS:
        level = 0.05 / family
        m = mde(COMPS, seeds, QUERIES, level=level, power=0.8).mde
        for i, frac in enumerate(FRACTIONS):
            effect = m * frac
            p = power_of(COMPS, seeds, QUERIES, effect, level=level)
            r = detected(seeds, effect, level, args.studies, seed=1000 * seeds + family * 10 + i)
            se = float(np.sqrt(max(r * (1 - r), 1e-12) / args.studies))
            worst = max(worst, p - r)
            print(f"| {seeds} | {level:.5f} | {frac:.1f} | {effect:.4f} | {p:.3f} | {r:.3f} | {p - r:+.3f} | {se:.3f} |")
    print(f"\nLargest overstatement (predicted - simulated): {worst:+.3f}. {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
