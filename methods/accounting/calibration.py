"""One calibration for every method: the largest noise-side parameter whose epsilon meets the target.

Follows dp_accounting's ``mechanism_calibration``: the privacy loss is a monotone function of one parameter,
and Brent's method finds where it crosses the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy.optimize import brentq


class InfeasibleTarget(ValueError):
    """The target epsilon is below what any parameter in range can reach."""

    def __init__(self, target: float, floor: float, what: str):
        self.target, self.floor = target, floor
        super().__init__(
            f"epsilon={target:g} is infeasible for {what}; the smallest feasible epsilon is {_round_up(floor)}"
        )


def _round_up(x: float, digits: int = 4) -> str:
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(x)))) if x > 0 else 1
    return f"{math.ceil(x * scale) / scale:g}"


def largest_parameter_meeting(
    epsilon_of: Callable[[float], float],
    target: float,
    *,
    low: float,
    high: float,
    what: str,
    xtol: float = 1e-10,
    rtol: float = 1e-10,
) -> float:
    """Largest p in [low, high) with epsilon_of(p) <= target, for epsilon_of increasing in p.

    ``epsilon_of(low)`` is the floor: a target below it raises :class:`InfeasibleTarget`. If even ``high``
    meets the target, ``high`` is returned.
    """
    floor = epsilon_of(low)
    if floor > target:
        raise InfeasibleTarget(target, floor, what)
    top = epsilon_of(high)
    if top <= target:
        return high
    p = brentq(lambda x: epsilon_of(x) - target, low, high, xtol=xtol, rtol=rtol)
    # brentq returns a point within tolerance of the root; step down until the target is met exactly.
    while epsilon_of(p) > target:
        p = p - max(xtol, abs(p) * rtol) * 4
    return p
