"""Family-wise error of max-t (Dunnett's many-to-one idea) in seeded null studies, per test and seed
count: why `--correction maxt` is refused with the crossed and across-seeds tests
(docs/statistics.md, "Max-t"; results in benchmarks/results/maxt_seeds.md).

Every study: a baseline and K null candidates, S seeds x Q queries; a value is a query's difficulty
(SD 0.15) + a seed effect every configuration shares (SD 0.01) + a configuration-by-query effect
(SD 0.03; 0 for across-seeds, whose null holds the queries fixed) + a per-run training effect
(``--training-sd``: 0.05, but 0 for seed-averaged, whose null holds the seeds fixed) + residual
noise (SD 0.1). A study counts when max-t marks at least one
candidate at 0.05: its largest statistic's adjusted p-value is below 0.05 (Bonferroni's count on
the same studies beside it).

Designs:
- ``crossed``: the crossed test's p-values as normal scores, the correlation of the crossed model
  estimated from the difference matrices (what `--correction maxt` ran under the crossed test
  before it was refused; the estimator is kept here, ``crossed_correlation``);
- ``crossed-true``: the same scores with the true correlation (0.5: every candidate shares the
  baseline's runs), to separate the estimate's noise from the joint tails;
- ``across-seeds``: the paired t over per-seed means, the correlation of the per-seed differences,
  the multivariate t on S - 1 df;
- ``seed-averaged``: the paired t over seed-averaged queries, the correlation of the query-level
  differences, the multivariate t on Q - 1 df (what `--correction maxt` runs).

    python benchmarks/maxt_seeds.py --design crossed --seeds 3 --studies 4000 --seed 33
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from harness.stats import maxt
from harness.stats.crossed import crossed_batch

DESIGNS = ("crossed", "crossed-true", "across-seeds", "seed-averaged")


def crossed_correlation(d: np.ndarray) -> np.ndarray:
    """The correlation of K crossed mean differences (d: K x S x Q) under the bivariate crossed
    model: the cross mean products give seed, query and residual component matrices, each made
    positive semi-definite (the estimator harness.stats.maxt had)."""
    _, s, q = d.shape
    grand = d.mean(axis=(1, 2))
    m_s = d.mean(axis=2) - grand[:, None]
    m_q = d.mean(axis=1) - grand[:, None]
    resid = d - m_s[:, :, None] - m_q[:, None, :] - grand[:, None, None]
    mp_seed = q * (m_s @ m_s.T) / (s - 1)
    mp_query = s * (m_q @ m_q.T) / (q - 1)
    mp_resid = np.einsum("ksq,lsq->kl", resid, resid) / ((s - 1) * (q - 1))

    def psd(m: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh((m + m.T) / 2.0)
        return np.asarray((v * np.maximum(w, 0.0)) @ v.T)

    # as harness.stats.maxt computed it (every comparison on all S seeds), times S
    cov = psd((mp_seed - mp_resid) / q) + psd((mp_query - mp_resid) / s) / q + mp_resid / q
    sd = np.sqrt(np.diag(cov))
    return np.clip(cov / np.outer(sd, sd), -1.0, 1.0)


def study_marks(design: str, v: np.ndarray, level: float) -> tuple[bool, bool]:
    """(max-t marks a candidate, Bonferroni does) for one study's values v: (K+1) x S x Q."""
    k = v.shape[0] - 1
    if design.startswith("crossed"):
        d = v[1:] - v[0]
        p = crossed_batch(d).p_value
        z = float(stats.norm.isf(p.min() / 2))
        corr = np.full((k, k), 0.5) if design == "crossed-true" else crossed_correlation(d)
        np.fill_diagonal(corr, 1.0)
        return maxt.max_abs_sf([z], corr, math.inf)[0] < level, p.min() < level / k
    units = v.mean(axis=2) if design == "across-seeds" else v.mean(axis=1)  # K+1 x units
    d = units[1:] - units[0]
    n = d.shape[1]
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    p = 2 * stats.t.sf(np.abs(t), n - 1)
    corr = maxt.unit_correlation(list(d))
    return maxt.max_abs_sf([float(np.abs(t).max())], corr, n - 1)[0] < level, p.min() < level / k


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--design", choices=DESIGNS, required=True)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--studies", type=int, default=2000)
    ap.add_argument("--training-sd", type=float, default=None,
                    help="SD of the per-run training effect (default 0.05; 0 for seed-averaged, whose "
                    "null holds the seeds fixed)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    g = np.random.default_rng(args.seed)
    if args.training_sd is None:
        args.training_sd = 0.0 if args.design == "seed-averaged" else 0.05
    k, s, q = args.candidates, args.seeds, args.queries
    interaction = 0.0 if args.design == "across-seeds" else 0.03
    marked = bonferroni = 0
    start = time.time()
    for _ in range(args.studies):
        v = (g.normal(0.5, 0.15, q)[None, None] + g.normal(0, 0.01, s)[None, :, None]
             + g.normal(0, interaction, (k + 1, 1, q)) + g.normal(0, args.training_sd, (k + 1, s, 1))
             + g.normal(0, 0.1, (k + 1, s, q)))
        m, b = study_marks(args.design, v, 0.05)
        marked += m
        bonferroni += b
    rate = marked / args.studies
    se = math.sqrt(rate * (1 - rate) / args.studies)
    print(f"{args.design}: {s} seeds x {q} queries, {k} candidates, training SD {args.training_sd:g}, "
          f"{args.studies} studies (seed {args.seed}): max-t {rate:.4f} +- {se:.4f}, Bonferroni "
          f"{bonferroni / args.studies:.4f} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
