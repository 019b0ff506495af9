"""The one-run game's statistics (Steinke, Nasr & Jagielski 2023; THEORY.md, "Auditing"): from the number of
correct guesses among r, a lower bound on epsilon at confidence 1 - beta, Bonferroni-corrected over every (score,
k) tried; beside it the f-DP bound of the same guesses (fdp_bound.py), and the ceiling the same m and k could show."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from . import fdp_bound
from .scores import ONE_TEST

BETA = 0.05



def binomial_tail(r: int, q: float, t: int) -> float:
    """f(t) = P[Binomial(r, q) >= t]."""
    if t <= 0:
        return 1.0
    return float(stats.binom.sf(t - 1, r, q))



def p_value(eps: float, *, r: int, v: int, m: int, delta: float) -> float:
    """p(eps) = f(v) + 2 m delta max_{i=1..v} (f(v-i) - f(v)) / i, with q_e = e^eps / (1 + e^eps)."""
    q = 1.0 / (1.0 + math.exp(-eps))
    ts = np.arange(0, v + 1)
    tails = stats.binom.sf(ts - 1, r, q)  # f(0), ..., f(v)
    tails[0] = 1.0
    fv = float(tails[v])
    if v == 0:
        return fv
    i = np.arange(1, v + 1)
    spread = float(np.max((tails[v - i] - fv) / i))
    return fv + 2.0 * m * delta * spread



def epsilon_lower_bound(*, r: int, v: int, m: int, delta: float, beta: float) -> float:
    """sup{eps : p(eps) < beta}, by bisection (p increases with eps); 0 if even eps = 0 is not rejected."""
    if r == 0 or p_value(0.0, r=r, v=v, m=m, delta=delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(hi, r=r, v=v, m=m, delta=delta) < beta and hi < 100:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_value(mid, r=r, v=v, m=m, delta=delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo



def k_grid(m: int) -> list[int]:
    """Guess counts tried (k "in" and k "out" guesses each): 5% to 50% of the canaries.

    Small k cannot give a large bound (the ceiling grows with the number of guesses) and only costs correction,
    so the grid starts at m/20 and ends with a guess for every canary.
    """
    return sorted({k for k in (m // 20, m // 10, 3 * m // 20, m // 5, 3 * m // 10, 2 * m // 5, m // 2) if k >= 1})



@dataclass
class ScoreOutcome:
    """One score's strongest test: Steinke et al.'s bound (``epsilon_lb``, at the k it was reached) and, over the
    same tests at the same level, the f-DP bounds (benchmarks/audits/fdp_bound.py): ``fdp_epsilon_lb`` against the
    (epsilon, delta) trade-off curve (refutes any (epsilon, delta) claim) and ``gdp_mu_lb`` (refutes a mu-GDP one)."""

    score: str
    epsilon_lb: float
    ceiling: float
    k: int
    guesses: int
    correct: int
    fdp_epsilon_lb: float = 0.0
    fdp_ceiling: float = 0.0
    gdp_mu_lb: float = 0.0
    #: False where the test's guesses could not depend on the run: every fixed guess on one side (a score above 0
    #: for every canary, as when noise moves every parameter), or every score equal (the ranking is the index
    #: order). Its count of right guesses is then the inclusion draw, Binomial(guesses, 1/2) whatever the mechanism,
    #: and its ceiling is out of reach: the verdict says "no power" instead
    power: bool = True

    @property
    def decides(self) -> str:
        """Which of the two (epsilon, delta) bounds is the larger: "f-DP" or "Steinke" (ties: Steinke)."""
        return "f-DP" if self.fdp_epsilon_lb > self.epsilon_lb + fdp_bound.DECIDES_MARGIN else "Steinke"



def fdp_bounds(*, r: int, v: int, m: int, delta: float, level: float) -> tuple[float, float, float]:
    """(f-DP epsilon lower bound, its ceiling (every guess right), mu-GDP lower bound) of v right among r guesses."""
    return (fdp_bound.eps_lower_bound(m=m, guesses=r, correct=v, tau=level, delta=delta),
            fdp_bound.eps_lower_bound(m=m, guesses=r, correct=r, tau=level, delta=delta),
            fdp_bound.mu_lower_bound(m=m, guesses=r, correct=v, tau=level))



def bound_for_scores(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float, n_tests: int,
                     score: str, grid: Sequence[int] | None = None) -> ScoreOutcome:
    """The best bound over the k grid (``k_grid(m)`` unless given) for one score, each test at level beta / n_tests
    (Bonferroni)."""
    m = len(scores)
    order = np.argsort(-scores, kind="stable")
    best = ScoreOutcome(score, 0.0, 0.0, 0, 0, 0, power=bool(np.ptp(scores) > 0) if m else False)
    fdp = (0.0, 0.0, 0.0)
    for k in (k_grid(m) if grid is None else grid):
        guessed_in, guessed_out = order[:k], order[-k:]
        v = int(included[guessed_in].sum() + (~included[guessed_out]).sum())
        r = 2 * k
        lb = epsilon_lower_bound(r=r, v=v, m=m, delta=delta, beta=beta / n_tests)
        ceiling = epsilon_lower_bound(r=r, v=r, m=m, delta=delta, beta=beta / n_tests)
        # the largest bound; among equal ones (all 0, say) the k with the largest ceiling, so that the ceiling
        # shown is the most this score could have shown
        if (lb, ceiling) > (best.epsilon_lb, best.ceiling) or best.k == 0:
            best = ScoreOutcome(score, lb, ceiling, k, r, v, power=best.power)
        # the f-DP bounds of the same test, each the strongest over the grid (every test is in the family)
        fdp = tuple(max(a, b) for a, b in zip(fdp, fdp_bounds(r=r, v=v, m=m, delta=delta, level=beta / n_tests)))
    return dataclasses.replace(best, fdp_epsilon_lb=fdp[0], fdp_ceiling=fdp[1], gdp_mu_lb=fdp[2])



def bound_fixed_guesses(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float, n_tests: int,
                        score: str) -> ScoreOutcome:
    """One test whose guesses were fixed before the run: every canary guessed, "in" iff its score is above 0."""
    m = len(scores)
    v = int(((scores > 0) == included).sum())
    lb = epsilon_lower_bound(r=m, v=v, m=m, delta=delta, beta=beta / n_tests)
    ceiling = epsilon_lower_bound(r=m, v=m, m=m, delta=delta, beta=beta / n_tests)
    fdp = fdp_bounds(r=m, v=v, m=m, delta=delta, level=beta / n_tests)
    guessed_in = int((scores > 0).sum())
    return ScoreOutcome(score, lb, ceiling, m, m, v, *fdp, power=0 < guessed_in < m)



#: each set of guesses is read by two analyses, Steinke et al.'s and the f-DP bound on the (epsilon, delta) curve, and
#: the verdict takes the larger: two tests of the same claim, so both are in the Bonferroni family
ANALYSES = 2



def count_tests(scores: Sequence[str], m: int) -> int:
    """The family the Bonferroni correction covers: one guess set per fixed-guess score, one per k for the others,
    each read by ``ANALYSES`` analyses."""
    return ANALYSES * sum(1 if s in ONE_TEST else len(k_grid(m)) for s in scores)
