"""The README's tables from the runs' JSON (``bench audit ... --canary-kind gradient_canaries --json``, one file a run
in runs/, named CASE_sSEED.json) and the simulations' lines (simulation/*.jsonl): python table.py > table.md"""

import json
import statistics
from pathlib import Path

from scipy import stats

HERE = Path(__file__).parent
#: the cases, in the order the table shows them, and what each is
CASES = {"ri_eps1": "eps 1, replace_input", "ar_eps1": "eps 1, add/remove", "zo_eps1": "eps 1, zero-out",
         "ri_eps4": "eps 4, replace_input", "ar_eps4": "eps 4, add/remove", "zo_eps4": "eps 4, zero-out",
         "ri_eps1_arsigma": "eps 1, replace_input claimed, add/remove's sigma (broken)",
         "ri_eps1_half": "eps 1, replace_input, half the sigma (broken)"}


def runs() -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in sorted((HERE / "runs").glob("*_s[0-9].json")):
        case = p.stem.rsplit("_s", 1)[0]
        out.setdefault(case, []).append(json.loads(p.read_text()))
    return out


def run_table(found: dict[str, list[dict]]) -> list[str]:
    lines = ["| case | sigma claimed (used) | seed | in / out | threshold: rate, observed FPR, FNR, claimed FNR | "
             "p | verdict | certified epsilon (X) | in noise | one-run reading (Steinke, f-DP) | test accuracy |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for case in [c for c in CASES if c in found] + sorted(set(found) - set(CASES)):
        for d in sorted(found[case], key=lambda d: d["seed"]):
            c, lr = d["claimed_curve"], d["per_score"]["likelihood_ratio"]
            used = d["noise_multiplier_used"]
            sigma = f"{d['noise_multiplier_claimed']:.4f}" + (f" ({used:.4f})" if d["deliberately_broken"] else "")
            lines.append(
                f"| {case} | {sigma} | {d['seed']} | {c['in']:,} / {c['out']:,} | {c['rates'][0]:.3f}, "
                f"{c['fpr'][0]:.4f}, {c['fnr'][0]:.4f}, {c['claimed_fnr'][0]:.4f} | {c['p_values'][0]:.2g} | "
                f"{d['verdict']} | {c['certified_epsilon']:.3f} ({c['tight_to']:.3f}) | {c['noise_ratio']:.3f} | "
                f"{lr['steinke_epsilon_lb']:.3f}, {lr['fdp_epsilon_lb']:.3f} | {100 * d['test_accuracy']:.2f}% |")
    return lines


def summary(found: dict[str, list[dict]]) -> list[str]:
    lines = ["", "| case | seeds | refuted | X: median (min-max) | in noise: median | one-run f-DP / claim: median |",
             "|---|---|---|---|---|---|"]
    for case, what in CASES.items():
        got = found.get(case, [])
        if not got:
            continue
        x = [d["claimed_curve"]["tight_to"] for d in got]
        mu = [d["claimed_curve"]["noise_ratio"] for d in got]
        one = [max(d["per_score"]["likelihood_ratio"]["steinke_epsilon_lb"],
                   d["per_score"]["likelihood_ratio"]["fdp_epsilon_lb"]) / d["epsilon_claimed"] for d in got]
        refuted = sum(d["claimed_curve"]["refuted"] for d in got)
        lines.append(f"| {what} | {len(got)} | {refuted} of {len(got)} | {statistics.median(x):.3f} "
                     f"({min(x):.3f}-{max(x):.3f}) | {statistics.median(mu):.3f} | {statistics.median(one):.3f} |")
    return lines


def level() -> list[str]:
    lines = []
    for path in sorted((HERE / "simulation").glob("level*.jsonl")):
        by: dict[str, list[dict]] = {}
        for line in path.read_text().splitlines():
            d = json.loads(line)
            by.setdefault(d["name"], []).append(d)
        for name, rows in by.items():
            n, refuted = len(rows), sum(r["refuted"] for r in rows)
            upper = float(stats.beta.ppf(0.95, refuted + 1, n - refuted)) if refuted < n else 1.0
            lines.append(f"\nlevel ({path.name}, {name}): a correctly calibrated claim refuted in {refuted} of {n} "
                         f"seeds ({refuted / n:.3f}, at most {upper:.3f} at 95% (Clopper-Pearson); the test's level "
                         f"{rows[0]['beta']:g})")
    return lines


def main() -> None:
    found = runs()
    print("\n".join(run_table(found) + summary(found) + level()))


if __name__ == "__main__":
    main()
