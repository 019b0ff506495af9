"""The answer first: per data set, neighbouring relation and epsilon, the most accurate row whose claim is sound for
the released model (a guarantee that no audit refutes), what it costs against the non-private reference, and the
next best, so that a reader who knows their relation and budget reads one line.

A row answers for a relation when its claim is under that relation, or under one whose theorem covers it: a claim
about replacing one example (its input and its label: PATE's, "add/remove or replace one example") covers replacing
it by the null example (zero-out) and replacing its input alone. An add/remove claim at epsilon covers neither at
the same epsilon in general (each is two add/remove steps: 2 epsilon by group privacy); it covers zero-out where its
mechanism's add/remove pair is zero-out's (``ADD_REMOVE_IS_ZERO_OUT``: DP-SGD, the least-squares statistics;
methods/THEORY.md, "Neighbouring relations")."""

from __future__ import annotations

import math

import pandas as pd

from inputdp.core.claims import ADD_REMOVE, RELATION_VALUES, REPLACE_INPUT, ZERO_OUT
from inputdp.core.claims import relations_covered as claim_covers
from inputdp.core.verdicts import REFUTED, TIGHT

from .reading import NOT_TIGHT, SOUND, covers_model, curve_text, text

#: the relations as the answer names them, with what each protects (its one-line legend)
RELATION_LEGEND = {
    ADD_REMOVE: ("add/remove", "one example added or removed, input and label: protects inputs, labels and membership"),
    ZERO_OUT: ("zero-out", "one example replaced by the null example (n public): protects its input and label"),
    REPLACE_INPUT: ("replace one input", "one input replaced, its label and membership public: protects inputs"),
}
#: the accuracy plot's panel of the rows without a guarantee for the released model (drawn without a zoom: no choice
#: is made among them)
NO_GUARANTEE_PANEL = "no guarantee for the released model (refuted, or a claim about other outputs)"
ANSWER_COLUMNS = ["dataset", "relation", "epsilon", "best sound method", "model", "accuracy % (n)", "time (x non-private)",
                  "audits", "next best", "non-private accuracy %"]


#: the mechanisms whose claims replace one example (PATE's), for boards written before claims listed what they cover
_REPLACES_AN_EXAMPLE = ("pate_gnmax_gnmax", "pate_confident_gnmax", "pate_interactive_gnmax")


def relations_covered(row) -> list[str]:
    """The relations a board row's claim answers for (none for the reference, or a claim about no relation): the
    claim's own first, as its ``privacy.covers`` field lists them; a board written before that field: the claim's
    rule on its relation key and mechanism (core/claims.relations_covered), PATE's claims covering the other two."""
    listed = text(row, "covers_relations")
    if listed:
        return [r for r in listed.split(",") if r in RELATION_VALUES]
    covered = list(claim_covers(text(row, "relation_key"), text(row, "mechanism")))
    if covered and text(row, "mechanism") in _REPLACES_AN_EXAMPLE:
        covered += [r for r in (ZERO_OUT, REPLACE_INPUT) if r not in covered]
    return covered


def is_sound(row) -> bool:
    """Whether a private row's claim is a guarantee of the released model that no audit refutes."""
    return covers_model(row) == SOUND


def time_cell(row) -> str:
    """The row's time against the reference's, and what was timed: a step (interleaved or the epochs of the
    sequential runs) or the whole run; "" where no uncontended timing exists."""
    ratio = row.get("time_ratio_to_nonprivate", math.nan)
    if pd.isna(ratio):
        return ""
    source = str(row.get("speed_source", ""))
    return f"×{float(ratio):.2f} " + ("whole run" if source.startswith("whole run") else "per step")


def _number(row, column: str) -> float:
    value = pd.to_numeric(row.get(column, math.nan), errors="coerce")
    return math.nan if pd.isna(value) else float(value)


def audit_cell(row) -> str:
    """A row's audits in the suite's four words, from the board's columns (as ``verdicts._audited`` reads them): a
    refutation alone where the model's, the claimed curve's or the mechanism's audit refutes the claim; else what the
    claimed curve certifies (tight to X: its audits' median), the mechanism audit's word (tight to X, or not tight),
    then the model's audits under the claim's relation: not refuted (ceiling X: the most
    its tests with power could show; the board keeps only their ceilings), no power, or not audited (saying when
    audits of another design were not counted)."""
    threats = ("white_box", "black_box")
    key = str(row.get("relation_key", "") or "")
    under = f" under {key}" if key in RELATION_VALUES else ""
    lbs = [x for x in (_number(row, f"{t}_lb") for t in threats) if not math.isnan(x)]
    if lbs and max(lbs) > float(row["epsilon"]):
        return f"refuted ({max(lbs):.2f} > {float(row['epsilon']):g}){under}"
    if text(row, "curve_word") == REFUTED:
        return curve_text(row) + under
    mechanism = text(row, "mechanism_word")
    if mechanism == REFUTED:
        return "refuted at the mechanism"
    notes = [f"{_number(row, 'mechanism_fraction'):.2f} of the claim"] if mechanism == NOT_TIGHT else []
    measured_in = text(row, "mechanism_from")  # the summary's: another study's audit of the same release
    if measured_in and measured_in != text(row, "study"):
        notes.append(f"in {measured_in}")
    parts = [curve_text(row)] if text(row, "curve_word") == TIGHT else []
    if mechanism:
        word = f"tight to {_number(row, 'mechanism_fraction'):.2f}" if mechanism == TIGHT else mechanism
        parts.append(f"{word} at the mechanism" + (f" ({'; '.join(notes)})" if notes else ""))
    audits = sum(0 if math.isnan(n) else int(n) for n in (_number(row, f"{t}_audits") for t in threats))
    ceiling = max((x for x in (_number(row, f"{t}_ceiling") for t in threats) if not math.isnan(x)), default=0.0)
    if not audits:
        other = _number(row, "other_design") > 0
        parts.append("the model not audited" + (f"{under} (audits of another design not counted)" if other else ""))
    elif ceiling > 0:
        parts.append(f"not refuted (ceiling {ceiling:.2f}){under}")
    else:
        parts.append(f"no power{under}")
    return "; ".join(parts)


def _accuracy(row) -> str:
    n = int(row["seeds"])
    return (f"{100 * row['acc_mean']:.2f} ± {100 * row['acc_std']:.2f} ({n})" if n > 1
            else f"{100 * row['acc_mean']:.2f} (1)")


def _base(method) -> str:
    """A board row's method without its recipe ("dpsgd [adjacency=zero_out]" -> "dpsgd")."""
    return str(method).split(" [", 1)[0]


def answer_table(board: pd.DataFrame, carry: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per (data set, relation, epsilon) that some private row claims: the best sound row, or "no sound
    row" where every row of it is refuted or no guarantee; ``carry`` names board columns copied from the chosen row
    (the summary's study of each row)."""
    columns = [*ANSWER_COLUMNS, *carry]
    if board.empty:
        return pd.DataFrame(columns=columns)
    private = board[[math.isfinite(float(e)) for e in board["epsilon"]]]
    reference = board[[not math.isfinite(float(e)) for e in board["epsilon"]]]
    rows = []
    # a relation is answered for once some row claims it as its own; rows whose theorem covers it join it then
    own = {relations_covered(r)[0] for _, r in private.iterrows() if relations_covered(r)}
    keyed = [(r, rel) for _, r in private.iterrows() for rel in relations_covered(r) if rel in own]
    groups: dict[tuple, list] = {}
    for r, rel in keyed:
        groups.setdefault((str(r["dataset"]), rel, float(r["epsilon"])), []).append(r)
    order = list(RELATION_LEGEND)
    for (dataset, rel, eps) in sorted(groups, key=lambda k: (k[0], order.index(k[1]), k[2])):
        # the most accurate first; on a tie, the row whose claim is the relation's own (DP-SGD's zero-out row before
        # its add/remove row, which covers zero-out at the same epsilon)
        sound = sorted((r for r in groups[(dataset, rel, eps)] if is_sound(r)),
                       key=lambda r, rel=rel: (-float(r["acc_mean"]), relations_covered(r)[0] != rel))
        ref = reference[reference["dataset"] == dataset]
        row = {"dataset": dataset, "relation": RELATION_LEGEND[rel][0], "epsilon": f"{eps:g}",
               "non-private accuracy %": f"{100 * ref['acc_mean'].max():.2f}" if not ref.empty else ""}
        if not sound:
            row.update({"best sound method": "no sound row (every row refuted or no guarantee)", "model": "",
                        "accuracy % (n)": "", "time (x non-private)": "", "audits": "", "next best": "",
                        **dict.fromkeys(carry, "")})
        else:
            best = sound[0]
            # the next best is another method: a variant of the same one under a relation whose pair is the same
            # (DP-SGD's zero-out row beside its add/remove row) is no alternative
            nxt = next((r for r in sound[1:] if _base(r["method"]) != _base(best["method"])), None)
            row.update({"best sound method": str(best["method"]), "model": str(best["model"]),
                        "accuracy % (n)": _accuracy(best), "time (x non-private)": time_cell(best),
                        "audits": audit_cell(best),
                        "next best": "" if nxt is None else f"{nxt['method']} ({nxt['model']}) {100 * nxt['acc_mean']:.2f}",
                        **{c: best.get(c, "") for c in carry}})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def answer_legend(answer: pd.DataFrame) -> str:
    """The one-line legend of the relations the answer names."""
    shown = set(answer["relation"]) if not answer.empty else set()
    return "; ".join(f"{short}: {text}" for short, text in RELATION_LEGEND.values() if short in shown)


def plot_panels(private: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The accuracy plot's panels: each relation's sound rows (a row whose claim covers two relations is in both),
    then every row without a guarantee for the released model (refuted, or a claim about other outputs), so that no
    refuted row is drawn among the sound ones and no add/remove row beside a replace_input one as if matched."""
    panels = []
    sound = private[[is_sound(r) for _, r in private.iterrows()]] if not private.empty else private
    own = {relations_covered(r)[0] for _, r in private.iterrows() if relations_covered(r)}
    for rel, (short, legend) in ((k, v) for k, v in RELATION_LEGEND.items() if k in own):
        rows = sound[[rel in relations_covered(r) for _, r in sound.iterrows()]] if not sound.empty else sound
        if not rows.empty:
            panels.append((f"sound under {short} ({legend.split(': ')[-1]})", rows))
    other = sound[[not relations_covered(r) for _, r in sound.iterrows()]] if not sound.empty else sound
    if not other.empty:
        panels.append(("sound, under a relation of its own (see the table)", other))
    unsound = private[[not is_sound(r) for _, r in private.iterrows()]] if not private.empty else private
    if not unsound.empty:
        panels.append((NO_GUARANTEE_PANEL, unsound))
    return panels
