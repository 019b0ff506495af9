"""The claimed-curve test's level on the ideal gradient-canary game of a correctly calibrated DP-SGD: how often it
refutes a claim that holds. The mechanism alone at the claim's own sigma, the audit's code for the rates (chosen once
from the claimed mechanism), the threshold, the p-value and the verdict; the certification is not searched (the
verdict alone is what the level is about).

    python level.py NAME EPSILON RELATION Q T M FIRST_SEED LAST_SEED [RATE] >> level.jsonl

one line of JSON per seed (its counts, p-value and verdict); ``table.py`` sums them. RATE, where given, replaces the
rate the audit's code would choose (e.g. the one a real audit chose at its own numbers of canaries in and out).
"""

from __future__ import annotations

import json
import sys

import numpy as np

from inputdp.benchmarks.audits.canary_gradients import rates_for, simulate_scores
from inputdp.benchmarks.audits.claimed_curve import claimed_family, curve_test
from inputdp.methods.accounting.accountants import GaussianSteps, accountant, least_noise

DELTA = 1e-5


def main(argv: list[str]) -> None:
    name, eps, relation, q, steps, m, first, last = argv[:8]
    eps, q, steps, m = float(eps), float(q), int(steps), int(m)
    sigma = least_noise("pld", GaussianSteps(q, steps, relation), eps, DELTA)
    family = claimed_family(GaussianSteps(q, steps, relation), accountant("pld"), sigma, DELTA)
    replaced = relation == "replace_input"
    rates = (float(argv[8]),) if len(argv) > 8 else rates_for(
        family, sampling_rate=q, steps=steps, sigma=sigma, in_trials=m // 2, out_trials=m - m // 2, replaced=replaced)
    for seed in range(int(first), int(last) + 1):
        rng = np.random.default_rng(10_000 + seed)
        n_in = int(rng.binomial(m, 0.5))
        common = {"sampling_rate": q, "steps": steps, "sigma": sigma, "score_sigma": sigma, "replaced": replaced}
        s_in = simulate_scores(**common, sign=1.0, trials=n_in, seed=3 * seed + 5_000_001)
        s_out = simulate_scores(**common, sign=-1.0 if replaced else 0.0, trials=m - n_in, seed=3 * seed + 5_000_002)
        test = curve_test(s_in, s_out, rates, family, certify=False)
        print(json.dumps({"name": name, "epsilon": eps, "relation": relation, "q": q, "T": steps, "m": m,
                          "seed": seed, "rates": test.rates, "fpr": test.fpr, "fnr": test.fnr,
                          "claimed_fnr": test.claimed_fnr, "p_values": test.p_values, "refuted": test.refuted,
                          "beta": test.beta}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
