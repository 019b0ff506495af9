"""A row's reading of its audits, from the board's columns alone (never from a verdict's words): the word the glance
table, the colours, the groups and the answer show. The board's columns are what the verdicts are made of
(verdicts.py joins them from each audit's stored fields and bounds): the model audits' largest bound and ceiling per
threat model and how many there were, the per-example curve's bound on the vectors, the claimed-curve reading of the
gradient canaries (``curve_*``), the mechanism audits' word and loosest fraction (``mechanism_word``,
``mechanism_fraction``), the claim's epsilon and whether it is a guarantee."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from inputdp.benchmarks.audits.mechanism import TIGHT_FRACTION
from inputdp.core import names
from inputdp.core.verdicts import CLAIMED_CURVE, REFUTED, TIGHT

#: what a row's claim covers, which groups the tables and styles the plots: a guarantee of the released model that no
#: audit refutes; the non-private reference; no guarantee of the model (the claim says so, or an audit refutes it)
SOUND, REFERENCE, NO_GUARANTEE = "sound", "reference", "no guarantee"
#: the mechanism audits' words: every audited release tight, one refuted, else not tight
NOT_TIGHT = "not tight"
#: a row's claimed-curve reading (its gradient-canary audits' verdict fields): the word, the median, least and largest
#: certified fraction of the claim over its audits, how many audits and how many refute
CURVE_COLUMNS = ("curve_word", "curve_median", "curve_min", "curve_max", "curve_audits", "curve_refuted")
MECHANISM_COLUMNS = ("mechanism_word", "mechanism_fraction")


def number(row, column: str) -> float:
    """A board cell as a float (nan where absent or empty)."""
    value = pd.to_numeric(row.get(column, math.nan), errors="coerce")
    return math.nan if pd.isna(value) else float(value)


def text(row, column: str) -> str:
    value = row.get(column, "")
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


@dataclass(frozen=True)
class Reading:
    """The row's reading: its word (refuted, tight, not refuted, no power, not tight, not audited, no claim), what
    decided it (the model's audits, the vectors' curve, the claimed curve, the mechanism), and its number."""

    word: str
    by: str = ""
    number: float = math.nan
    claimed: float = math.nan

    @property
    def refuted(self) -> bool:
        return self.word == REFUTED

    def short(self) -> str:
        """The glance table's cell."""
        if self.word == REFUTED:
            if self.by == "model":
                return f"refuted ({self.number:.2f} > {self.claimed:g})"
            return {"mechanism": "refuted at the mechanism", "curve": "refuted by the claimed curve",
                    "vectors": f"refuted ({self.number:.2f} > {self.claimed:g})"}[self.by]
        if self.word == TIGHT:
            return f"tight to {self.number:.2f}"
        if self.word == "not refuted":
            return f"not refuted (ceiling {self.number:.2f})"
        return self.word


def reading(row) -> Reading:
    """The row's reading from its columns: a refutation first (the model's audits, the vectors' curve, the claimed
    curve, the mechanism), then what the claimed curve or the mechanism certifies, then the model's audits."""
    claimed = number(row, "epsilon")
    if not math.isfinite(claimed):
        return Reading("no claim")
    lbs = [(number(row, f"{t}_lb"), t) for t in names.THREATS]
    best, _ = max(((x, t) for x, t in lbs if not math.isnan(x)), default=(math.nan, ""))
    if not math.isnan(best) and best > claimed:
        return Reading(REFUTED, "model", best, claimed)
    vectors = number(row, "vectors_lb")
    if not math.isnan(vectors) and vectors > claimed * (1 + 1e-6):
        return Reading(REFUTED, "vectors", vectors, claimed)
    curve, mechanism = text(row, "curve_word"), text(row, "mechanism_word")
    if curve == REFUTED:
        return Reading(REFUTED, "curve")
    if mechanism == REFUTED:
        return Reading(REFUTED, "mechanism")
    if curve == TIGHT:
        return Reading(TIGHT, "curve", number(row, "curve_median"), claimed)
    if mechanism == TIGHT:
        return Reading(TIGHT, "mechanism", number(row, "mechanism_fraction"), claimed)
    audits = sum(0 if math.isnan(n) else int(n) for n in (number(row, f"{t}_audits") for t in names.THREATS))
    ceiling = max((x for x in (number(row, f"{t}_ceiling") for t in names.THREATS) if not math.isnan(x)), default=0.0)
    if audits and ceiling > 0:
        return Reading("not refuted", "model", ceiling, claimed)
    if audits:
        return Reading("no power", "model")
    return Reading(NOT_TIGHT, "mechanism", number(row, "mechanism_fraction")) if mechanism == NOT_TIGHT \
        else Reading("not audited")


def covers_model(row) -> str:
    """The row's group: the reference (no claim), no guarantee (the claim says so, or a reading refutes it), sound."""
    if not math.isfinite(number(row, "epsilon")):
        return REFERENCE
    guarantee = text(row, "guarantee").lower() != "false"
    return SOUND if guarantee and not reading(row).refuted else NO_GUARANTEE


def short_verdict(row) -> str:
    """The verdict in a few words (the glance table's cell)."""
    return reading(row).short()


def verdict_class(row) -> str:
    """The colour of a row's verdict: refuted or no guarantee (red), not refuted or tight (green), else grey."""
    r = reading(row)
    if r.refuted or (covers_model(row) == NO_GUARANTEE):
        return "bad"
    return "ok" if r.word in ("not refuted", TIGHT) else "none"


def claimed_curve(hit: pd.DataFrame) -> dict[str, float | str]:
    """A row's claimed-curve reading from the verdict fields of its audits whose test read the claim's own curve
    (the gradient canaries at each seed): refuted where the row's test is (below), else tight to the median of what
    they certify over the claim. Empty where none did.

    The row reads n independent audits, each a test at level beta of its own thresholds: "refuted where one of them
    is" would be a test at level up to n beta. The row is refuted where an audit's p-value, times its number of
    thresholds, is below beta / n (Bonferroni over the row's audits: the row's test at level beta); an audit refuted
    at its own level but not at the row's is counted (``curve_refuted``) and named, not read as the row's verdict."""
    column = "verdict_bound_kind_white_box"
    if hit.empty or column not in hit.columns:
        return {}
    curve = hit[hit[column] == CLAIMED_CURVE]
    if curve.empty:
        return {}
    ratio = (curve["verdict_bound_white_box"].astype(float) / curve["verdict_claimed_epsilon_white_box"].astype(float))
    refuted = int((curve["verdict_word_white_box"] == REFUTED).sum())
    row_refuted = refuted > 0 and _row_refutes(curve)
    return {"curve_word": REFUTED if row_refuted else TIGHT, "curve_median": float(ratio.median()),
            "curve_min": float(ratio.min()), "curve_max": float(ratio.max()), "curve_audits": len(curve),
            "curve_refuted": refuted}


def _row_refutes(curve: pd.DataFrame) -> bool:
    """Whether the row's audits refute its claim at the level of one audit (Bonferroni over them); where a store
    holds no p-value (none logged), each audit's own verdict stands."""
    if "curve_p_value" not in curve.columns or curve["curve_p_value"].isna().any():
        return True
    tests = curve["verdict_tests_white_box"].fillna(1.0).clip(lower=1.0)
    level = curve["verdict_level_white_box"].astype(float)
    return bool(((curve["curve_p_value"] * tests) < level / len(curve)).any())


def curve_text(curve) -> str:
    """The claimed-curve reading in words: "tight to 0.87 of the claimed curve (median of 3 seeds, 0.80-0.93)"."""
    n = int(number(curve, "curve_audits"))
    if text(curve, "curve_word") == REFUTED:
        return f"refuted by the claimed curve ({int(number(curve, 'curve_refuted'))} of {n} audits)"
    spread = f", {number(curve, 'curve_min'):.2f}-{number(curve, 'curve_max'):.2f}" if n > 1 else ""
    alone = int(number(curve, "curve_refuted")) if not math.isnan(number(curve, "curve_refuted")) else 0
    alone_text = f"; {alone} of {n} refuted at its own level, not at the row's" if alone else ""
    return f"tight to {number(curve, 'curve_median'):.2f} of the claimed curve ({'median of ' if n > 1 else ''}{n} " \
           f"seed{'s' if n > 1 else ''}{spread}{alone_text})"


def mechanism_reading(hit: pd.DataFrame) -> dict[str, float | str]:
    """The mechanism audits of a row's claim, from their stored figures: refuted where a release's mu bound or
    family-free bound exceeds what the claim allows; tight where every release reaches ``TIGHT_FRACTION`` of the
    claim's mu; else not tight; with the loosest fraction. Empty where none."""
    if hit.empty:
        return {}
    refuted = ((hit["mechanism_mu_lb"].astype(float) > hit["mechanism_mu_allowed"].astype(float) * (1 + 1e-9))
               | (hit["mechanism_epsilon_free"].astype(float)
                  > hit["mechanism_epsilon_allowed"].astype(float) * (1 + 1e-9)))
    fraction = hit["mechanism_tightness"].astype(float)
    word = REFUTED if refuted.any() else TIGHT if (fraction >= TIGHT_FRACTION).all() else NOT_TIGHT
    return {"mechanism_word": word, "mechanism_fraction": float(fraction.min()),
            "mechanism_refuted_release": str(hit.loc[refuted, "mechanism_release"].iloc[0]) if refuted.any() else ""}
