"""How many gradient canaries a test of the audit's family would need to put its bound above the claim, projected from
a run's measured trade-off (its every-canary table, ``gradient_canaries_scores.csv``): for each k of the grid (as a
fraction of m) the measured precision p of the k top and k bottom guesses of the likelihood-ratio score; at a larger
m the same fraction is guessed with the same precision (the expected counts), and Steinke's bound and the f-DP
bound at the family's level are read there. A projection from one run's rates, not a bound. A test whose precision
is at most e^eps / (1 + e^eps) cannot exceed eps at any m.

    python project.py SCORES_CSV EPSILON [--score likelihood_ratio]
"""

import argparse
import csv
import math

import numpy as np

from inputdp.benchmarks.audits.gradient_canaries import GRID_FRACTIONS, count_tests
from inputdp.benchmarks.audits.one_run import BETA, epsilon_lower_bound, fdp_bounds

DELTA = 1e-5
M_GRID = [39_000, 60_000, 100_000, 200_000, 400_000, 1_000_000]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scores")
    ap.add_argument("epsilon", type=float)
    ap.add_argument("--score", default="likelihood_ratio")
    args = ap.parse_args()
    with open(args.scores) as f:
        rows = list(csv.DictReader(f))
    inc = np.array([r["included"] == "1" for r in rows])
    score = np.array([float(r[args.score]) for r in rows])
    m = len(rows)
    order = np.argsort(-score, kind="stable")
    need = math.exp(args.epsilon) / (1 + math.exp(args.epsilon))
    print(f"m {m}, claim {args.epsilon:g}: a test needs precision > {need:.4f}; level {BETA:g}/{count_tests(m)}")
    print("k/m    precision  log(p/(1-p))  " + "  ".join(f"m={n:>9,}" for n in M_GRID) + "   (Steinke / f-DP at m)")
    for f in GRID_FRACTIONS:
        k = max(1, int(f * m))
        right = int(inc[order[:k]].sum() + (~inc[order[-k:]]).sum())
        p = right / (2 * k)
        point = math.log(p / (1 - p)) if 0 < p < 1 else math.inf
        cells = []
        for n in M_GRID:
            r = 2 * max(1, int(f * n))
            v = int(round(p * r))
            level = BETA / count_tests(n)
            st = epsilon_lower_bound(r=r, v=v, m=n, delta=DELTA, beta=level)
            fd = fdp_bounds(r=r, v=v, m=n, delta=DELTA, level=level)[0]
            cells.append(f"{st:5.2f}/{fd:5.2f}")
        print(f"{f:<6g} {p:9.4f}  {point:12.3f}  " + "  ".join(f"{c:>11}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
