"""The likelihood-ratio score's empirical trade-off curves (runs/CASE_sSEED_trade_off.csv, each audit's logged table)
against the claim's own curve (its accountant's, dp_accounting's PLD at the claim's sigma), as the gap between them:
the false-negative rate a run reaches minus the least one the claim allows at the same false-positive rate. Below 0
the run does better than the claim allows; the claimed-curve test (its point marked) turns that into a 99% statement.
python plot.py -> trade_off.png"""

import csv
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from inputdp.methods.accounting.accountants import GaussianSteps, accountant  # noqa: E402

HERE = Path(__file__).parent
PANELS = [("eps 1, replace_input", ["ri_eps1", "ri_eps1_arsigma", "ri_eps1_half"]),
          ("eps 1, add/remove and zero-out", ["ar_eps1", "zo_eps1"]), ("eps 4", ["ri_eps4", "ar_eps4", "zo_eps4"])]
LABELS = {"ri_eps1": "correct sigma", "ri_eps1_arsigma": "add/remove's sigma (broken)",
          "ri_eps1_half": "half the sigma (broken)", "ar_eps1": "add/remove", "zo_eps1": "zero-out",
          "ri_eps4": "replace_input", "ar_eps4": "add/remove", "zo_eps4": "zero-out"}
COLOURS = {"ri_eps1": "tab:blue", "ri_eps1_arsigma": "tab:orange", "ri_eps1_half": "tab:red", "ar_eps1": "tab:green",
           "zo_eps1": "tab:purple", "ri_eps4": "tab:blue", "ar_eps4": "tab:green", "zo_eps4": "tab:purple"}


def claimed(run: dict):
    """The claim's curve: its release family at the claim's sigma, read by the PLD accountant."""
    family = GaussianSteps(256 / 60000, int(run["steps"]), run["relation"])
    return accountant("pld").trade_off(family, run["noise_multiplier_claimed"])


def main() -> None:
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4.2))
    for ax, (title, cases) in zip(axes, PANELS):
        for case in cases:
            for i, path in enumerate(sorted((HERE / "runs").glob(f"{case}_s[0-9].json"))):
                run = json.loads(path.read_text())
                table = path.with_name(f"{path.stem}_trade_off.csv")
                if not table.exists():
                    continue
                with open(table) as f:
                    rows = list(csv.DictReader(f))
                fpr = np.array([float(r["fpr"]) for r in rows])
                fnr = np.array([float(r["fnr"]) for r in rows])
                curve = claimed(run)
                keep = (fpr > 0.01) & (fpr < 0.99)
                ax.plot(fpr[keep], fnr[keep] - curve(fpr[keep]), color=COLOURS.get(case), lw=1.0, alpha=0.8,
                        label=LABELS.get(case, case) if i == 0 else None)
                c = run["claimed_curve"]
                ax.plot(c["fpr"][0], c["fnr"][0] - c["claimed_fnr"][0], "o", color=COLOURS.get(case), ms=5,
                        mfc="white" if c["refuted"] else COLOURS.get(case))
        ax.axhline(0, color="k", lw=0.8, ls=":")
        ax.set(title=f"{title}: FNR minus the claim's least FNR", xlabel="false-positive rate",
               ylabel="gap to the claimed curve")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("DP-SGD on mnist (cpu preset), 39,000 gradient canaries a run; dots: the test's threshold "
                 "(hollow: refuted at 0.01)", fontsize=9)
    fig.tight_layout()
    fig.savefig(HERE / "trade_off.png", dpi=110)


if __name__ == "__main__":
    main()
