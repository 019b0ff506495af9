"""Published results (``paper_results.csv``) beside the measured rows of the same data set, method and epsilon."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd


def paper_results() -> pd.DataFrame:
    with resources.files("inputdp.reports").joinpath("paper_results.csv").open() as f:
        return pd.read_csv(f)



def paper_side_by_side(board: pd.DataFrame) -> pd.DataFrame:
    """Published figures (the main paper's and the literature's, ``paper_results.csv``) next to the measured row of
    the same data set, method and epsilon. Comparable means the same model and budget, run by the preset that
    reproduces that recipe (the ``preset`` column: ``paper`` for the main paper's, ``best`` for the published
    DP-SGD recipes it carries); otherwise the row says what differs."""
    paper = paper_results()
    rows = []
    for p in paper.itertuples():
        eps = float(p.epsilon) if not pd.isna(p.epsilon) else None
        measured = board[(board["dataset"] == p.dataset) & (board["method"] == p.method)]
        if eps is not None:
            measured = measured[np.isclose(measured["epsilon"].astype(float), eps)]
        want = "" if pd.isna(getattr(p, "preset", np.nan)) else str(p.preset)
        if want and (measured["preset"] == want).any():
            measured = measured[measured["preset"] == want]
        if (measured["model"].astype(str) == str(p.model)).any():  # the row of the published model, if measured
            measured = measured[measured["model"].astype(str) == str(p.model)]
        value, comparable = "", "no run"
        if not measured.empty:
            m = measured.iloc[0]
            value = (f"{100 * m['acc_mean']:.2f}%" if p.metric == "test_accuracy"
                     else f"{m['median_epoch_time_s']:.1f} s")
            differs = []
            if not want:  # no preset of the suite reproduces the published recipe
                differs.append(f"our recipe (preset {m['preset']}), not the published one")
            elif m["preset"] != want:
                differs.append(f"preset {m['preset']}, not {want}")
            if p.metric == "test_accuracy" and str(m["model"]) != str(p.model):
                differs.append(f"model {m['model']} vs {p.model}")
            comparable = "yes" if not differs else "not comparable (" + ", ".join(differs) + ")"
        published = f"{100 * p.value:.2f}%" if p.metric == "test_accuracy" else f"~{p.value:g} s"
        rows.append({"dataset": p.dataset, "method": p.method, "epsilon": "" if eps is None else f"{eps:g}",
                     "metric": p.metric, "model": p.model, "extra data": getattr(p, "extra_data", ""),
                     "published": published, "source": p.source, "measured": value, "comparable": comparable})
    return pd.DataFrame(rows)



def _split_published(side: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(published results with a comparable run, the rest): the rest is folded away, not a wall of "no run"."""
    if side.empty or "comparable" not in side.columns:
        return side, pd.DataFrame()
    ok = side["comparable"].astype(str).str.startswith("yes")
    return side[ok], side[~ok]
