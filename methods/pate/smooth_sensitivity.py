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


class _FineCost:
    """A cost function of log q~ sampled on a fine uniform grid, with sparse tables for range max and min."""

    def __init__(self, cost, low: float, high: float, step: float):
        self.low, self.step = low, step
        grid = np.arange(low, high + step, step)
        values = np.array([cost(x) for x in grid])
        self.size = len(values)
        self.max_tables, self.min_tables = [values], [values]
        width = 1
        while 2 * width <= self.size:
            mx, mn = self.max_tables[-1], self.min_tables[-1]
            self.max_tables.append(np.maximum(mx[:-width], mx[width:]))
            self.min_tables.append(np.minimum(mn[:-width], mn[width:]))
            width *= 2

    def largest_window_spread(self, centre_lo: float, centre_hi: float, below: float, above: float) -> float | None:
        """max over centres L in [centre_lo, centre_hi] of (max - min of the cost over [L - below, L + above]),
        taken over grid points one step beyond each end; None where a window leaves the grid."""
        i0 = math.floor((centre_lo - self.low) / self.step)
        i1 = math.ceil((centre_hi - self.low) / self.step)
        wa = math.ceil(below / self.step) + 1
        wb = math.ceil(above / self.step) + 1
        if i0 - wa < 0 or i1 + wb >= self.size:
            return None
        starts = np.arange(i0, i1 + 1) - wa
        length = wa + wb + 1
        level = length.bit_length() - 1
        ends = starts + length - (1 << level)
        mx, mn = self.max_tables[level], self.min_tables[level]
        return float((np.maximum(mx[starts], mx[ends]) - np.minimum(mn[starts], mn[ends])).max())


def _log_tail(x: np.ndarray | float, sigma: float):
    """log(1/2 erfc(x / (2 sigma))) = log P[N(0, 2 sigma^2) > x]: one term of the union bound q~."""
    return special.log_ndtr(-np.asarray(x, dtype=np.float64) / (math.sqrt(2.0) * sigma))


def local_sensitivities(votes: np.ndarray, answered: np.ndarray, *, sigma1: float | None, sigma2: float,
                        threshold: float | None, order: float, num_teachers: int, distance: int,
                        check_votes: np.ndarray | None = None, tight: bool = True,
                        _cache: dict | None = None) -> np.ndarray:
    """Per query, an upper bound on the largest change of its cost that one vote move can cause, over every
    histogram within ``distance`` moves of its own (LS at distance d; THEORY.md, "PATE").

    Two bounds, the smaller taken (``tight``) or the first alone:
    - the spread of the cost over every q~ reachable within d + 1 moves (each gap moves by at most 2 per move);
    - where the top class cannot change within d + 1 moves (smallest gap > 2(d + 1)): for a histogram within d
      moves, log q~ lies in [log q~(gaps + 2d), log q~(gaps - 2d)], and one more move shifts log q~ by at most
      a = log Q(G) - log Q(G + 2) down and b = log Q(G - 2) - log Q(G) up, Q the tail of N(0, 2 sigma^2) and G the
      largest gap it can have (log Q is concave, so these one-move ratios are extreme at the largest gap); the
      bound is the largest spread of the cost over a window [L - a, L + b] as L runs over that range.
    The threshold check's cost depends on the top vote, which one move changes by at most 1: its bound is the
    largest one-step change within d of the top vote seen (the range within d + 1 where the seen values are not
    whole numbers, as the interactive aggregator's shifted ones are not).
    """
    cache = _cache if _cache is not None else {}
    votes = np.asarray(votes, dtype=np.float64)
    q, k = votes.shape
    cap = 1.0 - 1.0 / k
    teachers = int(num_teachers)
    d = int(distance)
    sorted_votes = -np.sort(-votes, axis=1)
    gaps = sorted_votes[:, :1] - sorted_votes[:, 1:]  # (q, k-1), relative to the top class
    answered = np.asarray(answered, dtype=bool)

    def cost(lq: float) -> float:
        return float(analysis.rdp_data_dependent(lq, sigma2, np.array([order]))[0])

    if "envelope" not in cache:
        cache["envelope"] = _Envelope.of(cost, math.log(cap))
    shift = 2.0 * (d + 1)
    loose = cache["envelope"].spread(_log_q_from_gaps(gaps + shift, sigma2, cap),
                                     _log_q_from_gaps(gaps - shift, sigma2, cap))
    out = np.where(answered, loose, 0.0)
    if tight and answered.any():
        if "fine" not in cache:
            lowest = float(_log_q_from_gaps(gaps[answered] + 2.0 * teachers, sigma2, cap).min())
            cache["fine"] = _FineCost(cost, max(lowest - 1.0, -120.0), math.log(cap), 0.002)
        fine = cache["fine"]
        for i in np.flatnonzero(answered & (gaps.min(axis=1) > shift)):
            big = min(float(gaps[i].max()) + 2 * d, float(teachers))
            below = float(_log_tail(big, sigma2) - _log_tail(big + 2, sigma2))
            above = float(_log_tail(big - 2, sigma2) - _log_tail(big, sigma2))
            lo = float(_log_q_from_gaps(gaps[i] + 2 * d, sigma2, cap))
            hi = float(_log_q_from_gaps(gaps[i] - 2 * d, sigma2, cap))
            windowed = fine.largest_window_spread(lo, hi, below, above)
            if windowed is not None:
                out[i] = min(out[i], windowed)
    if sigma1 is not None and threshold is not None:
        seen = votes.max(axis=1) if check_votes is None else np.asarray(check_votes, dtype=np.float64)
        if "threshold_costs" not in cache:
            cache["threshold_costs"] = np.array([
                analysis.rdp_threshold_data_dependent(threshold, sigma1, v, np.array([order]))[0]
                for v in range(teachers + 1)])
        costs = cache["threshold_costs"]
        steps = np.abs(np.diff(costs))  # steps[v]: |c(v + 1) - c(v)|
        whole = np.allclose(seen, np.rint(seen))
        top_votes = np.clip(np.rint(seen), 0, teachers).astype(int)
        for i, v in enumerate(top_votes):
            if whole and tight:  # the top vote within d moves is in [v - d, v + d]; one more move: one step
                lo, hi = max(v - d - 1, 0), min(v + d, teachers - 1)
                out[i] += float(steps[lo: hi + 1].max()) if hi >= lo else 0.0
            else:
                lo, hi = max(v - d - 1, 0), min(v + d + 1, teachers)
                out[i] += float(costs[lo: hi + 1].max() - costs[lo: hi + 1].min())
    return out


def smooth_sensitivity(votes: np.ndarray, answered: np.ndarray, *, sigma1: float | None, sigma2: float,
                       threshold: float | None, order: float, beta_smooth: float, num_teachers: int,
                       check_votes: np.ndarray | None = None, max_distance: int | None = None,
                       tight: bool = True) -> float:
    """beta-smooth upper bound on the local sensitivity of the total data-dependent RDP at ``order``:
    SS = max_d exp(-beta d) * LS_d, LS_d the sum over queries of :func:`local_sensitivities` (one teacher moves at
    most one vote in each query, so the total changes by at most the sum of the queries' changes).

    votes: (queries, classes) histograms; answered: which queries paid for a GNMax answer; sigma1/threshold: the
    check (None for plain GNMax); check_votes: the top value the check saw per query (default: the top vote; the
    interactive aggregator's shifted top n_j - M p_j lies in [0, M] as well).
    """
    votes = np.asarray(votes, dtype=np.float64)
    q = votes.shape[0]
    teachers = int(num_teachers)
    per_query_max = order / sigma2**2 + (order / (2 * sigma1**2) if sigma1 else 0.0)
    best, d, cache = 0.0, 0, {}
    limit = max_distance if max_distance is not None else teachers
    while d <= limit:
        weight = math.exp(-beta_smooth * d)
        if weight * q * per_query_max <= best:
            break
        ls = float(local_sensitivities(votes, answered, sigma1=sigma1, sigma2=sigma2, threshold=threshold,
                                       order=order, num_teachers=teachers, distance=d, check_votes=check_votes,
                                       tight=tight, _cache=cache).sum())
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
