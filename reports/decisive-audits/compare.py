"""mnist-cpu's replace_input rows: each audit of the committed study (made before the audits followed the claim's
relation: absent canaries) beside the same audit under the replace design (this folder's audits.csv).

    python compare.py > compare.md
"""

from pathlib import Path

import pandas as pd

HERE = Path(__file__).parent
KEY = ["method", "epsilon", "model", "canary"]
REPLACE_ROWS = ("dirichlet_softmax", "gaussian_penultimate", "dpsgd [adjacency=replace_input]", "dp_least_squares",
                "feature_perturbation")


def _bounds(row) -> str:
    """Steinke's black-box / white-box bounds, and the white-box f-DP bound of the same guesses."""
    cells = [str(row[c]).split(" (")[0].split(";")[0]
             for c in ("black-box epsilon_lb", "white-box epsilon_lb", "white-box f-DP")]
    cells = ["–" if c == "nan" else c for c in cells]
    return f"{cells[0]} / {cells[1]} (f-DP {cells[2]})"


def main() -> None:
    old = pd.read_csv(HERE.parent / "mnist-cpu" / "audits.csv")
    new = pd.read_csv(HERE / "audits.csv")
    new = new[new["preset"] == "cpu"]
    # this store names DP-SGD's option in its method column as the study does
    old = old[old["method"].isin(REPLACE_ROWS)]
    print("| method | claimed eps | canaries (model) | add/remove design (mnist-cpu study): black / white (f-DP), verdict | "
          "replace design (here): black / white (f-DP), verdict |")
    print("|---|---|---|---|---|")
    for _, o in old.sort_values(KEY).iterrows():
        match = new[(new["method"] == o["method"]) & (new["epsilon"] == o["epsilon"]) & (new["model"] == o["model"])
                    & (new["canary"] == o["canary"])]
        after = "not run" if match.empty else f"{_bounds(match.iloc[0])}, {match.iloc[0]['verdict']}"
        print(f"| {o['method']} | {o['epsilon']:g} | {o['canary']} ({o['model']}) | {_bounds(o)}, {o['verdict']} | "
              f"{after} |")


if __name__ == "__main__":
    main()
