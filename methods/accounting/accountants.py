"""The accountants of a subsampled-Gaussian release, by name (a method's option ``accountant``): ``pld`` (dp_accounting's
privacy-loss distribution, pessimistic: the tightest sound one, the default), ``rdp`` (the suite's vectorised copy of
Opacus' RDP accountant) and ``prv`` (Opacus' PRV accountant). Each reads the same release, :class:`GaussianSteps`
(k unsubsampled Gaussian releases, then T Poisson-subsampled Gaussian steps, under a neighbouring relation: the event
``events.subsampled_gaussian_steps`` builds for dp_accounting), says which relations and releases its theorem covers
(refused in one line otherwise, from the record, not from a branch per name), and finds the least noise that meets
a target through the one calibration search (``calibration.calibrate_parameter``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from inputdp.core.claims import ADD_REMOVE, RELATIONS, ZERO_OUT
from inputdp.core.errors import ConfigError

from .calibration import calibrate_parameter
from .events import Release, subsampled_gaussian_steps
from .gaussian_rdp import MAX_SIGMA, MIN_SIGMA, gaussian_epsilon_rdp, gaussian_noise_multiplier_rdp
from .pld import gaussian_epsilon_pld, gaussian_noise_multiplier_pld


@dataclass(frozen=True)
class GaussianSteps:
    """What a subsampled-Gaussian method releases, but its noise: ``releases`` (sigma_r, k) unsubsampled Gaussian
    releases (DP-SGD's private normalisation statistics), then ``steps`` Poisson-subsampled Gaussian steps at rate
    ``sampling_rate``, read under ``relation``."""

    sampling_rate: float
    steps: int
    relation: str = ADD_REMOVE
    releases: tuple[float, int] = (0.0, 0)

    def at(self, noise_multiplier: float) -> Release:
        """The release at this noise, as a value dp_accounting composes."""
        return Release(subsampled_gaussian_steps(sigma=noise_multiplier, sampling_rate=self.sampling_rate,
                                                 steps=self.steps, releases=self.releases), self.relation)


@dataclass(frozen=True)
class Accountant:
    name: str
    #: the relations whose pair the accountant's theorem is about (zero-out's pair is add/remove's: the null example
    #: contributes 0)
    relations: tuple[str, ...]
    #: whether it composes unsubsampled releases before the steps
    composes_releases: bool
    #: epsilon at delta of the release at a noise multiplier
    epsilon_of: Callable[[GaussianSteps, float, float], float]
    #: the smallest noise multiplier meeting (epsilon, delta), where the accountant has its own search; None: the
    #: one calibration search over ``epsilon_of``
    noise_of: Callable[[GaussianSteps, float, float], float] | None = None

    def check(self, relation: str, releases: tuple[float, int] = (0.0, 0)) -> None:
        """Refuse, in one line, a release this accountant's theorem does not cover (checked when a method is made,
        before its budget is known)."""
        if relation not in self.relations:
            raise ConfigError(f"adjacency={relation} is not allowed with accountant={self.name}: it is an "
                              f"add/remove theorem; use accountant=pld (dp_accounting's PLD under one input replaced)")
        if releases[1] > 0 and not self.composes_releases:
            raise ConfigError(f"accountant={self.name} is not allowed with private normalisation statistics "
                              "(norm_noise_multiplier > 0): their release is composed by accountant=pld only")

    def epsilon(self, release: GaussianSteps, noise_multiplier: float, delta: float) -> float:
        self.check(release.relation, release.releases)
        return self.epsilon_of(release, noise_multiplier, delta)

    def noise(self, release: GaussianSteps, epsilon: float, delta: float) -> float:
        """The smallest noise multiplier whose epsilon at ``delta`` is at most ``epsilon`` (InfeasibleTarget where
        none in range is)."""
        self.check(release.relation, release.releases)
        if self.noise_of is not None:
            return self.noise_of(release, epsilon, delta)
        what = (f"the subsampled Gaussian ({self.name}) at q={release.sampling_rate:g}, T={release.steps}, "
                f"delta={delta:g}")
        # a numerical accountant (PRV's own error bound is about 1e-2): no finer tolerance than that
        return calibrate_parameter(lambda s: self.epsilon_of(release, s, delta), epsilon, low=MIN_SIGMA,
                                   high=MAX_SIGMA, increasing=False, what=what, start=1.0, xtol=1e-6, rtol=1e-4)


def _pld_epsilon(r: GaussianSteps, sigma: float, delta: float) -> float:
    return gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=r.sampling_rate, steps=r.steps, delta=delta,
                                relation=r.relation, releases=r.releases)


def _pld_noise(r: GaussianSteps, epsilon: float, delta: float) -> float:
    return gaussian_noise_multiplier_pld(epsilon=epsilon, delta=delta, sampling_rate=r.sampling_rate, steps=r.steps,
                                         relation=r.relation, releases=r.releases)


def _rdp_epsilon(r: GaussianSteps, sigma: float, delta: float) -> float:
    return gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=r.sampling_rate, steps=r.steps, delta=delta)[0]


def _rdp_noise(r: GaussianSteps, epsilon: float, delta: float) -> float:
    return gaussian_noise_multiplier_rdp(epsilon=epsilon, delta=delta, sampling_rate=r.sampling_rate, steps=r.steps)


def _prv_epsilon(r: GaussianSteps, sigma: float, delta: float) -> float:
    from opacus.accountants import create_accountant

    accountant = create_accountant("prv")
    accountant.history = [(sigma, r.sampling_rate, r.steps)]
    return float(accountant.get_epsilon(delta=delta))


ACCOUNTANTS: dict[str, Accountant] = {a.name: a for a in (
    Accountant("pld", RELATIONS, True, _pld_epsilon, _pld_noise),
    Accountant("rdp", (ADD_REMOVE, ZERO_OUT), False, _rdp_epsilon, _rdp_noise),
    Accountant("prv", (ADD_REMOVE, ZERO_OUT), False, _prv_epsilon),
)}


def accountant(name: str) -> Accountant:
    """The accountant of that name, or a one-line refusal naming those there are."""
    try:
        return ACCOUNTANTS[name]
    except KeyError:
        raise ConfigError(f"accountant={name!r} is not allowed: choose one of {', '.join(ACCOUNTANTS)}") from None


@functools.lru_cache(maxsize=256)
def least_noise(name: str, release: GaussianSteps, epsilon: float, delta: float) -> float:
    """The named accountant's smallest noise multiplier for the release at (epsilon, delta); cached (a sweep
    calibrates each distinct budget once)."""
    return accountant(name).noise(release, epsilon, delta)
