"""An audit's verdict as a value: the word, the bound and what kind of bound it is, the ceiling, the claim it tested
(its epsilon, delta, relation and the source of its curve), the design, the number of canaries, and the test family
with its level. Every audit writes one per threat model it reads (``fields``), and the leaderboards, the README's
answer and ``bench run`` read them back (``from_fields``) instead of parsing prose (THEORY.md, "Auditing")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from . import names

#: the four words (THEORY.md, "Auditing"): the claim refuted; the data certify X of it (an audit whose tests read the
#: claim's own curve); not refuted, with the most its tests could have shown; no test's guesses could depend on the run
REFUTED, TIGHT, NOT_REFUTED, NO_POWER = "refuted", "tight", "not refuted", "no power"
WORDS = (REFUTED, TIGHT, NOT_REFUTED, NO_POWER)
#: what a verdict's bound is: the claimed curve read on independent trials (claimed_curve.py: the largest epsilon of
#: the claim's family the data exclude); Steinke et al.'s one-run bound; the f-DP one-run bound on the (epsilon,
#: delta) curve; a mechanism audit's certified mu in epsilon
CLAIMED_CURVE, STEINKE, FDP, MECHANISM = "claimed_curve", "steinke", "f-DP", "mechanism"
BOUND_KINDS = (CLAIMED_CURVE, STEINKE, FDP, MECHANISM)
#: how a stored verdict's fields are named: ``verdict.<threat>.<field>`` (metrics for numbers, tags for words)
PREFIX = "verdict.{}."
_NUMBERS = ("bound", "ceiling", "claimed_epsilon", "delta", "canaries", "tests", "level")
_WORDS = ("word", "bound_kind", "curve_source", "relation", "design", "family")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    word: str
    #: what the data certify: an epsilon at the claim's delta (0: nothing)
    bound: float
    bound_kind: str
    claimed_epsilon: float
    delta: float
    relation: str
    design: str
    canaries: int
    #: the test family in words, its size and the level of the whole family
    family: str
    tests: int
    level: float
    #: the most the family's tests could have shown (nan where the test has none: the claimed curve's)
    ceiling: float = math.nan
    #: the claimed curve's source (the accountant and its grid), where the test read the claim's curve
    curve_source: str = ""

    def __post_init__(self) -> None:
        if self.word not in WORDS:
            raise ValueError(f"verdict word {self.word!r} is not one of {', '.join(WORDS)}")
        if self.bound_kind not in BOUND_KINDS:
            raise ValueError(f"bound kind {self.bound_kind!r} is not one of {', '.join(BOUND_KINDS)}")

    @property
    def ratio(self) -> float:
        """The bound over the claim (above 1 refutes it); nan for a claim of no finite epsilon."""
        if not math.isfinite(self.claimed_epsilon) or self.claimed_epsilon <= 0:
            return math.nan
        return self.bound / self.claimed_epsilon

    def words(self) -> str:
        """The four words with their number: "refuted (1.45 > 1)", "tight to 0.86", "not refuted (ceiling 8.87)",
        "no power"."""
        if self.word == REFUTED:
            return f"refuted ({self.bound:.2f} > {self.claimed_epsilon:.3g})"
        if self.word == TIGHT:
            return f"tight to {self.ratio:.2f}"
        if self.word == NOT_REFUTED:
            return "not refuted" if math.isnan(self.ceiling) else f"not refuted (ceiling {self.ceiling:.2f})"
        return NO_POWER

    def fields(self, threat: str) -> tuple[dict[str, float], dict[str, str]]:
        """(metrics, tags) under ``verdict.<threat>.``: what the store holds."""
        prefix = PREFIX.format(threat)
        metrics = {prefix + k: float(getattr(self, k)) for k in _NUMBERS if not math.isnan(float(getattr(self, k)))}
        return metrics, {prefix + k: str(getattr(self, k)) for k in _WORDS}

    @classmethod
    def from_fields(cls, threat: str, metrics: Mapping[str, object], tags: Mapping[str, object]) -> Verdict | None:
        """The verdict stored under ``verdict.<threat>.``, or None where the run holds none (a missing field, or the
        NaN a table gives an absent one)."""
        prefix = PREFIX.format(threat)
        word = tags.get(prefix + "word")
        if not isinstance(word, str) or word not in WORDS:
            return None

        def number(k: str) -> float:
            v = metrics.get(prefix + k)
            try:
                return float(v)
            except (TypeError, ValueError):
                return math.nan

        def text(k: str) -> str:
            v = tags.get(prefix + k)
            return v if isinstance(v, str) else ""

        return cls(word=word, bound=number("bound"), bound_kind=text("bound_kind"),
                   claimed_epsilon=number("claimed_epsilon"), delta=number("delta"), relation=text("relation"),
                   design=text("design"), canaries=int(number("canaries")) if math.isfinite(number("canaries")) else 0,
                   family=text("family"), tests=int(number("tests")) if math.isfinite(number("tests")) else 0,
                   level=number("level"), ceiling=number("ceiling"), curve_source=text("curve_source"))


def one_run_verdict(*, bound: float, bound_kind: str, ceiling: float, powered: bool, claimed_epsilon: float,
                    delta: float, relation: str, design: str, canaries: int, family: str, tests: int,
                    level: float) -> Verdict:
    """The verdict of a one-run (or multi-run) lower bound on epsilon: refuted above the claim, else not refuted
    with the ceiling of its tests where one had power, else no power."""
    if math.isfinite(claimed_epsilon) and bound > claimed_epsilon:
        word = REFUTED
    else:
        word = NOT_REFUTED if powered else NO_POWER
    return Verdict(word=word, bound=bound, bound_kind=bound_kind, claimed_epsilon=claimed_epsilon, delta=delta,
                   relation=relation, design=design, canaries=canaries, family=family, tests=tests, level=level,
                   ceiling=ceiling)


def one_run_fields(metrics: Mapping[str, float], tags: Mapping[str, str], *, claimed_epsilon: float, delta: float,
                   canaries: int) -> tuple[dict[str, float], dict[str, str]]:
    """The verdict fields (``verdict.<threat>.*``) of a one-run or multi-run audit, from the bounds it logged under
    each threat model (``epsilon_lb.<threat>``, the f-DP bound of the same guesses, their ceilings, whether a test had
    power): the larger of Steinke's and the f-DP bound, refuted above the claim. What such an audit writes when it
    ends, and what ``bench store migrate`` adds to one logged before verdicts were fields."""
    out_m: dict[str, float] = {}
    out_t: dict[str, str] = {}
    tests = metrics.get(names.METRIC_AUDIT_TESTS, math.nan)
    for threat in names.THREATS:
        steinke = metrics.get(names.METRIC_THREAT_BOUND.format(threat))
        if steinke is None or not math.isfinite(steinke):
            continue
        fdp = metrics.get(names.METRIC_THREAT_FDP_BOUND.format(threat), math.nan)
        fdp_wins = math.isfinite(fdp) and fdp > steinke + 1e-3  # as ScoreOutcome.decides (fdp_bound.DECIDES_MARGIN)
        ceilings = [metrics.get(names.METRIC_THREAT_CEILING.format(threat), math.nan),
                    metrics.get(names.METRIC_THREAT_FDP_CEILING.format(threat), math.nan)]
        ceiling = max((c for c in ceilings if math.isfinite(c)), default=math.nan)
        power = metrics.get(names.METRIC_THREAT_POWER.format(threat), 1.0)
        verdict = one_run_verdict(
            bound=fdp if fdp_wins else steinke, bound_kind=FDP if fdp_wins else STEINKE, ceiling=ceiling,
            powered=not (math.isfinite(power) and power <= 0), claimed_epsilon=claimed_epsilon, delta=delta,
            relation=tags.get(names.TAG_AUDIT_RELATION, ""), design=tags.get(names.TAG_AUDIT_DESIGN, ""),
            canaries=canaries, family=f"{tags.get(names.TAG_AUDIT_MODE, 'one_run')}: "
                                      f"{tags.get(names.TAG_AUDIT_SCORES, '')}; Steinke and f-DP",
            tests=int(tests) if math.isfinite(tests) else 0, level=0.05)
        m, t = verdict.fields(threat)
        out_m.update(m)
        out_t.update(t)
    return out_m, out_t
