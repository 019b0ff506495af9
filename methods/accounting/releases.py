"""What a method's training releases, but its noise: the release *families* the accountants read (accountants.py).

A method declares one (``Method.release_family(spec)``); the accountant it names computes the family's epsilon at a
noise and delta, the least noise that meets a target (the one calibration), and its trade-off curve; the claim, the
ledger and the audits read the same value. ``at(noise)`` is the release at that noise as a dp_accounting event
(``events.Release``: an event and the relation the library reads it under) wherever an event of the library describes
it, else None; ``with_steps(k)`` is what the first k of its steps release (the ledger's), and ``complete`` says
whether the family is everything the training releases (False for the per-example vectors: every update also moves
the model through the private input without noise, so their epsilon bounds what training releases from below).

THEORY.md, "What each guarantee covers" and "Calibration".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from inputdp.core.claims import ADD_REMOVE, REPLACE_INPUT

from .events import Release, gaussian_releases, scaled_event, subsampled_gaussian_steps
from .per_example import dirichlet_corner, gaussian_pair


@dataclass(frozen=True)
class GaussianSteps:
    """DP-SGD's release, and what the papers' accountants read the penultimate Gaussian's as: ``releases`` (sigma_r,
    k) unsubsampled Gaussian releases (the private normalisation statistics), then ``steps`` Poisson-subsampled
    Gaussian steps at rate ``sampling_rate``, under ``relation``; the noise is the steps' noise multiplier."""

    sampling_rate: float
    steps: int
    relation: str = ADD_REMOVE
    releases: tuple[float, int] = (0.0, 0)

    noise_name: ClassVar[str] = "noise_multiplier"
    complete: ClassVar[bool] = True

    def at(self, noise_multiplier: float) -> Release:
        """The release at this noise, as a value dp_accounting composes."""
        return Release(subsampled_gaussian_steps(sigma=noise_multiplier, sampling_rate=self.sampling_rate,
                                                 steps=self.steps, releases=self.releases), self.relation)

    def with_steps(self, steps: int) -> GaussianSteps:
        return replace(self, steps=max(int(steps), 0))

    @property
    def sampling(self) -> str:
        return f"poisson(q={self.sampling_rate:g})"

    @property
    def claim_steps(self) -> int:
        return self.steps

    def empty(self) -> bool:
        return self.steps <= 0 and self.releases[1] == 0


@dataclass(frozen=True)
class GaussianReleases:
    """Unsampled Gaussian releases made once (DP least squares' two statistics, feature perturbation's one vector
    per example), each in units of its own sensitivity under the claim's ``relation`` (so the library reads them
    under add/remove's "moves by at most its sensitivity"). At noise s they compose to one Gaussian of noise s
    exactly (Dong, Roth & Su 2022, Corollary 3.3): release i spends the share ``shares[i]`` of 1 / s^2, its noise
    multiplier s / sqrt(share). ``what`` names them for the claim's accountant."""

    shares: tuple[float, ...]
    relation: str
    what: str

    noise_name: ClassVar[str] = "noise_multiplier"
    complete: ClassVar[bool] = True

    def multipliers(self, noise: float) -> tuple[float, ...]:
        return tuple(noise / math.sqrt(share) for share in self.shares)

    def at(self, noise: float) -> Release:
        return Release(gaussian_releases(*self.multipliers(noise)), ADD_REMOVE)

    def with_steps(self, steps: int) -> GaussianReleases:
        """All of them once anything is done; none before."""
        return self if steps > 0 else replace(self, shares=())

    sampling: ClassVar[str] = "none (every example, once)"
    claim_steps: ClassVar[int] = 1

    def empty(self) -> bool:
        return not self.shares


@dataclass(frozen=True)
class PateQueries:
    """PATE's data-independent release: ``queries`` GNMax answers (the histogram moves by sqrt 2 for one vote: a
    Gaussian of noise multiplier sigma2 / sqrt 2) and, with ``sigma1``, as many threshold checks (sensitivity 1).
    The noise is the common scale of the two sigmas (their ratio kept)."""

    queries: int
    sigma2: float
    sigma1: float | None = None
    #: False (option ``calibrate=false``): the sigmas as given, scale 1, refused if they do not meet the target
    calibrated: bool = True

    noise_name: ClassVar[str] = "scale"
    complete: ClassVar[bool] = True
    relation: ClassVar[str] = ADD_REMOVE

    def at(self, scale: float) -> Release:
        from dp_accounting import dp_event

        parts = [dp_event.GaussianDpEvent(self.sigma2 * scale / math.sqrt(2.0))]
        if self.sigma1 is not None:
            parts.append(dp_event.GaussianDpEvent(self.sigma1 * scale))
        return Release(dp_event.SelfComposedDpEvent(dp_event.ComposedDpEvent(parts), int(self.queries)), ADD_REMOVE)

    def sigmas(self, scale: float) -> dict[str, float]:
        out = {"sigma2": self.sigma2 * scale}
        if self.sigma1 is not None:
            out["sigma1"] = self.sigma1 * scale
        return out

    def with_steps(self, steps: int) -> PateQueries:
        return replace(self, queries=max(int(steps), 0))

    sampling: ClassVar[str] = "none"

    @property
    def claim_steps(self) -> int:
        return self.queries

    def empty(self) -> bool:
        return self.queries <= 0


@dataclass(frozen=True)
class PerExampleVectors:
    """One noisy vector per sampled example (Dirichlet-softmax's p~, the penultimate Gaussian's h~), ``steps``
    Poisson steps at ``sampling_rate``, one input replaced (label and membership public): the single release is the
    Dirichlet corner pair at concentration r (``kind`` "dirichlet", with ``alpha``) or a Gaussian of ``sensitivity``
    C at noise multiplier sigma ("gaussian"). ``grid_steps``: the T whose grid the per-example curve is computed on
    (the run's, also for the ledger's prefixes). No library event describes it."""

    kind: str
    sampling_rate: float
    steps: int
    grid_steps: int
    alpha: float = 0.0
    sensitivity: float = 2.0

    complete: ClassVar[bool] = False
    relation: ClassVar[str] = REPLACE_INPUT

    @property
    def noise_name(self) -> str:
        return "r" if self.kind == "dirichlet" else "noise_multiplier"

    def at(self, noise: float) -> Any:
        return None

    def single(self, noise: float):
        """The single release's worst pair (per_example.py)."""
        if self.kind == "dirichlet":
            return dirichlet_corner(noise, self.alpha)
        return gaussian_pair(self.sensitivity / noise)

    def with_steps(self, steps: int) -> PerExampleVectors:
        return replace(self, steps=max(int(steps), 0))

    @property
    def sampling(self) -> str:
        return f"poisson(q={self.sampling_rate:g})"

    @property
    def claim_steps(self) -> int:
        return self.steps

    def empty(self) -> bool:
        return self.steps <= 0


@dataclass(frozen=True)
class NonPrivate:
    """The private data released without noise (the non-private reference) over ``steps`` steps: no finite epsilon
    once a step is taken."""

    steps: int
    sampling_rate: float = 0.0

    noise_name: ClassVar[str] = ""
    complete: ClassVar[bool] = True
    relation: ClassVar[str] = ""

    @property
    def sampling(self) -> str:
        return f"poisson(q={self.sampling_rate:g})"

    @property
    def claim_steps(self) -> int:
        return self.steps

    def at(self, noise: float = 0.0) -> Any:
        return None

    def with_steps(self, steps: int) -> NonPrivate:
        return replace(self, steps=max(int(steps), 0))

    def empty(self) -> bool:
        return self.steps <= 0


@dataclass(frozen=True)
class ScaledEvent:
    """Any release a dp_accounting event describes, read under ``relation``, its every Gaussian's noise multiplier
    times the noise ``s`` (its sampling and composition kept; s = 1 is the event as given): what a mechanism audit's
    trials release (benchmarks/audits/mechanism.py), whose least allowed s the accountant computes."""

    event: Any
    relation: str = ADD_REMOVE

    noise_name: ClassVar[str] = ""
    complete: ClassVar[bool] = True

    def at(self, scale: float) -> Release:
        return Release(scaled_event(self.event, scale), self.relation)

    def key(self) -> tuple[str, str]:
        return repr(self.event), self.relation

    def empty(self) -> bool:
        return False
