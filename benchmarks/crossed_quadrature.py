"""The crossed test's p-value in the tail: the quadrature (harness.stats.crossed.generalized_p)
against a seeded Monte Carlo of the same generalized pivot, at the levels Holm's steps use.

For each design (seeds x queries) the mean squares are fixed (MS_seed 0.02, MS_query 0.03, MS_resid
0.01) and the mean difference is solved so that the shipped p is the target. The Monte Carlo draws
the three chi-square variables, evaluates 2 E[Phi(-|dbar| / sqrt(R / (S Q)))] (a draw with R <= 0
adds nothing) and reports its standard error. The row "one node per stratum" is the seed axis's
rule before 2026-12-08 (each probability stratum's midpoint quantile, twice the strata), rebuilt
here for the record.

    python benchmarks/crossed_quadrature.py [--draws 8000000] > benchmarks/results/crossed_quadrature.md
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from machine import in_words
from scipy import special

from harness.stats import crossed
from harness.stats import distributions as dist
from harness.stats.roots import secant

MS = (0.02, 0.03, 0.01)
DESIGNS = ((2, 50, 0.005), (3, 10, 0.005), (5, 50, 0.0005))


def shipped_p(mean: float, seeds: int, queries: int) -> float:
    return float(crossed.generalized_p(np.array([mean]), *(np.array([m]) for m in MS), seeds, queries)[0])


def one_node_p(mean: float, seeds: int, queries: int) -> float:
    """The same pivot with the former seed-axis rule: one node per stratum, 192 + 2 x 32 strata."""
    tail = np.geomspace(1e-9, 1.0 / 192, 32, endpoint=False)
    edges = np.unique(np.concatenate([[0.0], tail, np.linspace(0.0, 1.0, 193), 1.0 - tail, [1.0]]))
    u_s = dist.chi2.ppf((edges[:-1] + edges[1:]) / 2.0, seeds - 1) / (seeds - 1)
    w_s = np.diff(edges)
    (u_q, w_q), (u_e, w_e) = crossed.chi2_nodes(queries - 1, 1), crossed.chi2_nodes((seeds - 1) * (queries - 1), 2)
    inv_s, inv_q, inv_e = np.meshgrid(1.0 / u_s, 1.0 / u_q, 1.0 / u_e, indexing="ij")
    weight = np.einsum("i,j,k->ijk", w_s, w_q, w_e)
    r = MS[0] * inv_s + MS[1] * inv_q - MS[2] * inv_e
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(r > 0, special.ndtr(-abs(mean) / np.sqrt(np.where(r > 0, r, 1.0) / (seeds * queries))), 0.0)
    return float(2.0 * (z * weight).sum())


def monte_carlo(mean: float, seeds: int, queries: int, draws: int, seed: int) -> tuple[float, float]:
    g = np.random.default_rng(seed)
    dfs = (seeds - 1, queries - 1, (seeds - 1) * (queries - 1))
    total = square = 0.0
    done = 0
    while done < draws:
        n = min(1_000_000, draws - done)
        x = [g.chisquare(df, n) / df for df in dfs]
        r = MS[0] / x[0] + MS[1] / x[1] - MS[2] / x[2]
        v = np.where(r > 0, special.ndtr(-abs(mean) / np.sqrt(np.where(r > 0, r, 1.0) / (seeds * queries))), 0.0)
        total, square, done = total + float(v.sum()), square + float((v * v).sum()), done + n
    mean_v = total / done
    return 2.0 * mean_v, 2.0 * math.sqrt(max(square / done - mean_v ** 2, 0.0) / done)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=8_000_000)
    args = ap.parse_args()
    start = time.time()
    print(f"# The crossed test's p in the tail: quadrature against a Monte Carlo of the pivot\n\n"
          f"{args.draws:,} draws per design (seeded); MS_seed {MS[0]}, MS_query {MS[1]}, MS_resid {MS[2]}; "
          f"{in_words()}.\n")
    print("| seeds x queries | shipped p | Monte Carlo p (SE) | shipped / MC - 1 | one node per stratum / MC - 1 |")
    print("|--:|--:|--:|--:|--:|")
    for i, (seeds, queries, target) in enumerate(DESIGNS):
        mean = secant(lambda m, s=seeds, q=queries, t=target: math.log(shipped_p(m, s, q) / t), 1e-4, 2.0,
                      rising=False)
        p = shipped_p(mean, seeds, queries)
        mc, se = monte_carlo(mean, seeds, queries, args.draws, seed=i)
        old = one_node_p(mean, seeds, queries)
        print(f"| {seeds} x {queries} | {p:.6f} | {mc:.6f} ({se:.6f}) | {p / mc - 1:+.2%} | {old / mc - 1:+.2%} |",
              flush=True)
    print(f"\n{time.time() - start:.0f} s.")


if __name__ == "__main__":
    main()
