"""The search charged: a random number K of trials of one release, the best kept (Papernot & Steinke 2022,
"Hyperparameter tuning with Renyi differential privacy", Theorems 2 and 6). Each trial draws a recipe from a public
space (randomness independent of the data), trains, and releases a noisy score on a private validation split; only
the best trial's model, recipe and score leave the search. If every trial is (lambda, rho(lambda))-RDP at every
order, the search is RDP at every order lambda > 1 with

- K ~ Poisson(mu) (K = 0 releases nothing):  rho(lambda) + mu * delta_hat + log(mu) / (lambda - 1), where delta_hat
  is the trial's delta at epsilon_hat = log(1 + 1 / (lambda - 1)) (Theorem 6);
- K truncated negative binomial of shape eta >= 0 and mean mu (eta = 0 logarithmic, eta = 1 geometric):
  rho(lambda) + (1 + eta) (1 - 1/lambda_hat) rho(lambda_hat) + (1 + eta) log(1/gamma) / lambda_hat
  + log(mu) / (lambda - 1), minimised over lambda_hat, gamma the distribution's parameter (Theorem 2), then made
  monotone in lambda.

Both are what dp_accounting 0.6 computes for its ``RepeatAndSelectDpEvent`` (the tests compose one there, apart
from this code, and compare); a Monte Carlo of the search on a one-dimensional Gaussian checks the bound itself.

A trial's RDP (:func:`trial_rdp`) is the method's release family at its noise (releases.py) composed with the score's
Gaussian: DP-SGD's subsampled steps (add/remove and zero-out: the suite's exact series, gaussian_rdp.py; one input
replaced: the library's REPLACE pair, q N(-1, s^2) + (1-q) N(0, s^2) against q N(1, s^2) + (1-q) N(0, s^2), whose
Renyi divergence is integrated numerically, :func:`replace_pair_rdp`), and unsampled Gaussians composed exactly
(rho = lambda / (2 s^2) in units of their sensitivity). Where the trials' recipes differ, the trial is a public
mixture of them, whose Renyi divergence is at most the largest of theirs at each order (joint quasi-convexity):
:func:`search_rdp` charges the pointwise maximum. THEORY.md, "The search charged".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from inputdp.core.claims import ADD_REMOVE, REPLACE_INPUT, ZERO_OUT
from inputdp.core.errors import ConfigError

from .calibration import InfeasibleTarget, calibrate_parameter
from .gaussian_rdp import subsampled_gaussian_rdp
from .releases import GaussianReleases, GaussianSteps

#: dp_accounting's default RDP orders up to 256 (its 512 and 1024 never give the minimum at the budgets searched here,
#: and the numerical REPLACE pair grows with the order)
ORDERS = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256], dtype=np.float64)
#: the shape of the Poisson distribution of K (dp_accounting's convention: shape = inf)
POISSON = math.inf
#: the families whose RDP a trial can be charged by
REPEATABLE = (GaussianSteps, GaussianReleases)


@dataclass(frozen=True)
class TrialCount:
    """The distribution of the number of trials: Poisson (``shape`` inf) or truncated negative binomial (``shape``
    eta >= 0), of mean ``mean`` >= 1 (dp_accounting's bound on it)."""

    mean: float
    shape: float = POISSON

    def __post_init__(self) -> None:
        if not (isinstance(self.mean, (int, float)) and math.isfinite(self.mean) and self.mean >= 1):
            raise ConfigError(f"trials mean={self.mean!r} is not allowed: the mean number of trials must be a finite "
                              "number >= 1")
        if not (isinstance(self.shape, (int, float)) and self.shape >= 0) or math.isnan(self.shape):
            raise ConfigError(f"trials shape={self.shape!r} is not allowed: poisson, or a truncated negative "
                              "binomial's shape >= 0 (0 logarithmic, 1 geometric)")

    @property
    def name(self) -> str:
        if self.shape == POISSON:
            return f"Poisson (mean {self.mean:g})"
        named = {0.0: "logarithmic", 1.0: "geometric"}
        kind = named.get(float(self.shape), f"truncated negative binomial (shape {self.shape:g})")
        return f"{kind} (mean {self.mean:g})"

    def gamma(self) -> float:
        """The truncated negative binomial's gamma for this mean (mean = eta (1 - gamma) / (gamma (1 - gamma^eta)))."""
        eta, mu = float(self.shape), float(self.mean)
        if mu == 1:
            return 1.0
        if eta == 1:
            return 1.0 / mu

        def mean_at(g: float) -> float:
            if eta == 0:
                return (1 / g - 1) / math.log(1 / g)
            return eta * (1 - g) / (g * (1 - g**eta))

        lo, hi = 1e-300, 1.0 - 1e-15  # the mean falls as gamma grows
        for _ in range(200):
            mid = math.sqrt(lo * hi) if hi / lo > 10 else (lo + hi) / 2
            if mean_at(mid) > mu:
                lo = mid
            else:
                hi = mid
        return lo  # the smaller gamma: a larger mean, the safe side

    def draw(self, rng: np.random.Generator) -> int:
        """K, from ``rng`` (the search's secret randomness)."""
        if self.shape == POISSON:
            return int(rng.poisson(self.mean))
        if self.mean == 1:
            return 1
        eta, g = float(self.shape), self.gamma()
        if eta == 0:  # logarithmic: P(k) proportional to (1 - gamma)^k / k
            return int(rng.logseries(1 - g))
        while True:  # negative binomial (eta, gamma) conditioned on K >= 1
            k = int(rng.negative_binomial(eta, g))
            if k >= 1:
                return k


def replace_pair_rdp(q: float, sigma: float, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """Renyi divergence at each order of dp_accounting's REPLACE pair of one Poisson-subsampled Gaussian step:
    P = q N(-1, s^2) + (1-q) N(0, s^2), Q = q N(1, s^2) + (1-q) N(0, s^2) (symmetric, so either direction), by the
    trapezoid rule in log space over a grid of step s/40 that covers where P^lambda Q^(1-lambda) lives (for q < 1 its
    peak lies near x = -lambda, or near 0 where s^2 log(1/q) > lambda; near x = 1 - 2 lambda for q = 1; the exponent
    falls off beyond, and the endpoints' terms are below e^-90). Checked against a grid ten times finer and wider (an
    independent review: at most 1e-12 in the log-integral)."""
    orders = np.asarray(orders, dtype=np.float64)
    if q == 0:
        return np.zeros_like(orders)
    if sigma <= 0:
        return np.full_like(orders, np.inf)
    out = np.empty_like(orders)
    lq, l1q = math.log(q), (math.log1p(-q) if q < 1 else -math.inf)
    for i, lam in enumerate(orders):
        lo, hi = -(2 * lam + 2.0) - 14 * sigma, 2.0 + 14 * sigma
        x = np.arange(lo, hi, sigma / 40)
        norm = -0.5 * math.log(2 * math.pi * sigma**2)
        log_p = np.logaddexp(lq - (x + 1) ** 2 / (2 * sigma**2), l1q - x**2 / (2 * sigma**2)) + norm
        log_q = np.logaddexp(lq - (x - 1) ** 2 / (2 * sigma**2), l1q - x**2 / (2 * sigma**2)) + norm
        f = lam * log_p + (1 - lam) * log_q
        log_integral = logsumexp(f) + math.log(sigma / 40)
        out[i] = max(log_integral, 0.0) / (lam - 1)
    return out


def family_rdp(family, noise: float, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """The RDP at each order of what ``family`` releases at ``noise``; a family with no RDP here is refused in one
    line (nothing to repeat: the per-example vectors, PATE's queries, the non-private reference)."""
    orders = np.asarray(orders, dtype=np.float64)
    if isinstance(family, GaussianReleases):
        return (orders / (2.0 * noise**2)) if family.shares else np.zeros_like(orders)
    if isinstance(family, GaussianSteps):
        sigma_r, k = family.releases
        # the statistics move by c, or 2c where one input is replaced (the PLD's reading, pld.py):
        # rho = k lambda d^2 / (2 s_r^2)
        shift = 2.0 if family.relation == REPLACE_INPUT else 1.0
        out = k * orders * shift**2 / (2.0 * sigma_r**2) if k else np.zeros_like(orders)
        if family.steps <= 0:
            return out
        if family.relation in (ADD_REMOVE, ZERO_OUT):
            return out + family.steps * subsampled_gaussian_rdp(family.sampling_rate, noise, orders)
        if family.relation == REPLACE_INPUT:
            return out + family.steps * replace_pair_rdp(family.sampling_rate, noise, orders)
    raise ConfigError(f"a release of {type(family).__name__} is not allowed in a search: its trials need an RDP "
                      "curve to be repeated (DP-SGD's steps or one-shot Gaussian releases)")


def score_rdp(score_sigma: float, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """The noisy validation count's RDP: a Gaussian of sensitivity 1 (one example moves the count by at most 1 under
    every relation) and noise ``score_sigma`` (in counts)."""
    return np.asarray(orders, dtype=np.float64) / (2.0 * score_sigma**2)


def trial_rdp(family, noise: float, score_sigma: float, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """One trial: the training's release composed with the score's."""
    return family_rdp(family, noise, orders) + score_rdp(score_sigma, orders)


def repeat_select_rdp(rdp: np.ndarray, count: TrialCount, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """The search's RDP at each order from one trial's (Papernot & Steinke 2022, Theorems 2 and 6)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_delta

    orders = np.asarray(orders, dtype=np.float64)
    rdp = np.asarray(rdp, dtype=np.float64)
    mu = float(count.mean)
    out = np.full_like(orders, np.inf)
    if count.shape == POISSON:
        for i, lam in enumerate(orders):
            if lam <= 1 or not np.isfinite(rdp[i]):
                continue
            delta_hat, _ = compute_delta(orders, rdp, math.log1p(1.0 / (lam - 1)))
            out[i] = rdp[i] + mu * delta_hat + math.log(mu) / (lam - 1)
        return out
    eta, gamma = float(count.shape), count.gamma()
    with np.errstate(invalid="ignore"):
        c = (1 + eta) * np.min((1 - 1 / orders) * rdp - math.log(gamma) / orders)
    for i, lam in enumerate(orders):
        if lam > 1:
            out[i] = rdp[i] + math.log(mu) / (lam - 1) + c
    return np.minimum.accumulate(out[::-1])[::-1]  # RDP grows with the order: a larger order's bound holds below


def rdp_epsilon(rdp: np.ndarray, delta: float, orders: Sequence[float] = ORDERS) -> float:
    """Epsilon at ``delta`` from an RDP curve (dp_accounting's conversion, Canonne, Kamath & Steinke 2020)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    rdp = np.asarray(rdp, dtype=np.float64)
    if not np.isfinite(rdp).any():
        return math.inf
    return float(compute_epsilon(np.asarray(orders, dtype=np.float64), rdp, delta)[0])


def search_rdp(curves: Sequence[np.ndarray], count: TrialCount, orders: Sequence[float] = ORDERS) -> np.ndarray:
    """The search's RDP where each trial draws one of several recipes (a public mixture): the repeat-and-select bound
    of their pointwise maximum."""
    return repeat_select_rdp(np.max(np.vstack(curves), axis=0), count, orders)


def search_epsilon(curves: Sequence[np.ndarray], count: TrialCount, delta: float,
                   orders: Sequence[float] = ORDERS) -> float:
    return rdp_epsilon(search_rdp(curves, count, orders), delta, orders)


#: the noise searched for a trial: at most this (a search that needs more is refused as infeasible)
MAX_NOISE = 1e4


def calibrate_search(families: Sequence, count: TrialCount, score_sigma: float, epsilon: float, delta: float,
                     what: str, orders: Sequence[float] = ORDERS) -> list[float]:
    """Each recipe's least noise such that the whole search (a public mixture of the recipes' trials) meets
    (epsilon, delta): each calibrated alone to a common inner target t, t lowered until the mixture's maximum meets
    the budget. A budget no noise meets (the score's noise and the repetition alone spend it) is refused in one line
    naming ``what``."""
    floor = search_epsilon([score_rdp(score_sigma, orders)], count, delta, orders)
    if floor >= epsilon:
        raise ConfigError(f"{what}: epsilon={epsilon:g} is too small for even one trial: the validation score's noise "
                          f"and the {count.name} repetition alone spend {floor:.4g} at delta={delta:g}; raise epsilon, "
                          "the score's noise or the validation split, or lower the mean number of trials")

    def noises_at(target: float) -> list[float]:
        out = []
        for family in families:
            def eps_of(s: float, family=family) -> float:
                return search_epsilon([trial_rdp(family, s, score_sigma, orders)], count, delta, orders)
            try:
                out.append(calibrate_parameter(eps_of, target, low=1e-2, high=MAX_NOISE, increasing=False,
                                               what=what, start=1.0, xtol=1e-6, rtol=1e-5))
            except InfeasibleTarget as err:
                raise ConfigError(f"{what}: {err}") from None
        return out

    target = epsilon
    for _ in range(50):
        noises = noises_at(target)
        reached = search_epsilon([trial_rdp(f, s, score_sigma, orders) for f, s in zip(families, noises)], count,
                                 delta, orders)
        if reached <= epsilon:
            return noises
        target = floor + (target - floor) * (epsilon - floor) / (reached - floor) * 0.999
    raise ConfigError(f"{what}: no common calibration of the recipes met epsilon={epsilon:g}")
