"""The subsampled-Gaussian accountant shared by DP-SGD and the penultimate-layer method: Opacus' own."""

from __future__ import annotations

import functools

from .accounting.gaussian import gaussian_epsilon_rdp, gaussian_noise_multiplier_rdp

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
