"""Plots readable without the table: accuracy against epsilon, and epoch time with the ratio to non-private."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

COLOURS = {"dirichlet_softmax": "tab:blue", "dpsgd": "tab:red", "gaussian_penultimate": "tab:green",
           "pate": "tab:purple", "nonprivate": "black"}


def accuracy_vs_epsilon(board: pd.DataFrame, path: Path, dataset: str) -> Path:
    """One line per private method with error bars over seeds; the non-private level as a dashed line.

    Left: the whole range. Right: zoomed on the methods within 5 points of non-private, where the differences
    that matter for a choice are a fraction of a point.
    """
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    private = board[[math.isfinite(e) for e in board["epsilon"]]]
    ref = board[board["method"] == "nonprivate"]
    ref_acc = float(ref["acc_mean"].iloc[0]) if not ref.empty else None
    for ax in axes:
        for method, g in private.groupby("method"):
            g = g.sort_values("epsilon")
            ax.errorbar(g["epsilon"], 100 * g["acc_mean"], yerr=100 * g["acc_std"], marker="o", capsize=4,
                        label=method, color=COLOURS.get(method))
        if ref_acc is not None:
            ax.axhline(100 * ref_acc, color="black", linestyle="--", linewidth=1, label=f"non-private ({100 * ref_acc:.2f}%)")
        if not private.empty:
            ax.set_xscale("log", base=2)
            eps = sorted(private["epsilon"].unique())
            ax.set_xticks(eps, [f"{e:g}" for e in eps])
        ax.set_xlabel("target epsilon (delta as in the table)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].set_title("all methods")
    top = private[private["acc_mean"] >= (ref_acc if ref_acc is not None else private["acc_mean"].max()) - 0.05]
    if not top.empty:
        lo = 100 * float((top["acc_mean"] - top["acc_std"]).min()) - 0.3
        hi = 100 * max(float((top["acc_mean"] + top["acc_std"]).max()), ref_acc or 0.0) + 0.3
        axes[1].set_ylim(lo, hi)
    axes[1].set_title("zoom: within 5 points of non-private")
    presets = ", ".join(sorted(board["preset"].astype(str).unique()))
    models = ", ".join(sorted(board["model"].astype(str).unique()))
    fig.suptitle(f"{dataset}: accuracy at matched privacy ({presets} preset, {models})")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def epoch_time_bars(board: pd.DataFrame, path: Path, dataset: str) -> Path:
    """Median epoch time per method (over its runs), the ratio to non-private written on each bar."""
    # contended timings are NaN (not a speed comparison): left out; with none left, the plot says so
    per = board.groupby("method")["median_epoch_time_s"].median().dropna().sort_values()
    ref = per.get("nonprivate")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    if per.empty:
        ax.text(0.5, 0.5, "every run was timed while other work shared the cores:\nno speed comparison",
                ha="center", va="center", transform=ax.transAxes)
    bars = ax.bar(per.index, per.values, color=[COLOURS.get(m, "grey") for m in per.index])
    for bar, value in zip(bars, per.values):
        label = f"{value:.1f} s" + (f"\n×{value / ref:.2f}" if ref else "")
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), label, ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("median epoch time (s)")
    preset = ", ".join(sorted(board["preset"].astype(str).unique()))
    ax.set_title(f"{dataset} ({preset} preset): training time per epoch (ratio to non-private)")
    ax.set_ylim(0, per.max() * 1.3 if len(per) else 1)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
