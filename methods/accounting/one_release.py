"""One Gaussian release, exactly (Balle & Wang 2018, Theorem 8), and the exact composition of several Gaussian
releases of the same data (Dong, Roth & Su 2022: Gaussian mechanisms of noise multipliers sigma_i compose to one of
1/sigma^2 = sum_i 1/sigma_i^2). THEORY.md, "Sound input-private methods"."""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm

from .calibration import calibrate_parameter


def gaussian_release_delta(sigma: float, epsilon: float) -> float:
    """delta(epsilon) of one Gaussian mechanism of sensitivity 1 and noise sigma (exact; log-space for large
    epsilon so that e^eps Phi(.) does not overflow)."""
    if sigma <= 0:
        return 1.0
    a, b = 0.5 / sigma - epsilon * sigma, -0.5 / sigma - epsilon * sigma
    return max(0.0, float(norm.cdf(a) - math.exp(min(epsilon + norm.logcdf(b), 700.0))))


def gaussian_release_epsilon(sigma: float, delta: float) -> float:
    """The smallest epsilon at which one Gaussian release of noise multiplier ``sigma`` is (epsilon, delta)-DP."""
    if gaussian_release_delta(sigma, 0.0) <= delta:
        return 0.0
    high = 1.0
    while gaussian_release_delta(sigma, high) > delta:  # epsilon grows as 1 / (2 sigma^2) at small sigma
        high *= 2.0
    return float(brentq(lambda e: gaussian_release_delta(sigma, e) - delta, 0.0, high, xtol=1e-12, rtol=1e-12))


def composed_sigma(sigmas: tuple[float, ...]) -> float:
    """The noise multiplier of the one Gaussian mechanism that several releases of noise ``sigmas`` compose to."""
    return 1.0 / math.sqrt(sum(1.0 / s**2 for s in sigmas))


#: the noise range searched: above 1e4 C per coordinate nothing is learnt (and epsilon reaches 0 at delta 1e-5 near
#: sigma 4e4, where delta alone covers the distance); below 1e-4 epsilon exceeds 1e7
MIN_SIGMA, MAX_SIGMA = 1e-4, 1e4


def gaussian_release_sigma(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier whose one Gaussian release meets (epsilon, delta), on the safe side."""
    return calibrate_parameter(lambda s: gaussian_release_epsilon(s, delta), epsilon, low=MIN_SIGMA, high=MAX_SIGMA,
                               increasing=False, what=f"one Gaussian release at delta={delta:g}", start=1.0,
                               xtol=1e-12, rtol=1e-10)
