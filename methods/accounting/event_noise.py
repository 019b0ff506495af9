"""The least noise scale of any release a dp_accounting event describes (``releases.ScaledEvent``: a mechanism audit's
trials) that an (epsilon, delta) claim allows: the PLD accountant's search for that family (accountants.PLD), exact
where the event is unsampled Gaussians alone."""

from __future__ import annotations

import math

from scipy import optimize

from inputdp.core.errors import ConfigError

from .events import PLD_INTERVAL, gdp_mu
from .releases import ScaledEvent


def event_least_noise(family: ScaledEvent, epsilon: float, delta: float) -> float:
    """The least s such that the event with every noise multiplier times s is (epsilon, delta)-DP under its relation.

    Unsampled Gaussians alone (add/remove's pair, the sensitivity folded into the noise multipliers) compose exactly
    to one of mu = sqrt(sum_i 1 / s_i^2) (Dong, Roth & Su 2022, Corollary 3.3), so s = mu(unit event) /
    gdp_mu(epsilon, delta), exact. Otherwise the root in s of dp_accounting's pessimistic PLD epsilon (decreasing in
    s): bracketed by doubling from s = 1 on a grid of 10 x ``PLD_INTERVAL``, settled on that grid, then on
    ``PLD_INTERVAL`` within 0.3% of it (widened if need be); its epsilon is an upper bound, so s is at or above the
    exact one by the grid's error (tests/benchmarks/test_mechanism_audit.py measures it). Cached."""
    key = family.key()
    if (key, epsilon, delta) in _EVENT_NOISE:
        return _EVENT_NOISE[(key, epsilon, delta)]
    mu = family.at(1.0).exact_mu()
    if mu is not None:
        out = mu / gdp_mu(epsilon, delta)
    else:
        out = _event_search(family, epsilon, delta)
    _EVENT_NOISE[(key, epsilon, delta)] = out
    return out


_EVENT_NOISE: dict[tuple, float] = {}


def _event_search(family: ScaledEvent, epsilon: float, delta: float) -> float:
    def excess(log_s: float, interval: float) -> float:
        return family.at(math.exp(log_s)).epsilon(delta, interval=interval) - epsilon

    coarse = 10 * PLD_INTERVAL
    low, high = 0.0, 0.0
    if excess(0.0, coarse) > 0:
        while excess(high, coarse) > 0:
            low, high = high, high + math.log(2.0)
            if high > math.log(1e4):
                raise ConfigError(f"epsilon={epsilon:g} is not allowed in a mechanism audit: no noise below 1e4 "
                                  f"meets it at delta={delta:g}")
    else:
        while excess(low, coarse) <= 0:
            high, low = low, low - math.log(2.0)
            if low < math.log(1e-3):
                raise ConfigError(f"epsilon={epsilon:g} is not allowed in a mechanism audit: noise 1e-3 already meets "
                                  f"it at delta={delta:g}")
    first = optimize.brentq(excess, low, high, args=(coarse,), xtol=2e-3)
    low, high = first - 0.003, first + 0.003  # the two grids' roots differ by about 0.1%
    while excess(low, PLD_INTERVAL) <= 0:
        low -= 0.01
    while excess(high, PLD_INTERVAL) > 0:
        high += 0.01
    return math.exp(optimize.brentq(excess, low, high, args=(PLD_INTERVAL,), xtol=1e-4))
