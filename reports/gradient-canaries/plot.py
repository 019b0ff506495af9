"""The likelihood-ratio score's empirical trade-off curves (runs/*_trade_off.csv, logged by each audit) against the
trade-off curve of each claim's (epsilon, delta): a run whose curve dips below its claim's is evidence against it
(the one-run bounds make that a 95% statement). python plot.py -> trade_off.png"""

import csv
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = Path(__file__).parent
PANELS = [("eps 4", ["ri_eps4", "ri_eps4_s1", "ri_eps4_s2", "ar_eps4"]),
          ("eps 1", ["ri_eps1", "ar_eps1", "ri_eps1_half", "ri_eps1_arsigma"])]
LABELS = {"ri_eps4": "replace_input, seed 0", "ri_eps4_s1": "replace_input, seed 1",
          "ri_eps4_s2": "replace_input, seed 2", "ar_eps4": "add/remove", "ri_eps1": "replace_input",
          "ar_eps1": "add/remove", "ri_eps1_half": "replace_input, half the sigma (broken)",
          "ri_eps1_arsigma": "replace_input claim, add/remove's sigma (broken)"}


def claim_curve(eps: float, delta: float, fpr: np.ndarray) -> np.ndarray:
    """The least false-negative rate an (eps, delta)-DP pair allows at each false-positive rate."""
    return np.maximum(0.0, np.maximum(1 - delta - math.exp(eps) * fpr, math.exp(-eps) * (1 - delta - fpr)))


def main() -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    for ax, (title, names) in zip(axes, PANELS):
        eps = None
        for name in names:
            path = HERE / "runs" / f"{name}.json"
            if not path.exists():
                continue
            run = json.loads(path.read_text())
            eps, delta = run["epsilon_claimed"], run["delta"]
            with open(HERE / "runs" / f"{name}_trade_off.csv") as f:
                rows = list(csv.DictReader(f))
            fpr = [float(r["fpr"]) for r in rows]
            fnr = [float(r["fnr"]) for r in rows]
            style = "--" if run["deliberately_broken"] else "-"
            ax.plot(fpr, fnr, style, lw=1.4, label=f"{LABELS.get(name, name)}: bound {run['epsilon_lb']:.2f}")
        if eps is not None:
            x = np.linspace(0, 1, 400)
            ax.plot(x, claim_curve(eps, delta, x), "k:", lw=1.6, label=f"the claim's ({eps:g}, {delta:g}) curve")
        ax.plot([0, 1], [1, 0], color="0.8", lw=0.8)
        ax.set(title=f"DP-SGD on mnist (cpu preset), {title}: 39,000 gradient canaries", xlabel="false-positive rate",
               ylabel="false-negative rate", xlim=(0, 1), ylim=(0, 1), aspect="equal")
        ax.title.set_fontsize(9)
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(HERE / "trade_off.png", dpi=110)


if __name__ == "__main__":
    main()
