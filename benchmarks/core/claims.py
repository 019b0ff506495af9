"""What a calibration found and what a run's guarantee claims: records a method returns and the harness, the
audits and the tracker read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import names

#: the neighbouring relations a claim can be about (option ``adjacency``): one example added or removed with its
#: label (what DP-SGD's theorems are about), or one input replaced, its label and membership public (the relation
#: "inputs private, labels public" names). THEORY.md, "Neighbouring relations".
ADD_REMOVE = "add_remove"
REPLACE_INPUT = "replace_input"
RELATIONS = (ADD_REMOVE, REPLACE_INPUT)
RELATION_TEXT = {
    ADD_REMOVE: "add/remove one example",
    REPLACE_INPUT: "one input replaced, its label and membership public",
}


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The calibrated noise parameter(s) and the epsilon they reach over the full T steps."""

    noise: Mapping[str, float]
    epsilon: float
    order: float | None = None
    seconds: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)


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

    def as_tags(self) -> dict[str, str]:
        return {
            names.TAG_PRIVACY_MECHANISM: self.mechanism,
            names.TAG_PRIVACY_PROTECTS: self.protects,
            names.TAG_PRIVACY_SCOPE: self.scope,
            names.TAG_PRIVACY_NEEDS_PUBLIC_DATA: str(self.needs_public_data).lower(),
            names.TAG_PRIVACY_ACCOUNTANT: self.accountant,
            names.TAG_PRIVACY_ADJACENCY: self.adjacency,
            names.TAG_PRIVACY_GUARANTEE: str(self.guarantee).lower(),
        }

    def as_metrics(self) -> dict[str, float]:
        """The claim's numbers beside its epsilon, as run metrics (only those that apply)."""
        out = {}
        if self.vectors_epsilon_lb is not None:
            out[names.METRIC_VECTORS_EPSILON_LB] = self.vectors_epsilon_lb
        if self.paper_epsilon is not None:
            out[names.METRIC_PAPER_EPSILON] = self.paper_epsilon
        return out
