"""The subsampled-Gaussian accountant shared by DP-SGD and the penultimate-layer method: Opacus' own."""

from __future__ import annotations

import functools
import time
from typing import Any

from inputdp.benchmarks.config import PrivacySpec
from inputdp.benchmarks.errors import ConfigError

from .accounting.gaussian import gaussian_epsilon_rdp, gaussian_noise_multiplier_rdp
from .base import Calibration, Method

ACCOUNTANTS = ("rdp", "prv")


@functools.lru_cache(maxsize=256)
def noise_multiplier_for(*, epsilon: float, delta: float, sampling_rate: float, steps: int, accountant: str) -> float:
    """Opacus' ``get_noise_multiplier`` for the matched (epsilon, delta, q, T).

    For the RDP accountant the same algorithm runs on the vectorised RDP of ``accounting.gaussian`` (equal to
    Opacus' result, tested; about 50x faster); the PRV accountant is Opacus' own.
    """
    if accountant == "rdp":
        return gaussian_noise_multiplier_rdp(epsilon=epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps)
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sampling_rate,
                                      steps=steps, accountant=accountant))


def gaussian_epsilon(*, noise_multiplier: float, delta: float, sampling_rate: float, steps: int,
                     accountant: str) -> float:
    """Epsilon of T Poisson-subsampled Gaussian steps, from Opacus' accountant of that name."""
    if accountant == "rdp":
        return gaussian_epsilon_rdp(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps,
                                    delta=delta)[0]
    from opacus.accountants import create_accountant

    acc = create_accountant(accountant)
    acc.history = [(noise_multiplier, sampling_rate, steps)]
    return float(acc.get_epsilon(delta=delta))


class SubsampledGaussianMethod(Method):
    """A method whose every step is a Poisson-subsampled Gaussian mechanism (DP-SGD, Gaussian-penultimate):
    sigma from the matched spec, the ledger from the same accountant. Subclasses name their clipping option."""

    clip_option: str = "max_grad_norm"

    def __init__(self, **options: Any):
        super().__init__(**options)
        c = self.options[self.clip_option]
        if not (isinstance(c, (int, float)) and c > 0 and c < float("inf")):
            raise ConfigError(f"{self.clip_option}={c!r} is not allowed: the clipping norm must be a finite number > 0")
        if self.options["accountant"] not in ACCOUNTANTS:
            raise ConfigError(f"accountant={self.options['accountant']!r} is not allowed: choose rdp or prv")

    @property
    def sigma(self) -> float:
        return self._need_calibration()[1].noise["noise_multiplier"]

    def calibrate(self, spec: PrivacySpec) -> Calibration:
        t0 = time.perf_counter()
        accountant = self.options["accountant"]
        try:
            sigma = noise_multiplier_for(epsilon=spec.epsilon, delta=spec.delta, sampling_rate=spec.sampling_rate,
                                         steps=spec.steps, accountant=accountant)
        except ValueError as err:
            raise ConfigError(f"epsilon={spec.epsilon:g} cannot be reached by {self.name} at q={spec.sampling_rate:g}, "
                              f"T={spec.steps}: {err}") from None
        seconds = time.perf_counter() - t0
        self.spec = spec
        eps = gaussian_epsilon(noise_multiplier=sigma, delta=spec.delta, sampling_rate=spec.sampling_rate,
                               steps=spec.steps, accountant=accountant)
        self.calibration = Calibration(noise={"noise_multiplier": sigma}, epsilon=eps, seconds=seconds,
                                       details={"accountant": accountant,
                                                self.clip_option: self.options[self.clip_option]})
        return self.calibration

    def epsilon_spent(self, steps_done: int) -> float:
        spec, cal = self._need_calibration()
        if steps_done <= 0:
            return 0.0
        return gaussian_epsilon(noise_multiplier=cal.noise["noise_multiplier"], delta=spec.delta,
                                sampling_rate=spec.sampling_rate, steps=steps_done, accountant=self.options["accountant"])
