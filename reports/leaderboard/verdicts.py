"""Verdicts: which audits test a row's claim (the same claim, a design under its relation), what they found (the
board's columns: bounds and ceilings, each audit's stored verdict fields, the mechanism audits' figures), and the
verdict in full words from those columns, the relation named; one row per audit for the audit table. The row's word,
group and colour are read from the same columns (reading.py), never from the words."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inputdp.benchmarks.audits.fdp_bound import DECIDES_MARGIN
from inputdp.core import names
from inputdp.core.claims import ABSENT, RELATION_VALUES
from inputdp.core.verdicts import REFUTED, TIGHT

from .reading import (
    CURVE_COLUMNS,
    MECHANISM_COLUMNS,
    NO_GUARANTEE,
    REFERENCE,
    SOUND,
    claimed_curve,
    curve_text,
    mechanism_reading,
)


def _same_claim(audits: pd.DataFrame, row) -> pd.DataFrame:
    same_eps = np.isclose(audits["epsilon"].astype(float), float(row["epsilon"]))  # inf matches inf only
    return audits[(audits["dataset"] == row["dataset"]) & (audits["method"] == row["method"]) & same_eps
                  & np.isclose(audits["delta"].astype(float), float(row["delta"]))]



def _model_audits(audits: pd.DataFrame | None) -> pd.DataFrame | None:
    if audits is None or audits.empty:
        return audits
    if "kind" in audits.columns:
        audits = audits[audits["kind"] != names.KIND_MECHANISM_AUDIT]
    return _with_best_bounds(audits)



def _with_best_bounds(audits: pd.DataFrame) -> pd.DataFrame:
    """Per threat model, what the verdicts read: the larger of Steinke's bound and the f-DP bound on the (epsilon,
    delta) curve of the same guesses (both refute an (epsilon, delta) claim; audits logged before the f-DP bound
    have Steinke's alone), its ceiling, and which of the two it is."""
    audits = audits.copy()
    for threat in names.THREATS:
        for col in (f"fdp_{threat}", f"fdp_ceiling_{threat}", f"gdp_mu_{threat}", f"power_{threat}"):
            if col not in audits.columns:
                audits[col] = np.nan
        steinke = pd.to_numeric(audits[f"lb_{threat}"], errors="coerce")
        fdp = pd.to_numeric(audits[f"fdp_{threat}"], errors="coerce")
        fdp_wins = fdp.fillna(-1.0) > steinke.fillna(-1.0) + DECIDES_MARGIN  # as ScoreOutcome.decides
        nothing = (steinke.fillna(0.0) <= 0) & (fdp.fillna(0.0) <= 0)  # both 0: neither decided anything
        audits[f"decides_{threat}"] = np.where(nothing, "", np.where(fdp_wins, "f-DP", "Steinke"))
        audits[f"best_{threat}"] = steinke.where(~fdp_wins, fdp)
        audits[f"best_ceiling_{threat}"] = np.fmax(pd.to_numeric(audits[f"ceiling_{threat}"], errors="coerce"),
                                                   pd.to_numeric(audits[f"fdp_ceiling_{threat}"], errors="coerce"))
    return audits



def _mechanism_audits(audits: pd.DataFrame | None) -> pd.DataFrame:
    if audits is None or audits.empty or "kind" not in audits.columns:
        return pd.DataFrame()
    return audits[audits["kind"] == names.KIND_MECHANISM_AUDIT]



def _same_mechanism(mech: pd.DataFrame, row) -> pd.DataFrame:
    """The mechanism audits of a row's claim at its calibrated noise: the same method, (epsilon, delta, q, T) and
    neighbouring relation (the calibration is a function of these and the method's options)."""
    if mech.empty:
        return mech
    same = ((mech["method_name"] == row["method_name"]) & (mech["adjacency"] == row.get("adjacency", ""))
            & np.isclose(mech["noise_scale"].astype(float), 1.0))
    for col in ("epsilon", "delta", "q", "T"):
        same &= np.isclose(mech[col].astype(float), float(row[col]))
    return mech[same]



def _mechanism_text(m: dict) -> str:
    """The mechanism audits in words: refuted (the release), tight to X or not tight (X of the claim)."""
    if not m:
        return ""
    if m["mechanism_word"] == REFUTED:
        return f"refuted at the mechanism ({m['mechanism_refuted_release']})"
    if m["mechanism_word"] == TIGHT:
        return f"tight to {m['mechanism_fraction']:.2f} at the mechanism ({m['releases']})"
    return f"not tight at the mechanism ({m['mechanism_fraction']:.2f} of the claim)"



def _join_mechanism(board: pd.DataFrame, i, same: pd.DataFrame) -> dict:
    """A row's mechanism audits into its columns (word, loosest fraction) and their text; their reading."""
    m = mechanism_reading(same)
    if m:
        m["releases"] = "; ".join(sorted(set(same["mechanism_release"].astype(str))))
        board.loc[i, list(MECHANISM_COLUMNS)] = [m[c] for c in MECHANISM_COLUMNS]
    board.loc[i, "mechanism audit"] = _mechanism_text(m)
    return m


def _join_audits(board: pd.DataFrame, audits: pd.DataFrame | None) -> None:
    """Per row and threat model: the strongest bound over every audit of the same claim (data set, method,
    epsilon, delta; any model or (q, T)) whose neighbouring pairs follow the claim's relation, how many audits and of
    which kinds, and the verdict in four words, the relation named: refuted (the model's audit or the mechanism's),
    tight to X (the mechanism audit reaches its fraction of the claim and the model's audit does not refute it), not
    refuted (ceiling X: the most the tests that had power could show), or no power (no test's guesses could depend
    on the run). An audit whose design is not the claim's relation's (the absent canaries of add/remove against a
    replace_input claim) tests a statement the claim does not make: it is not counted, and the verdict says so.

    Each audit is its own 95% statement; the largest of n is not itself a 95% bound, so their number is shown."""
    mech = _mechanism_audits(audits)
    audits = _model_audits(audits)
    board["mechanism audit"] = ""
    for column in (*CURVE_COLUMNS, *MECHANISM_COLUMNS, "other_design"):
        board[column] = "" if column.endswith("_word") else np.nan
    for threat in names.THREATS:
        board[f"{threat}_lb"] = np.nan
        board[f"{threat}_ceiling"] = np.nan
        board[f"{threat}_audits"] = 0
        board[f"{threat}_kinds"] = ""
    board["verdict"] = ""
    for i, r in board.iterrows():
        hit = _same_claim(audits, r) if audits is not None and not audits.empty else pd.DataFrame()
        hit, other_design = _by_design(hit, r)
        claimed = float(r["epsilon"])
        best_lb, best_threat, ceiling, decides, powered = -1.0, "", 0.0, "", False
        for threat in names.THREATS:
            got = hit[hit[f"lb_{threat}"].notna()] if not hit.empty else hit
            if got.empty:
                continue
            power = pd.to_numeric(got[f"power_{threat}"], errors="coerce").fillna(1.0) > 0
            powered |= bool(power.any())
            # the larger of Steinke's and the f-DP bound of each audit (both refute an (epsilon, delta) claim)
            lb = float(got[f"best_{threat}"].astype(float).max())
            board.loc[i, f"{threat}_lb"] = lb
            # the ceiling of the tests that had power (a test without power cannot reach its own)
            threat_ceiling = float(got.loc[power, f"best_ceiling_{threat}"].astype(float).max()) if power.any() else 0.0
            board.loc[i, f"{threat}_ceiling"] = threat_ceiling
            board.loc[i, f"{threat}_audits"] = len(got)
            board.loc[i, f"{threat}_kinds"] = "; ".join(sorted(set(_audit_label(a) for a in got.itertuples())))
            ceiling = max(ceiling, threat_ceiling)
            if lb > best_lb:
                best_lb, best_threat = lb, threat
                decides = str(got.loc[got[f"best_{threat}"].astype(float).idxmax(), f"decides_{threat}"])
        m = _join_mechanism(board, i, _same_mechanism(mech, r) if math.isfinite(claimed) else pd.DataFrame())
        text = board.loc[i, "mechanism audit"]
        board.loc[i, "other_design"] = other_design
        curve = claimed_curve(hit)
        for column, value in curve.items():
            board.loc[i, column] = value
        word = m.get("mechanism_word", "")
        audited = _audited(r, _ModelAudits(best_lb, best_threat, ceiling, decides, powered, other_design), word, text)
        if curve and curve["curve_word"] == REFUTED:
            audited = f"claim {curve_text(curve)}{_under(r)}"
        elif curve:
            audited = f"{curve_text(curve)}; the one-run readings: {audited}"
        board.loc[i, "verdict"] = "; ".join(v for v in (_vectors_verdict(r), audited) if v)



@dataclass(frozen=True)
class _ModelAudits:
    """What a row's model audits (those under its claim's relation) found, for its verdict."""

    best_lb: float
    best_threat: str  # "" where none
    ceiling: float  # of the tests that had power
    decides: str
    powered: bool
    other_design: int  # audits with another design, not counted



def _audited(r, a: _ModelAudits, word: str, text: str) -> str:
    """The verdict of the model's audits and the mechanism's, in four words, the relation named."""
    claimed = float(r["epsilon"])
    under = _under(r)
    model_said = (f"not refuted (ceiling {a.ceiling:.2f}){under}" if a.powered
                  else f"no power{under}: every test's guesses were fixed on one side or its scores all equal")
    if not math.isfinite(claimed):
        return "no claim (reference)" if a.best_threat else ""
    if a.best_threat and a.best_lb > claimed:
        audited = (f"claim refuted for the released model ({a.best_threat.replace('_', '-')} {a.best_lb:.2f} > "
                   f"{claimed:g}, {a.decides}){under}")
    elif word == REFUTED:
        audited = f"claim {text}"
    elif word == TIGHT:
        audited = text + (f"; the model's audit: {model_said}" if a.best_threat else "; the model not audited")
    elif not a.best_threat:
        audited = "not audited" + (under if a.other_design else "") + (f" ({text})" if text else "")
    else:
        audited = model_said + (f"; {text}" if text else "")
    if a.other_design:
        audited += (f"; {a.other_design} audit{'s' if a.other_design > 1 else ''} with add/remove's absent canaries "
                    "not counted: they do not test a replace_input claim")
    return audited



def _row_design(row) -> str:
    rel = RELATION_VALUES.get(str(row.get("relation_key", "") or ""))
    return rel.excluded if rel is not None else ABSENT



def _under(row) -> str:
    """" under replace_input" where the row's claim names a relation, else ""."""
    key = str(row.get("relation_key", "") or "")
    return f" under {key}" if key in RELATION_VALUES else ""



def _by_design(hit: pd.DataFrame, row) -> tuple[pd.DataFrame, int]:
    """(the audits whose design is the row's relation's, how many others): an audit logged before the relation
    was read built the absent design whatever the claim (its tag says so since ``bench store migrate``)."""
    if hit.empty or "audit_design" not in hit.columns:
        return hit, 0
    same = hit["audit_design"].astype(str) == _row_design(row)
    return hit[same], int((~same).sum())



def _vectors_verdict(row) -> str:
    """What the per-example curve says of a claim about per-example vectors (empty for other claims)."""
    lb, claimed = row.get("vectors_lb", math.nan), float(row["epsilon"])
    if pd.isna(lb) or not math.isfinite(claimed):
        return ""
    if lb > claimed * (1 + 1e-6):
        return (f"the {row['accountant'] or 'claimed'} epsilon is refuted for the released vectors: they spend at "
                f"least {lb:.2f}")
    return "not a guarantee: a lower bound on what the vectors spend (per-example curve)"



def _audit_label(a) -> str:
    """"exclusive_support on mlp, 400 runs" / "random_pattern on small_cnn"."""
    text = f"{a.canary_kind} on {a.model}"
    if a.audit_mode == "multi_run" and not pd.isna(a.audit_runs):
        text += f", {int(a.audit_runs)} runs"
    return text



GROUP_TITLES = {SOUND: "Sound for the released model", REFERENCE: "The non-private reference",
                NO_GUARANTEE: "No guarantee for the released model (the claim says so, or an audit refutes it)"}
#: each group's one-line legend
GROUP_LEGENDS = {
    SOUND: "A guarantee of the released model (parameters and every prediction) under the relation named, which no "
           "audit refutes. add/remove protects an example's input, label and membership; replace one input protects "
           "the input alone, its label and membership public.",
    REFERENCE: "No privacy: the accuracy and time every private row is measured against.",
    NO_GUARANTEE: "Their accuracy is not bought with a privacy the released model has: the claim covers other outputs "
                  "(per-example vectors) or an audit of the model refutes it."}



def audit_table(audits: pd.DataFrame) -> pd.DataFrame:
    """One row per audit run: what it audited, with what, and both threat models' bounds next to the claim."""
    audits = _model_audits(audits)
    if audits is None or audits.empty:
        return pd.DataFrame()
    rows = []

    def cell(a, threat: str) -> str:
        lb, ceiling = getattr(a, f"lb_{threat}"), getattr(a, f"ceiling_{threat}")
        return "" if pd.isna(lb) else f"{float(lb):.2f} (ceiling {float(ceiling):.2f})"

    def fdp_cell(a, threat: str) -> str:
        lb, ceiling = getattr(a, f"fdp_{threat}"), getattr(a, f"fdp_ceiling_{threat}")
        mu = getattr(a, f"gdp_mu_{threat}")
        if pd.isna(lb):
            return ""
        return f"{float(lb):.2f} (ceiling {float(ceiling):.2f}); mu >= {float(mu):.2f}"

    for a in audits.sort_values(["dataset", "method", "epsilon", "model", "audit_mode"]).itertuples():
        claimed = float(a.epsilon)
        best = max((float(v) for v in (a.best_black_box, a.best_white_box) if not pd.isna(v)), default=math.nan)
        decides = a.decides_white_box if (pd.isna(a.best_black_box) or (not pd.isna(a.best_white_box)
                                          and float(a.best_white_box) >= float(a.best_black_box))) else a.decides_black_box
        powered = any(not pd.isna(getattr(a, f"lb_{t}")) and (pd.isna(getattr(a, f"power_{t}", math.nan))
                                                              or float(getattr(a, f"power_{t}")) > 0)
                      for t in names.THREATS)
        verdict = ("no claim" if not math.isfinite(claimed) else "" if math.isnan(best)
                   else "refuted" if best > claimed else "not refuted" if powered else "no power")
        relation = str(getattr(a, "audit_relation", "") or "") or "(not logged: before #52)"
        subset = "all" if pd.isna(a.train_examples) or str(a.train_examples) in ("0", "") else str(a.train_examples)
        rows.append({"dataset": a.dataset, "method": a.method,
                     "epsilon": "∞ (none)" if not math.isfinite(claimed) else f"{claimed:g}",
                     "model": a.model, "preset": a.preset, "train examples": subset, "q": f"{float(a.q):.5g}",
                     "T": int(a.T), "seed": a.seed, "canary": a.canary_kind,
                     "audit": ("multi-run" + ("" if pd.isna(a.audit_runs) else f", {int(a.audit_runs)} runs"))
                     if a.audit_mode == "multi_run" else "one run",
                     "black-box epsilon_lb": cell(a, "black_box"), "white-box epsilon_lb": cell(a, "white_box"),
                     "black-box f-DP": fdp_cell(a, "black_box"), "white-box f-DP": fdp_cell(a, "white_box"),
                     "relation, design": f"{relation}, {getattr(a, 'audit_design', ABSENT)}",
                     "decides": decides if verdict else "", "verdict": verdict})
    return pd.DataFrame(rows)
