"""The leaderboard: finished MLflow runs -> tables (Markdown, CSV, HTML) and plots, with the paper side by side.

Runs are grouped by (data set, preset, model, method, epsilon); seeds are aggregated (mean +- std of test
accuracy). Audit runs (tag ``kind = audit``) give the audited epsilon lower bound of the configuration they audit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from inputdp.benchmarks import names

GROUP = ["dataset", "preset", "model", "method", "epsilon"]
THREAT = {
    "nothing": "no privacy",
    "inputs": "inputs private; labels public",
    "inputs and labels": "inputs and labels private",
}


def paper_results() -> pd.DataFrame:
    with resources.files("inputdp.reports").joinpath("paper_results.csv").open() as f:
        return pd.read_csv(f)


def load_runs(tracking_uri: str | None = None, experiment: str = "inputdp") -> pd.DataFrame:
    """Every FINISHED run of the experiment as one row (MLflow ``search_runs`` into pandas)."""
    import mlflow

    from inputdp.benchmarks.tracking import default_tracking_uri, open_store

    uri = tracking_uri or default_tracking_uri()
    if open_store(uri, experiment, create=False)[1] is None:
        return pd.DataFrame()
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(experiment_names=[experiment], filter_string="attributes.status = 'FINISHED'",
                              max_results=100000)


def _col(df: pd.DataFrame, name: str, default=np.nan) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(default, index=df.index)


def _method_label(method: pd.Series, precision: pd.Series) -> pd.Series:
    """A run in another precision than float32 is its own row: "dirichlet_softmax [bf16]"."""
    other = precision.notna() & (precision != "float32")
    return method.where(~other, method + " [" + precision.astype(str) + "]")


def tidy(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training runs, audit runs), one row per run with plain column names."""
    if runs.empty:
        return pd.DataFrame(columns=[*GROUP, "seed"]), pd.DataFrame()
    kind = _col(runs, f"tags.{names.TAG_KIND}", "train").fillna("train")
    out = pd.DataFrame({
        "run_id": runs["run_id"],
        "dataset": _col(runs, f"tags.{names.TAG_DATASET}"),
        "preset": _col(runs, f"tags.{names.TAG_PRESET}"),
        "model": _col(runs, f"params.{names.PARAM_MODEL}"),
        "method": _method_label(_col(runs, f"tags.{names.TAG_METHOD}"), _col(runs, f"tags.{names.TAG_PRECISION}")),
        "epsilon": pd.to_numeric(_col(runs, f"params.{names.PARAM_EPSILON}"), errors="coerce"),
        "delta": pd.to_numeric(_col(runs, f"params.{names.PARAM_DELTA}"), errors="coerce"),
        "q": pd.to_numeric(_col(runs, f"params.{names.PARAM_SAMPLING_RATE}"), errors="coerce"),
        "T": pd.to_numeric(_col(runs, f"params.{names.PARAM_STEPS}"), errors="coerce"),
        "seed": _col(runs, f"tags.{names.TAG_SEED}"),
        "match_key": _col(runs, f"tags.{names.TAG_MATCH_KEY}"),
        "norm": _col(runs, f"tags.{names.TAG_NORM}"),
        "test_accuracy": _col(runs, f"metrics.{names.METRIC_FINAL_TEST_ACCURACY}"),
        "median_epoch_time_s": _col(runs, f"metrics.{names.METRIC_MEDIAN_EPOCH_TIME}"),
        "peak_memory_mb": _col(runs, f"metrics.{names.METRIC_PEAK_MEMORY}"),
        "epsilon_spent": _col(runs, f"metrics.{names.METRIC_FINAL_EPSILON_SPENT}").fillna(
            _col(runs, f"metrics.{names.METRIC_EPSILON_SPENT}")),
        "scope": _col(runs, f"tags.{names.TAG_PRIVACY_SCOPE}"),
        "protects": _col(runs, f"tags.{names.TAG_PRIVACY_PROTECTS}"),
        "needs_public_data": _col(runs, f"tags.{names.TAG_PRIVACY_NEEDS_PUBLIC_DATA}"),
        "epsilon_lb": _col(runs, f"metrics.{names.METRIC_EPSILON_LB}"),
        "audit_of": _col(runs, f"tags.{names.TAG_AUDIT_OF}"),
        "kind": kind,
    })
    return out[out["kind"] != names.KIND_AUDIT].copy(), out[out["kind"] == names.KIND_AUDIT].copy()


def _threat(protects: str, needs_public: str) -> str:
    text = THREAT.get(str(protects), str(protects))
    if str(needs_public).lower() == "true":
        text += "; needs public unlabeled inputs"
    return text


def leaderboard(train: pd.DataFrame, audits: pd.DataFrame | None = None) -> pd.DataFrame:
    if train.empty:
        return pd.DataFrame()
    rows = []
    for key, g in train.groupby(GROUP, dropna=False, sort=True):
        acc = g["test_accuracy"].astype(float)
        row = dict(zip(GROUP, key))
        row.update({
            "delta": g["delta"].iloc[0], "q": g["q"].iloc[0], "T": int(g["T"].iloc[0]),
            "seeds": int(g["seed"].nunique()),
            "acc_mean": acc.mean(), "acc_std": acc.std(ddof=1) if len(acc) > 1 else 0.0,
            "median_epoch_time_s": float(np.median(g["median_epoch_time_s"].astype(float))),
            "peak_memory_mb": float(g["peak_memory_mb"].astype(float).max()),
            "epsilon_spent": float(g["epsilon_spent"].astype(float).max()) if g["epsilon_spent"].notna().any() else math.inf,
            "scope": g["scope"].iloc[0],
            "threat_model": _threat(g["protects"].iloc[0], g["needs_public_data"].iloc[0]),
            "match_key": g["match_key"].iloc[0],
            "protects": g["protects"].iloc[0],
        })
        rows.append(row)
    board = pd.DataFrame(rows)
    # the reference is the method that protects nothing (the non-private baseline), whatever its name
    ref = board[board["protects"] == "nothing"].set_index(["dataset", "preset"])["median_epoch_time_s"]
    board["time_ratio_to_nonprivate"] = [
        r.median_epoch_time_s / ref.get((r.dataset, r.preset), np.nan) if (r.dataset, r.preset) in ref.index else np.nan
        for r in board.itertuples()
    ]
    # each audit is its own 95% statement; the largest of several is shown with their number, since the
    # largest of n bounds is not itself a 95% bound
    board["audited_epsilon_lb"] = np.nan
    board["audits"] = 0
    if audits is not None and not audits.empty:
        for i, r in board.iterrows():
            hit = audits[(audits["audit_of"] == r["match_key"]) & (audits["method"] == r["method"])]
            if not hit.empty:
                board.loc[i, "audited_epsilon_lb"] = hit["epsilon_lb"].astype(float).max()
                board.loc[i, "audits"] = len(hit)
    return board


COLUMNS = ["dataset", "preset", "model", "method", "epsilon", "delta", "q", "T", "seeds", "test_accuracy",
           "median_epoch_time_s", "time_ratio_to_nonprivate", "peak_memory_mb", "epsilon_spent", "scope",
           "threat_model", "audited_epsilon_lb"]


def display_table(board: pd.DataFrame) -> pd.DataFrame:
    t = board.copy()
    t["test_accuracy"] = [f"{100 * m:.2f} ± {100 * s:.2f}" for m, s in zip(t["acc_mean"], t["acc_std"])]
    t["epsilon"] = ["∞ (none)" if not math.isfinite(e) else f"{e:g}" for e in t["epsilon"]]
    t["epsilon_spent"] = ["∞" if not math.isfinite(e) else f"{e:.3f}" for e in t["epsilon_spent"]]
    t["q"] = [f"{q:.5g}" for q in t["q"]]
    t["median_epoch_time_s"] = [f"{x:.2f}" for x in t["median_epoch_time_s"]]
    t["time_ratio_to_nonprivate"] = ["" if pd.isna(x) else f"{x:.2f}" for x in t["time_ratio_to_nonprivate"]]
    t["peak_memory_mb"] = [f"{x:.0f}" for x in t["peak_memory_mb"]]
    t["audited_epsilon_lb"] = ["" if pd.isna(x) else f"{x:.2f}" if n == 1 else f"{x:.2f} (largest of {n} audits)"
                               for x, n in zip(t["audited_epsilon_lb"], t["audits"])]
    t["scope"] = [str(s).split(";")[0] for s in t["scope"]]  # the full text is in the CSV
    return t[COLUMNS]


def paper_side_by_side(board: pd.DataFrame) -> pd.DataFrame:
    """The paper's published figures next to the measured figure of the same data set, method and epsilon."""
    paper = paper_results()
    rows = []
    for p in paper.itertuples():
        eps = float(p.epsilon) if not pd.isna(p.epsilon) else None
        measured = board[(board["dataset"] == p.dataset) & (board["method"] == p.method)]
        if eps is not None:
            measured = measured[np.isclose(measured["epsilon"].astype(float), eps)]
        value, preset = "", ""
        if not measured.empty:
            m = measured.iloc[0]
            preset = m["preset"]
            value = (f"{100 * m['acc_mean']:.2f}%" if p.metric == "test_accuracy"
                     else f"{m['median_epoch_time_s']:.1f} s")
        published = f"{100 * p.value:.2f}%" if p.metric == "test_accuracy" else f"~{p.value:g} s"
        comparable = "" if not value else ("yes" if preset == "paper" else f"not comparable (preset {preset})")
        rows.append({"dataset": p.dataset, "method": p.method, "epsilon": "" if eps is None else f"{eps:g}",
                     "metric": p.metric, "paper": published, "source": p.source, "measured": value,
                     "comparable": comparable or "no run"})
    return pd.DataFrame(rows)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class ReportFiles:
    markdown: Path
    csv: Path
    html: Path
    plots: list[Path]


def write_report(board: pd.DataFrame, out: Path, *, title: str = "inputdp leaderboard", stamp: str = "") -> ReportFiles:
    from .plots import accuracy_vs_epsilon, epoch_time_bars

    out.mkdir(parents=True, exist_ok=True)
    table = display_table(board) if not board.empty else pd.DataFrame(columns=COLUMNS)
    side = paper_side_by_side(board) if not board.empty else pd.DataFrame()
    csv = out / "leaderboard.csv"
    raw = board.drop(columns=["match_key"], errors="ignore")
    raw.to_csv(csv, index=False)
    plots: list[Path] = []
    # one pair of plots per (data set, preset): runs of different presets are never drawn on one line
    pairs = sorted(board[["dataset", "preset"]].dropna().drop_duplicates().itertuples(index=False)) if not board.empty else []
    for dataset, preset in pairs:
        sub = board[(board["dataset"] == dataset) & (board["preset"] == preset)]
        plots.append(accuracy_vs_epsilon(sub, out / f"accuracy_vs_epsilon_{dataset}_{preset}.png", dataset))
        plots.append(epoch_time_bars(sub, out / f"epoch_time_{dataset}_{preset}.png", dataset))
    md = out / "leaderboard.md"
    lines = [f"# {title}", ""]
    if stamp:
        lines += [stamp, ""]
    lines += [to_markdown(table) if not table.empty else "(no finished runs)", ""]
    if not side.empty:
        lines += ["## The paper side by side", "", to_markdown(side), ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    md.write_text("\n".join(lines) + "\n")
    html = out / "leaderboard.html"
    imgs = "".join(f'<p><img src="{p.name}" alt="{p.stem}" width="640"></p>' for p in plots)
    html.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:4px 8px} th{background:#eee}</style></head><body>"
        f"<h1>{title}</h1><p>{stamp}</p>{table.to_html(index=False, escape=True)}"
        + (f"<h2>The paper side by side</h2>{side.to_html(index=False)}" if not side.empty else "")
        + f"{imgs}</body></html>\n"
    )
    return ReportFiles(md, csv, html, plots)
