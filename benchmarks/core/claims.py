"""What a calibration found and what a run's guarantee claims: records a method returns and the harness, the
audits and the tracker read."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from . import names

#: the neighbouring relations a claim can be about (option ``adjacency``): one example added or removed with its
#: label (what DP-SGD's theorems are about), or one input replaced, its label and membership public (the relation
#: "inputs private, labels public" names). THEORY.md, "Neighbouring relations".
ADD_REMOVE = "add_remove"
REPLACE_INPUT = "replace_input"
#: one example replaced by the null example, which contributes nothing (Kairouz et al. 2021's "zero-out";
#: dp_accounting's REPLACE_SPECIAL): n and every index public, the example's input and label hidden
ZERO_OUT = "zero_out"
RELATIONS = (ADD_REMOVE, REPLACE_INPUT, ZERO_OUT)
#: the claims' mechanisms whose add/remove pair is zero-out's: the null example adds nothing and the output does not
#: depend on n (DP-SGD's noised sum over a fixed divisor q n; the least-squares statistics), so an add/remove claim
#: at epsilon is a zero-out claim at epsilon (THEORY.md, "Neighbouring relations")
ADD_REMOVE_IS_ZERO_OUT = ("subsampled_gaussian", "gaussian_sufficient_statistics")
def relations_covered(relation: str, mechanism: str) -> tuple[str, ...]:
    """The relations a claim under ``relation`` by ``mechanism`` covers at its epsilon unless it says more (a claim
    whose theorem replaces one example, input and label, covers zero-out and one input replaced too: PATE's says so,
    ``ClaimText.covers``): its own, and zero-out where the mechanism's add/remove pair is zero-out's
    (``ADD_REMOVE_IS_ZERO_OUT``). An add/remove claim covers neither in general (each is two add/remove steps: twice
    the epsilon). THEORY.md, "Neighbouring relations"."""
    if relation not in RELATIONS:
        return ()
    if relation == ADD_REMOVE and mechanism in ADD_REMOVE_IS_ZERO_OUT:
        return (ADD_REMOVE, ZERO_OUT)
    return (relation,)


RELATION_TEXT = {
    ADD_REMOVE: "add/remove one example",
    REPLACE_INPUT: "one input replaced, its label and membership public",
    ZERO_OUT: "one example replaced by the null example (zero-out: it contributes nothing; n public)",
}
#: how an audit represents a canary that its coin left out: absent from the training set, or its slot kept (same
#: index, same label, n unchanged) holding the canary's replacement
ABSENT = "absent"
REPLACED = "replaced"
NULL = "null"  # zero-out: the slot holds the null example, whose contribution (gradient, statistic) is zero


@dataclass(frozen=True)
class Relation:
    """A neighbouring relation as a value: what the claim's theorem is about, what it protects, and the audit design
    that tests it. Steinke, Nasr & Jagielski's one-run theorem (and every multi-run test) needs each canary's
    inclusion flip to be a pair of neighbours *under the claim's relation*: under add/remove an excluded canary is
    absent; under replace_input it is replaced (its slot, index and label kept, its input swapped for a fixed
    replacement), so that n and every other example are the same in both worlds (THEORY.md, "Auditing")."""

    key: str
    text: str
    protects: str
    excluded: str  # ABSENT, REPLACED or NULL: the audit design the relation asks for

    def __str__(self) -> str:
        return self.key


RELATION_VALUES = {
    ADD_REMOVE: Relation(ADD_REMOVE, RELATION_TEXT[ADD_REMOVE], "inputs and labels", ABSENT),
    REPLACE_INPUT: Relation(REPLACE_INPUT, RELATION_TEXT[REPLACE_INPUT], "inputs", REPLACED),
    ZERO_OUT: Relation(ZERO_OUT, RELATION_TEXT[ZERO_OUT], "inputs and labels", NULL),
}


#: the method option that names the claim's relation
ADJACENCY = "adjacency"


def adjacency_of(options: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> str:
    """The relation a method's options name (their ``adjacency``; else the method's default's; "" for a method that
    has none): what a preset's recipe, a run's key and an audit's design are chosen by."""
    return str(options.get(ADJACENCY, (defaults or {}).get(ADJACENCY, "")))


def relation_named(name: str) -> Relation:
    """The relation a key (``add_remove``) or its text names; a one-line error otherwise."""
    for r in RELATION_VALUES.values():
        if name in (r.key, r.text):
            return r
    raise ValueError(f"relation {name!r} is not known: choose one of {', '.join(RELATION_VALUES)}")


def relation_key(adjacency: str) -> str:
    """The key of the relation an adjacency text (or key) names, "" where it names none (a reference run's): what a
    claim's ``privacy.relation`` tag holds, derived as :class:`PrivacyClaim` derives its relation."""
    try:
        return relation_named(adjacency).key
    except ValueError:
        return ""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The calibrated noise parameter(s) and the epsilon they reach over the full T steps."""

    noise: Mapping[str, float]
    epsilon: float
    order: float | None = None
    seconds: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)
    #: the release family's noise (methods/accounting/releases.py) that ``noise`` maps out (PATE's common scale of
    #: its sigmas; the noise multiplier or r itself otherwise); nan where there is none (the reference)
    release_noise: float = math.nan

    def scaled(self, factor: float) -> Calibration:
        """Every noise times ``factor``, the epsilon kept: a deliberately broken implementation's calibration (an
        audit's). Where the noise is Dirichlet's r, more is less noise: its caller says which it means."""
        return replace(self, noise={k: v * factor for k, v in self.noise.items()},
                       release_noise=self.release_noise * factor)


@dataclass(frozen=True, kw_only=True)
class PrivacyClaim:
    """What the run's guarantee is (an event, as dp_accounting calls it) and what it covers."""

    mechanism: str
    parameters: Mapping[str, float]
    sampling: str
    steps: int
    epsilon: float
    delta: float
    protects: str  # "inputs", "inputs and labels", "nothing"
    scope: str  # in words: which released values the guarantee covers
    needs_public_data: bool = False
    #: the accountant that computed ``epsilon`` (a method option where there is a choice), and the neighbouring
    #: relation its theorem is about
    accountant: str = ""
    adjacency: str = ""
    #: False where ``epsilon`` is not a guarantee of any output of the training: a number computed for comparison
    #: (the paper's accountant), or a lower bound on what the training releases (the per-example curve)
    guarantee: bool = True
    #: a rigorous lower bound on the epsilon that the released per-example vectors spend at this noise (the
    #: per-example curve of THEORY.md, "Per-example releases under Poisson sampling"); None where not applicable
    vectors_epsilon_lb: float | None = None
    #: the epsilon the paper's accountant gives this noise, reported beside a claim computed otherwise
    paper_epsilon: float | None = None
    #: where the noise comes from: secret (the OS's entropy, option ``secure_mode``) or seeded from the run's seed, in
    #: which case the guarantee assumes a secret that the published seed is not (methods/noise.py); "" where unsaid
    noise: str = ""
    #: the neighbouring relation as a value (key or text accepted; derived from ``adjacency`` when that names one):
    #: what the audits read to build their neighbouring pairs. None for a claim about no relation (no privacy)
    relation: Relation | str | None = None
    #: the relations the claim covers at its epsilon (keys); derived from its relation and mechanism where not given
    #: (``relations_covered``): what the answer reads
    covers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        rel = self.relation
        if rel is None and self.adjacency:
            try:
                rel = relation_named(self.adjacency)
            except ValueError:
                rel = None
        elif isinstance(rel, str):
            rel = relation_named(rel)
        object.__setattr__(self, "relation", rel)
        if rel is not None and not self.adjacency:
            object.__setattr__(self, "adjacency", rel.text)
        if not self.covers:
            object.__setattr__(self, "covers", relations_covered(rel.key if rel is not None else "", self.mechanism))

    def as_tags(self) -> dict[str, str]:
        return {
            names.TAG_PRIVACY_MECHANISM: self.mechanism,
            names.TAG_PRIVACY_PROTECTS: self.protects,
            names.TAG_PRIVACY_SCOPE: self.scope,
            names.TAG_PRIVACY_NEEDS_PUBLIC_DATA: str(self.needs_public_data).lower(),
            names.TAG_PRIVACY_ACCOUNTANT: self.accountant,
            names.TAG_PRIVACY_ADJACENCY: self.adjacency,
            names.TAG_PRIVACY_GUARANTEE: str(self.guarantee).lower(),
            names.TAG_PRIVACY_NOISE: self.noise,
            names.TAG_PRIVACY_RELATION: self.relation.key if isinstance(self.relation, Relation) else "",
            names.TAG_PRIVACY_COVERS: ",".join(self.covers),
        }

    def as_metrics(self) -> dict[str, float]:
        """The claim's numbers beside its epsilon, as run metrics (only those that apply)."""
        out = {}
        if self.vectors_epsilon_lb is not None:
            out[names.METRIC_VECTORS_EPSILON_LB] = self.vectors_epsilon_lb
        if self.paper_epsilon is not None:
            out[names.METRIC_PAPER_EPSILON] = self.paper_epsilon
        return out
