"""Writing a report: leaderboard.md, leaderboard.csv, leaderboard.html (its script a static file, page.js) and the
plots; a store of audits alone as its audit table."""

from __future__ import annotations

import html
import html as html_lib
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd

from ..plots import accuracy_vs_epsilon, time_bars
from .answer import answer_legend, answer_table, plot_panels
from .load import _file_stem
from .published import _split_published, paper_side_by_side
from .reading import NO_GUARANTEE
from .tables import DETAILS, GLANCE, TOOLTIPS, _grouped_markdown, display_table, to_markdown
from .verdicts import GROUP_LEGENDS, GROUP_TITLES, audit_table

#: the heading of the answer: the best sound row per data set, relation and epsilon
ANSWER_TITLE = "Which method, at what cost: the most accurate sound row per data set, relation and epsilon"


@dataclass
class ReportFiles:
    markdown: Path
    csv: Path
    html: Path
    plots: list[Path]


AUDIT_NOTE = (
    "Black-box: the adversary sees the trained model's predictions; white-box: its parameters and their initial "
    "values. Each bound is a 95% lower bound on the epsilon of what was audited (the trained parameters); a row of "
    "the leaderboard shows the strongest over every audit of the same claim (data set, method, epsilon, delta), "
    "with their number, and the largest of several is not itself a 95% bound. 'Refuted' means a bound exceeds the "
    "claimed epsilon: the claim does not extend to the released model (for dirichlet_softmax and "
    "gaussian_penultimate no epsilon is a guarantee of any output of the training: methods/THEORY.md, 'Per-example "
    "releases under Poisson sampling'; their rows also carry the rigorous lower bound on what their released "
    "vectors spend, 'vectors spend at least'). 'Not refuted' proves nothing; the ceiling is the largest bound those "
    "audits could have shown. 'No power': no test's guesses could depend on the run (every fixed guess on one side), "
    "so its count is the inclusion coins and no ceiling is shown. Every audit builds its neighbouring pairs under "
    "its claim's relation ('relation, design': absent canaries for add/remove, replaced in their slots for "
    "replace_input); an audit whose design is not its row's claim's is not counted in the leaderboard.")


VIEW_NOTE = (
    "Two views: 'matched' rows run every method at one (q, T) of their preset; 'own_best' rows run each method at "
    "its own best recipe (its own q, T, model and optimiser) at the same (epsilon, delta), and is timed by its whole "
    "run against the reference's (its epochs and steps are not the reference's). 'configs tried' counts the "
    "configurations tried to choose a row's recipe: choosing among them on the private data is itself not free "
    "(Papernot & Steinke 2022), and no row's epsilon includes it. A published recipe counts as 1; its authors' own "
    "search is not counted.")


def smoke_banner(board: pd.DataFrame) -> str:
    """The banner of a report with smoke-size runs: their numbers are plumbing, not a comparison of methods."""
    if not board.empty and (board["preset"].astype(str) == "smoke").any():
        return ("Smoke-size runs (the smoke preset: 2,000 examples, a few steps): plumbing, not a comparison; "
                "no ranking of methods follows from them")
    return ""


def _plots(board: pd.DataFrame, out: Path) -> list[Path]:
    """One pair of plots per (data set, preset): runs of different presets are never drawn on one line; the
    accuracy plot's panels are plot_panels'."""

    plots: list[Path] = []
    pairs = sorted(board[["dataset", "preset"]].dropna().drop_duplicates().itertuples(index=False)) if not board.empty else []
    for dataset, preset in pairs:
        sub = board[(board["dataset"] == dataset) & (board["preset"] == preset)]
        stem = _file_stem(dataset)
        private = sub[[math.isfinite(float(e)) for e in sub["epsilon"]]]
        reference = sub[[not math.isfinite(float(e)) for e in sub["epsilon"]]]
        models = ", ".join(sorted(sub["model"].astype(str).unique()))
        plots.append(accuracy_vs_epsilon(plot_panels(private), reference,
                                         out / f"accuracy_vs_epsilon_{stem}_{preset}.png",
                                         f"{dataset}: accuracy at the same privacy budget ({preset} preset, {models})"))
        plots.append(time_bars(sub, out / f"time_{stem}_{preset}.png", dataset))
    return plots


def _page_script() -> str:
    """The page's script (page.js, installed with the package): sorting by a column."""
    return resources.files("inputdp.reports.leaderboard").joinpath("page.js").read_text()


def _html_table(df: pd.DataFrame, *, sortable: bool = False, titles: dict[str, pd.Series] | None = None,
                classes: str | None = None) -> str:
    if titles:
        return _html_table_with_titles(df, titles, sortable=sortable)
    return df.to_html(index=False, escape=True, classes=classes or ("sortable" if sortable else None), border=0)


def _html_table_with_titles(df: pd.DataFrame, titles: dict[str, pd.Series], *, sortable: bool) -> str:
    """The table with each cell of a column in ``titles`` carrying its full text as a tooltip (``title``)."""
    head = "".join(f"<th>{_escape(str(c))}</th>" for c in df.columns)
    rows = []
    for i, row in df.iterrows():
        cells = []
        for c in df.columns:
            value = "" if pd.isna(row[c]) else str(row[c])
            if c == "verdict" and "verdict class" in titles:  # coloured by the row's reading (reading.verdict_class)
                attrs = f' class="verdict {titles["verdict class"].loc[i]}"'
            else:
                attrs = ""
            if c in titles and str(titles[c].loc[i]):
                attrs += f' title="{html_lib.escape(str(titles[c].loc[i]), quote=True)}"'
            cells.append(f"<td{attrs}>{_escape(value)}</td>")
        group = str(titles["covers"].loc[i]) if "covers" in titles else ""
        row_class = ' class="noguarantee"' if group == NO_GUARANTEE else ""
        rows.append(f"<tr{row_class}>{''.join(cells)}</tr>")
    cls = ' class="dataframe sortable"' if sortable else ' class="dataframe"'
    return f"<table border=\"0\"{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


#: the page's style: headers that stay on scroll, verdicts coloured, the rows without a guarantee greyed, the answer
#: table set apart
STYLE = ("body{font-family:sans-serif;margin:2em} table{border-collapse:collapse;font-size:13px}"
         "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
         "th{background:#eee;position:sticky;top:0;text-align:left}"
         "img{max-width:49%;height:auto;vertical-align:top}"
         ".banner{background:#fff3cd;border:1px solid #e0c36c;padding:8px 12px}"
         ".verdict.bad{background:#f8d7da} .verdict.ok{background:#d4edda} .verdict.none{color:#666}"
         "table.answer td,table.answer th{font-size:14px;padding:6px 10px} table.answer{margin-bottom:0.5em}"
         ".legend{color:#444;font-size:13px;margin:0.3em 0 1em} summary{cursor:pointer;font-weight:bold;margin:1em 0}"
         "tr.noguarantee td{color:#777;font-style:italic;background:#f6f6f6}")


def _html(title, stamp, banner, answer, legend, sections, details, audited, comparable, other, plots) -> str:
    """The page in the order a reader asks: the answer (best sound row per data set, relation and epsilon), the
    plots, the glance tables by what each claim covers (each with its one-line legend), then folded: the details,
    the audits, the published results without a comparable run."""
    imgs = "".join(f'<a href="{p.name}"><img src="{p.name}" alt="{p.stem}"></a> ' for p in plots)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{_escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{_escape(title)}</h1>"]
    if banner:
        parts.append(f'<p class="banner"><b>{_escape(banner)}</b></p>')
    if stamp:
        parts.append(f"<p>{_escape(stamp)}</p>")
    if not answer.empty:
        parts.append(f"<h2>{_escape(ANSWER_TITLE)}</h2>"
                     + _html_table(answer, classes="answer") + f'<p class="legend">{_escape(legend)}</p>')
    if imgs:
        parts.append(f"<p>{imgs}</p>")
    if not sections:
        parts.append("<p>(no finished runs)</p>")
    for heading, note, table, tips in sections:
        parts.append(f"<h2>{_escape(heading)}</h2><p class=\"legend\">{_escape(note)}</p>"
                     + _html_table(table, sortable=True, titles=tips))
    if not details.empty:
        parts.append(f"<details><summary>Details: every row in full ({len(details)} rows)</summary>"
                     f"<p class=\"legend\">{_escape(VIEW_NOTE)}</p>{_html_table(details)}</details>")
    if not audited.empty:
        parts.append(f"<details><summary>Privacy audits, both threat models ({len(audited)} audits)</summary>"
                     f"<p class=\"legend\">{_escape(AUDIT_NOTE)}</p>{_html_table(audited)}</details>")
    if not comparable.empty:
        parts.append(f"<h2>Published results side by side</h2>{_html_table(comparable)}")
    if not other.empty:
        parts.append(f"<details><summary>{len(other)} published results with no comparable run here</summary>"
                     f"{_html_table(other)}</details>")
    parts.append(f"<script>{_page_script()}</script></body></html>\n")
    return "".join(parts)


def write_audit_report(audits: pd.DataFrame, out: Path, *, stamp: str = "") -> list[Path]:
    """A store of model audits alone: every audit as a row (``audits.csv``, ``audits.md``), both threat models,
    Steinke's and the f-DP bound of the same guesses."""
    out.mkdir(parents=True, exist_ok=True)
    table = audit_table(audits)
    csv, md = out / "audits.csv", out / "audits.md"
    table.to_csv(csv, index=False)
    lines = ["# Model audits", ""] + ([stamp, ""] if stamp else []) + [AUDIT_NOTE, "", to_markdown(table)]
    md.write_text("\n".join(lines) + "\n")
    return [csv, md]


def write_report(board: pd.DataFrame, out: Path, *, title: str = "inputdp leaderboard", stamp: str = "",
                 audits: pd.DataFrame | None = None) -> ReportFiles:
    out.mkdir(parents=True, exist_ok=True)
    shown = display_table(board) if not board.empty else pd.DataFrame(columns=[*GLANCE, *DETAILS, "covers", "verdict class"])
    glance, details = shown[GLANCE], shown[DETAILS]
    answer = answer_table(board)
    legend = answer_legend(answer)
    side = paper_side_by_side(board) if not board.empty else pd.DataFrame()
    audited = audit_table(audits) if audits is not None else pd.DataFrame()
    csv = out / "leaderboard.csv"
    raw = board.drop(columns=["match_key"], errors="ignore")
    raw.to_csv(csv, index=False)
    if not audited.empty:
        audited.to_csv(out / "audits.csv", index=False)
    plots = _plots(board, out)
    banner = smoke_banner(board)
    md = out / "leaderboard.md"
    lines = [f"# {title}", ""] + ([f"> **{banner}**", ""] if banner else []) + ([stamp, ""] if stamp else [])
    if not answer.empty:
        lines += [f"## {ANSWER_TITLE}", "", to_markdown(answer), "", legend, ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots] + ([""] if plots else [])
    lines += _grouped_markdown(glance, shown["covers"]) if not glance.empty else ["(no finished runs)", ""]
    if not glance.empty:
        lines += [VIEW_NOTE, "", "## Details", "", to_markdown(details), ""]
    if not audited.empty:
        lines += ["## Privacy audits: both threat models", "", AUDIT_NOTE, "", to_markdown(audited), ""]
    comparable, other = _split_published(side)
    if not comparable.empty:
        lines += ["## Published results side by side", "", to_markdown(comparable), ""]
    if not other.empty:
        lines += [f"{len(other)} published results have no comparable run here (leaderboard.html lists them).", ""]
    md.write_text("\n".join(lines).rstrip("\n") + "\n")
    html = out / "leaderboard.html"
    sections = []
    for group, heading in GROUP_TITLES.items():
        rows = (shown["covers"] == group).to_numpy()
        if rows.any():
            tips = {**{c: shown.loc[rows, full] for c, full in TOOLTIPS.items()}, "covers": shown.loc[rows, "covers"],
                    "verdict class": shown.loc[rows, "verdict class"]}
            sections.append((heading, GROUP_LEGENDS[group], glance[rows], tips))
    html.write_text(_html(title, stamp, banner, answer, legend, sections, details, audited, comparable, other, plots))
    return ReportFiles(md, csv, html, plots)
