"""What a method's training releases, as a value an accountant composes: a dp_accounting ``DpEvent`` and the
neighbouring relation the library is asked about (THEORY.md, "Neighbouring relations"); the noise scaling of an
event (``scaled_event``: a mechanism audit's release family, releases.ScaledEvent) and mu-GDP's conversions.

A method that declares its release (``Method.release``) can have its claim recomputed by dp_accounting's own
accountants, independently of the method's calibration code (the method contract tests do, for every method that
declares one). ``relation`` is the pair the library reads the event under: DP-SGD's steps under its own relation (the
library forms replace_input's subsampled mixtures itself); a release whose noise is already in units of its
relation's own sensitivity (DP least squares: sqrt(2) C^2 and 2C where an input is replaced) under add/remove, the
pair "the statistic moves by at most its sensitivity".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from scipy import optimize

from inputdp.core.claims import ADD_REMOVE, RELATIONS, REPLACE_INPUT, ZERO_OUT

from .one_release import gaussian_release_delta
from .trade_off import TradeOffCurve, gaussian_curve, profile_curve

#: the width of the privacy-loss grid (dp_accounting's ``value_discretization_interval``) of every PLD the suite reads
VALUE_INTERVAL = 1e-3


def neighbouring(relation: str):
    """dp_accounting's NeighboringRelation of the suite's relation key (one line otherwise)."""
    from dp_accounting import NeighboringRelation

    if relation == ADD_REMOVE:
        return NeighboringRelation.ADD_OR_REMOVE_ONE
    if relation == REPLACE_INPUT:
        return NeighboringRelation.REPLACE_ONE
    if relation == ZERO_OUT:
        return NeighboringRelation.REPLACE_SPECIAL
    raise ValueError(f"relation={relation!r} is not allowed: choose one of {', '.join(RELATIONS)}")


#: the source named where unsampled Gaussians compose exactly (Release.exact_mu)
EXACT_GAUSSIANS = "exact composition of Gaussians (Dong, Roth & Su 2022)"

#: the privacy-loss grid of a mechanism audit's event where it is not Gaussians alone (accountants.PLD's search on
#: it; one on a grid ten times coarser brackets it first)
PLD_INTERVAL = 1e-4


@dataclass(frozen=True)
class Release:
    """A dp_accounting event and the relation (the suite's key: add_remove, zero_out, replace_input) it is read under."""

    event: Any  # dp_accounting.DpEvent
    relation: str

    def epsilon(self, delta: float, *, interval: float = VALUE_INTERVAL) -> float:
        """Epsilon at ``delta`` from dp_accounting's PLD accountant (pessimistic, connect-the-dots) composing the
        event under the relation (inf for an event the library calls non-private)."""
        return float(self._accountant(interval).get_epsilon(delta))

    def trade_off(self, *, interval: float = VALUE_INTERVAL) -> TradeOffCurve:
        """The claimed trade-off curve of the release (methods/accounting/trade_off.py): exact mu-GDP where the event
        is unsampled Gaussians read under add/remove (their exact composition), else from dp_accounting's
        pessimistic PLD's privacy profile (both directions), read on ``trade_off.EPSILON_GRID``: at or below the
        exact curve, never above; no curve at all (0) for an event the library calls non-private."""
        mu = self.exact_mu()
        if mu is not None:
            return gaussian_curve(mu, EXACT_GAUSSIANS)
        accountant = self._accountant(interval)
        source = f"dp_accounting PLD (pessimistic, grid {interval:g}, {self.relation})"
        if accountant._contains_non_dp_event:  # the library's own flag: no epsilon at any delta
            return profile_curve(lambda e: [1.0] * len(e), source)
        return profile_curve(accountant._pld.get_delta_for_epsilon, source)

    def exact_mu(self) -> float | None:
        """mu of the event's exact mu-GDP where it is unsampled Gaussians alone (each noise > 0) read under
        add/remove's pair (zero-out's too): they compose to mu = sqrt(sum_i n_i / s_i^2) (Dong, Roth & Su 2022,
        Corollary 3.3); None otherwise (the PLD reads it)."""
        gaussians = gaussians_of(self.event) if self.relation in (ADD_REMOVE, ZERO_OUT) else None
        if gaussians is None or not all(s > 0 for s, _ in gaussians):
            return None
        return math.sqrt(sum(n / s**2 for s, n in gaussians))

    def _accountant(self, interval: float):
        """dp_accounting's PLD accountant having composed the event under the relation (pessimistic), once per
        (event, relation, grid): a release's epsilon and its curve read the same distribution."""
        key = (repr(self.event), self.relation, interval)
        if key not in _PLDS:
            from dp_accounting.pld import pld_privacy_accountant

            accountant = pld_privacy_accountant.PLDAccountant(neighboring_relation=neighbouring(self.relation),
                                                              value_discretization_interval=interval)
            if len(_PLDS) >= 64:
                _PLDS.pop(next(iter(_PLDS)))
            _PLDS[key] = accountant.compose(self.event)  # its composed distribution: ``_pld`` (no getter)
        return _PLDS[key]


#: the last composed PLDs, by (repr of the event, relation, grid): events hold lists, so they are keyed by their repr
_PLDS: dict[tuple[str, str, float], object] = {}


def subsampled_gaussian_steps(*, sigma: float, sampling_rate: float, steps: int,
                              releases: tuple[float, int] = (0.0, 0)) -> Any:
    """DP-SGD's release: ``releases`` (sigma_r, k) unsubsampled Gaussians, then T Poisson-subsampled Gaussian steps
    (no part where its count is 0: the library composes no event zero times)."""
    import dp_accounting

    parts = [dp_accounting.GaussianDpEvent(releases[0])] * int(releases[1])
    if steps > 0:
        step = dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(sigma))
        parts.append(dp_accounting.SelfComposedDpEvent(step, int(steps)))
    return dp_accounting.ComposedDpEvent(parts)


def gaussian_releases(*sigmas: float) -> Any:
    """One Gaussian release per noise multiplier (each in units of its own sensitivity), composed."""
    import dp_accounting

    return dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s) for s in sigmas])


# --- mu-GDP, and an event's noise scaled (a mechanism audit's release family) -------------------------------
def gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-GDP: one Gaussian release of sensitivity 1 and noise 1/mu (Dong, Roth & Su 2022,
    Corollary 2.13; the project's exact formula, methods/accounting/one_release.py)."""
    return 0.0 if mu <= 0 else gaussian_release_delta(1.0 / mu, epsilon)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest mu whose mu-GDP is (epsilon, delta)-DP (delta(epsilon) grows with mu: the root of
    gdp_delta(mu, epsilon) = delta)."""
    high = 1.0
    while gdp_delta(high, epsilon) < delta:
        high *= 2.0
    return float(optimize.brentq(lambda m: gdp_delta(m, epsilon) - delta, 1e-12, high, xtol=1e-14, rtol=1e-12))


def gaussians_of(event, count: int = 1) -> list[tuple[float, int]] | None:
    """(noise multiplier, times) of each Gaussian of an event made of unsampled Gaussians composed; None otherwise."""
    from dp_accounting import dp_event

    if isinstance(event, dp_event.GaussianDpEvent):
        return [(float(event.noise_multiplier), count)]
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return gaussians_of(event.event, count * int(event.count))
    if isinstance(event, dp_event.ComposedDpEvent):
        parts = [gaussians_of(e, count) for e in event.events]
        return None if any(p is None for p in parts) else [g for p in parts for g in p]
    return None


def scaled_event(event, scale: float):
    """``event`` with every Gaussian's noise multiplier times ``scale`` (its sampling and composition kept)."""
    from dp_accounting import dp_event

    if isinstance(event, dp_event.GaussianDpEvent):
        return dp_event.GaussianDpEvent(event.noise_multiplier * scale)
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        return dp_event.PoissonSampledDpEvent(event.sampling_probability, scaled_event(event.event, scale))
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(scaled_event(event.event, scale), event.count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([scaled_event(e, scale) for e in event.events])
    raise ValueError(f"event {event!r} is not allowed here: Gaussian, Poisson-sampled, self-composed "
                     "or composed events only")


def pld_epsilon(event, *, delta: float, relation: str, interval: float = PLD_INTERVAL) -> float:
    """epsilon at ``delta`` of ``event`` under ``relation`` by dp_accounting's PLD accountant (:meth:`Release.epsilon`)
    on a grid of ``interval``."""
    return Release(event, relation).epsilon(delta, interval=interval)
