"""Candidate guess families read on the simulated games of simulate.py (counts.jsonl): each family a set of k (as
fractions of m) and scores, every guess set read by Steinke's bound and the f-DP bound at level 0.05 / (tests); the
median over seeds 21-23 of the family's largest bound, and its fraction of the claim. Output: families.txt.

    python families.py > families.txt
"""

import json
from pathlib import Path

import numpy as np

from inputdp.benchmarks.audits.one_run import epsilon_lower_bound, fdp_bounds

ROWS = [json.loads(line) for line in open(Path(__file__).with_name("counts.jsonl"))]
CLAIM = {"ri4": 4, "ar4": 4, "ri1": 1, "ar1": 1, "half1": 1, "arsig1": 1}
BOTH, LR, LAST = ("lr", "last"), ("lr",), ("last",)
FAMILIES = {
    "old(2x7x2)": ([0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5], BOTH),
    "A lr+last 1,2,5,10,20,50%": ([0.01, 0.02, 0.05, 0.1, 0.2, 0.5], BOTH),
    "B lr+last 1,5,20,50%": ([0.01, 0.05, 0.2, 0.5], BOTH),
    "C lr+last 0.5,1,2,5,10,20,50%": ([0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5], BOTH),
    "D lr+last 1,2,10,50%": ([0.01, 0.02, 0.1, 0.5], BOTH),
    "E lr 1,2,5,10,20,50% (12)": ([0.01, 0.02, 0.05, 0.1, 0.2, 0.5], LR),
    "E' last 1,2,5,10,20,50% (12)": ([0.01, 0.02, 0.05, 0.1, 0.2, 0.5], LAST),
    "G lr 0.5,1,2,5,10,20,50% (14)": ([0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5], LR),
}
_cache: dict = {}


def bound(r: int, v: int, m: int, tests: int) -> float:
    key = (r, v, m, tests)
    if key not in _cache:
        level = 0.05 / tests
        _cache[key] = max(epsilon_lower_bound(r=r, v=v, m=m, delta=1e-5, beta=level),
                          fdp_bounds(r=r, v=v, m=m, delta=1e-5, level=level)[0])
    return _cache[key]


for name, (fractions, scores) in FAMILIES.items():
    tests = 2 * len(fractions) * len(scores)
    res: dict[str, list[float]] = {}
    for row in ROWS:
        m = row["m"]
        res.setdefault(row["name"], []).append(max(
            bound(2 * max(1, int(f * m)), row["counts"][s][str(f)], m, tests) for f in fractions for s in scores))
    cells = "  ".join(f"{n} {np.median(v):.2f} ({np.median(v) / CLAIM[n]:.2f})" for n, v in res.items())
    print(f"{name:32s} tests {tests:2d}: {cells}", flush=True)
