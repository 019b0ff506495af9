"""The non-private baseline: cross-entropy on the harness's Poisson batches, no noise, no guarantee."""

from __future__ import annotations

from inputdp.core.config import PrivacySpec

from . import NONPRIVATE_INFO
from .accounting.releases import NonPrivate as NoNoise
from .base import ClaimText, Method
from .noise import NO_NOISE


class NonPrivate(Method):
    name = "nonprivate"
    capabilities = NONPRIVATE_INFO.capabilities  # declared with its registry entry (methods/__init__.py)

    def release_family(self, spec: PrivacySpec) -> NoNoise:
        """Every step's gradient of the private batch, without noise: no finite epsilon."""
        return NoNoise(spec.steps, spec.sampling_rate)

    def claim_text(self) -> ClaimText:
        return ClaimText(mechanism="none", noise=NO_NOISE, protects="nothing",
                         scope="no guarantee: the reference for accuracy and speed at the same (q, T)")
