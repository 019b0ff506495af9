"""Rényi-DP accounting as small pure functions (THEORY.md, "Rényi DP and its conversion").

Every function here is vectorised over Rényi orders: it takes an integer array of orders and returns an
array of the same shape, with ``inf`` where an order is not valid. Nothing here holds state.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import gammaln, logsumexp, polygamma

from .calibration import calibrate_parameter

#: Largest integer Rényi order the accountant ever evaluates. Orders beyond it only matter for r close to 0,
#: where the subsampled bound is already dominated by its floor (the factor 3 term).
MAX_ORDER = 256


def integer_orders(max_order: int = MAX_ORDER) -> np.ndarray:
    """The integer orders 2, 3, ..., max_order."""
    return np.arange(2, max_order + 1, dtype=np.int64)


def dirichlet_rdp(orders: np.ndarray, r: float, alpha: float) -> np.ndarray:
    """RDP of one release of the Dirichlet mechanism Dir(r*s + alpha*1) at each order.

    eps_hat(lambda; r) = lambda * r^2 * psi1(alpha - (lambda - 1) * r), valid for 1 <= lambda < 1 + alpha/r
    (the paper's single-release theorem with Delta_2^2 <= 2, Delta_inf <= 1); ``inf`` beyond.
    """
    orders = np.asarray(orders, dtype=np.float64)
    arg = alpha - (orders - 1.0) * r
    out = np.full(orders.shape, np.inf)
    valid = arg > 0
    out[valid] = orders[valid] * r * r * polygamma(1, arg[valid])
    return out


def gaussian_rdp(orders: np.ndarray, noise_multiplier: float) -> np.ndarray:
    """RDP of the Gaussian mechanism with sensitivity 1 and noise std sigma: lambda / (2 sigma^2)."""
    return np.asarray(orders, dtype=np.float64) / (2.0 * noise_multiplier**2)


@functools.lru_cache(maxsize=8)
def _log_binomial_table(max_order: int) -> np.ndarray:
    """log C(lambda, l) for lambda, l in 0..max_order (-inf where l > lambda)."""
    n = np.arange(max_order + 1, dtype=np.float64)
    table = gammaln(n[:, None] + 1) - gammaln(n[None, :] + 1) - gammaln(n[:, None] - n[None, :] + 1)
    table[n[None, :] > n[:, None]] = -np.inf
    table.setflags(write=False)
    return table


def poisson_subsampled_rdp(q: float, rdp_by_order: np.ndarray) -> np.ndarray:
    """Zhu & Wang (2019) general upper bound on the RDP of a Poisson-subsampled mechanism.

    ``rdp_by_order[i]`` is the base mechanism's RDP eps_hat at order i + 2 (orders 2..L, contiguous). For each
    integer order lambda in 2..L:

        eps_PS(lambda) = 1/(lambda-1) * log[ (1-q)^(lambda-1) * (lambda*q - q + 1)
                         + C(lambda,2) q^2 (1-q)^(lambda-2) exp(eps_hat(2))
                         + 3 * sum_{l=3..lambda} C(lambda,l) q^l (1-q)^(lambda-l) exp((l-1) eps_hat(l)) ]

    evaluated in log space (one logsumexp over a lower-triangular matrix). An order whose terms include an
    infinite eps_hat(l), l <= lambda, is infinite.
    """
    eps_hat = np.asarray(rdp_by_order, dtype=np.float64)
    max_order = eps_hat.shape[0] + 1
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling rate q={q} must be in (0, 1]")
    lam = np.arange(2, max_order + 1, dtype=np.float64)
    if q == 1.0:
        return eps_hat.copy()
    log_q, log_1mq = np.log(q), np.log1p(-q)
    ls = np.arange(max_order + 1, dtype=np.float64)
    # terms[i, l]: the l-th summand for order lam[i] (only l = 2..lam[i] used here)
    log_binom = _log_binomial_table(max_order)[2:, :]
    with np.errstate(invalid="ignore"):
        weight = (ls[None, :] - 1.0) * np.concatenate([[np.inf, np.inf], eps_hat])[None, :]
        terms = log_binom + ls[None, :] * log_q + (lam[:, None] - ls[None, :]) * log_1mq + weight
    terms[:, :2] = -np.inf
    terms[:, 3:] += np.log(3.0)
    mask = ls[None, :] > lam[:, None]
    terms[mask] = -np.inf
    # the l = 2 term carries exp(eps_hat(2)), not exp((2 - 1) * eps_hat(2)): identical, kept in one matrix.
    first = (lam - 1.0) * log_1mq + np.log1p((lam - 1.0) * q)
    total = logsumexp(np.concatenate([first[:, None], terms], axis=1), axis=1)
    out = total / (lam - 1.0)
    # an order is finite only if every eps_hat(l), l <= lambda, is finite
    finite_prefix = np.logical_and.accumulate(np.isfinite(eps_hat))
    out[~finite_prefix] = np.inf
    return out


def conversion_term(orders: np.ndarray, delta: float) -> np.ndarray:
    """What the conversion adds to the RDP at each order: log((lambda-1)/lambda) - (log(delta) + log(lambda))/(lambda-1).

    Since RDP is >= 0, an order's epsilon is at least this; an order whose term already exceeds an epsilon in hand
    cannot give the minimum, so an accountant may skip computing its RDP.
    """
    orders = np.asarray(orders, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return np.log1p(-1.0 / orders) - (np.log(delta) + np.log(orders)) / (orders - 1.0)


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """Convert RDP to (epsilon, delta)-DP (Canonne, Kamath & Steinke 2020; Balle et al. 2020).

    eps = rdp(lambda) + log((lambda-1)/lambda) - (log(delta) + log(lambda)) / (lambda - 1), minimised over the
    given orders. Returns (epsilon, best order); epsilon is ``inf`` if no order is finite.
    """
    orders = np.asarray(orders, dtype=np.float64)
    rdp = np.asarray(rdp, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + conversion_term(orders, delta)
    eps = np.where(np.isfinite(rdp), eps, np.inf)
    i = int(np.argmin(eps))
    return float(max(eps[i], 0.0)), float(orders[i])


def rdp_to_epsilon_classic(orders: np.ndarray, rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """The classic conversion (Mironov 2017, Proposition 3): eps = rdp(lambda) + log(1/delta) / (lambda - 1),
    minimised over the orders. Looser than :func:`rdp_to_epsilon`; only for comparing with papers and reference
    code that use it (PATE 2018's); no claim of the suite goes through it."""
    orders = np.asarray(orders, dtype=np.float64)
    rdp = np.asarray(rdp, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        eps = rdp - math.log(delta) / (orders - 1.0)
    eps = np.where(np.isfinite(rdp), eps, np.inf)
    i = int(np.argmin(eps))
    return float(max(eps[i], 0.0)), float(orders[i])


def dirichlet_epsilon(
    *, r: float, alpha: float, q: float, steps: int, delta: float, max_order: int = MAX_ORDER
) -> tuple[float, float]:
    """(epsilon, best order) of T Poisson-subsampled Dirichlet releases (Algorithm 1's accountant)."""
    # orders at or beyond 1 + alpha/r are infinite for the base mechanism: do not evaluate them
    if r > 0:
        max_order = int(min(max_order, max(2, math.ceil(1.0 + alpha / r))))
    orders = integer_orders(max_order)
    per_step = poisson_subsampled_rdp(q, dirichlet_rdp(orders, r, alpha))
    return rdp_to_epsilon(orders, steps * per_step, delta)


@functools.lru_cache(maxsize=256)
def calibrate_r(*, epsilon: float, delta: float, sampling_rate: float, steps: int, alpha: float) -> tuple[float, float, float]:
    """(r*, achieved epsilon, best order): the largest r whose Algorithm 1 accountant meets the matched (epsilon,
    delta, q, T) (the paper's eq. 12, by Brent's method; THEORY.md, "Calibration"); cached, since sweeps repeat it."""

    def eps_of(r: float) -> float:
        return dirichlet_epsilon(r=r, alpha=alpha, q=sampling_rate, steps=steps, delta=delta)[0]

    what = f"dirichlet_softmax at q={sampling_rate:g}, T={steps}, alpha={alpha:g}, delta={delta:g}"
    r = calibrate_parameter(eps_of, epsilon, low=alpha * 1e-9, high=alpha * (1 - 1e-12), increasing=True, what=what)
    eps, order = dirichlet_epsilon(r=r, alpha=alpha, q=sampling_rate, steps=steps, delta=delta)
    return r, eps, order
