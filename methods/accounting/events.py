"""What a method's training releases, as a value an accountant composes: a dp_accounting ``DpEvent`` and the
neighbouring relation the library is asked about (THEORY.md, "Neighbouring relations").

A method that declares its release (``Method.release``) can have its claim recomputed by dp_accounting's own
accountants, independently of the method's calibration code (the method contract tests do, for every method that
declares one). ``relation`` is the pair the library reads the event under: DP-SGD's steps under its own relation (the
library forms replace_input's subsampled mixtures itself); a release whose noise is already in units of its
relation's own sensitivity (DP least squares: sqrt(2) C^2 and 2C where an input is replaced) under add/remove, the
pair "the statistic moves by at most its sensitivity".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .pld import VALUE_INTERVAL, _neighbouring


@dataclass(frozen=True)
class Release:
    """A dp_accounting event and the relation (the suite's key: add_remove, zero_out, replace_input) it is read under."""

    event: Any  # dp_accounting.DpEvent
    relation: str

    def epsilon(self, delta: float, *, interval: float = VALUE_INTERVAL) -> float:
        """Epsilon at ``delta`` from dp_accounting's PLD accountant (pessimistic, connect-the-dots) composing the
        event under the relation."""
        from dp_accounting.pld import pld_privacy_accountant

        accountant = pld_privacy_accountant.PLDAccountant(neighboring_relation=_neighbouring(self.relation),
                                                          value_discretization_interval=interval)
        return float(accountant.compose(self.event).get_epsilon(delta))


def subsampled_gaussian_steps(*, sigma: float, sampling_rate: float, steps: int,
                              releases: tuple[float, int] = (0.0, 0)) -> Any:
    """DP-SGD's release: ``releases`` (sigma_r, k) unsubsampled Gaussians, then T Poisson-subsampled Gaussian steps."""
    import dp_accounting

    step = dp_accounting.PoissonSampledDpEvent(sampling_rate, dp_accounting.GaussianDpEvent(sigma))
    parts = [dp_accounting.GaussianDpEvent(releases[0])] * releases[1]
    return dp_accounting.ComposedDpEvent([*parts, dp_accounting.SelfComposedDpEvent(step, steps)])


def gaussian_releases(*sigmas: float) -> Any:
    """One Gaussian release per noise multiplier (each in units of its own sensitivity), composed."""
    import dp_accounting

    return dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(s) for s in sigmas])
