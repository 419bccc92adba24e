"""Why a seed schedule starts at 4 seeds or more (harness.stats.sequential.MIN_START): the size of
the rule, and of the final table's marker, for schedules that start at 2, 3 and 4 seeds, by seeded
simulation of null comparisons.

Each comparison's paired differences are d[s, q] = a_s + b_q + e_sq with the seeds' component
dominant (training variance 1e-3, residual 1e-6, 50 queries); at each look the crossed test of the
first n_k seeds gives p_k, its signed normal score goes to GroupSequential.decide, as
harness.driver._rounds does, and the final table tests the seeds the comparison received.

    python benchmarks/sequential_start.py [--comparisons 20000] > benchmarks/results/sequential_start.md
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from machine import in_words

from harness.stats.crossed import crossed_batch
from harness.stats.sequential import CODES, GroupSequential, Stop, signed_z

SETTLED = [CODES.index(Stop.BETTER), CODES.index(Stop.WORSE)]
SCHEDULES = ((2, 3, 4, 5, 6), (3, 4, 5, 6), (4, 6, 8, 10, 12))


def sizes(looks: tuple[int, ...], alpha: float, comparisons: int, seed: int,
          batch: int = 5000) -> tuple[float, float, float]:
    """(verdicts settled, final-table markers, the fixed design's rejections at the last look) as
    rates over ``comparisons`` null comparisons."""
    g = np.random.default_rng(seed)
    q, s = 50, looks[-1]
    counts = np.zeros(3)
    for _ in range(comparisons // batch):
        d = (g.normal(0.0, np.sqrt(1e-3), (batch, s, 1)) + g.normal(0.0, np.sqrt(1e-6), (batch, s, q)))
        p = np.stack([crossed_batch(d[:, :k]).p_value for k in looks], 1)
        z = signed_z(np.stack([d[:, :k].mean((1, 2)) for k in looks], 1), p)
        code, where = GroupSequential(looks=looks, alpha=alpha).decide(z)
        counts += (np.isin(code, SETTLED).sum(), (p[np.arange(batch), where] < alpha).sum(), (p[:, -1] < alpha).sum())
    return tuple(counts / (comparisons // batch * batch))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--comparisons", type=int, default=20000)
    args = ap.parse_args()
    start = time.time()
    print(f"# Seed schedules by their first round: size at level 0.05\n\n{args.comparisons} null comparisons "
          f"per schedule (seed 2026; binomial SE {np.sqrt(0.05 * 0.95 / args.comparisons):.4f}); "
          f"{in_words()}.\n")
    print("| looks (seeds) | verdicts settled | final-table markers | fixed design at the last look |")
    print("|:--|--:|--:|--:|")
    for looks in SCHEDULES:
        v, m, f = sizes(looks, 0.05, args.comparisons, 2026)
        print(f"| {', '.join(map(str, looks))} | {v:.4f} | {m:.4f} | {f:.4f} |")
    print(f"\n{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
