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


@dataclass(frozen=True)
class SanitisedRelease:
    order: float
    rdp_expected: float  # the data-dependent total at ``order`` (never published as such)
    smooth_sensitivity: float
    sigma_ss: float
    noisy_rdp: float  # what is released
    release_cost: float  # the RDP of releasing it: (lambda + 1) / sigma_ss^2
    epsilon: float  # from noisy_rdp + release_cost at ``order``


def sanitise(total_rdp: float, ss: float, *, order: float, delta: float, rng: np.random.Generator) -> SanitisedRelease:
    """Release the data-dependent RDP with Gaussian noise of std sigma_ss * SS (the GNSS mechanism).

    sigma_ss minimises the expected total plus two standard deviations, (order + 1)/s^2 + 2 s SS, as the paper
    tunes it; the release costs (order + 1) / sigma_ss^2 at the same order (Theorem 23, for beta < 1/(2 lambda)).
    """
    from inputdp.methods.accounting import rdp_to_epsilon

    sigma_ss = ((order + 1) / max(ss, 1e-12)) ** (1 / 3)
    noisy = total_rdp + ss * sigma_ss * float(rng.standard_normal())
    cost = (order + 1) / sigma_ss**2
    eps, _ = rdp_to_epsilon(np.array([order]), np.array([max(noisy, 0.0) + cost]), delta)
    return SanitisedRelease(order, total_rdp, ss, sigma_ss, noisy, cost, eps)
