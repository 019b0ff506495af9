"""What the two input-private methods share: each releases one noisy vector per sampled example, so their claims
come from one of two accountants (THEORY.md, "Per-example releases under Poisson sampling"):

- the per-example curve (``accountant=per_example``, the default): the exact privacy curve of one example's own
  vectors for a fixed model, one input replaced (label and membership public), from dp_accounting's PLD: a lower
  bound on what the training releases, and the most any accountant can say of this mechanism;
- the accountant its paper used (Dirichlet's ``paper``, the Gaussian's ``rdp`` / ``prv``): an add/remove
  subsampling theorem for a noised aggregate, whose hypotheses this release does not meet: a number reported for
  comparison with the paper.

Neither is a guarantee of any output of the training; each run logs the per-example curve's rigorous lower bound at
its noise beside the paper's number.
"""

from __future__ import annotations

from collections.abc import Callable

from inputdp.core.claims import RELATION_TEXT
from inputdp.core.errors import ConfigError

from .accounting.accountants import accountant
from .accounting.per_example import (
    ADD_REMOVE,
    REPLACE_INPUT,
    Bracket,
    NoFiniteEpsilon,
    dirichlet_vectors_epsilon,
    gaussian_vectors_epsilon,
)

PER_EXAMPLE = "per_example"
#: the option value that means "the relation of the accountant's own theorem"
AUTO = "auto"
ADJACENCY_TEXT = RELATION_TEXT
THEORY = "THEORY.md, 'Per-example releases under Poisson sampling'"


def resolve_adjacency(method: str, accountant: str, adjacency: str) -> str:
    """The relation a run's accountant is about: ``replace_input`` for the per-example curve, ``add_remove`` for the
    papers' subsampling theorems; an explicit value the accountant cannot have is refused in one line."""
    own = REPLACE_INPUT if accountant == PER_EXAMPLE else ADD_REMOVE
    if adjacency == AUTO:
        return own
    if adjacency not in (REPLACE_INPUT, ADD_REMOVE):
        raise ConfigError(f"adjacency={adjacency!r} is not allowed: choose auto, {REPLACE_INPUT} or {ADD_REMOVE}")
    if adjacency == own:
        return own
    if accountant == PER_EXAMPLE:
        raise ConfigError(f"adjacency=add_remove is not allowed for {method}'s per-example curve: with one example "
                          "added, one more vector is released, which reveals membership (no finite epsilon for "
                          "any delta below the chance that it is sampled); use adjacency=replace_input")
    raise ConfigError(f"adjacency=replace_input is not allowed with accountant={accountant}: that accountant is an "
                      f"add/remove theorem; for one input replaced use accountant=per_example")


def scope(*, accountant: str, released: str, lower_bound: float | None,
          reference: str = "the paper's accountant") -> str:
    """The claim's scope, in full: what the number is, what it is not, and what the vectors spend at least."""
    if accountant == PER_EXAMPLE:
        return (f"epsilon of one example's own {released} for a fixed model, by the per-example curve "
                f"({ADJACENCY_TEXT[REPLACE_INPUT]}): a lower bound on what the training releases, not a guarantee, since "
                "each update moves the model through the private input without noise and every later vector of "
                f"every example reads that model out, which no accountant bounds ({THEORY}); the parameters are "
                "not covered either: the audit measures them")
    spend = (f"so by the per-example curve its {released} spend at least {lower_bound:.3g}" if lower_bound is not None
             else f"so its {released} spend more than it says (the per-example curve is not evaluated at this q*T)")
    return (f"epsilon by {reference} ({accountant}), reported for comparison, not a guarantee of any output of the "
            "training: that accountant is an add/remove subsampling theorem for a noised aggregate, and this "
            f"mechanism releases one vector per sampled example, {spend} ({THEORY}); the parameters are not covered "
            "either: the audit measures them")


def bracket_details(compute: Callable[[], Bracket], prefix: str) -> dict[str, float | str | None]:
    """``compute().as_dict(prefix)``, or, where the curve is not evaluated (more expected releases than
    MAX_EXPECTED_RELEASES), ``None`` for both ends and the reason under ``{prefix}_not_evaluated``."""
    try:
        return compute().as_dict(prefix)
    except NoFiniteEpsilon as err:
        return {f"{prefix}_lower": None, f"{prefix}_upper": None, f"{prefix}_not_evaluated": str(err)}


#: each per-example family's paper accountant: what the method's paper would have claimed at this noise
PAPER_ACCOUNTANTS = {"dirichlet": "paper", "gaussian": "rdp"}


def vectors_and_paper(family, noise: float, delta: float, paper: str = "") -> dict[str, float | None]:
    """A per-example release's two numbers beside its claim (``accounting.releases.PerExampleVectors``): the
    rigorous lower bound on what its vectors spend (the per-example curve's bracket, lower end; None where the curve
    is not evaluated) and what its paper's accountant gives at this noise (``paper``: the run's own where it is a
    paper's; else the family's, ``PAPER_ACCOUNTANTS``)."""

    q, steps = family.sampling_rate, family.steps
    try:
        if family.kind == "dirichlet":
            lower = dirichlet_vectors_epsilon(r=noise, alpha=family.alpha, q=q, steps=steps, delta=delta).lower
        else:
            lower = gaussian_vectors_epsilon(noise_multiplier=noise, sensitivity=family.sensitivity, q=q, steps=steps,
                                             delta=delta).lower
    except NoFiniteEpsilon:
        lower = None
    return {"vectors_epsilon_lb": lower, "paper_epsilon": accountant(paper or PAPER_ACCOUNTANTS[family.kind]).epsilon(
        family, noise, delta)}


def vectors_details(family, noise: float, delta: float, paper: str = "") -> dict[str, float | str | None]:
    """A per-example calibration's details: the per-example curve's bracket at this noise (or why it is not
    evaluated) and the paper's accountant's epsilon."""
    q, steps = family.sampling_rate, family.steps
    if family.kind == "dirichlet":
        bracket = bracket_details(lambda: dirichlet_vectors_epsilon(r=noise, alpha=family.alpha, q=q, steps=steps,
                                                                    delta=delta), "epsilon_vectors")
    else:
        bracket = bracket_details(lambda: gaussian_vectors_epsilon(noise_multiplier=noise,
                                                                   sensitivity=family.sensitivity, q=q, steps=steps,
                                                                   delta=delta), "epsilon_vectors")
    return {**bracket, "epsilon_paper_accountant": vectors_and_paper(family, noise, delta, paper)["paper_epsilon"]}
