"""Plots readable without the table: accuracy against epsilon, and what each method costs in time."""

from __future__ import annotations

import zlib
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from .leaderboard.reading import reading

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
    """(legend label, marker face): a row whose claim an audit refutes says "refuted" (its reading, from the board's
    columns), one whose epsilon is no guarantee of the model says so; both are drawn hollow, never like a sound one."""
    if any(reading(r).refuted for _, r in rows.iterrows()):
        return f"{label} (refuted)", "white"
    if "guarantee" in rows and str(rows["guarantee"].iloc[0]) == "false":
        return f"{label} (no guarantee)", "white"
    return label, None


def accuracy_vs_epsilon(panels: list[tuple[str, pd.DataFrame]], reference: pd.DataFrame, path: Path,
                        title: str) -> Path:
    """One row of axes per panel (a relation's sound rows, each relation apart as they are not matched; the rows
    without a guarantee for the model in a panel of their own): one line per (method and recipe, model) with error
    bars over seeds, the non-private level as a dotted line in each.

    Left: the panel's whole range. Right (only where it zooms: the rows within 5 points of non-private span less than
    the whole range): zoomed on them, where the differences that matter for a choice are a fraction of a point. The
    legend sits outside the axes, so it hides no point or error bar."""
    ref_acc = float(reference["acc_mean"].iloc[0]) if not reference.empty else None
    layout = []
    for name, rows in panels:
        full = _limits(rows, ref_acc)
        top = rows[rows["acc_mean"] >= (ref_acc if ref_acc is not None else rows["acc_mean"].max()) - 0.05]
        zoom = _limits(top, ref_acc) if not top.empty else None
        zooms = (zoom is not None and full is not None and (zoom[1] - zoom[0]) < 0.8 * (full[1] - full[0])
                 and not name.startswith("no guarantee"))  # no choice is made among those: no zoom
        layout.append((name, rows, zoom if zooms else None))
    cols = 2 if any(z for *_, z in layout) else 1
    fig, axes = plt.subplots(max(1, len(layout)), cols, figsize=(13 if cols == 2 else 8, 0.6 + 3.6 * max(1, len(layout))),
                             squeeze=False)
    every = sorted({float(e) for _, rows in panels for e in rows["epsilon"]})
    ticks = [e for i, e in enumerate(every) if i == 0 or e > 1.15 * every[i - 1]]  # no two labels on one spot
    for k, (name, rows, zoom) in enumerate(layout):
        shown_axes = [axes[k][0]] + ([axes[k][1]] if zoom else [])
        if cols == 2 and not zoom:
            axes[k][1].set_visible(False)  # no empty panel
        for ax in shown_axes:
            for label, base, g in _series(rows):
                shown, face = series_style(label, g)
                ax.errorbar(g["epsilon"], 100 * g["acc_mean"], yerr=100 * g["acc_std"], marker="o", capsize=4,
                            label=shown, color=colour(str(base)), linestyle="--" if " [" in label else "-",
                            markerfacecolor=face)
            if ref_acc is not None:
                ax.axhline(100 * ref_acc, color="black", linestyle=":", linewidth=1,
                           label=f"non-private ({100 * ref_acc:.2f}%)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [f"{e:g}" for e in ticks])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
            ax.set_ylabel("test accuracy (%)")
        shown_axes[0].set_title(name, fontsize=10, loc="left")
        if zoom:
            shown_axes[1].set_ylim(*zoom)
            shown_axes[1].set_title("zoom: within 5 points of non-private", fontsize=10)
        shown_axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    for ax in axes[-1]:
        ax.set_xlabel("target epsilon (delta as in the table)")
    if not layout:
        axes[0][0].text(0.5, 0.5, "no private row", ha="center", va="center", transform=axes[0][0].transAxes)
    fig.suptitle(title)
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
    (else the sequential runs' epoch times, no whisker); left out where no row has one (each method at its own
    recipe: its cost is its whole run). Right: the time to train one model, the median over the runs that had the
    cores to themselves, which an own-loop method (PATE: teachers, votes, student) has too; in seconds where every
    run took under two minutes, so that no two bars read the same label."""
    rows = board.assign(base=board["method"].astype(str).str.split(" [", regex=False).str[0])
    step = rows[rows["time_ratio_to_nonprivate"].notna()
                & ~rows["speed_source"].astype(str).str.startswith("whole run")].groupby("method").first()
    step = step.sort_values("time_ratio_to_nonprivate")
    per_run = rows.groupby("method").agg(seconds=("median_run_time_s", "median"), base=("base", "first"))
    per_run = per_run.dropna().sort_values("seconds")
    panels = (["step"] if not step.empty else []) + (["run"] if not per_run.empty else [])
    # a panel's width grows with its bars, so that no two labels on them overlap
    widths = [max(4.0, 0.95 * len(step) + 1.5) if p == "step" else max(4.0, 0.95 * len(per_run) + 1.5) for p in panels]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(max(6.4, sum(widths)), 4.2), squeeze=False,
                             gridspec_kw={"width_ratios": widths} if widths else None)
    axes = list(axes[0])
    if "step" in panels:
        left = axes[0]
        _bars(left, step, step["time_ratio_to_nonprivate"], lambda v: f"×{v:.2f}", whiskers=True)
        left.axhline(1.0, color="black", linestyle=":", linewidth=1)
        left.set_ylabel("step time ÷ non-private step time")
        left.set_title("per step" + _step_sources(left, step))
    if "run" in panels:
        right = axes[-1]
        unit, values, labels = run_time_labels(per_run["seconds"], reference="nonprivate")
        _bars(right, per_run, values, labels)
        right.set_ylabel(f"{unit} to train one model")
        right.set_title("per run (median of the uncontended runs)")
    if not panels:  # one panel that says why there is no comparison; no axis of 0 to 1 that measures nothing
        axes[0].text(0.5, 0.5, "every run was timed while other work shared\nthe cores: no speed comparison",
                     ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_xticks([])
        axes[0].set_yticks([])
    for ax in axes:
        for tick in ax.get_xticklabels():  # a long variant's name ends under its own bar, not across its neighbours'
            tick.set_rotation(25)
            tick.set_horizontalalignment("right")
    preset = ", ".join(sorted(board["preset"].astype(str).unique()))
    fig.suptitle(f"{dataset} ({preset} preset): what each method costs in time")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_time_labels(seconds: pd.Series, reference: str | None = None) -> tuple[str, pd.Series, list[str]]:
    """(the unit, the values in it, each bar's label): minutes where some run took two minutes or more, else
    seconds; three significant figures under 10, so that runs a few percent apart never read the same label; the
    ratio to the reference's where it is among them."""
    minutes = float(seconds.max()) >= 120
    unit, short = ("minutes", "min") if minutes else ("seconds", "s")
    values = seconds / (60.0 if minutes else 1.0)
    ref = values.get(reference) if reference is not None else None
    labels = [(f"{v:.1f} {short}" if v >= 10 else f"{v:.2f} {short}") + (f"\n×{v / ref:.2f}" if ref else "")
              for v in values]
    return unit, values, labels


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
    texts = label if isinstance(label, list) else [label(v) for v in values.values]
    for bar, text, top in zip(bars, texts, tops):
        ax.text(bar.get_x() + bar.get_width() / 2, top, text, ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, float(tops.max()) * 1.3)
