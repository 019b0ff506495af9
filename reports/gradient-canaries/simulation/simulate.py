"""The gradient-canary game at the mnist cpu preset, idealised: every iterate seen, the exact per-step likelihood ratio,
no model. Used to fix the audit's guess grid before any mnist run (benchmarks/audits/gradient_canaries.py,
GRID_FRACTIONS); seeds 21-23, none of them a run's.

    python simulate.py NAME SIGMA M r|a SEED [SCORE_SIGMA] >> counts.jsonl

prints, for the likelihood-ratio score ("lr") and the total displacement ("last", the last iterate of plain SGD), the
right guesses among k "in" (the top k) and k "out" (the bottom k) at k = f m for each fraction f. What was run
(xargs -P 2, seeds 21, 22, 23 each):

    ri4 0.6761 39000 r    eps 4, replace_input, the calibrated sigma
    ar4 0.6383 39000 a    eps 4, add/remove
    ri1 1.5660 39000 r    eps 1, replace_input
    ar1 1.0522 39000 a    eps 1, add/remove
    half1 0.7830 39000 r  eps 1, replace_input, half the sigma
    arsig1 1.0522 39000 r eps 1, replace_input claimed, add/remove's sigma
"""

import json
import math
import sys

import numpy as np

q, T = 0.0042667, 2340  # the cpu preset's Poisson rate and steps (mnist)
name, sigma, m, rel, seed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
score_sigma = float(sys.argv[6]) if len(sys.argv) > 6 else sigma
replaced = rel == "r"
rng = np.random.default_rng(seed)
inc = rng.random(m) < 0.5
s = np.where(inc, 1.0, -1.0 if replaced else 0.0)
v = 2 * score_sigma ** 2
lq, l1q = math.log(q), math.log1p(-q)
llr = np.zeros(m)
disp = np.zeros(m)
for _ in range(T):
    b = rng.random(m) < q
    z = rng.normal(0, sigma, m) + s * b
    disp += z
    step = np.logaddexp(l1q, lq + (2 * z - 1) / v)
    if replaced:
        step -= np.logaddexp(l1q, lq + (-2 * z - 1) / v)
    llr += step
out = {}
for sname, sc in (("lr", llr), ("last", disp)):
    order = np.argsort(-sc)
    out[sname] = {}
    for f in [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5]:
        k = max(1, int(f * m))
        gi, go = order[:k], order[-k:]
        out[sname][f] = int(inc[gi].sum() + (~inc[go]).sum())
print(json.dumps({"name": name, "seed": seed, "m": m, "counts": out}))
