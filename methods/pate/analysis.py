"""PATE's privacy analysis as pure functions (Papernot et al. 2018; THEORY.md, "PATE").

Notation: votes n_j per class for one query, sigma the GNMax noise, lambda the Renyi order. Every function
works on one query's histogram or is vectorised over orders; composition is a sum over queries.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

# the data-independent analysis is the accountant's (methods/accounting/gnmax.py): re-exported for the analysis' users
from ..accounting.gnmax import ORDERS


def log_q_gnmax(votes: np.ndarray, sigma: float) -> float:
    """log of q~ >= P[GNMax(votes) != argmax votes]: the union bound of Proposition 7,
    q~ = 1/2 * sum_{i != i*} erfc((n_i* - n_i) / (2 sigma)), capped at 1 - 1/d."""
    votes = np.asarray(votes, dtype=np.float64)
    top = int(np.argmax(votes))
    gaps = votes[top] - np.delete(votes, top)
    # log(1/2 erfc(g / (2 sigma))) = log P[N(0, 2 sigma^2) > g]
    terms = special.log_ndtr(-gaps / (math.sqrt(2.0) * sigma))
    logq = float(special.logsumexp(terms))
    return min(logq, math.log(1.0 - 1.0 / len(votes)))


def _log1mexp(x: float) -> float:
    """log(1 - e^x) for x <= 0."""
    if x < -1:
        return math.log1p(-math.exp(x))
    if x < 0:
        return math.log(-math.expm1(x))
    return -math.inf


def rdp_data_dependent(logq: float, sigma: float, orders: np.ndarray = ORDERS) -> np.ndarray:
    """Theorem 6 with Proposition 10's orders, min with the data-independent lambda / sigma^2.

    mu2 = sigma sqrt(log(1/q~)), mu1 = mu2 + 1, eps_i = mu_i / sigma^2; where lambda < mu1, q~ < exp(-eps2) and
    q~ <= exp((mu2 - 1) eps2) / (mu1/(mu1-1) * mu2/(mu2-1))^mu2:
      eps(lambda) = 1/(lambda-1) log((1-q~) A^(lambda-1) + q~ B^(lambda-1)),
      A = (1-q~) / (1 - (q~ e^eps2)^((mu2-1)/mu2)),  B = e^eps1 / q~^(1/(mu1-1)).
    """
    orders = np.asarray(orders, dtype=np.float64)
    bound = orders / sigma**2
    if logq == -math.inf:
        return np.zeros_like(orders)
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    if mu2 <= 1:
        return bound
    eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
    conditions = (-logq > eps2 and
                  logq <= (mu2 - 1) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1)) + math.log(mu2 / (mu2 - 1))))
    mask = orders < mu1
    if not (conditions and mask.any()):
        return bound
    log1q = _log1mexp(logq)
    log_a = log1q - _log1mexp((logq + eps2) * (1 - 1 / mu2))
    log_b = eps1 - logq / (mu1 - 1)
    lam = orders[mask]
    log_s = np.logaddexp(log1q + (lam - 1) * log_a, logq + (lam - 1) * log_b)
    out = bound.copy()
    out[mask] = np.minimum(bound[mask], log_s / (lam - 1))
    return out


def log_pr_answered(threshold: float, sigma1: float, max_vote: float) -> float:
    """log P[max vote + N(0, sigma1^2) >= threshold]."""
    return float(special.log_ndtr((round(max_vote) - threshold) / sigma1))


def rdp_threshold_data_dependent(threshold: float, sigma1: float, max_vote: float,
                                 orders: np.ndarray = ORDERS) -> np.ndarray:
    """The threshold check's data-dependent RDP: Theorem 6 on the likelier of its two outcomes; the check's
    sensitivity is 1 (vs sqrt(2) for GNMax), hence sqrt(2) sigma1 in the GNMax formula."""
    lp = log_pr_answered(threshold, sigma1, max_vote)
    logq = min(lp, _log1mexp(lp))
    return rdp_data_dependent(logq, math.sqrt(2.0) * sigma1, orders)


def queries_event(queries: int, noise: dict[str, float], *, unit: str):
    """The data-independent claim as a dp_accounting event: ``queries`` times a GNMax answer (the histogram moves by
    sqrt2 for one vote: a Gaussian of noise multiplier sigma2 / sqrt2) and, where there is one, a threshold check
    (sensitivity 1: sigma1), with the release ``unit`` names ("sigma1" or "sigma2") at noise 1 and the other in its
    ratio to it."""
    from dp_accounting import dp_event

    parts = [dp_event.GaussianDpEvent(noise["sigma2"] / math.sqrt(2.0) / noise[unit])]
    if "sigma1" in noise:
        parts.append(dp_event.GaussianDpEvent(noise["sigma1"] / noise[unit]))
    return dp_event.SelfComposedDpEvent(dp_event.ComposedDpEvent(parts), int(queries))
