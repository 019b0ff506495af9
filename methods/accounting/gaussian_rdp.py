"""RDP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar & Zhang 2019), vectorised over orders.
THEORY.md, "The subsampled Gaussian".

The same computation as Opacus' ``opacus.accountants.analysis.rdp`` (itself from TF Privacy): for integer
orders the exact binomial expansion of A_alpha, for fractional orders the two-sided series truncated at the
first term below exp(-30). Opacus evaluates it with Python loops (about 0.1 s per epsilon, 1.5 s per
calibration); here each evaluation is one array expression, and the tests check equality with Opacus.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special
from scipy.special import logsumexp

from .calibration import calibrate_parameter
from .rdp import conversion_term, rdp_to_epsilon

#: Opacus' RDPAccountant.DEFAULT_ALPHAS
OPACUS_ALPHAS = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)), dtype=np.float64)
MAX_SIGMA = 1e6  # as in Opacus' get_noise_multiplier
MIN_SIGMA = 1e-3


def _log_a_int(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    amax = int(alphas.max())
    i = np.arange(amax + 1, dtype=np.float64)[None, :]
    a = alphas[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        log_coef = np.log(special.binom(a, i)) + i * math.log(q) + (a - i) * math.log1p(-q)
    s = log_coef + (i * i - i) / (2 * sigma**2)
    s = np.where(i <= a, s, -np.inf)
    return logsumexp(s, axis=1)


def _signed_log_sum(log_terms: np.ndarray, signs: np.ndarray) -> np.ndarray:
    m = np.max(np.where(np.isfinite(log_terms), log_terms, -np.inf), axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    total = np.sum(signs * np.exp(log_terms - m), axis=1)
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(total, 0.0)) + m[:, 0]


def _frac_terms(q: float, sigma: float, z0: float, alphas: np.ndarray, start: int, stop_at: int):
    """Columns start..stop_at-1 of the two-sided series for each order: (log s0, log s1, signs, stops)."""
    i = np.arange(start, stop_at, dtype=np.float64)[None, :]
    a = alphas[:, None]
    coef = special.binom(a, i)
    with np.errstate(divide="ignore"):
        log_coef = np.log(np.abs(coef))
    j = a - i
    log_t0 = log_coef + i * math.log(q) + j * math.log1p(-q)
    log_t1 = log_coef + j * math.log(q) + i * math.log1p(-q)
    log_e0 = math.log(0.5) + math.log(2) + special.log_ndtr(-((i - z0) / (math.sqrt(2) * sigma)) * 2**0.5)
    log_e1 = math.log(0.5) + math.log(2) + special.log_ndtr(-((z0 - j) / (math.sqrt(2) * sigma)) * 2**0.5)
    log_s0 = log_t0 + (i * i - i) / (2 * sigma**2) + log_e0
    log_s1 = log_t1 + (j * j - j) / (2 * sigma**2) + log_e1
    return log_s0, log_s1, np.where(coef > 0, 1.0, -1.0), np.maximum(log_s0, log_s1) < -30


def _log_a_frac(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """Each order's series up to and including its first term below exp(-30) (Opacus' do-until loop).

    The columns come in blocks of doubling width from 64, and an order leaves the computation at its own stopping
    term. Where the terms decay only polynomially (q near 1/2, where the Gaussian tail and the sampling odds cancel)
    an order near 1 needs some 10^4 terms and an order above 5 fewer than 100; at large sigma every order stops
    within some 40 terms although the series' centre z0 lies far out. Computing every order to the longest one's
    length, from a first width of z0 + 8 sigma, was most of a calibration's time (3 s at q = 0.5, T = 1000,
    epsilon = 0.5; 28 s at q = 0.3, T = 10^5, epsilon = 0.05, delta = 0.05)."""
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    width = 64
    active = np.arange(alphas.size)
    blocks: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in range(alphas.size)]
    start = 0
    while active.size:
        log_s0, log_s1, signs, stop = _frac_terms(q, sigma, z0, alphas[active], start, start + width)
        done = stop.any(axis=1)
        last = np.where(done, np.argmax(stop, axis=1), width - 1)
        for row, order in enumerate(active):
            keep = slice(0, last[row] + 1)
            blocks[order].append((log_s0[row, keep], log_s1[row, keep], signs[row, keep]))
        active = active[~done]
        start += width
        width *= 2
    out = np.empty(alphas.size)
    for order, parts in enumerate(blocks):
        s0, s1, signs = (np.concatenate(column)[None, :] for column in zip(*parts))
        out[order] = np.logaddexp(_signed_log_sum(s0, signs), _signed_log_sum(s1, signs))[0]
    return out


def subsampled_gaussian_rdp(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """RDP at each order of one step of the Poisson-subsampled Gaussian mechanism (sensitivity 1, noise sigma)."""
    alphas = np.asarray(alphas, dtype=np.float64)
    if q == 0:
        return np.zeros_like(alphas)
    if sigma == 0:
        return np.full_like(alphas, np.inf)
    if q == 1.0:
        return alphas / (2 * sigma**2)
    out = np.empty_like(alphas)
    is_int = np.equal(np.floor(alphas), alphas)
    if is_int.any():
        out[is_int] = _log_a_int(q, sigma, alphas[is_int]) / (alphas[is_int] - 1)
    if (~is_int).any():
        out[~is_int] = _log_a_frac(q, sigma, alphas[~is_int]) / (alphas[~is_int] - 1)
    return out


def gaussian_epsilon_rdp(*, noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                         alphas: np.ndarray = OPACUS_ALPHAS) -> tuple[float, float]:
    """(epsilon, best order) of T Poisson-subsampled Gaussian steps over Opacus' orders: the RDP above, converted
    by the suite's one conversion (``rdp.rdp_to_epsilon``, the formula of Opacus' ``get_privacy_spent``).

    The integer orders are cheap and are computed first. A fractional order is computed only if its conversion term
    alone (its epsilon at zero RDP) is below the integer orders' epsilon: any other cannot give the minimum, so the
    result is the same, and the fractional series is never built where it cannot matter.
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    rdp = np.full_like(alphas, np.inf)
    is_int = np.equal(np.floor(alphas), alphas)
    if is_int.any():
        rdp[is_int] = steps * subsampled_gaussian_rdp(sampling_rate, noise_multiplier, alphas[is_int])
        eps_int = rdp_to_epsilon(alphas[is_int], rdp[is_int], delta)[0]
    else:
        eps_int = math.inf
    wanted = ~is_int & (conversion_term(alphas, delta) < eps_int)
    if wanted.any():
        rdp[wanted] = steps * subsampled_gaussian_rdp(sampling_rate, noise_multiplier, alphas[wanted])
    return rdp_to_epsilon(alphas, rdp, delta)


def gaussian_noise_multiplier_rdp(*, epsilon: float, delta: float, sampling_rate: float, steps: int) -> float:
    """The smallest sigma whose T Poisson-subsampled Gaussian steps reach at most ``epsilon`` (RDP accountant),
    found by the suite's one calibration search."""
    what = f"the subsampled Gaussian at q={sampling_rate:g}, T={steps}, delta={delta:g}"
    integer_alphas = OPACUS_ALPHAS[np.equal(np.floor(OPACUS_ALPHAS), OPACUS_ALPHAS)]

    def eps_of(sigma: float) -> float:
        # The bound from the integer orders alone is >= the exact eps (a minimum over fewer orders). Where it
        # already meets the target, so does the exact value, and the search only needs the side: the costly
        # fractional series (long at large sigma) is skipped there. Where the bound does not meet it, the
        # exact value decides, so the crossing found is the exact one.
        bound = gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=sampling_rate, steps=steps, delta=delta,
                                     alphas=integer_alphas)[0]
        if bound <= epsilon:
            return bound
        return gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=sampling_rate, steps=steps, delta=delta)[0]

    return calibrate_parameter(eps_of, epsilon, low=MIN_SIGMA, high=MAX_SIGMA, increasing=False, what=what,
                               start=1.0, xtol=1e-12, rtol=1e-9)
