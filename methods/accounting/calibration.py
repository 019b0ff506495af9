"""One calibration for every method: the noise-side parameter whose epsilon meets the target.

Follows dp_accounting's ``mechanism_calibration``: the privacy loss is a monotone function of one parameter
(Dirichlet's r, a Gaussian's sigma, PATE's common scale of its sigmas), and Brent's method finds where it crosses
the target. The answer is always on the safe side: epsilon_of(answer) <= target. THEORY.md, "Calibration".
"""

from __future__ import annotations

import math
from collections.abc import Callable

from scipy.optimize import brentq


class InfeasibleTarget(ValueError):
    """The target epsilon is outside what any parameter in range can reach: below the floor (the most noise the range
    allows), or above the ceiling (the least noise it allows, where a larger target would only buy made-up noise)."""

    def __init__(self, target: float, floor: float, what: str, *, ceiling: float | None = None):
        self.target, self.floor, self.ceiling = target, floor, ceiling
        if ceiling is None:
            message = f"epsilon={target:g} is infeasible for {what}; the smallest feasible epsilon is {_round_up(floor)}"
        else:
            message = (f"epsilon={target:g} is infeasible for {what}; the largest feasible epsilon is "
                       f"{_round_down(ceiling)} (for no privacy at all, run the non-private reference)")
        super().__init__(message)


def _round_down(x: float, digits: int = 4) -> str:
    if not math.isfinite(x) or x <= 0:
        return f"{x:g}"
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return f"{math.floor(x * scale) / scale:g}"


def _round_up(x: float, digits: int = 4) -> str:
    if not math.isfinite(x):
        return f"{x:g}"
    scale = 10 ** (digits - 1 - math.floor(math.log10(abs(x)))) if x > 0 else 1
    return f"{math.ceil(x * scale) / scale:g}"


def calibrate_parameter(
    epsilon_of: Callable[[float], float],
    target: float,
    *,
    low: float,
    high: float,
    increasing: bool,
    what: str,
    start: float | None = None,
    bracket: tuple[float, float] | None = None,
    xtol: float = 1e-10,
    rtol: float = 1e-10,
) -> float:
    """The parameter p in [low, high] with epsilon_of(p) <= target that lies nearest the crossing.

    ``epsilon_of`` is monotone in p: ``increasing`` (less noise as p grows, e.g. Dirichlet's r: the largest safe p
    is returned) or decreasing (more noise as p grows, e.g. sigma: the smallest safe p is returned). The safe end
    of the range gives the floor; a target below it raises :class:`InfeasibleTarget` with that floor. The unsafe end
    gives the ceiling: a target at or above it (an infinite one included) is refused too, with that ceiling, since
    the noise returned would be the range's limit, not a calibration.

    With ``start`` the bracket is found by doubling (or halving) from ``start``, so the ends of a wide range are
    evaluated only when the crossing lies there; without it both ends are evaluated first. A ``bracket`` (two
    points believed to lie either side of the crossing, e.g. from a looser accountant) is tried first: where it does
    straddle the target the search stays inside it (two evaluations fewer than a walk), else the walk from ``start``
    (or the ends) takes over.
    """
    safe_end, unsafe_end = (low, high) if increasing else (high, low)

    def meets(p: float) -> bool:
        return epsilon_of(p) <= target

    if not math.isfinite(target):
        raise InfeasibleTarget(target, math.nan, what, ceiling=epsilon_of(unsafe_end))
    straddled = _straddle(meets, bracket, low, high)
    if straddled is not None:
        safe, unsafe = straddled
    elif start is None:
        floor = epsilon_of(safe_end)
        if floor > target:
            raise InfeasibleTarget(target, floor, what)
        if meets(unsafe_end):
            raise InfeasibleTarget(target, floor, what, ceiling=epsilon_of(unsafe_end))
        safe, unsafe = safe_end, unsafe_end
    else:
        safe, unsafe = _bracket(meets, start, safe_end, unsafe_end, epsilon_of, target, what)
        if safe == unsafe:
            raise InfeasibleTarget(target, math.nan, what, ceiling=epsilon_of(unsafe_end))
    a, b = sorted((safe, unsafe))
    p = brentq(lambda x: epsilon_of(x) - target, a, b, xtol=xtol, rtol=rtol)
    # brentq returns a point within tolerance of the root: step towards the safe side until the target is met
    # (the step doubles, so this ends within a few tries, at the latest on the safe end of the bracket).
    step = max(xtol, abs(p) * rtol) * 4
    while not meets(p):
        p = min(p + step, safe) if safe > p else max(p - step, safe)
        step *= 2
    return p


def _straddle(meets, bracket: tuple[float, float] | None, low: float, high: float) -> tuple[float, float] | None:
    """(safe, unsafe) from a given bracket when one end meets the target and the other does not; else None."""
    if bracket is None:
        return None
    a, b = (min(max(p, low), high) for p in bracket)
    if a == b:
        return None
    ma, mb = meets(a), meets(b)
    if ma == mb:
        return None
    return (a, b) if ma else (b, a)


def _bracket(meets, start: float, safe_end: float, unsafe_end: float, epsilon_of, target: float,
             what: str) -> tuple[float, float]:
    """(safe, unsafe) points around the crossing, walking geometrically (x2 or /2) from ``start`` within the range;
    (p, p) if the walk reaches the unsafe end and it still meets the target."""

    def walk(p: float, end: float) -> float:  # one geometric step towards ``end``, never past it
        q = p * 2.0 if end > p else p / 2.0
        return min(q, end) if end > p else max(q, end)

    p = min(max(start, min(safe_end, unsafe_end)), max(safe_end, unsafe_end))
    if meets(p):
        while p != unsafe_end:
            q = walk(p, unsafe_end)
            if not meets(q):
                return p, q
            p = q
        return p, p
    while p != safe_end:
        q = walk(p, safe_end)
        if meets(q):
            return q, p
        p = q
    raise InfeasibleTarget(target, epsilon_of(safe_end), what)
