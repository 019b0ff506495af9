"""The board: one row per recipe and budget (seeds aggregated), its time against the reference's, the interleaved
speed runs joined where they exist, and every audit of its claim read into a verdict (verdicts.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from inputdp.core import names
from inputdp.methods import METHODS, reference_method

from .load import GROUP, THREAT
from .verdicts import _join_audits


def _threat(protects: str, needs_public: str) -> str:
    text = THREAT.get(str(protects), str(protects))
    if str(needs_public).lower() == "true":
        text += "; needs public unlabeled inputs"
    return text



def _uncontended_median(g: pd.DataFrame, column: str = "median_epoch_time_s") -> float:
    times = g.loc[g["contended"] != 1, column].astype(float).dropna() if column in g.columns else pd.Series([])
    return float(np.median(times)) if len(times) else math.nan



def _own_loop(method: str) -> bool:
    """Whether a method trains in its own loop (PATE: teachers, votes, student), so that it has no per-step time and
    its "epoch" is the whole run; False for a name this checkout does not know."""

    try:
        return bool(METHODS.get(method).facts().own_loop)
    except Exception:  # noqa: BLE001 - a plug-in that is not installed here: read its rows as per-step ones
        return False



def speed_ratios(runs: pd.DataFrame) -> dict[tuple[str, str, str], dict[str, float]]:
    """(data set, preset, method) -> its median ratio to the reference, the quartiles of its paired per-step
    ratios and its memory (``ratio``, ``p25``, ``p75``, ``memory_mb``, ``memory_kind``), from the interleaved speed
    runs (kind ``speed``) that were not contended; the latest such run of a (data set, preset) wins."""
    column = f"tags.{names.TAG_KIND}"
    if runs.empty or column not in runs.columns:
        return {}
    speed = runs[runs[column] == names.KIND_SPEED].sort_values("start_time")
    out = {}
    prefix = "metrics." + names.METRIC_SPEED_RATIO.format("")
    for _, r in speed.iterrows():
        if float(r.get(f"metrics.{names.METRIC_CONTENDED}", 0) or 0) == 1:
            continue  # timed while other work shared the cores: not a speed comparison
        for col in runs.columns:
            if col.startswith(prefix) and not pd.isna(r[col]):
                label = col[len(prefix):]
                got = {"ratio": float(r[col])}
                for key, name in (("p25", names.METRIC_SPEED_P25), ("p75", names.METRIC_SPEED_P75),
                                  ("memory_mb", names.METRIC_SPEED_MEMORY)):
                    value = r.get("metrics." + name.format(label))
                    got[key] = math.nan if value is None or pd.isna(value) else float(value)
                got["memory_kind"] = str(r.get(f"params.{names.PARAM_MEMORY_KIND}", "") or "")
                out[(r[f"tags.{names.TAG_DATASET}"], r[f"tags.{names.TAG_PRESET}"], label)] = got
    return out



def leaderboard(train: pd.DataFrame, audits: pd.DataFrame | None = None,
                speed: dict[tuple[str, str, str], dict] | None = None) -> pd.DataFrame:
    if train.empty:
        return pd.DataFrame()
    rows = []
    for key, g in train.groupby(GROUP, dropna=False, sort=True):
        acc = g["test_accuracy"].astype(float)
        row = dict(zip(GROUP, key))
        row.update({
            "delta": g["delta"].iloc[0], "q": g["q"].iloc[0], "T": int(g["T"].iloc[0]),
            "seeds": int(g["seed"].nunique()),
            "view": g["view"].iloc[0],
            "configs_tried": (int(g["configs_tried"].max()) if g["configs_tried"].notna().any() else math.nan),
            "acc_mean": acc.mean(), "acc_std": acc.std(ddof=1) if len(acc) > 1 else 0.0,
            # a contended run's times are not a speed comparison: the median is of the others (NaN if none)
            "median_epoch_time_s": _uncontended_median(g),
            # the time to train one model (an own-loop method's whole pipeline; a per-step method's epochs)
            "median_run_time_s": _uncontended_median(g, "total_train_time_s"),
            "timed_runs": int((g["contended"] != 1).sum()),
            # a run's own memory only where it is attributable (a GPU's torch peak); a CPU process's resident set
            # holds what earlier runs of the process left, so it is not shown (the speed run measures it alone)
            "peak_memory_mb": (float(g["peak_memory_mb"].astype(float).max())
                               if (g["device"].astype(str).str.startswith("cuda")).all() else math.nan),
            "memory_source": ("the run's torch peak (GPU)" if (g["device"].astype(str).str.startswith("cuda")).all()
                              else "not attributable (a CPU process's RSS)"),
            "epsilon_spent": float(g["epsilon_spent"].astype(float).max()) if g["epsilon_spent"].notna().any() else math.inf,
            # PATE: the sanitised data-dependent epsilon, a report beside the claim (largest over the seeds, and
            # the smallest, so that the tables show its spread: the votes, hence the report, differ by seed)
            "epsilon_dd_sanitised": (float(g["epsilon_dd_sanitised"].astype(float).max())
                                     if g["epsilon_dd_sanitised"].notna().any() else math.nan),
            "epsilon_dd_sanitised_min": (float(g["epsilon_dd_sanitised"].astype(float).min())
                                         if g["epsilon_dd_sanitised"].notna().any() else math.nan),
            "scope": g["scope"].iloc[0],
            "accountant": g["accountant"].iloc[0],
            # "false" where the epsilon is not a guarantee of any output; "" for runs logged before the tag existed
            "guarantee": g["guarantee"].iloc[0],
            # a rigorous lower bound on what the released per-example vectors spend (the per-example curve), and
            # the paper's accountant at the same noise (identical over seeds: the calibration is deterministic)
            "vectors_lb": float(g["vectors_lb"].max()) if g["vectors_lb"].notna().any() else math.nan,
            "paper_epsilon": float(g["paper_epsilon"].max()) if g["paper_epsilon"].notna().any() else math.nan,
            "threat_model": _threat(g["protects"].iloc[0], g["needs_public_data"].iloc[0]),
            "match_key": g["match_key"].iloc[0],
            "adjacency": g["adjacency"].iloc[0] if "adjacency" in g.columns else "",
            "relation_key": g["relation"].iloc[0] if "relation" in g.columns else "",
            "covers_relations": g["covers_relations"].iloc[0] if "covers_relations" in g.columns else "",
            "protects": g["protects"].iloc[0],
            "mechanism": g["mechanism"].iloc[0] if "mechanism" in g.columns else "",
            "method_name": g["method_name"].iloc[0],
        })
        rows.append(row)
    board = pd.DataFrame(rows)
    _time_ratios(board)
    _join_speed(board, speed or {})
    _join_audits(board, audits)
    return board



def _time_ratios(board: pd.DataFrame) -> None:
    """Each row's time as a multiple of the reference's (the registered method that spends no budget, its plain
    recipe) at the same data set and preset, from the sequential runs, and where that figure comes from."""
    reference = reference_method()
    plain = (board["method_name"] == reference) & (board["method"] == reference)
    ref = board[plain].set_index(["dataset", "preset"])
    own = [_own_loop(str(m)) for m in board["method_name"]]
    # compared run for run: an own-loop method (its "epoch" is its whole pipeline) and every row of the own-best
    # view (each method's own q, T and model: neither its epoch nor its step is the reference's); else epoch for epoch
    whole = [o or v == "own_best" for o, v in zip(own, board["view"])]
    board["time_ratio_to_nonprivate"] = [
        (r.median_run_time_s / ref["median_run_time_s"].get((r.dataset, r.preset), np.nan) if w else
         r.median_epoch_time_s / ref["median_epoch_time_s"].get((r.dataset, r.preset), np.nan))
        if (r.dataset, r.preset) in ref.index else np.nan
        for r, w in zip(board.itertuples(), whole)
    ]
    # every row's whole run against the reference's, beside its per-step figure (a per-step method's run is its
    # epochs plus evaluation; an own-loop method's or an own recipe's is its only figure)
    board["whole_run_ratio"] = [
        r.median_run_time_s / ref["median_run_time_s"].get((r.dataset, r.preset), np.nan)
        if (r.dataset, r.preset) in ref.index else np.nan for r in board.itertuples()]
    board["speed_source"] = [("whole run, own recipe, sequential runs" if v == "own_best" and not o else
                              "whole run, sequential runs") if w else "sequential runs"
                             for o, v, w in zip(own, board["view"], whole)]



def _join_speed(board: pd.DataFrame, speed: dict[tuple[str, str, str], dict]) -> None:
    """An interleaved measurement of the row's method (a speed run), where there is one, wins over the sequential
    runs' clocks; so does its memory, measured alone (CPU) or as torch's peak (GPU). Not on an own-best row."""
    board["speed_p25"], board["speed_p75"] = math.nan, math.nan
    for i, r in board.iterrows():
        found = speed.get((r["dataset"], r["preset"], r["method"]))
        # an own-best row's recipe is its own (q, T, model): one step at a common batch is not what it costs
        if found is None or r["view"] == "own_best":
            continue
        board.loc[i, "time_ratio_to_nonprivate"] = found["ratio"]
        board.loc[i, "speed_source"] = f"interleaved, quartiles {found['p25']:.2f}-{found['p75']:.2f}"
        board.loc[i, "speed_p25"], board.loc[i, "speed_p75"] = found["p25"], found["p75"]
        if not math.isnan(found["memory_mb"]):
            board.loc[i, "peak_memory_mb"] = found["memory_mb"]
            board.loc[i, "memory_source"] = ("alone in a fresh process (CPU), speed run"
                                             if found["memory_kind"].startswith("CPU: each method alone")
                                             else "torch peak in the speed run (GPU)")
