"""The non-private baseline: cross-entropy on the harness's Poisson batches, no noise, no guarantee."""

from __future__ import annotations

import math

from inputdp.core.config import PrivacySpec

from . import NONPRIVATE_INFO
from .base import Calibration, Method, PrivacyClaim
from .noise import NO_NOISE


class NonPrivate(Method):
    name = "nonprivate"
    capabilities = NONPRIVATE_INFO.capabilities  # declared with its registry entry (methods/__init__.py)

    def noise_for(self, spec: PrivacySpec) -> Calibration:
        return Calibration(noise={}, epsilon=math.inf)

    def claim(self) -> PrivacyClaim:
        spec, _ = self._need_calibration()
        return PrivacyClaim(
            mechanism="none", parameters={}, sampling=f"poisson(q={spec.sampling_rate:g})", steps=spec.steps,
            epsilon=math.inf, delta=spec.delta, protects="nothing", guarantee=False, noise=NO_NOISE,
            scope="no guarantee: the reference for accuracy and speed at the same (q, T)",
        )

    def epsilon_spent(self, steps_done: int) -> float:
        return math.inf if steps_done > 0 else 0.0
