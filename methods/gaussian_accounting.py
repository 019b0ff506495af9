"""The subsampled-Gaussian accountant shared by DP-SGD and the penultimate-layer method: Opacus' own."""

from __future__ import annotations

import functools

ACCOUNTANTS = ("rdp", "prv")


@functools.lru_cache(maxsize=256)
def noise_multiplier_for(*, epsilon: float, delta: float, sampling_rate: float, steps: int, accountant: str) -> float:
    """Opacus' ``get_noise_multiplier`` for the matched (epsilon, delta, q, T)."""
    from opacus.accountants.utils import get_noise_multiplier

    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta, sample_rate=sampling_rate,
                                      steps=steps, accountant=accountant))


def gaussian_epsilon(*, noise_multiplier: float, delta: float, sampling_rate: float, steps: int,
                     accountant: str) -> float:
    """Epsilon of T Poisson-subsampled Gaussian steps, from Opacus' accountant of that name."""
    from opacus.accountants import create_accountant

    acc = create_accountant(accountant)
    acc.history = [(noise_multiplier, sampling_rate, steps)]
    return float(acc.get_epsilon(delta=delta))
