"""The accountants, by name (a method's option ``accountant``), each reading the release families it knows
(releases.py): the epsilon of a family at a noise and delta, the least noise that meets a target (the one calibration
of every method: :func:`calibrate`), the claimed trade-off curve, and whether its epsilon is a guarantee of what the
family describes (``sound``: the papers' accountants read a per-example release as if it were a noised aggregate,
which it is not, and say so). A registry in Opacus' manner: ``register_accountant`` refuses a name taken.

- ``pld``: dp_accounting's privacy-loss distribution (pessimistic, connect-the-dots; the tightest sound one) of the
  subsampled-Gaussian steps under any relation, and of any event's noise scaled (a mechanism audit's release);
- ``rdp``: the suite's vectorised copy of Opacus' RDP accountant; ``prv``: Opacus' PRV accountant (add/remove and
  zero-out only, no prior releases); each also reads the penultimate Gaussian's vectors as its paper does (unsound);
- ``analytic_gaussian``: unsampled Gaussian releases composed exactly (Balle & Wang 2018; Dong, Roth & Su 2022);
- ``per_example``: the per-example curve of one example's own vectors (a lower bound on what training releases);
- ``paper``: the main paper's accountant of Dirichlet's vectors (Zhu & Wang's subsampled RDP; refuted for them);
- ``gnmax_data_independent_rdp``: PATE's data-independent RDP of its queries;
- ``none``: the non-private reference's (no finite epsilon).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from inputdp.core.claims import ADD_REMOVE, RELATIONS, ZERO_OUT, Calibration
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from .calibration import InfeasibleTarget, calibrate_parameter
from .event_noise import event_least_noise
from .events import EXACT_GAUSSIANS, PLD_INTERVAL
from .gaussian_rdp import MAX_SIGMA, MIN_SIGMA, gaussian_epsilon_rdp, gaussian_noise_multiplier_rdp
from .gnmax import ORDERS as GNMAX_ORDERS
from .gnmax import data_independent_rdp
from .one_release import gaussian_release_epsilon, gaussian_release_sigma
from .per_example import calibrate_dirichlet_r, calibrate_gaussian_sigma, discretisation_for, per_example_pld
from .pld import (
    DESCRIPTION,
    DESCRIPTION_REPLACE,
    DESCRIPTION_ZERO_OUT,
    MAX_STEPS,
    VALUE_INTERVAL,
    gaussian_epsilon_pld,
    gaussian_noise_multiplier_pld,
    library_version,
)
from .rdp import calibrate_r, dirichlet_epsilon, rdp_to_epsilon
from .releases import GaussianReleases, GaussianSteps, NonPrivate, PateQueries, PerExampleVectors, ScaledEvent
from .trade_off import TradeOffCurve


class Accountant:
    """An accountant: the families it reads (``families``), whether its epsilon is a guarantee of what they describe
    (``sound``), how a claim names it (``label``), and the three computations. Subclasses fill in ``epsilon`` and,
    where they have a faster search than the generic one, ``least_noise``."""

    name: str = ""
    families: tuple[type, ...] = ()
    sound: bool = True

    def check(self, family) -> None:
        """Refuse, in one line, a family this accountant does not read (before any budget is known)."""
        if not isinstance(family, self.families):
            raise ConfigError(f"accountant={self.name} is not allowed for a release of {type(family).__name__}: it reads "
                              + ", ".join(f.__name__ for f in self.families))

    def label(self, family) -> str:
        return self.name

    def relation(self, family) -> str:
        """The relation its theorem is about, read on this family (the claim's)."""
        return family.relation

    def details(self, family) -> dict[str, Any]:
        return {"accountant": self.name}

    def epsilon(self, family, noise: float, delta: float) -> float:
        return self.epsilon_and_order(family, noise, delta)[0]

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        """(epsilon at delta, the Rényi order it was converted at where the accountant has one)."""
        raise NotImplementedError

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        """The noise nearest the crossing whose epsilon is at most the target (InfeasibleTarget otherwise)."""
        raise NotImplementedError(f"accountant {self.name} has no search")

    def trade_off(self, family, noise: float) -> TradeOffCurve:
        """The claimed curve of the release at this noise: the library's event's, where one describes it."""
        release = family.at(noise)
        if release is None:
            raise ConfigError(f"accountant={self.name}: no library event describes a {type(family).__name__} release, "
                              "so it has no trade-off curve here")
        return release.trade_off()


# --- the subsampled Gaussian ---------------------------------------------------------------------------------------
def _as_steps(family) -> GaussianSteps:
    """The family as the subsampled-Gaussian accountants read it: itself, or the penultimate Gaussian's vectors read
    as its paper does (T steps of a noised aggregate of sensitivity C, add/remove)."""
    if isinstance(family, PerExampleVectors):
        return GaussianSteps(family.sampling_rate, family.steps, ADD_REMOVE)
    return family


class _SubsampledGaussian(Accountant):
    families = (GaussianSteps,)
    relations: tuple[str, ...] = (ADD_REMOVE, ZERO_OUT)
    composes_releases = False

    def check(self, family) -> None:
        if isinstance(family, PerExampleVectors) and family.kind == "gaussian":
            return  # the paper's reading (unsound: ``sound_for``)
        super().check(family)
        if family.relation not in self.relations:
            raise ConfigError(f"adjacency={family.relation} is not allowed with accountant={self.name}: it is an "
                              f"add/remove theorem; use accountant=pld (dp_accounting's PLD under one input replaced)")
        if family.releases[1] > 0 and not self.composes_releases:
            raise ConfigError(f"accountant={self.name} is not allowed with private normalisation statistics "
                              "(norm_noise_multiplier > 0): their release is composed by accountant=pld only")

    def sound_for(self, family) -> bool:
        return not isinstance(family, PerExampleVectors)

    def relation(self, family) -> str:
        return _as_steps(family).relation

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        steps = _as_steps(family)
        if steps.empty():
            return 0.0, None
        return self._epsilon(steps, noise, delta), None

    def _epsilon(self, steps: GaussianSteps, noise: float, delta: float) -> float:
        raise NotImplementedError

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        return cached_least_noise(self.name, _as_steps(family), epsilon, delta)

    def _search(self, steps: GaussianSteps, epsilon: float, delta: float) -> float:
        what = f"the subsampled Gaussian ({self.name}) at q={steps.sampling_rate:g}, T={steps.steps}, delta={delta:g}"
        # a numerical accountant (PRV's own error bound is about 1e-2): no finer tolerance than that
        return calibrate_parameter(lambda s: self._epsilon(steps, s, delta), epsilon, low=MIN_SIGMA, high=MAX_SIGMA,
                                   increasing=False, what=what, start=1.0, xtol=1e-6, rtol=1e-4)


class PLD(_SubsampledGaussian):
    """DP-SGD's steps, and any release a dp_accounting event describes with its noise scaled (``ScaledEvent``: a
    mechanism audit's trials), under any relation."""

    name = "pld"
    families = (GaussianSteps, ScaledEvent)
    relations = RELATIONS
    composes_releases = True

    def check(self, family) -> None:
        if isinstance(family, ScaledEvent):
            return
        super().check(family)
        if isinstance(family, GaussianSteps) and family.steps > MAX_STEPS:
            raise ConfigError(f"steps={family.steps} is not allowed with accountant=pld: it composes at most "
                              f"{MAX_STEPS:,} steps; use accountant=rdp")

    def label(self, family) -> str:
        if isinstance(family, ScaledEvent):
            if family.at(1.0).exact_mu() is not None:
                return EXACT_GAUSSIANS
            return f"dp_accounting PLD (pessimistic, grid {PLD_INTERVAL:g}, {family.relation})"
        return f"pld (dp_accounting {library_version()}, pessimistic, grid {VALUE_INTERVAL:g})"

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        if isinstance(family, ScaledEvent):
            return family.at(noise).epsilon(delta, interval=PLD_INTERVAL), None
        return super().epsilon_and_order(family, noise, delta)

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        if isinstance(family, ScaledEvent):
            return event_least_noise(family, float(epsilon), float(delta))
        return super().least_noise(family, epsilon, delta)

    def details(self, family) -> dict[str, Any]:
        relation = _as_steps(family).relation
        detail = {ADD_REMOVE: DESCRIPTION, ZERO_OUT: DESCRIPTION_ZERO_OUT}.get(relation, DESCRIPTION_REPLACE)
        return {"accountant": self.name, "accountant_detail": detail,
                "accountant_library": f"dp_accounting {library_version()}"}

    def _epsilon(self, steps: GaussianSteps, noise: float, delta: float) -> float:
        return gaussian_epsilon_pld(noise_multiplier=noise, sampling_rate=steps.sampling_rate, steps=steps.steps,
                                    delta=delta, relation=steps.relation, releases=steps.releases)

    def _search(self, steps: GaussianSteps, epsilon: float, delta: float) -> float:
        return gaussian_noise_multiplier_pld(epsilon=epsilon, delta=delta, sampling_rate=steps.sampling_rate,
                                             steps=steps.steps, relation=steps.relation, releases=steps.releases)


class RDP(_SubsampledGaussian):
    name = "rdp"

    def _epsilon(self, steps: GaussianSteps, noise: float, delta: float) -> float:
        return gaussian_epsilon_rdp(noise_multiplier=noise, sampling_rate=steps.sampling_rate, steps=steps.steps,
                                    delta=delta)[0]

    def _search(self, steps: GaussianSteps, epsilon: float, delta: float) -> float:
        return gaussian_noise_multiplier_rdp(epsilon=epsilon, delta=delta, sampling_rate=steps.sampling_rate,
                                             steps=steps.steps)


class PRV(_SubsampledGaussian):
    name = "prv"

    def _epsilon(self, steps: GaussianSteps, noise: float, delta: float) -> float:
        from opacus.accountants import create_accountant

        accountant = create_accountant("prv")
        accountant.history = [(noise, steps.sampling_rate, steps.steps)]
        return float(accountant.get_epsilon(delta=delta))


@functools.lru_cache(maxsize=256)
def cached_least_noise(name: str, steps: GaussianSteps, epsilon: float, delta: float) -> float:
    """The named subsampled-Gaussian accountant's least noise; cached (a sweep calibrates each budget once)."""
    return accountant(name)._search(steps, epsilon, delta)


# --- one-shot Gaussians, PATE, the per-example vectors, none --------------------------------------------------------
class AnalyticGaussian(Accountant):
    name = "analytic_gaussian"
    families = (GaussianReleases,)

    def label(self, family) -> str:
        return f"analytic Gaussian (Balle & Wang 2018), {family.what}"

    def details(self, family) -> dict[str, Any]:
        return {"accountant": self.label(family)}

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        # the releases compose to one Gaussian of noise s exactly (releases.GaussianReleases)
        return (0.0 if family.empty() else gaussian_release_epsilon(noise, delta)), None

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        return gaussian_release_sigma(epsilon, delta)


class GNMaxDataIndependent(Accountant):
    name = "gnmax_data_independent_rdp"
    families = (PateQueries,)

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        if family.empty():
            return 0.0, None
        sigmas = family.sigmas(noise)
        rdp = data_independent_rdp(queries=family.queries, answers=family.queries, sigma1=sigmas.get("sigma1"),
                                   sigma2=sigmas["sigma2"])
        return rdp_to_epsilon(GNMAX_ORDERS, rdp, delta)

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        if not family.calibrated:
            return 1.0
        what = f"pate with {family.queries} queries at delta={delta:g}"
        # the data-independent epsilon decreases as both sigmas grow by a common scale
        return calibrate_parameter(lambda s: self.epsilon(family, s, delta), epsilon, low=1e-6, high=1e6,
                                   increasing=False, what=what, start=1.0, xtol=1e-12, rtol=1e-12)


class PerExample(Accountant):
    name = "per_example"
    families = (PerExampleVectors,)

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        if family.empty():
            return 0.0, None
        h = discretisation_for(family.sampling_rate, family.grid_steps)
        pld = per_example_pld(family.single(noise), family.sampling_rate, family.steps, pessimistic=True, h=h)
        return max(0.0, float(pld.get_epsilon_for_delta(delta))), None

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        q, steps = family.sampling_rate, family.steps
        if family.kind == "dirichlet":
            return calibrate_dirichlet_r(epsilon=epsilon, delta=delta, q=q, steps=steps, alpha=family.alpha)
        return calibrate_gaussian_sigma(epsilon=epsilon, delta=delta, q=q, steps=steps, sensitivity=family.sensitivity)


class DirichletPaper(Accountant):
    """The main paper's accountant: Zhu & Wang's subsampled RDP of the Dirichlet mechanism, an add/remove theorem for
    a noised aggregate, read on one vector per sampled example (THEORY.md, "Per-example releases under Poisson sampling")."""

    name = "paper"
    families = (PerExampleVectors,)
    sound = False

    def check(self, family) -> None:
        super().check(family)
        if family.kind != "dirichlet":
            raise ConfigError("accountant=paper is not allowed here: it is the Dirichlet mechanism's")

    def relation(self, family) -> str:
        return ADD_REMOVE  # an add/remove subsampling theorem

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        if family.empty():
            return 0.0, None
        if noise >= family.alpha:
            return math.inf, None
        return dirichlet_epsilon(r=noise, alpha=family.alpha, q=family.sampling_rate, steps=family.steps, delta=delta)

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        return calibrate_r(epsilon=epsilon, delta=delta, sampling_rate=family.sampling_rate, steps=family.steps,
                           alpha=family.alpha)[0]


class NoneAccountant(Accountant):
    name = "none"
    families = (NonPrivate,)
    sound = False

    def label(self, family) -> str:
        return ""  # no accountant computed anything

    def epsilon_and_order(self, family, noise: float, delta: float) -> tuple[float, float | None]:
        return (0.0 if family.empty() else math.inf), None

    def least_noise(self, family, epsilon: float, delta: float) -> float:
        return 0.0


ACCOUNTANTS: dict[str, Accountant] = {}


def register_accountant(acc: Accountant, *, force: bool = False) -> Accountant:
    """Add an accountant under its name; a name taken is refused unless ``force``."""
    if acc.name in ACCOUNTANTS and not force:
        raise ConfigError(f"accountant {acc.name!r} is already registered")
    ACCOUNTANTS[acc.name] = acc
    return acc


for _acc in (PLD(), RDP(), PRV(), AnalyticGaussian(), GNMaxDataIndependent(), PerExample(), DirichletPaper(),
             NoneAccountant()):
    register_accountant(_acc)


def accountant(name: str) -> Accountant:
    """The accountant of that name, or a one-line refusal naming those there are."""
    try:
        return ACCOUNTANTS[name]
    except KeyError:
        raise ConfigError(f"accountant={name!r} is not allowed: choose one of {', '.join(ACCOUNTANTS)}") from None


def sound(acc: Accountant, family) -> bool:
    """Whether the accountant's epsilon is a guarantee of what the family describes."""
    return bool(getattr(acc, "sound_for", lambda f: acc.sound)(family))


def calibrate(family, acc: Accountant, spec: PrivacySpec, what: str) -> Calibration:
    """The one calibration: the least noise of the family that the accountant puts within ``spec``'s (epsilon,
    delta), and the epsilon it reaches; a target no noise meets is refused in one line naming ``what`` (the method)."""
    acc.check(family)
    try:
        noise = acc.least_noise(family, spec.epsilon, spec.delta)
    except InfeasibleTarget as err:  # a target no noise meets: one line, whichever accountant found it
        raise ConfigError(f"{what}: {err}") from None
    eps, order = acc.epsilon_and_order(family, noise, spec.delta)
    if sound(acc, family) and eps > spec.epsilon * (1 + 1e-9):  # a noise fixed by the options (PATE's calibrate=false)
        raise ConfigError(f"epsilon={spec.epsilon:g} is below what the noise its options fix guarantees: {acc.name} "
                          f"gives {eps:.4g} (raise the target or let {what} calibrate)")
    noise_map = family.sigmas(noise) if isinstance(family, PateQueries) else (
        {family.noise_name: noise} if family.noise_name else {})
    return Calibration(noise=noise_map, epsilon=eps, order=order, details=acc.details(family),
                       release_noise=noise if family.noise_name else math.nan)


def least_noise(name: str, family: GaussianSteps, epsilon: float, delta: float) -> float:
    """The named accountant's least noise for a subsampled-Gaussian family (what ``bench calibrate`` and the tests
    compare across accountants)."""
    acc = accountant(name)
    acc.check(family)
    return acc.least_noise(family, epsilon, delta)


__all__ = ["ACCOUNTANTS", "Accountant", "GaussianSteps", "accountant", "calibrate", "least_noise",
           "register_accountant", "sound"]
