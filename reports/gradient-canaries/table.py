"""The README's table from the runs' JSON (``bench audit ... --canary-kind gradient_canaries --json``, one file a run in
runs/): python table.py > table.md"""

import json
import statistics
from pathlib import Path

#: the runs' --seed where their JSON predates the "seed" field (0 unless given)
SEEDS = {"ri_eps4_s1": 1, "ri_eps4_s2": 2}
ORDER = ["ri_eps4", "ri_eps4_s1", "ri_eps4_s2", "ar_eps4", "ri_eps1", "ar_eps1", "ri_eps1_half", "ri_eps1_arsigma"]


def main() -> None:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(Path(__file__).with_name("runs").glob("*.json"))}
    print("| run | relation | claim | sigma (used) | seed | m | times sampled | every iterate: right (k a side) | "
          "Steinke | f-DP | of the claim | verdict | last iterate (own family) | test accuracy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in [n for n in ORDER if n in runs] + sorted(set(runs) - set(ORDER)):
        d = runs[name]
        lr, last = d["per_score"]["likelihood_ratio"], d["per_score"]["last_iterate"]
        used = d["noise_multiplier_used"]
        sigma = f"{d['noise_multiplier_claimed']:.4f}" + (f" ({used:.4f})" if d["deliberately_broken"] else "")
        last_lb = max(last["steinke_epsilon_lb"], last["fdp_epsilon_lb"])
        print(f"| {name} | {d['relation']} | {d['epsilon_claimed']:g} | {sigma} | {d.get('seed', SEEDS.get(name, 0))} | "
              f"{d['canaries']:,} | {d['mean_times_sampled']:.2f} | {lr['correct']:,} / {lr['guesses']:,} "
              f"({lr['k']:,}) | {lr['steinke_epsilon_lb']:.3f} | {lr['fdp_epsilon_lb']:.3f} | "
              f"{d['epsilon_lb'] / d['epsilon_claimed']:.3f} | {d['verdict'].split(' (')[0]} | {last_lb:.3f} | "
              f"{100 * d['test_accuracy']:.2f}% |")
    eps4 = [runs[n]["epsilon_lb"] for n in ("ri_eps4", "ri_eps4_s1", "ri_eps4_s2") if n in runs]
    if eps4:
        med = statistics.median(eps4)
        print(f"\neps 4, replace_input, the calibrated sigma: median over {len(eps4)} seeds {med:.3f} = "
              f"{med / 4:.3f} of the claim (seeds: {', '.join(f'{v:.3f}' for v in eps4)})")


if __name__ == "__main__":
    main()
