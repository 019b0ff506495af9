"""The Poisson-subsampled Gaussian by its privacy-loss distribution (Google's dp_accounting). THEORY.md, "The
subsampled Gaussian".

The PLD of one step (sensitivity 1, noise sigma, Poisson rate q; add/remove one example, both directions) is built by
connect-the-dots (Doroshenko et al. 2022) on a grid of width ``VALUE_INTERVAL`` in the privacy loss, *pessimistically*:
every discretised distribution dominates the true one, so the epsilon read off the T-fold composition is an upper
bound on the true epsilon at that delta (mass cut at the tails, below exp(-50), is counted as infinite loss, i.e. in
delta). The discretisation costs a little tightness, never soundness: at the presets' budgets the grid of 1e-3 gives
an epsilon about 3e-3 above a grid ten times finer at eps 1 (under 1% wherever tested; ``discretisation_gap``
measures it at any point).

The calibration starts from the RDP sigma (PLD's epsilon is never above RDP's at the same sigma, tested on a grid), so
it needs only a few PLD evaluations; the answer is on the safe side like every calibration of the suite.
"""

from __future__ import annotations

import functools
import math
from importlib.metadata import version

from inputdp.core.claims import ADD_REMOVE, ZERO_OUT

from .calibration import InfeasibleTarget, calibrate_parameter
from .events import VALUE_INTERVAL, Release, neighbouring, subsampled_gaussian_steps
from .gaussian_rdp import MAX_SIGMA, MIN_SIGMA, gaussian_noise_multiplier_rdp

#: the most steps the PLD is composed over (beyond, its support and time grow without a useful answer: use rdp)
MAX_STEPS = 10**5
#: the relative tolerance on sigma of the calibration (the answer still meets the target exactly)
SIGMA_RTOL = 2e-4


#: what computed it, for the claim and the run's identity
DESCRIPTION = (f"privacy-loss distribution (dp_accounting, connect-the-dots, pessimistic, grid {VALUE_INTERVAL:g}, "
               "add/remove one example)")
#: the same under one input replaced (dp_accounting's REPLACE_ONE: each example's contribution of norm <= C, so the
#: two neighbours' sums differ by at most 2C)
DESCRIPTION_REPLACE = (f"privacy-loss distribution (dp_accounting, connect-the-dots, pessimistic, grid "
                       f"{VALUE_INTERVAL:g}, replace one example: the clipped difference 2C)")


#: the same under zero-out (dp_accounting's REPLACE_SPECIAL: one example's contribution of norm <= C against the null
#: example's 0, the pair add/remove's is)
DESCRIPTION_ZERO_OUT = (f"privacy-loss distribution (dp_accounting, connect-the-dots, pessimistic, grid "
                        f"{VALUE_INTERVAL:g}, zero-out: one example against the null example, the difference C)")


@functools.lru_cache(maxsize=1024)
def gaussian_epsilon_pld(*, noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                         interval: float = VALUE_INTERVAL, relation: str = ADD_REMOVE,
                         releases: tuple[float, int] = (0.0, 0)) -> float:
    """An upper bound on epsilon at ``delta`` of T Poisson-subsampled Gaussian steps of noise ``noise_multiplier``
    (in units of the clipping norm C), from the pessimistic PLD on a grid of ``interval``: ``add_remove`` (one example
    added or removed, sensitivity C), ``zero_out`` (one example against the null example, whose contribution is 0: the
    same pair) or ``replace_input`` (one example's contribution replaced by another of norm <= C: mixtures
    q N(-C) + (1-q) N(0) against q N(C) + (1-q) N(0), the difference 2C).

    ``releases`` = (sigma_r, k): k Gaussian releases of a sum of per-example vectors clipped to norm c, each with
    noise sigma_r c, made once on the whole data (unsubsampled) and composed with the steps; under the same relation
    (the difference c, or 2c where one input is replaced). DP-SGD's privately estimated normalisation statistics.

    The PLD is the release's own event composed by dp_accounting's PLD accountant (events.Release.epsilon): one
    construction, the one the claimed curve and the audits read too."""
    release_sigma, count = float(releases[0]), int(releases[1])
    stepping = steps > 0 and sampling_rate > 0
    if (count > 0 and release_sigma <= 0) or (stepping and noise_multiplier <= 0):
        return math.inf
    if count <= 0 and not stepping:
        return 0.0
    event = subsampled_gaussian_steps(sigma=float(noise_multiplier), sampling_rate=float(sampling_rate),
                                      steps=int(steps) if stepping else 0, releases=(release_sigma, count))
    return Release(event, relation).epsilon(float(delta), interval=interval)


def discretisation_gap(*, noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                       relation: str = ADD_REMOVE) -> float:
    """How much the grid costs at this point: epsilon on the suite's grid minus epsilon on a grid ten times finer
    (both upper bounds; the true epsilon is below the smaller)."""
    kw = {"noise_multiplier": noise_multiplier, "sampling_rate": sampling_rate, "steps": steps, "delta": delta,
          "relation": relation}
    return gaussian_epsilon_pld(**kw) - gaussian_epsilon_pld(**kw, interval=VALUE_INTERVAL / 10)


def gaussian_noise_multiplier_pld(*, epsilon: float, delta: float, sampling_rate: float, steps: int,
                                  relation: str = ADD_REMOVE, releases: tuple[float, int] = (0.0, 0)) -> float:
    """The smallest sigma (to ``SIGMA_RTOL``) whose PLD epsilon (with ``releases`` composed) is at most ``epsilon``;
    always on the safe side."""
    neighbouring(relation)

    def eps_of(sigma: float) -> float:
        return gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=sampling_rate, steps=steps, delta=delta,
                                    relation=relation, releases=releases)

    if releases[1] > 0:  # the releases take part of the budget: the steps need more noise than RDP's bracket says
        alone = gaussian_epsilon_pld(noise_multiplier=1.0, sampling_rate=0.0, steps=0, delta=delta,
                                     relation=relation, releases=releases)
        what = (f"the subsampled Gaussian (pld, {relation}) at q={sampling_rate:g}, T={steps}, delta={delta:g} after "
                f"{releases[1]} Gaussian release(s) of noise {releases[0]:g}")
        if alone >= epsilon:
            raise InfeasibleTarget(epsilon, alone, what)
        return calibrate_parameter(eps_of, epsilon, low=MIN_SIGMA, high=MAX_SIGMA, increasing=False, what=what,
                                   start=1.5 * gaussian_noise_multiplier_rdp(epsilon=epsilon, delta=delta,
                                                                            sampling_rate=sampling_rate, steps=steps),
                                   xtol=1e-6, rtol=SIGMA_RTOL)

    what = f"the subsampled Gaussian (pld, {relation}) at q={sampling_rate:g}, T={steps}, delta={delta:g}"
    # RDP's sigma (add/remove) is safe for PLD's add/remove (never a larger epsilon at the same sigma), and PLD's lies
    # within a few tens of percent below it at useful budgets: a bracket that saves the walk's evaluations at small
    # sigma (the costly ones). One input replaced needs between once and twice the add/remove noise (twice at q = 1,
    # where the mixtures are two Gaussians 2C apart), so its bracket is (0.8, 2) x RDP's; where a bracket does not
    # straddle, the search walks from it. A target RDP cannot meet within sigma <= 1e6 is refused with RDP's floor
    # (an upper bound on PLD's): PLD could reach some of them only where delta alone covers the distance (epsilon 0
    # at sigma ~ 4e5 for the cpu preset's (q, T)), which is no training.
    rdp = gaussian_noise_multiplier_rdp(epsilon=epsilon, delta=delta, sampling_rate=sampling_rate, steps=steps)
    # zero-out's dominating pair is add/remove's (the null example adds 0): the same bracket and floor
    like_add_remove = relation in (ADD_REMOVE, ZERO_OUT)
    start, bracket = (rdp, (0.8 * rdp, rdp)) if like_add_remove else (1.5 * rdp, (0.8 * rdp, 2.0 * rdp))
    if like_add_remove and eps_of(rdp) > epsilon:  # tiny targets: the grid's pessimism exceeds RDP's slack
        err = InfeasibleTarget(epsilon, eps_of(rdp), what)
        err.args = (f"epsilon={epsilon:g} is too small for the PLD's grid ({VALUE_INTERVAL:g}) at q={sampling_rate:g}, "
                    f"T={steps}, delta={delta:g}: use accountant=rdp",)
        raise err
    return calibrate_parameter(eps_of, epsilon, low=MIN_SIGMA, high=MAX_SIGMA, increasing=False, what=what,
                               start=start, bracket=bracket, xtol=1e-6, rtol=SIGMA_RTOL)


@functools.cache  # read once per process: every claim and calibration names it
def library_version() -> str:
    """dp_accounting's version: part of the accounting's identity (a changed library reruns, never reuses)."""

    return version("dp-accounting")
