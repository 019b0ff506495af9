"""The board as the tables a reader sees: the glance table (short cells), its details row for row, Markdown."""

from __future__ import annotations

import math

import pandas as pd

from inputdp.core import names
from inputdp.core.claims import ADD_REMOVE, RELATION_TEXT, REPLACE_INPUT, ZERO_OUT

from .reading import NO_GUARANTEE, REFERENCE, SOUND, covers_model, short_verdict, verdict_class
from .verdicts import GROUP_TITLES

#: a method's peak memory where it is attributable: torch's peak on a GPU; on a CPU the peak resident set of a fresh
#: process that ran only that method (the study's speed run); a CPU run's own RSS holds what earlier runs of its
#: process left and is not shown
MEMORY = "peak memory MB (how measured)"
#: time against the non-private reference's, two figures never mixed in one column: a step (interleaved with the
#: reference's where a speed run measured it, else the sequential runs' epochs) and the whole run (a model trained)
STEP, WHOLE_RUN = "per step (x non-private)", "whole run (x non-private)"



#: the table read at a glance: one row per (data set, method and recipe, epsilon), in the order a reader asks
#: short cells only: which accountant, the neighbouring relation, whether the epsilon is a guarantee of the released
#: model, the two bounds and the verdict in a few words; the full texts are in the details (and, in the HTML, each
#: short cell's tooltip: TOOLTIPS)
GLANCE = ["dataset", "method", "model", "epsilon", "accuracy % (n)", STEP, WHOLE_RUN, "accountant", "relation",
          "guarantee", "black-box lb", "white-box lb", "verdict"]



#: and its details, row for row
DETAILS = ["dataset", "method", "epsilon", "preset", "view", "model", "q", "T", "delta", "seeds",
           "configs tried", "median_epoch_time_s", "speed (x non-private)", MEMORY, "epsilon_spent", "vectors spend at least",
           "paper's accountant at this noise", "sanitised data-dependent epsilon", "threat_model",
           "the claim and what it covers", "black-box epsilon_lb", "white-box epsilon_lb", "mechanism audit",
           "verdict in full"]



#: the glance table's short cells and the full text each one's HTML tooltip shows
TOOLTIPS = {"accountant": "the claim and what it covers", "guarantee": "the claim and what it covers",
            "black-box lb": "black-box epsilon_lb", "white-box lb": "white-box epsilon_lb", "verdict": "verdict in full"}



#: the neighbouring relations, as the glance table names them (a run logs the relation's key or its text)
RELATION_SHORT = {ADD_REMOVE: "add/remove", REPLACE_INPUT: "replace one input", ZERO_OUT: "zero-out",
                  RELATION_TEXT[ADD_REMOVE]: "add/remove", RELATION_TEXT[REPLACE_INPUT]: "replace one input",
                  RELATION_TEXT[ZERO_OUT]: "zero-out"}



COLUMNS = ["dataset", "preset", "view", "model", "method", "epsilon", "accountant", "delta", "q", "T", "seeds",
           "configs tried", "test_accuracy",
           "median_epoch_time_s", "time_ratio_to_nonprivate", "peak_memory_mb", "epsilon_spent",
           "vectors spend at least", "paper's accountant at this noise",
           "sanitised data-dependent epsilon", "scope",
           "threat_model", "black-box epsilon_lb", "white-box epsilon_lb", "verdict"]



def display_table(board: pd.DataFrame) -> pd.DataFrame:
    t = board.copy()
    # what each row's audits say, read from its columns (reading.py) before they are formatted for display
    rows = [r for _, r in board.iterrows()]
    t["covers"] = [covers_model(r) for r in rows]
    t["verdict short"] = [short_verdict(r) for r in rows]
    t["verdict class"] = [verdict_class(r) for r in rows]
    t["test_accuracy"] = [f"{100 * m:.2f} ± {100 * s:.2f}" for m, s in zip(t["acc_mean"], t["acc_std"])]
    t["epsilon"] = ["∞ (none)" if not math.isfinite(e) else f"{e:g}" for e in t["epsilon"]]
    t["epsilon_spent"] = ["∞" if not math.isfinite(e) else f"{e:.3f}" for e in t["epsilon_spent"]]
    t["configs tried"] = ["" if pd.isna(n) else str(int(n)) for n in t["configs_tried"]]
    t["sanitised data-dependent epsilon"] = [  # its range over the seeds; one value where they agree
        "" if pd.isna(hi) else f"{hi:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f} to {hi:.3f}"
        for lo, hi in zip(t["epsilon_dd_sanitised_min"], t["epsilon_dd_sanitised"])]
    for col in ("vectors_lb", "paper_epsilon", "accountant", "guarantee", "mechanism audit"):
        if col not in t.columns:  # a board built from runs logged before these existed
            t[col] = math.nan if col in ("vectors_lb", "paper_epsilon") else ""
    t["vectors spend at least"] = ["" if pd.isna(e) else f"{e:.3f}" for e in t["vectors_lb"]]
    t["paper's accountant at this noise"] = ["" if pd.isna(e) else f"{e:.3f}" for e in t["paper_epsilon"]]
    t["accountant"] = [f"{a} (not a guarantee)" if str(g) == "false" and a else a
                       for a, g in zip(t["accountant"], t["guarantee"])]
    t["q"] = [f"{q:.5g}" for q in t["q"]]
    # NaN: every run of the row was timed while other work shared the cores (not a speed comparison)
    t["median_epoch_time_s"] = ["contended" if pd.isna(x) else f"{x:.2f}" for x in t["median_epoch_time_s"]]
    t["time_ratio_to_nonprivate"] = ["" if pd.isna(x) else f"{x:.2f}" for x in t["time_ratio_to_nonprivate"]]
    t["peak_memory_mb"] = ["" if pd.isna(x) else f"{x:.0f}" for x in t["peak_memory_mb"]]
    source = t["memory_source"] if "memory_source" in t.columns else pd.Series("", index=t.index)
    t[MEMORY] = [f"{m} ({s})" if m else str(s) for m, s in zip(t["peak_memory_mb"], source)]
    for threat in names.THREATS:
        t[f"{threat.replace('_', '-')} epsilon_lb"] = [
            "" if pd.isna(x) else f"{x:.2f} ({kinds})" if n == 1 else f"{x:.2f} (largest of {n}: {kinds})"
            for x, n, kinds in zip(t[f"{threat}_lb"], t[f"{threat}_audits"], t[f"{threat}_kinds"])]
    # one seed has no spread to show: "98.88 (1)", not "± 0.00"
    t["accuracy % (n)"] = [f"{100 * m:.2f} ± {100 * s:.2f} ({int(n)})" if n > 1 else f"{100 * m:.2f} (1)"
                           for m, s, n in zip(t["acc_mean"], t["acc_std"], t["seeds"])]
    source = t["speed_source"] if "speed_source" in t.columns else pd.Series("sequential runs", index=t.index)
    t[STEP] = ["" if r == "" or str(s).startswith("whole run") else
               f"{r} (interleaved)" if str(s).startswith("interleaved") else f"{r} (epochs)"
               for r, s in zip(t["time_ratio_to_nonprivate"], source)]
    whole = t["whole_run_ratio"] if "whole_run_ratio" in t.columns else pd.Series(math.nan, index=t.index)
    t[WHOLE_RUN] = ["" if pd.isna(w) else f"{float(w):.2f}" for w in whole]
    # the speed figure with its source in full (the details)
    t["speed (x non-private)"] = ["" if r == "" else f"{r} ({s})" for r, s in zip(t["time_ratio_to_nonprivate"], source)]
    # the claim in full, caveat included: which accountant, and every released value it covers and does not
    t["the claim and what it covers"] = [f"{a}: {s}" if a else str(s) for a, s in zip(t["accountant"], t["scope"])]
    _short_cells(t)
    order = {SOUND: 0, REFERENCE: 1, NO_GUARANTEE: 2}
    return t.iloc[sorted(range(len(t)), key=lambda i: order[t["covers"].iloc[i]])]



def _short_cells(t: pd.DataFrame) -> None:
    """The glance table's cells: a few words each (their full texts stay in the details)."""
    private = [math.isfinite(float(e)) for e in t["epsilon"].replace("∞ (none)", "inf")]
    t["accountant"] = [str(a).split(" (")[0] if p else "" for a, p in zip(t["accountant"], private)]
    adjacency = t["adjacency"] if "adjacency" in t.columns else pd.Series("", index=t.index)
    t["relation"] = [RELATION_SHORT.get(str(a), "" if pd.isna(a) else str(a)) if p else ""
                     for a, p in zip(adjacency, private)]
    t["guarantee"] = ["" if not p else "no" if str(g) == "false" else "yes" for g, p in zip(t["guarantee"], private)]
    for threat in names.THREATS:
        t[f"{threat.replace('_', '-')} lb"] = [
            "" if pd.isna(x) else f"{x:.2f}" if n == 1 else f"{x:.2f} ({n} audits)"
            for x, n in zip(t[f"{threat}_lb"], t[f"{threat}_audits"])]
    t["verdict in full"] = t["verdict"]
    t["verdict"] = t["verdict short"]



def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub Markdown table (no extra dependency)."""
    cols = [str(c) for c in df.columns]
    cell = lambda v: str(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)



def _grouped_markdown(glance: pd.DataFrame, covers: pd.Series) -> list[str]:
    """The glance table as one table per group (sound, reference, no guarantee), so that a row whose claim does
    not cover the model is never read among the sound ones."""
    lines = []
    for group, title in GROUP_TITLES.items():
        rows = glance[(covers == group).to_numpy()]
        if not rows.empty:
            lines += [f"### {title}", "", to_markdown(rows), ""]
    return lines
