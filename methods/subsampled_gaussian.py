"""The subsampled-Gaussian accountant shared by DP-SGD and the penultimate-layer method (THEORY.md, "The
subsampled Gaussian"): the privacy-loss distribution through dp_accounting (``pld``, pessimistic, the tightest sound
one), the RDP accountant as Opacus computes it (``rdp``), or Opacus' PRV accountant (``prv``)."""

from __future__ import annotations

from typing import Any

from inputdp.core.claims import ADD_REMOVE, ZERO_OUT
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from .accounting.accountants import ACCOUNTANTS as REGISTRY
from .accounting.accountants import GaussianSteps, least_noise
from .accounting.accountants import accountant as accountant_named
from .accounting.calibration import InfeasibleTarget
from .accounting.pld import DESCRIPTION as PLD_DESCRIPTION
from .accounting.pld import DESCRIPTION_REPLACE as PLD_DESCRIPTION_REPLACE
from .accounting.pld import DESCRIPTION_ZERO_OUT as PLD_DESCRIPTION_ZERO_OUT
from .accounting.pld import MAX_STEPS as PLD_MAX_STEPS
from .accounting.pld import VALUE_INTERVAL as PLD_INTERVAL
from .accounting.pld import library_version as pld_library_version
from .base import Calibration, Method

ACCOUNTANTS = tuple(REGISTRY)


def noise_multiplier_for(*, epsilon: float, delta: float, sampling_rate: float, steps: int, accountant: str,
                         relation: str = ADD_REMOVE, releases: tuple[float, int] = (0.0, 0)) -> float:
    """The smallest sigma meeting (epsilon, delta, q, T) under the named accountant (accounting/accountants.py):
    ``releases`` (sigma_r, k) unsubsampled Gaussian releases composed before the steps (PLD's only); ``relation``
    ``replace_input`` is PLD's only, ``zero_out`` has add/remove's pair."""
    return least_noise(accountant, GaussianSteps(sampling_rate, steps, relation, tuple(releases)), epsilon, delta)


def gaussian_epsilon(*, noise_multiplier: float, delta: float, sampling_rate: float, steps: int,
                     accountant: str, relation: str = ADD_REMOVE, releases: tuple[float, int] = (0.0, 0)) -> float:
    """Epsilon of T Poisson-subsampled Gaussian steps after ``releases``, from the named accountant."""
    return accountant_named(accountant).epsilon(GaussianSteps(sampling_rate, steps, relation, tuple(releases)),
                                                noise_multiplier, delta)


class SubsampledGaussianMethod(Method):
    """A method whose every step is a Poisson-subsampled Gaussian mechanism (DP-SGD, Gaussian-penultimate):
    sigma from the matched spec, the ledger from the same accountant. Subclasses name their clipping option."""

    clip_option: str = "max_grad_norm"
    #: the accountants a run may choose (option ``accountant``)
    accountants: tuple[str, ...] = ACCOUNTANTS
    #: the neighbouring relation the accountant is asked about (DP-SGD's option ``adjacency``)
    relation: str = ADD_REMOVE

    def __init__(self, **options: Any):
        super().__init__(**options)
        c = self.options[self.clip_option]
        if not (isinstance(c, (int, float)) and c > 0 and c < float("inf")):
            raise ConfigError(f"{self.clip_option}={c!r} is not allowed: the clipping norm must be a finite number > 0")
        if self.options["accountant"] not in self.accountants:
            raise ConfigError(f"accountant={self.options['accountant']!r} is not allowed: choose one of "
                              f"{', '.join(self.accountants)}")

    def prior_releases(self) -> tuple[float, int]:
        """(sigma_r, k): the unsubsampled Gaussian releases the method makes before its steps (none by default)."""
        return (0.0, 0)

    def steps_release(self, spec: PrivacySpec, steps: int) -> GaussianSteps:
        """What ``steps`` of the method release, but the noise: its prior releases, then the subsampled steps, under
        its relation (the one value calibration, the ledger and ``release`` read)."""
        return GaussianSteps(spec.sampling_rate, steps, self.relation, tuple(self.prior_releases()))

    def accountant_label(self) -> str:
        """The accountant as a claim names it: which one, and for ``pld`` its library version and grid."""
        accountant = self.options["accountant"]
        if accountant == "pld":
            return f"pld (dp_accounting {pld_library_version()}, pessimistic, grid {PLD_INTERVAL:g})"
        return accountant

    @property
    def sigma(self) -> float:
        return self._need_calibration()[1].noise["noise_multiplier"]

    def noise_for(self, spec: PrivacySpec) -> Calibration:
        accountant = self.options["accountant"]
        if accountant == "pld" and spec.steps > PLD_MAX_STEPS:
            raise ConfigError(f"{self.name}: steps={spec.steps} is not allowed with accountant=pld: it composes at "
                              f"most {PLD_MAX_STEPS:,} steps; use --option {self.name}.accountant=rdp")
        release = self.steps_release(spec, spec.steps)
        try:
            sigma = least_noise(accountant, release, spec.epsilon, spec.delta)
        except InfeasibleTarget as err:
            raise ConfigError(f"{self.name}: {err}") from None
        eps = accountant_named(accountant).epsilon(release, sigma, spec.delta)
        details = {"accountant": accountant, self.clip_option: self.options[self.clip_option]}
        if self.relation != ADD_REMOVE:
            details["adjacency"] = self.relation
        if self.prior_releases()[1]:
            details["releases"] = f"{self.prior_releases()[1]} x Gaussian, noise multiplier {self.prior_releases()[0]:g}"
        if accountant == "pld":
            detail = {ADD_REMOVE: PLD_DESCRIPTION, ZERO_OUT: PLD_DESCRIPTION_ZERO_OUT}.get(self.relation,
                                                                                     PLD_DESCRIPTION_REPLACE)
            details.update(accountant_detail=detail, accountant_library=f"dp_accounting {pld_library_version()}")
        return Calibration(noise={"noise_multiplier": sigma}, epsilon=eps, details=details)

    def epsilon_spent(self, steps_done: int) -> float:
        spec, cal = self._need_calibration()
        if steps_done <= 0 and self.prior_releases()[1] == 0:
            return 0.0
        return accountant_named(self.options["accountant"]).epsilon(
            self.steps_release(spec, max(steps_done, 0)), cal.noise["noise_multiplier"], spec.delta)
