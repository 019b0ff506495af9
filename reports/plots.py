"""Plots readable without the table: accuracy against epsilon, and what each method costs in time."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

COLOURS = {"dirichlet_softmax": "tab:blue", "dpsgd": "tab:red", "gaussian_penultimate": "tab:green",
           "pate": "tab:purple", "nonprivate": "black", "dp_least_squares": "tab:brown",
           "feature_perturbation": "tab:orange"}
_SPARE = ("tab:cyan", "tab:olive", "tab:pink", "tab:gray")


def colour(method: str) -> str:
    """A method's colour in every plot: the built-in methods' own, a plug-in's one of the spare ones (by its name,
    so the same in every report), never the next in matplotlib's cycle, which repeats the built-ins'."""
    return COLOURS.get(method) or _SPARE[zlib.crc32(method.encode()) % len(_SPARE)]


def _series(private: pd.DataFrame):
    """One series per (method and recipe, model): a method's superseded recipes or other models are their own line,
    never one zigzag through them."""
    models = private["model"].astype(str).nunique() > 1
    for (method, model), g in private.groupby(["method", "model"], sort=True):
        label = f"{method} ({model})" if models else str(method)
        base = str(method).split(" [")[0]
        yield label, base, g.sort_values("epsilon")


def series_style(label: str, rows: pd.DataFrame) -> tuple[str, str | None]:
    """(legend label, marker face): a row whose epsilon is no guarantee of the model, or whose claim an audit
    refutes, is drawn hollow and says so, never like a sound one."""
    if "guarantee" in rows and str(rows["guarantee"].iloc[0]) == "false":
        return f"{label} (no guarantee)", "white"
    verdicts = rows["verdict"].astype(str) if "verdict" in rows else pd.Series([], dtype=str)
    if any("refuted" in v and "not refuted" not in v for v in verdicts):
        return f"{label} (refuted)", "white"
    return label, None


def accuracy_vs_epsilon(board: pd.DataFrame, path: Path, dataset: str) -> Path:
    """One line per (method and recipe, model) with error bars over seeds; the non-private level as a dashed line.
    Rows whose epsilon is no guarantee of the model (the per-example releases) are drawn with hollow markers.

    Left: the whole range. Right (only where it zooms: the methods within 5 points of non-private span less than
    the whole range): zoomed on them, where the differences that matter for a choice are a fraction of a point. The
    legend sits outside the axes, so it hides no point or error bar.
    """
    private = board[[math.isfinite(e) for e in board["epsilon"]]]
    ref = board[board["method"] == "nonprivate"]
    ref_acc = float(ref["acc_mean"].iloc[0]) if not ref.empty else None
    full = _limits(private, ref_acc)
    top = private[private["acc_mean"] >= (ref_acc if ref_acc is not None else private["acc_mean"].max()) - 0.05]
    zoom = _limits(top, ref_acc) if not top.empty else None
    zooms = zoom is not None and full is not None and (zoom[1] - zoom[0]) < 0.8 * (full[1] - full[0])
    fig, axes = plt.subplots(1, 2 if zooms else 1, figsize=(13 if zooms else 8, 4.4), squeeze=False)
    axes = list(axes[0])
    for ax in axes:
        for label, base, g in _series(private):
            shown, face = series_style(label, g)
            ax.errorbar(g["epsilon"], 100 * g["acc_mean"], yerr=100 * g["acc_std"], marker="o", capsize=4,
                        label=shown, color=colour(str(base)), linestyle="--" if " [" in label else "-",
                        markerfacecolor=face)
        if ref_acc is not None:
            ax.axhline(100 * ref_acc, color="black", linestyle=":", linewidth=1, label=f"non-private ({100 * ref_acc:.2f}%)")
        if not private.empty:
            ax.set_xscale("log", base=2)
            eps = [e for i, e in enumerate(sorted(private["epsilon"].unique()))
                   if i == 0 or e > 1.15 * sorted(private["epsilon"].unique())[i - 1]]  # no two labels on one spot
            ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.set_xlabel("target epsilon (delta as in the table)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].set_title("all methods")
    if zooms:
        axes[1].set_ylim(*zoom)
        axes[1].set_title("zoom: within 5 points of non-private")
    presets = ", ".join(sorted(board["preset"].astype(str).unique()))
    models = ", ".join(sorted(board["model"].astype(str).unique()))
    fig.suptitle(f"{dataset}: accuracy at matched privacy ({presets} preset, {models})")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def _limits(rows: pd.DataFrame, ref_acc: float | None) -> tuple[float, float] | None:
    """The y range (in %) that holds every point with its error bar, and the reference, with a margin."""
    if rows.empty:
        return None
    lo = 100 * float((rows["acc_mean"] - rows["acc_std"]).min())
    hi = 100 * max(float((rows["acc_mean"] + rows["acc_std"]).max()), ref_acc or 0.0)
    if ref_acc is not None:
        lo = min(lo, 100 * ref_acc)
    return lo - 0.3, hi + 0.3


def time_bars(board: pd.DataFrame, path: Path, dataset: str) -> Path:
    """What each method costs in time, two ways. Left: a step's time as a multiple of the non-private step's, the
    study's interleaved measurement with the quartiles of its paired per-step ratios as whiskers where there is one
    (else the sequential runs' epoch times, no whisker). Right: the time to train one model, the median over the
    runs that had the cores to themselves, which an own-loop method (PATE: teachers, votes, student) has too."""
    rows = board.assign(base=board["method"].astype(str).str.split(" [", regex=False).str[0])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.8, 4.2))
    step = rows[rows["time_ratio_to_nonprivate"].notna()
                & ~rows["speed_source"].astype(str).str.startswith("whole run")].groupby("method").first()
    step = step.sort_values("time_ratio_to_nonprivate")
    _bars(left, step, step["time_ratio_to_nonprivate"], lambda v: f"×{v:.2f}", whiskers=True)
    left.axhline(1.0, color="black", linestyle=":", linewidth=1)
    left.set_ylabel("step time ÷ non-private step time")
    left.set_title("per step" + _step_sources(left, step))
    per_run = rows.groupby("method").agg(minutes=("median_run_time_s", "median"), base=("base", "first"))
    per_run = per_run.assign(minutes=per_run["minutes"] / 60).dropna().sort_values("minutes")
    ref = per_run["minutes"].get("nonprivate")
    _bars(right, per_run, per_run["minutes"], lambda v: f"{v:.1f} min" + (f"\n×{v / ref:.2f}" if ref else ""))
    right.set_ylabel("minutes to train one model")
    right.set_title("per run (median of the uncontended runs)")
    own_recipes = (rows["view"] == "own_best").any() if "view" in rows.columns else False
    for ax, data in ((left, step), (right, per_run)):
        if data.empty:
            ax.text(0.5, 0.5, ("each method at its own recipe (q, T, model):\nits cost is the whole run (right)"
                               if ax is left and own_recipes else
                               "every run was timed while other work shared\nthe cores: no speed comparison"),
                    ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])  # an empty panel says why; no axis of 0 to 1 that measures nothing
        for tick in ax.get_xticklabels():  # a long variant's name ends under its own bar, not across its neighbours'
            tick.set_rotation(25)
            tick.set_horizontalalignment("right")
    preset = ", ".join(sorted(board["preset"].astype(str).unique()))
    fig.suptitle(f"{dataset} ({preset} preset): what each method costs in time")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _step_sources(ax, step: pd.DataFrame) -> str:
    """The per-step panel's title suffix; where interleaved ratios and sequential runs' epoch ratios share the panel
    (a variant, such as DP-SGD at another relation, is not in the interleaved run), the latter's bars are hatched."""
    interleaved = step["speed_source"].astype(str).str.startswith("interleaved").to_numpy() if len(step) else []
    if not any(interleaved):
        return " (sequential runs)"
    if all(interleaved):
        return " (interleaved; whiskers: quartiles)"
    for bar, mixed in zip(ax.patches, interleaved):
        if not mixed:
            bar.set_hatch("//")
    return " (interleaved, whiskers: quartiles;\nhatched: sequential runs' epochs)"


def _bars(ax, rows: pd.DataFrame, values: pd.Series, label, whiskers: bool = False) -> None:
    """One bar per method, coloured by its base method, its value written on it; whiskers from ``speed_p25`` to
    ``speed_p75`` where the row has them."""
    if rows.empty:
        return
    base = rows["base"] if "base" in rows.columns else pd.Series(rows.index, index=rows.index)
    colours = [colour(str(b)) for b in base]
    yerr = None
    if whiskers and {"speed_p25", "speed_p75"} <= set(rows.columns) and rows["speed_p25"].notna().any():
        lo, hi = (values - rows["speed_p25"]).clip(lower=0), (rows["speed_p75"] - values).clip(lower=0)
        yerr = [lo.fillna(0).values, hi.fillna(0).values]
    bars = ax.bar([str(i) for i in rows.index], values.values, color=colours, yerr=yerr, capsize=4)
    tops = values.values + (yerr[1] if yerr is not None else 0)  # the label sits above the whisker, not on it
    for bar, value, top in zip(bars, values.values, tops):
        ax.text(bar.get_x() + bar.get_width() / 2, top, label(value), ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, float(tops.max()) * 1.3)
