"""The README answer's "search charged" cell: a row's method with its recipe search inside the epsilon, from
reports/charged-search/charged.csv (its table.py), and the price of the search in points of accuracy."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from inputdp.core.claims import RELATIONS
from inputdp.reports.leaderboard.tables import RELATION_SHORT

#: the answer's relation words -> the relation keys the charged searches are stored under
RELATION_KEYS = {short: key for key, short in RELATION_SHORT.items() if key in RELATIONS}
HEAD = "search charged (price)"


def charged_searches(reports: Path) -> pd.DataFrame:
    path = reports / "charged-search" / "charged.csv"
    return pd.read_csv(path) if path.exists() else pd.DataFrame()


def charged_cell(found: pd.DataFrame, dataset: str, relation: str, epsilon: str, method: str) -> str:
    """"97.50 (3; 0.69 points)": the charged searches' median test accuracy (the number of searches; the price: the
    uncharged row's mean minus the charged searches' mean, in points), "not run" where no search of the row is
    stored."""
    if found.empty:
        return "not run"
    name, key = method.split(" ")[0], RELATION_KEYS.get(relation, relation)
    hit = found[(found["dataset"] == dataset) & (found["method"] == name) & (found["relation_key"] == key)
                & (found["epsilon"].map(lambda e: f"{e:g}") == epsilon)]
    if hit.empty:
        return "not run"
    r = hit.iloc[0]
    price = "" if pd.isna(r["price_points"]) else f"; {r['price_points']:.2f} points"
    return f"{r['charged_median']:.2f} ({int(r['charged_seeds'])}{price})"
