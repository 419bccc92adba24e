"""Where the crossed test's markers fall under the null: the rate of p < 0.05 by how closely the seeds'
mean differences agreed (MS_seed / MS_resid), against the t-test over seed-averaged queries.

Null studies with no seed, query or interaction effect: every difference d[s, q] is an independent
N(0, 1) draw (50 queries). The exact-tie rule (harness.stats.crossed, "Seeds that tie") applies only
where MS_seed is zero to rounding; this measures what happens just above it, where the pivot's
draws with R <= 0 still count as certainty. Seeded.

    python benchmarks/crossed_near_ties.py [--studies 20000] > benchmarks/results/crossed_near_ties.md
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from machine import in_words
from scipy import stats

from harness.stats.crossed import crossed_batch

QUERIES = 50
BINS = (0.0, 0.003, 0.03, 0.3, np.inf)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=20_000)
    args = ap.parse_args()
    start = time.time()
    print(f"# The crossed test under the null, by how closely the seeds agreed\n\n{args.studies:,} null "
          f"studies per seed count (seeded), {QUERIES} queries, d ~ N(0, 1) iid; {in_words()}.\n")
    print("| seeds | MS_seed / MS_resid | share of studies | crossed p < 0.05 | seed-averaged t p < 0.05 |")
    print("|--:|:--|--:|--:|--:|")
    for seeds in (2, 3, 5):
        g = np.random.default_rng(seeds)
        d = g.normal(size=(args.studies, seeds, QUERIES))
        crossed = np.concatenate([crossed_batch(d[i:i + 4000]).p_value for i in range(0, args.studies, 4000)])
        averaged = stats.ttest_1samp(d.mean(axis=1), 0.0, axis=1).pvalue
        m_s, grand = d.mean(axis=2), d.mean(axis=(1, 2))
        resid = d - m_s[:, :, None] - d.mean(axis=1)[:, None, :] + grand[:, None, None]
        ratio = (QUERIES * ((m_s - grand[:, None]) ** 2).sum(axis=1) / (seeds - 1)) / (
            (resid ** 2).sum(axis=(1, 2)) / ((seeds - 1) * (QUERIES - 1)))
        for lo, hi in itertools.pairwise(BINS):
            inside = (ratio >= lo) & (ratio < hi)
            label = f"{lo:g} to {hi:g}" if np.isfinite(hi) else f"{lo:g} and above"
            rates = (f"{np.mean(crossed[inside] < 0.05):.3f} | {np.mean(averaged[inside] < 0.05):.3f}"
                     if inside.any() else "- | -")
            print(f"| {seeds} | {label} | {inside.mean():.3f} | {rates} |")
        print(f"| {seeds} | all | 1.000 | {np.mean(crossed < 0.05):.3f} | {np.mean(averaged < 0.05):.3f} |",
              flush=True)
    print(f"\n{time.time() - start:.0f} s.")


if __name__ == "__main__":
    main()
