"""The claimed-curve test (benchmarks/audits/claimed_curve.py) on the ideal gradient-canary game: the mechanism alone
(every iterate seen, the exact per-step likelihood ratio at the claim's sigma, no model), at a preset's q and T, with
the audit's own code for the rates, the thresholds, the counts, the bounds and the certification.

    python curve_test.py NAME EPSILON RELATION SCALE Q T M SEED [SEED ...] >> curve_test.jsonl

claims (EPSILON, delta 1e-5) under RELATION, calibrated by the suite's accountant; the game runs at SCALE times the
claim's sigma (1: a correct implementation; 0.5: half the sigma; for add/remove's sigma under a replace_input claim,
the ratio of the two calibrations, given as SCALE=arsigma) with M canaries, each in with probability 1/2, one line of
JSON per seed: the test's counts, bounds, verdict and X. The rates are chosen once per claim (simulation seed
``THRESHOLD_SEED``, none of the game's seeds).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from inputdp.benchmarks.audits.canary_gradients import SIMULATED_TRIALS, THRESHOLD_SEED, rates_for, simulate_scores
from inputdp.benchmarks.audits.claimed_curve import claimed_family, curve_test
from inputdp.methods.accounting.accountants import GaussianSteps, accountant, least_noise

DELTA = 1e-5


def main(argv: list[str]) -> None:
    name, eps, relation, scale_arg, q, steps, m = argv[:7]
    seeds = [int(s) for s in argv[7:]]
    eps, q, steps, m = float(eps), float(q), int(steps), int(m)
    sigma = least_noise("pld", GaussianSteps(q, steps, relation), eps, DELTA)
    if scale_arg == "arsigma":
        scale = least_noise("pld", GaussianSteps(q, steps, "add_remove"), eps, DELTA) / sigma
    else:
        scale = float(scale_arg)
    family = claimed_family(GaussianSteps(q, steps, relation), accountant("pld"), sigma, DELTA)
    replaced = relation == "replace_input"
    out_sign = -1.0 if replaced else 0.0
    t0 = time.perf_counter()
    rates = rates_for(family, sampling_rate=q, steps=steps, sigma=sigma, in_trials=m // 2,
                                out_trials=m - m // 2, replaced=replaced)
    chosen = time.perf_counter() - t0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        n_in = int(rng.binomial(m, 0.5))
        s_in = simulate_scores(sampling_rate=q, steps=steps, sigma=sigma * scale, score_sigma=sigma, sign=1.0,
                               trials=n_in, seed=2 * seed + 1_000_003, replaced=replaced)
        s_out = simulate_scores(sampling_rate=q, steps=steps, sigma=sigma * scale, score_sigma=sigma, sign=out_sign,
                                trials=m - n_in, seed=2 * seed + 1_000_004, replaced=replaced)
        test = curve_test(s_in, s_out, rates, family)
        print(json.dumps({"name": name, "epsilon": eps, "relation": relation, "scale": scale, "q": q, "T": steps,
                          "m": m, "seed": seed, "sigma_claim": sigma, "rates": test.rates, "thresholds": test.thresholds,
                          "fn": test.false_negatives, "ranks": test.ranks, "in": test.in_trials,
                          "out": test.out_trials, "fpr": test.fpr, "fnr": test.fnr, "p_values": test.p_values,
                          "claimed_fnr": test.claimed_fnr, "refuted": test.refuted, "noise_ratio": test.noise_ratio,
                          "certified_epsilon": test.certified_epsilon, "claimed_epsilon": test.claimed_epsilon,
                          "ratio": test.ratio, "threshold_seconds": round(chosen, 1),
                          "simulated_trials": SIMULATED_TRIALS, "threshold_seed": THRESHOLD_SEED}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
