"""Publishing PATE's data-dependent epsilon: smooth sensitivity and the Gaussian release (paper Appendix B).

The data-dependent RDP total depends on the teachers' votes, so it is released only with noise scaled to a
beta-smooth upper bound on its local sensitivity (Nissim, Raskhodnikova & Smith 2007), as the paper's
Appendix B does. The bound here is conservative and simple rather than the paper's exact Algorithms 3-5:

- a neighbouring teacher set moves one vote of each query's histogram, so every gap n_top - n_i changes by
  at most 2, and within distance d by at most 2d; q~ (a union bound of erfc terms) is monotone in each gap, so
  at distance d every histogram and its neighbours have q~ in [q~(gaps + 2(d+1)), q~(gaps - 2(d+1))] (the
  cap 1 - 1/k once a gap can reach 0, where the top class may change);
- the local sensitivity of one query's cost beta(q~) there is at most the spread of beta over that interval,
  bounded with monotone envelopes of beta on a fine grid of log q~ (no shape assumption on beta);
- the threshold check's cost depends on the top vote only, which moves by at most d (d + 1 for neighbours);
- a sum's local sensitivity is at most the sum of its terms' (each query changes by one move), and
  SS = max_d exp(-beta_s d) * LS_d.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from . import analysis


def _log_q_from_gaps(gaps: np.ndarray, sigma: float, cap: float) -> np.ndarray:
    """Vectorised union bound: gaps has shape (..., k-1); returns log q~ of shape (...)."""
    terms = special.log_ndtr(-gaps / (math.sqrt(2.0) * sigma))
    logq = special.logsumexp(terms, axis=-1)
    out = np.minimum(logq, math.log(cap))
    return np.where((gaps <= 0).any(axis=-1), math.log(cap), out)


@dataclass
class _Envelope:
    grid: np.ndarray  # increasing log q~
    upper: np.ndarray  # max of beta over (-inf, grid[i]]
    lower: np.ndarray  # min of beta over [grid[i], +inf)

    @classmethod
    def of(cls, beta, log_cap: float, n: int = 3000) -> _Envelope:
        grid = np.concatenate([[-1e4], np.linspace(-400.0, log_cap, n)])
        values = np.array([beta(g) for g in grid])
        upper = np.maximum.accumulate(values)
        lower = np.minimum.accumulate(values[::-1])[::-1]
        return cls(grid, upper, lower)

    def spread(self, log_q_lo: np.ndarray, log_q_hi: np.ndarray) -> np.ndarray:
        hi = np.clip(np.searchsorted(self.grid, log_q_hi, side="left"), 0, len(self.grid) - 1)  # round up
        lo = np.clip(np.searchsorted(self.grid, log_q_lo, side="right") - 1, 0, len(self.grid) - 1)  # round down
        return np.maximum(self.upper[hi] - self.lower[lo], 0.0)


def smooth_sensitivity(votes: np.ndarray, answered: np.ndarray, *, sigma1: float | None, sigma2: float,
                       threshold: float | None, order: float, beta_smooth: float, num_teachers: int,
                       check_votes: np.ndarray | None = None, max_distance: int | None = None) -> float:
    """beta-smooth upper bound on the local sensitivity of the total data-dependent RDP at ``order``.

    votes: (queries, classes) histograms (for the interactive aggregator, the shifted votes of the check);
    answered: which queries paid for a GNMax answer; sigma1/threshold: the check (None for plain GNMax);
    check_votes: the top value the check saw per query (default: the top vote; the interactive aggregator's
    shifted top n_j - M p_j lies in [0, M] as well).
    """
    votes = np.asarray(votes, dtype=np.float64)
    q, k = votes.shape
    cap = 1.0 - 1.0 / k
    teachers = int(num_teachers)
    top = votes.max(axis=1, keepdims=True)
    order_idx = np.argsort(-votes, axis=1)
    sorted_votes = np.take_along_axis(votes, order_idx, axis=1)
    gaps = sorted_votes[:, :1] - sorted_votes[:, 1:]  # (q, k-1), relative to the top class
    gnmax_env = _Envelope.of(lambda lq: float(analysis.rdp_data_dependent(lq, sigma2, np.array([order]))[0]),
                             math.log(cap))
    threshold_costs = None
    seen = top[:, 0] if check_votes is None else np.asarray(check_votes, dtype=np.float64)
    top_votes = np.clip(np.rint(seen), 0, teachers).astype(int)
    if sigma1 is not None and threshold is not None:  # the check's cost as a function of the top vote
        threshold_costs = np.array([analysis.rdp_threshold_data_dependent(threshold, sigma1, v, np.array([order]))[0]
                                    for v in range(teachers + 1)])
    per_query_max = order / sigma2**2 + (order / (2 * sigma1**2) if sigma1 else 0.0)
    best, d = 0.0, 0
    limit = max_distance if max_distance is not None else teachers
    while d <= limit:
        weight = math.exp(-beta_smooth * d)
        if weight * q * per_query_max <= best:
            break
        shift = 2.0 * (d + 1)
        lq_hi = _log_q_from_gaps(gaps - shift, sigma2, cap)
        lq_lo = _log_q_from_gaps(gaps + shift, sigma2, cap)
        ls = float((gnmax_env.spread(lq_lo, lq_hi) * answered).sum())
        if threshold_costs is not None:
            lo = np.clip(top_votes - d - 1, 0, teachers)
            hi = np.clip(top_votes + d + 1, 0, teachers)
            ls += float(sum(threshold_costs[a: b + 1].max() - threshold_costs[a: b + 1].min() for a, b in zip(lo, hi)))
        best = max(best, weight * ls)
        d += 1
    return best


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
    from scipy import optimize

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
    from inputdp.methods.accounting import rdp_to_epsilon

    noisy = total_rdp + ss * sigma_ss * float(rng.standard_normal())
    cost = release_cost(order, beta, sigma_ss)
    eps, _ = rdp_to_epsilon(np.array([order]), np.array([max(noisy, 0.0) + cost]), delta)
    return SanitisedRelease(order, beta, sigma_ss, total_rdp, ss, noisy, cost, eps)
