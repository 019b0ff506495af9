"""The privacy curve of a per-example release under Poisson sampling (THEORY.md, "Per-example releases under
Poisson sampling").

A mechanism that releases *one noisy vector per sampled example* (Dirichlet-softmax's p~, the penultimate
Gaussian's h~) is not a noised aggregate, and Zhu & Wang's subsampled-RDP theorem does not apply to it. With one
input replaced (its label and its membership public) example x's own vector is released, identifiably, on each
step that samples it, so one step is the pair of mixtures

    P = (1 - q) [nothing] + q M(x),        Q = (1 - q) [nothing] + q M(x'),

whose privacy-loss distribution is an atom at 0 of mass 1 - q and, with mass q, the loss L of one release for the
pair (x, x'). T steps compose. For a *fixed* model this is exact for x's own vectors; for training, where each
update moves the model that produces every later vector, it is a lower bound (THEORY.md says why).

Everything here is a pure function. The curves are computed as privacy-loss distributions with Google's
dp_accounting (pessimistic and optimistic discretisations of the single-release loss, each a rigorous one-sided
bound), so every answer is a bracket ``[lower, upper]`` around the exact value.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special, stats

from inputdp.core.claims import ADD_REMOVE, REPLACE_INPUT

from .calibration import InfeasibleTarget, calibrate_parameter
from .rdp import rdp_to_epsilon

# the per-example curve is computed for one input replaced, its label and its membership public
ADJACENCIES = (REPLACE_INPUT, ADD_REMOVE)
#: the single-release loss is truncated where each tail holds less than this mass (the pessimistic estimate puts
#: the upper tail at infinity, so truncation never makes it optimistic)
TAIL_MASS = 1e-15
#: the most expected releases per example (q T) the curve is evaluated for: the discretisation interval shrinks as
#: 1 / sqrt(q T) to keep the bracket narrow, and the composed distribution's grid grows with it (the papers'
#: settings have q T <= 100; the cpu preset 10)
MAX_EXPECTED_RELEASES = 200.0


class NoFiniteEpsilon(ValueError):
    """The mechanism has no finite epsilon below some delta for the asked relation (one line, with the reason)."""


def refuse_add_remove(q: float, steps: int) -> NoFiniteEpsilon:
    """Under add/remove one example, a per-example release cannot be private: D = {x} releases some vector with
    probability 1 - (1-q)^T, D' = {} never does, so no epsilon holds for any delta below that probability."""
    floor = release_probability(q, steps)
    return NoFiniteEpsilon(
        f"adjacency=add_remove is not allowed for a per-example release: with one example added, one more vector "
        f"is released (probability 1-(1-q)^T = {floor:.6g} at q={q:g}, T={steps}), so no finite epsilon holds for "
        f"any delta below that; use adjacency=replace_input (one input replaced, label and membership public)")


@dataclass(frozen=True)
class SingleRelease:
    """The privacy loss L = log(p(o) / p'(o)), o ~ p, of one release for the worst pair of inputs, and the same
    loss's law when o ~ p' (which, for the symmetric pairs here, is that of -L under p).

    ``cdf(t) = P[L <= t]`` and ``sf(t) = P[L > t]`` under p; ``quantiles(m)`` the points below and above which L
    has mass at most m; ``sample(n, rng)`` draws L under p (for Monte Carlo checks); ``renyi(orders)`` the exact
    Rényi divergence D_lambda(p || p') of the pair.
    """

    name: str
    cdf: Callable[[np.ndarray], np.ndarray]
    sf: Callable[[np.ndarray], np.ndarray]
    quantiles: Callable[[float], tuple[float, float]]
    sample: Callable[[int, np.random.Generator], np.ndarray]
    renyi: Callable[[np.ndarray], np.ndarray]


def dirichlet_corner(r: float, alpha: float) -> SingleRelease:
    """One Dirichlet release Dir(r s + alpha 1) for the corner pair s = e_1, s' = e_2 (any number of classes d).

    The density ratio is (y_1 / y_2)^r (the normalising constants are equal by symmetry), so L = r logit(B) with
    B = y_1 / (y_1 + y_2) ~ Beta(alpha + r, alpha) under p, independent of the other coordinates and of d. Its
    Rényi divergence is exact: D_lambda = log(B(alpha + lambda r, alpha + (1 - lambda) r) / B(alpha + r, alpha)) /
    (lambda - 1), finite for alpha + (1 - lambda) r > 0. (The corner pair is the supremum over softmax pairs, never
    attained: a lower bound for every pair's curve; it was the worst of every pair the tests' search tried.)
    """
    if not (r > 0 and alpha > 0):
        raise ValueError(f"r={r!r} and alpha={alpha!r} must be > 0")
    beta = stats.beta(alpha + r, alpha)

    def renyi(orders: np.ndarray) -> np.ndarray:
        lam = np.asarray(orders, dtype=np.float64)
        out = np.full(lam.shape, np.inf)
        ok = alpha + (1.0 - lam) * r > 0
        out[ok] = (special.betaln(alpha + lam[ok] * r, alpha + (1.0 - lam[ok]) * r)
                   - special.betaln(alpha + r, alpha)) / (lam[ok] - 1.0)
        return out

    return SingleRelease(
        name=f"dirichlet corner pair (r={r:g}, alpha={alpha:g})",
        cdf=lambda t: beta.cdf(special.expit(np.asarray(t) / r)),
        sf=lambda t: beta.sf(special.expit(np.asarray(t) / r)),
        quantiles=lambda m: (r * float(special.logit(beta.ppf(m))), r * float(special.logit(beta.isf(m)))),
        sample=lambda n, rng: r * special.logit(rng.beta(alpha + r, alpha, size=n)),
        renyi=renyi,
    )


def gaussian_pair(mu: float) -> SingleRelease:
    """One Gaussian release N(h, sigma^2 C^2 I) for two clipped vectors ||h - h'|| = Delta: mu = Delta / (sigma C)
    (2 / sigma with one input replaced: h' = -h on the sphere of radius C). L ~ N(mu^2 / 2, mu^2) under p, and
    D_lambda = lambda mu^2 / 2."""
    if not mu > 0:
        raise ValueError(f"mu={mu!r} must be > 0")
    law = stats.norm(mu * mu / 2.0, mu)
    return SingleRelease(
        name=f"gaussian pair (mu={mu:g})",
        cdf=lambda t: law.cdf(t), sf=lambda t: law.sf(t),
        quantiles=lambda m: (float(law.ppf(m)), float(law.isf(m))),
        sample=lambda n, rng: rng.normal(mu * mu / 2.0, mu, size=n),
        renyi=lambda orders: np.asarray(orders, dtype=np.float64) * mu * mu / 2.0,
    )


def discretisation_for(q: float, steps: int) -> float:
    """The grid step of the loss: 1e-3 up to 10 expected releases per example, finer beyond (as 1 / sqrt(q T)).
    Each release's loss is rounded by at most one step, so the composed loss moves by at most about
    q T h: 0.01 at q T = 10, 0.045 at q T = 200 (the bracket shows what it comes to)."""
    return 1e-3 * min(1.0, math.sqrt(10.0 / max(q * steps, 1e-12)))


def _check(q: float, steps: int, adjacency: str) -> None:
    if adjacency == ADD_REMOVE:
        raise refuse_add_remove(q, steps)
    if adjacency != REPLACE_INPUT:
        raise ValueError(f"adjacency={adjacency!r} is not allowed: choose one of {', '.join(ADJACENCIES)}")
    if not 0 < q <= 1:
        raise ValueError(f"sampling rate q={q!r} must be in (0, 1]")
    if q * steps > MAX_EXPECTED_RELEASES:
        raise NoFiniteEpsilon(
            f"q*T={q * steps:g} expected releases per example is more than the per-example accountant evaluates "
            f"({MAX_EXPECTED_RELEASES:g}): use a smaller q or T")


#: the most grid points one release's loss is spread over
MAX_GRID = 10_000


def _grid(single: SingleRelease, h: float) -> float:
    lo, hi = single.quantiles(TAIL_MASS)
    return max(h, (hi - lo) / MAX_GRID)


def _rounded_pmf(single: SingleRelease, h: float, pessimistic: bool) -> tuple[dict[int, float], float]:
    """The single-release loss on the grid h Z: rounded up (pessimistic: each mass moves to the grid point at or
    above it, the upper tail beyond the truncation to infinity) or down (optimistic: to the point at or below)."""
    lo, hi = single.quantiles(TAIL_MASS)
    k_lo, k_hi = math.floor(lo / h) - 1, math.ceil(hi / h) + 1
    ks = np.arange(k_lo, k_hi + 1)
    cdf = single.cdf(ks * h)
    mass = np.diff(cdf)  # mass in ((k-1) h, k h]
    upper_tail = float(single.sf(k_hi * h))
    if pessimistic:
        keys, mass[0] = ks[1:], mass[0] + cdf[0]
        infinity = upper_tail
    else:
        keys, mass[-1] = ks[:-1], mass[-1] + upper_tail
        infinity = 0.0
    keep = mass > 0
    return dict(zip(keys[keep].tolist(), mass[keep].tolist())), infinity


def per_example_pld(single: SingleRelease, q: float, steps: int, *, pessimistic: bool, h: float | None = None):
    """The dp_accounting privacy-loss distribution of T steps, each the mixture (1-q) [nothing] + q [one release].

    Both directions of the pair have the same loss law (the pairs here are symmetric), so the PLD is symmetric.
    """
    from dp_accounting.pld import privacy_loss_distribution as pld

    # a release whose loss spans more than MAX_GRID steps (a nearly noiseless one, whose epsilon is huge) is put on
    # a coarser grid: rounding up (down) to it is still a valid upper (lower) bound, only a looser one
    h = _grid(single, h or discretisation_for(q, steps))
    pmf, infinity = _rounded_pmf(single, h, pessimistic)
    step = {k: q * v for k, v in pmf.items()}
    step[0] = step.get(0, 0.0) + (1.0 - q)
    one = pld.PrivacyLossDistribution.create_from_rounded_probability(
        step, q * infinity, h, pessimistic_estimate=pessimistic)
    return one.self_compose(steps) if steps > 1 else one


@dataclass(frozen=True)
class Bracket:
    """A rigorous bracket: ``lower`` from the optimistic discretisation, ``upper`` from the pessimistic one."""

    lower: float
    upper: float

    def as_dict(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}_lower": self.lower, f"{prefix}_upper": self.upper}


def per_example_epsilon(single: SingleRelease, *, q: float, steps: int, delta: float, adjacency: str = REPLACE_INPUT,
                        h: float | None = None) -> Bracket:
    """[lower, upper] around the epsilon at ``delta`` of one example's own vectors over T Poisson steps."""
    _check(q, steps, adjacency)
    if release_probability(q, steps) <= delta:  # the total variation is at most that: (0, delta)-DP
        return Bracket(0.0, 0.0)
    eps = [max(0.0, float(per_example_pld(single, q, steps, pessimistic=p, h=h).get_epsilon_for_delta(delta)))
           for p in (False, True)]
    return Bracket(*eps)


def per_example_delta(single: SingleRelease, *, q: float, steps: int, epsilon: float, adjacency: str = REPLACE_INPUT,
                      h: float | None = None) -> Bracket:
    """[lower, upper] around the delta at ``epsilon`` of one example's own vectors over T Poisson steps."""
    _check(q, steps, adjacency)
    d = [float(per_example_pld(single, q, steps, pessimistic=p, h=h).get_delta_for_epsilon(epsilon))
         for p in (False, True)]
    return Bracket(*d)


def mixture_rdp(single_rdp: np.ndarray, orders: np.ndarray, q: float) -> np.ndarray:
    """The exact RDP of one step's mixture, given the single release's RDP e(lambda) at each order:

        rho(lambda) = log(1 + q (exp((lambda - 1) e(lambda)) - 1)) / (lambda - 1)    (>= q e(lambda): linear in q).

    The nothing-branch is shared by both outputs and disjoint from a release, so E_Q[(P/Q)^lambda] is
    (1 - q) + q exp((lambda - 1) e(lambda)). An upper bound on e gives an upper bound on rho."""
    lam = np.asarray(orders, dtype=np.float64)
    e = np.asarray(single_rdp, dtype=np.float64)
    with np.errstate(over="ignore"):
        x = (lam - 1.0) * e
        # log(1 + q (e^x - 1)) = log((1 - q) + q e^x), in log space for large x
        out = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + x) / (lam - 1.0)
    return np.where(np.isfinite(e), out, np.inf)


def monte_carlo_delta(single: SingleRelease, *, q: float, steps: int, epsilon: float, samples: int,
                      seed: int = 0) -> tuple[float, float]:
    """(estimate, standard error) of delta(epsilon) = E[(1 - exp(epsilon - S))_+], S the composed loss: K ~
    Binomial(T, q) releases, each loss drawn from ``single.sample``. Each term lies in [0, 1]."""
    rng = np.random.default_rng(seed)
    k = rng.binomial(steps, q, size=samples)
    draws = single.sample(int(k.sum()), rng)
    sums = np.add.reduceat(draws, np.r_[0, np.cumsum(k)[:-1]]) if draws.size else np.zeros(samples)
    sums = np.where(k > 0, sums, 0.0)  # reduceat gives the next draw for an empty slice
    with np.errstate(over="ignore"):
        terms = np.clip(-np.expm1(epsilon - sums), 0.0, None)
    return float(terms.mean()), float(terms.std(ddof=1) / math.sqrt(samples))


# --- calibration --------------------------------------------------------------------------------------------------

#: the range of Dirichlet's r the per-example calibration searches, in units of alpha (the exact loss has every
#: moment, so r may pass alpha; at 100 alpha a release is nearly noiseless)
R_RANGE = (1e-9, 100.0)
SIGMA_RANGE = (1e-3, 1e6)


#: the reported brackets use a grid this many times finer than the calibration's (1: the same grid; at the cpu
#: preset the paper's r then gives [3.909, 3.925], with 4 [3.915, 3.919] at four times the cost)
REPORT_REFINEMENT = 1


@functools.lru_cache(maxsize=512)
def dirichlet_vectors_epsilon(*, r: float, alpha: float, q: float, steps: int, delta: float) -> Bracket:
    """The per-example curve's epsilon of Dirichlet-softmax's vectors at (r, alpha): a bracket."""
    return per_example_epsilon(dirichlet_corner(r, alpha), q=q, steps=steps, delta=delta,
                               h=discretisation_for(q, steps) / REPORT_REFINEMENT)


@functools.lru_cache(maxsize=512)
def gaussian_vectors_epsilon(*, noise_multiplier: float, sensitivity: float, q: float, steps: int,
                             delta: float) -> Bracket:
    """The per-example curve's epsilon of a Gaussian release of clipped vectors (``sensitivity`` in units of C)."""
    return per_example_epsilon(gaussian_pair(sensitivity / noise_multiplier), q=q, steps=steps, delta=delta,
                               h=discretisation_for(q, steps) / REPORT_REFINEMENT)


def _upper_epsilon(single: SingleRelease, q: float, steps: int, delta: float, h: float) -> float:
    return max(0.0, float(per_example_pld(single, q, steps, pessimistic=True, h=h).get_epsilon_for_delta(delta)))


#: the Rényi orders of the fast upper bound that brackets a calibration (fractional near 1, where the Dirichlet
#: pair's divergence is finite at large r)
_ORDERS = np.unique(np.concatenate([1.0 + np.geomspace(1e-3, 1.0, 40), np.arange(2.0, 257.0)]))


def rdp_upper_epsilon(single: SingleRelease, *, q: float, steps: int, delta: float) -> float:
    """An upper bound on the per-example curve's epsilon from the exact Rényi divergence of the pair: the exact RDP
    of one step's mixture (:func:`mixture_rdp`), composed and converted (THEORY.md, "Rényi DP and its
    conversion"). Analytic, so a calibration can bracket its answer with it before the PLD refines it."""

    return rdp_to_epsilon(_ORDERS, steps * mixture_rdp(single.renyi(_ORDERS), _ORDERS, q), delta)[0]


def release_probability(q: float, steps: int) -> float:
    """P[an example is sampled at least once in T steps] = 1 - (1-q)^T."""
    return 1.0 if q >= 1 else -math.expm1(steps * math.log1p(-q))


def _calibrate(single_of: Callable[[float], SingleRelease], target: float, *, q: float, steps: int, delta: float,
               increasing: bool, low: float, high: float, start: float, what: str) -> float:
    """The noise whose per-example curve (pessimistic, on the run's grid) meets the target, nearest the crossing.

    The analytic RDP bound gives a safe point first; the PLD then walks from it towards less noise until the
    target is crossed, and Brent's method finds the crossing between (about ten PLD evaluations in all)."""
    if release_probability(q, steps) <= delta:
        raise NoFiniteEpsilon(f"at q={q:g}, T={steps} an example is released with probability "
                              f"{release_probability(q, steps):.3g} <= delta={delta:g}: epsilon is 0 at any noise, so "
                              "there is nothing to calibrate")
    h = discretisation_for(q, steps)
    seen: dict[float, float] = {}  # the search evaluates the ends of its bracket again: each PLD once

    def pld_eps(p: float) -> float:
        if p not in seen:
            seen[p] = _upper_epsilon(single_of(p), q, steps, delta, h)
        return seen[p]

    try:
        safe = calibrate_parameter(lambda p: rdp_upper_epsilon(single_of(p), q=q, steps=steps, delta=delta), target,
                                   low=low, high=high, increasing=increasing, what=what, start=start, rtol=1e-6)
    except InfeasibleTarget as err:
        if err.ceiling is not None:  # the bound meets the target even at the least noise: so does the exact curve
            raise
        # below the RDP conversion's floor (about 0.02 at delta 1e-5): the PLD alone decides, from its safe end
        # (where the grid's own pessimism, about q T h, is its floor)
        floor = pld_eps(low if increasing else high)
        if floor > target:
            raise InfeasibleTarget(target, floor, what) from None
        return calibrate_parameter(pld_eps, target, low=low, high=high, increasing=increasing, what=what,
                                   start=start, rtol=1e-4)
    end, step = (high, 1.5) if increasing else (low, 1 / 1.5)
    far = safe
    while True:
        far = min(far * step, end) if increasing else max(far * step, end)
        if pld_eps(far) > target:
            break
        if far == end:
            raise InfeasibleTarget(target, math.nan, what, ceiling=pld_eps(end))
        safe = far
    a, b = sorted((safe, far))
    return calibrate_parameter(pld_eps, target, low=a, high=b, increasing=increasing, what=what, rtol=1e-4,
                               xtol=1e-12)


@functools.lru_cache(maxsize=256)
def calibrate_dirichlet_r(*, epsilon: float, delta: float, q: float, steps: int, alpha: float,
                          adjacency: str = REPLACE_INPUT) -> float:
    """The largest r whose per-example curve (pessimistic) meets (epsilon, delta): one example's own vectors,
    for a fixed model, then spend at most the target."""
    _check(q, steps, adjacency)
    what = f"dirichlet_softmax's per-example curve at q={q:g}, T={steps}, alpha={alpha:g}, delta={delta:g}"
    return _calibrate(lambda r: dirichlet_corner(r, alpha), epsilon, q=q, steps=steps, delta=delta, increasing=True,
                      low=R_RANGE[0] * alpha, high=R_RANGE[1] * alpha, start=alpha * 0.05, what=what)


@functools.lru_cache(maxsize=256)
def calibrate_gaussian_sigma(*, epsilon: float, delta: float, q: float, steps: int, sensitivity: float = 2.0,
                             adjacency: str = REPLACE_INPUT) -> float:
    """The smallest noise multiplier whose per-example curve (pessimistic) meets (epsilon, delta)."""
    _check(q, steps, adjacency)
    what = f"the per-example Gaussian curve (sensitivity {sensitivity:g} C) at q={q:g}, T={steps}, delta={delta:g}"
    return _calibrate(lambda s: gaussian_pair(sensitivity / s), epsilon, q=q, steps=steps, delta=delta,
                      increasing=False, low=SIGMA_RANGE[0], high=SIGMA_RANGE[1], start=4.0, what=what)


__all__ = ["ADD_REMOVE", "ADJACENCIES", "Bracket", "InfeasibleTarget", "NoFiniteEpsilon", "REPLACE_INPUT",
           "SingleRelease", "calibrate_dirichlet_r", "calibrate_gaussian_sigma", "dirichlet_corner",
           "dirichlet_vectors_epsilon", "gaussian_pair", "gaussian_vectors_epsilon", "mixture_rdp",
           "monte_carlo_delta", "per_example_delta", "per_example_epsilon", "per_example_pld", "rdp_upper_epsilon",
           "refuse_add_remove", "release_probability"]
