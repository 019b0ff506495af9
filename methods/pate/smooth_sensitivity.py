"""Publishing PATE's data-dependent epsilon: the smooth sensitivity of its RDP total (paper Appendix B; the Gaussian
release that uses it is gnss.py).

The data-dependent RDP total depends on the teachers' votes, so it is released only with noise scaled to a
beta-smooth upper bound on its local sensitivity (Nissim, Raskhodnikova & Smith 2007), as the paper's
Appendix B does. One teacher moves at most one vote of each query's histogram, so the total's local sensitivity at
distance d is at most the sum of the queries' own, and SS = max_d exp(-beta d) * LS_d. Per answered query, three
bounds on the GNMax cost's local sensitivity at distance d (the smallest that applies is taken):

- ``simple``: every gap n_top - n_i moves by at most 2 per move and q~ (a union bound of erfc terms) is monotone in
  each gap, so within d + 1 moves q~ lies in [q~(gaps + 2(d+1)), q~(gaps - 2(d+1))] (capped at 1 - 1/k once a gap
  can reach 0), and the cost's spread over that interval bounds the change (monotone envelopes on a fine grid);
- ``windowed``: where the top class cannot change within d + 1 moves, one more move shifts log q~ by at most the
  extreme one-move ratios of the union bound's Gaussian tails, and the bound is the largest spread of the cost over
  such a window;
- ``paper``: the paper's Algorithms 3-5 (:class:`GNMaxSensitivity`). One move changes q~ by at most the maps
  q -> bu(q), bl(q) (equal gaps over k - 1 classes are the worst case); where the cost beta(q) is non-decreasing
  below q0 (the point above which it is the data-independent lambda / sigma^2; condition C5) and
  beta(bu(q)) - beta(q) is non-decreasing below bl(q0) (C6), the local sensitivity at q is
  max(beta(bu(q)) - beta(q), beta(q) - beta(bl(q))), largest on [bl(q0), q0], and the histogram within d moves
  nearest that plateau is found by moving votes between the two top classes. The conditions depend on (sigma,
  lambda, k) only; they are checked numerically before use, and where they fail the windowed bound is used.

The threshold check's cost depends on the top vote only, which one move changes by at most 1: its bound at
distance d is the largest one-step change of the cost within d of the top vote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

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


_SQRT2 = math.sqrt(2.0)
#: the local-sensitivity bounds of one answered query's GNMax cost, loosest first (:func:`local_sensitivities`)
BOUNDS = ("simple", "windowed", "paper")


@dataclass(frozen=True)
class GNMaxSensitivity:
    """The paper's local sensitivity of one GNMax answer's data-dependent cost (Algorithms 3-5, Appendix B), for
    noise ``sigma``, order ``order`` and ``classes`` classes.

    beta(q) is the cost at union bound q (:func:`analysis.rdp_data_dependent`); q0 the largest q below which it is
    under the data-independent lambda / sigma^2; bu, bl the largest and smallest q~ one move can reach from any
    histogram whose union bound is q: with q / (k - 1) = Q(z), Q the standard normal tail, a move shifts every
    term's argument by at most sqrt(2) / sigma, and equal gaps are the worst case, so
    bu(q) = (k - 1) Q(z - sqrt(2)/sigma) (at most 1) and bl(q) = (k - 1) Q(z + sqrt(2)/sigma); q1 = bl(q0).
    ``holds`` says whether C5, C6 and the shape this argument needs were verified (:meth:`prepare`).
    """

    sigma: float
    order: float
    classes: int
    log_q0: float
    log_q1: float
    plateau: float
    holds: bool
    reason: str

    def beta(self, logq: float) -> float:
        return float(analysis.rdp_data_dependent(logq, self.sigma, np.array([self.order]))[0])

    def _log_move(self, logq: float, sign: float) -> float:
        log_k1 = math.log(self.classes - 1)
        z = -float(special.ndtri_exp(min(logq - log_k1, 0.0)))
        return min(log_k1 + float(special.log_ndtr(-(z + sign * _SQRT2 / self.sigma))), 0.0)

    def log_bu(self, logq: float) -> float:
        return self._log_move(logq, -1.0)

    def log_bl(self, logq: float) -> float:
        return self._log_move(logq, +1.0)

    def at(self, logq: float) -> float:
        """Algorithm 3: a bound on the largest change one move can make to the cost of a histogram whose union
        bound is q (valid only where ``holds``)."""
        if self.log_q1 <= logq <= self.log_q0:
            logq = self.log_q1
        b = self.beta(logq)
        return max(self.beta(self.log_bu(logq)) - b, b - self.beta(self.log_bl(logq)), 0.0)

    def by_distance(self, votes: np.ndarray, teachers: int) -> np.ndarray:
        """Algorithms 4-5: for d = 0..teachers, a bound on the local sensitivity over every histogram within d
        moves of ``votes`` (a running maximum, so "within", not "at exactly", d)."""
        out = np.full(teachers + 1, self.plateau)
        if self.log_q0 == -math.inf:  # constant cost
            return out
        v = sorted((float(x) for x in votes), reverse=True)
        logq = analysis.log_q_gnmax(np.array(v), self.sigma)
        if self.log_q1 <= logq <= self.log_q0:
            return out
        out[0] = self.at(logq)
        d = 0
        left = logq > self.log_q0  # above the plateau: widen the lead; below it: narrow it
        while d < teachers and ((left and logq > self.log_q0 and v[1] > 0)
                                or (not left and logq < self.log_q1 and v[0] - v[1] >= 2)):
            d += 1
            if left:
                v[0] += 1
                v[1] -= 1
                i = 1
                while i < len(v) - 1 and v[i] < v[i + 1]:
                    v[i], v[i + 1] = v[i + 1], v[i]
                    i += 1
            else:  # the runner-up never overtakes: a lead below 2 puts q~ above q0 (and the loop stops there)
                v[0] -= 1
                v[1] += 1
            logq = analysis.log_q_gnmax(np.array(v), self.sigma)
            out[d] = self.at(logq)
        return np.maximum.accumulate(out)

    @classmethod
    def prepare(cls, sigma: float, order: float, classes: int, log_q_floor: float, points: int = 4000
                ) -> GNMaxSensitivity:
        """Find q0 and q1 and verify, on a grid of ``points`` values of log q from below ``log_q_floor`` (the
        smallest union bound any histogram can have) up to the cap, what Algorithms 3-5 rest on:
        the cost is the data-independent lambda / sigma^2 at and above q0 (one crossing); C5, beta non-decreasing
        below q0; C6, beta(bu(q)) - beta(q) non-decreasing below q1. A numerical check, as the reference's (which
        minimises a symbolic derivative) is; the brute-force tests compare the result with exhaustive search."""
        indep = order / sigma**2
        cap = math.log(1.0 - 1.0 / classes)
        tol = 1e-12 * max(indep, 1e-300)

        def unusable(reason: str) -> GNMaxSensitivity:
            return cls(float(sigma), float(order), int(classes), math.nan, math.nan, math.nan, False, reason)

        if classes < 2:
            return unusable("fewer than two classes")
        low = min(log_q_floor, cap) - 1.0
        grid = np.linspace(low, cap, points)
        probe = cls(float(sigma), float(order), int(classes), math.nan, math.nan, math.nan, False, "")
        values = np.array([probe.beta(x) for x in grid])
        under = values < indep - tol
        if not under.any():  # the cost is lambda / sigma^2 for every histogram: no move changes it
            return cls(float(sigma), float(order), int(classes), -math.inf, -math.inf, 0.0, True,
                       "constant: the data-dependent bound never beats the data-independent one here")
        last = int(np.flatnonzero(under).max())
        if not under[: last + 1].all():
            return unusable("the data-dependent bound crosses the data-independent one more than once")
        if last + 1 < points:
            log_q0 = float(optimize.brentq(lambda x: probe.beta(x) - indep + tol, grid[last], grid[last + 1],
                                           xtol=1e-14, rtol=1e-14))
            log_q0 = min(log_q0, float(grid[last + 1]))
            while probe.beta(log_q0) >= indep - tol and log_q0 > grid[last]:  # stay on the data-dependent side
                log_q0 = math.nextafter(log_q0, -math.inf)
        else:
            log_q0 = cap
        if np.any(np.diff(values[: last + 1]) < -tol):
            return unusable("C5 fails: the cost is not non-decreasing in q below q0")
        log_q1 = probe.log_bl(log_q0)
        below = grid[grid < log_q1]
        jump = np.array([probe.beta(probe.log_bu(x)) - probe.beta(x) for x in below])
        if np.any(np.diff(jump) < -tol):
            return unusable("C6 fails: beta(bu(q)) - beta(q) is not non-decreasing in q below q1")
        ready = cls(float(sigma), float(order), int(classes), log_q0, log_q1, math.nan, True, "verified")
        return cls(float(sigma), float(order), int(classes), log_q0, log_q1, ready.at(log_q1), True, "verified")


def _paper_sensitivity(cache: dict, votes: np.ndarray, answered: np.ndarray, *, sigma2: float, order: float,
                       teachers: int, cap: float) -> GNMaxSensitivity:
    """The paper's Algorithms 3-5 for (sigma2, order, classes), and (where its conditions hold) each answered
    query's bound at every distance, in ``cache["paper_table"]`` (queries x distances 0..teachers)."""
    k = votes.shape[1]
    if "paper" not in cache:
        floor = float(_log_q_from_gaps(np.full((1, k - 1), float(teachers)), sigma2, cap)[0])
        cache["paper"] = GNMaxSensitivity.prepare(sigma2, order, k, floor)
    paper = cache["paper"]
    if paper.holds and "paper_table" not in cache:
        table = np.zeros((votes.shape[0], teachers + 1))
        for i in np.flatnonzero(answered):
            table[i] = paper.by_distance(votes[i], teachers)
        cache["paper_table"] = table
    return paper


def _windowed(out: np.ndarray, cache: dict, cost, gaps: np.ndarray, answered: np.ndarray, *, sigma2: float,
              cap: float, d: int, teachers: int) -> None:
    """Lower ``out`` to the windowed bound where the top class cannot change within d + 1 moves (the second bound
    of :func:`local_sensitivities`)."""
    shift = 2.0 * (d + 1)
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


def _threshold_sensitivities(cache: dict, votes: np.ndarray, check_votes: np.ndarray | None, *, sigma1: float,
                             threshold: float, order: float, teachers: int, d: int, tight: bool) -> np.ndarray:
    """Per query, the threshold check's bound: the largest one-step change of its cost within d of the top vote
    seen (the whole range within d + 1 where the seen values are not whole numbers)."""
    seen = votes.max(axis=1) if check_votes is None else np.asarray(check_votes, dtype=np.float64)
    if "threshold_costs" not in cache:
        cache["threshold_costs"] = np.array([
            analysis.rdp_threshold_data_dependent(threshold, sigma1, v, np.array([order]))[0]
            for v in range(teachers + 1)])
    costs = cache["threshold_costs"]
    steps = np.abs(np.diff(costs))  # steps[v]: |c(v + 1) - c(v)|
    whole = np.allclose(seen, np.rint(seen))
    top_votes = np.clip(np.rint(seen), 0, teachers).astype(int)
    out = np.zeros(len(top_votes))
    for i, v in enumerate(top_votes):
        if whole and tight:  # the top vote within d moves is in [v - d, v + d]; one more move: one step
            lo, hi = max(v - d - 1, 0), min(v + d, teachers - 1)
            out[i] = float(steps[lo: hi + 1].max()) if hi >= lo else 0.0
        else:
            lo, hi = max(v - d - 1, 0), min(v + d + 1, teachers)
            out[i] = float(costs[lo: hi + 1].max() - costs[lo: hi + 1].min())
    return out


def local_sensitivities(votes: np.ndarray, answered: np.ndarray, *, sigma1: float | None, sigma2: float,
                        threshold: float | None, order: float, num_teachers: int, distance: int,
                        check_votes: np.ndarray | None = None, bound: str = "paper",
                        _cache: dict | None = None) -> np.ndarray:
    """Per query, an upper bound on the largest change of its cost that one vote move can cause, over every
    histogram within ``distance`` moves of its own (LS at distance d; THEORY.md, "PATE").

    ``bound`` is one of BOUNDS. For an answered query's GNMax cost, "simple" takes the first bound below alone;
    "windowed" the smaller of the first two; "paper" the smaller of the first and the paper's Algorithms 3-5
    (:class:`GNMaxSensitivity`) where its conditions hold for (sigma2, order, classes), else "windowed"'s:
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
    if bound not in BOUNDS:
        raise ValueError(f"bound={bound!r} is not allowed: choose one of {', '.join(BOUNDS)}")
    paper = None
    if bound == "paper" and answered.any():
        paper = _paper_sensitivity(cache, votes, answered, sigma2=sigma2, order=order, teachers=teachers, cap=cap)
        if paper.holds:
            out = np.where(answered, np.minimum(out, cache["paper_table"][:, min(d, teachers)]), 0.0)
    tight = bound != "simple"
    if tight and answered.any() and not (paper is not None and paper.holds):
        _windowed(out, cache, cost, gaps, answered, sigma2=sigma2, cap=cap, d=d, teachers=teachers)
    if sigma1 is not None and threshold is not None:
        out += _threshold_sensitivities(cache, votes, check_votes, sigma1=sigma1, threshold=threshold, order=order,
                                        teachers=teachers, d=d, tight=tight)
    return out


def smooth_sensitivity(votes: np.ndarray, answered: np.ndarray, *, sigma1: float | None, sigma2: float,
                       threshold: float | None, order: float, beta_smooth: float, num_teachers: int,
                       check_votes: np.ndarray | None = None, max_distance: int | None = None,
                       bound: str = "paper") -> float:
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
                                       bound=bound, _cache=cache).sum())
        best = max(best, weight * ls)
        d += 1
    return best
