"""The f-DP one-run bound of Mahloujifar, Melis & Chaudhuri (2024, "Auditing f-Differential Privacy in One Run";
THEORY.md, "Auditing": the f-DP bound from the same guesses).

The same guessing game as Steinke, Nasr & Jagielski's: m canaries, each in with probability 1/2, c' guesses of which
c are right. For a mechanism that is f-DP with respect to each canary, the masses

    r_i = (1/m) E[#right guesses ; C >= i],   h_i = (1/m) E[#wrong guesses ; C >= i]      (C: the right guesses)

obey, from i = c down to 0: h_i >= max(h_{i+1}, g(r_{i+1})) (flipping one canary's membership turns a right guess
into a wrong one and C >= i+1 into C >= i; g = the inverse blow-up of f, the least probability an event can have in
one world given its probability in the other) and r_i - r_{i+1} = i / (c' - i) (h_i - h_{i+1}) (on C = i there are
i right and c' - i wrong guesses), with r_0 + h_0 = c'/m (every guess is right or wrong). Starting from
P[C >= c] = tau (r_c = tau c/m, h_c = tau (c' - c)/m) the recursion gives the least r_0 + h_0 the game allows; if it
exceeds c'/m, P[C >= c] < tau under f: f is rejected at level tau.

Two families of f are searched for the strongest rejected member:

- ``gdp``: mu-GDP, g(x) = Phi(Phi^-1(x) - mu); the bound is a lower bound on mu, and epsilon(mu) at delta is what
  the paper reports. It refutes a claim only where the claim is mu-GDP (its whole trade-off curve Gaussian);
- ``eps_delta``: the trade-off curve of (epsilon, delta)-DP itself, g(x) = max(0, e^-eps (x - delta),
  1 - delta - e^eps (1 - x)); it refutes any (epsilon, delta) claim, whatever its curve. This is the one the
  verdicts use beside Steinke's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import ndtr, ndtri

from inputdp.methods.accounting.one_release import gaussian_release_epsilon

FAMILIES = ("gdp", "eps_delta")
#: the f-DP bound "decides" (is the one a verdict names) only where it exceeds Steinke's bound of the same guesses by
#: more than this; nearer, the two agree to the precision the bounds are computed at, and Steinke's is named
DECIDES_MARGIN = 1e-3
#: the parameter grid refined around the boundary: this many points a round, this many rounds
_GRID, _ROUNDS = 64, 4


def gdp_inverse_blowup(mu: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """x -> Phi(Phi^-1(x) - mu), for a vector of mu (one per column of the grid)."""
    return lambda x: ndtr(ndtri(np.clip(x, 0.0, 1.0)) - mu)


def eps_delta_inverse_blowup(eps: np.ndarray, delta: float) -> Callable[[np.ndarray], np.ndarray]:
    """x -> the least probability an event can have in one world of an (eps, delta)-DP pair given x in the other."""
    return lambda x: np.maximum(0.0, np.maximum(np.exp(-eps) * (x - delta), 1.0 - delta - np.exp(eps) * (1.0 - x)))


def rejected(g: Callable[[np.ndarray], np.ndarray], *, m: int, guesses: int, correct: int, tau: float,
             size: int) -> np.ndarray:
    """For each of ``size`` members of a family (g vectorised over them): is it rejected at level tau by
    ``correct`` right guesses of ``guesses`` among m canaries?"""
    if guesses <= 0 or correct <= 0:
        return np.zeros(size, dtype=bool)
    mass = tau * guesses / m
    r = np.full(size, mass * correct / guesses)
    h = np.full(size, mass * (guesses - correct) / guesses)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in range(correct - 1, -1, -1):
            h_new = np.maximum(h, g(r))
            # masses only grow as i falls: past 1 the member is rejected already, and the cap keeps them finite
            r = np.minimum(r + (i / (guesses - i)) * (h_new - h), 1.0)
            h = np.minimum(h_new, 1.0)
    return r + h > guesses / m * (1.0 + 1e-12)


def _largest_rejected(make_g: Callable[[np.ndarray], Callable], high: float, **game) -> float:
    """sup{t in [0, high] : member t rejected}; rejection is monotone (a smaller t is a stronger claim)."""
    lo, hi = 0.0, high
    for _ in range(_ROUNDS):
        grid = np.linspace(lo, hi, _GRID)
        rej = rejected(make_g(grid), size=_GRID, **game)
        if not rej[0]:
            return lo if lo > 0 else 0.0
        last = int(np.flatnonzero(rej)[-1])
        if last == _GRID - 1:
            return hi
        lo, hi = float(grid[last]), float(grid[last + 1])
    return lo


def mu_lower_bound(*, m: int, guesses: int, correct: int, tau: float) -> float:
    """The largest mu such that mu-GDP is rejected (0: none is)."""
    return _largest_rejected(gdp_inverse_blowup, 50.0, m=m, guesses=guesses, correct=correct, tau=tau)


def eps_lower_bound(*, m: int, guesses: int, correct: int, tau: float, delta: float) -> float:
    """The largest epsilon such that (epsilon, delta)-DP's own trade-off curve is rejected (0: none is)."""
    return _largest_rejected(lambda e: eps_delta_inverse_blowup(e, delta), 30.0, m=m, guesses=guesses,
                             correct=correct, tau=tau)


def gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon of mu-GDP at delta (mu-GDP is one Gaussian release of sensitivity 1 and noise 1/mu)."""
    return 0.0 if mu <= 0 else gaussian_release_epsilon(1.0 / mu, delta)
