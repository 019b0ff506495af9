"""Releasing PATE's data-dependent RDP total: the Gaussian noise with smooth sensitivity (GNSS) mechanism (Papernot
et al. 2018, Theorem 23; paper Appendix B), its cost (the theorem's bound, or the exact divergence where larger) and
the sanitised release. The smooth sensitivity itself is smooth_sensitivity.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from inputdp.methods.accounting import rdp_to_epsilon


def gnss_rdp(order: float, beta: float, sigma: float) -> float:
    """RDP at ``order`` of the (beta, sigma)-GNSS mechanism (Papernot et al. 2018, Theorem 23).

    The mechanism releases f(D) + sigma * SS(D) * Z, Z ~ N(0, 1), where SS is a beta-smooth upper bound on f's
    local sensitivity: |f(D) - f(D')| <= SS(D) and SS(D') <= exp(beta) SS(D) for neighbours D, D'. For
    1 < order < 1/(2 beta) it is (order, order e^(2 beta) / sigma^2 + (beta order - ln(1 - 2 order beta) / 2)
    / (order - 1))-RDP. The second term does not shrink with sigma: it is what releasing a noise *scale* that
    itself depends on the data costs. (THEORY.md, "PATE".)
    """
    if not (beta > 0 and 1 < order < 1 / (2 * beta)):
        raise ValueError(f"GNSS needs beta > 0 and 1 < order < 1/(2 beta); got order={order}, beta={beta}")
    return order * math.exp(2 * beta) / sigma**2 + (beta * order - 0.5 * math.log(1 - 2 * order * beta)) / (order - 1)


def _renyi_gaussians(order: float, mu0: float, s0: float, mu1: float, s1: float) -> float:
    """D_order(N(mu0, s0^2) || N(mu1, s1^2)) in closed form (Gil, Alajaji & Linder 2013); inf where it diverges."""
    s_mix = order * s1**2 + (1 - order) * s0**2
    if s_mix <= 0:
        return math.inf
    return (math.log(s1 / s0) + math.log(s1**2 / s_mix) / (2 * (order - 1))
            + order * (mu0 - mu1) ** 2 / (2 * s_mix))


def gnss_exact_rdp(order: float, beta: float, sigma: float) -> float:
    """The GNSS mechanism's RDP at ``order``, exactly: the largest divergence between its outputs on neighbours.

    With SS(D) = 1 (the divergence does not depend on the scale), a neighbour has SS(D') = r in [e^-beta, e^beta]
    and |f(D) - f(D')| <= min(1, r) (each smooth sensitivity bounds its own side's local sensitivity); the
    divergence grows with the shift, so the worst pair has the largest one, and the supremum over r (both
    directions) is found on a dense grid of log r, then refined.
    """

    def worst_at(log_r: float) -> float:
        r = math.exp(log_r)
        shift = min(1.0, r)
        return max(_renyi_gaussians(order, 0.0, sigma, shift, sigma * r),
                   _renyi_gaussians(order, shift, sigma * r, 0.0, sigma))

    grid = np.linspace(-beta, beta, 2001)
    values = np.array([worst_at(x) for x in grid])
    i = int(np.argmax(values))
    best = float(values[i])
    if math.isfinite(best) and 0 < i < len(grid) - 1:
        res = optimize.minimize_scalar(lambda x: -worst_at(x), bounds=(grid[i - 1], grid[i + 1]), method="bounded",
                                       options={"xatol": 1e-12})
        best = max(best, -float(res.fun))
    return best


def release_cost(order: float, beta: float, sigma: float) -> float:
    """What releasing through GNSS costs at ``order``: Theorem 23's bound, or the exact divergence where that is
    larger. The theorem's bound falls below the exact divergence when sigma is small for the order (at order 14,
    sigma 5: 0.69 against 1.22), so neither alone is charged."""
    return max(gnss_rdp(order, beta, sigma), gnss_exact_rdp(order, beta, sigma))


@dataclass(frozen=True)
class SanitisedRelease:
    order: float  # fixed before the votes were seen
    beta: float
    sigma_ss: float  # fixed before the votes were seen
    rdp_expected: float  # the data-dependent total at ``order`` (never published as such)
    smooth_sensitivity: float  # a function of the votes: never published
    noisy_rdp: float  # what is released
    release_cost: float  # the RDP of releasing it (:func:`release_cost`)
    epsilon: float  # from noisy_rdp + release_cost at ``order``


def sanitise(total_rdp: float, ss: float, *, order: float, beta: float, sigma_ss: float, delta: float,
             rng: np.random.Generator) -> SanitisedRelease:
    """Release the data-dependent RDP total with Gaussian noise of std sigma_ss * SS (the GNSS mechanism).

    ``order``, ``beta`` and ``sigma_ss`` must be chosen without looking at the votes (the paper tuned sigma_ss on
    the data and says so; a tuned value could not be published). The released epsilon adds the release's own cost,
    :func:`release_cost`, at the same order.
    """

    noisy = total_rdp + ss * sigma_ss * float(rng.standard_normal())
    cost = release_cost(order, beta, sigma_ss)
    eps, _ = rdp_to_epsilon(np.array([order]), np.array([max(noisy, 0.0) + cost]), delta)
    return SanitisedRelease(order, beta, sigma_ss, total_rdp, ss, noisy, cost, eps)
