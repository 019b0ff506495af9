"""A claim's trade-off curve: the least false-negative rate any test of "in" against "out" can have at each
false-positive rate, computed from the claim's privacy profile (THEORY.md, "Auditing", "The claimed curve").

A mechanism that is (epsilon, delta(epsilon))-DP for every epsilon >= 0 of its privacy profile, in both directions of
its neighbouring pair, has, for every test with false-positive rate alpha ("out" guessed "in") and false-negative
rate beta ("in" guessed "out"),

    beta >= f(alpha) = sup_eps max(0, 1 - delta(eps) - e^eps alpha, e^-eps (1 - delta(eps) - alpha))

(Kairouz, Oh & Viswanath 2015; Dong, Roth & Su 2022, Proposition 2.12). Each epsilon gives two lines that every
(epsilon, delta(epsilon))-DP pair obeys, so the supremum over *any* set of epsilons is a curve the claim implies:
a finite grid gives a curve at or below the exact one (never above: an audit reading it can only be more cautious),
and a profile that overstates delta (dp_accounting's pessimistic PLD) likewise. One Gaussian release of sensitivity 1
and noise 1/mu has the exact curve Phi(Phi^-1(1 - alpha) - mu) (mu-GDP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

#: the epsilons a privacy profile is read at: fine where the curve's slopes change fastest (small epsilon), up to 40,
#: beyond which e^-eps is below 5e-18 (no rate an audit of fewer than 10^17 trials measures)
EPSILON_GRID = np.concatenate([np.linspace(0.0, 10.0, 2001), np.linspace(10.05, 40.0, 600)])


@dataclass(frozen=True, eq=False)
class TradeOffCurve:
    """f(alpha) from a privacy profile: ``epsilons`` and their ``deltas`` (both directions' largest), or, with
    ``gdp_mu``, the exact mu-GDP curve. Call it on an array of false-positive rates."""

    epsilons: np.ndarray | None = None
    deltas: np.ndarray | None = None
    gdp_mu: float | None = None
    #: what computed it (the accountant and its grid), for the audit's record
    source: str = ""

    def __post_init__(self) -> None:
        if (self.gdp_mu is None) == (self.epsilons is None):
            raise ValueError("a trade-off curve is either a privacy profile (epsilons, deltas) or a GDP mu, not both")
        if self.epsilons is not None:
            e, d = np.asarray(self.epsilons, dtype=float), np.asarray(self.deltas, dtype=float)
            if e.shape != d.shape or e.ndim != 1 or np.any(e < 0) or np.any((d < 0) | (d > 1)):
                raise ValueError("a privacy profile needs one delta in [0, 1] per epsilon >= 0")
            object.__setattr__(self, "epsilons", e)
            object.__setattr__(self, "deltas", d)

    def __call__(self, alpha) -> np.ndarray:
        a = np.clip(np.atleast_1d(np.asarray(alpha, dtype=float)), 0.0, 1.0)
        if self.gdp_mu is not None:
            return ndtr(ndtri(1.0 - a) - self.gdp_mu)
        slopes, intercepts, starts = self._envelope()
        i = np.searchsorted(starts, a, side="right") - 1  # the line on top at each alpha
        return np.maximum(intercepts[i] + slopes[i] * a, 0.0)

    def _envelope(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The upper envelope of the profile's lines (each epsilon's two, and 0) on [0, 1]: (slopes, intercepts, the
        alpha from which each is on top), computed once. The maximum of finitely many lines is their envelope, so
        reading it is exactly the supremum over the grid, in O(log n) per rate."""
        cached = getattr(self, "_lines", None)
        if cached is not None:
            return cached
        e, d = self.epsilons, self.deltas
        slopes = np.concatenate([-np.exp(e), -np.exp(-e), [0.0]])
        intercepts = np.concatenate([1.0 - d, np.exp(-e) * (1.0 - d), [0.0]])
        # steepest first: at alpha = 0 the largest intercept wins, and as alpha grows flatter lines take over
        order = np.lexsort((-intercepts, slopes))
        hull: list[int] = []
        for j in order:
            if hull and slopes[hull[-1]] == slopes[j]:
                continue  # same slope, lower intercept (sorted so): never on top
            while len(hull) >= 2 and _crossing(slopes, intercepts, hull[-2], j) <= _crossing(slopes, intercepts,
                                                                                               hull[-2], hull[-1]):
                hull.pop()
            hull.append(j)
        h = np.array(hull)
        starts = np.concatenate([[-np.inf], [_crossing(slopes, intercepts, h[k - 1], h[k]) for k in range(1, h.size)]])
        lines = (slopes[h], intercepts[h], starts)
        object.__setattr__(self, "_lines", lines)
        return lines


def _crossing(slopes: np.ndarray, intercepts: np.ndarray, i: int, j: int) -> float:
    """The alpha at which line j (flatter) meets line i (steeper)."""
    return float((intercepts[i] - intercepts[j]) / (slopes[j] - slopes[i]))


def gaussian_curve(mu: float, source: str = "") -> TradeOffCurve:
    """The exact curve of mu-GDP (one Gaussian release of sensitivity 1 and noise 1/mu)."""
    return TradeOffCurve(gdp_mu=float(mu), source=source or f"{mu:g}-GDP (exact)")


def profile_curve(delta_of, source: str, epsilons: np.ndarray = EPSILON_GRID) -> TradeOffCurve:
    """The curve of a privacy profile ``delta_of(epsilons) -> deltas`` (vectorised), read at ``epsilons``."""
    return TradeOffCurve(epsilons=epsilons, deltas=np.clip(np.asarray(delta_of(epsilons), dtype=float), 0.0, 1.0),
                         source=source)
