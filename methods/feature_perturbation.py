"""Feature perturbation: each example's clipped features of a fixed data-independent map (norm <= C, a constant
coordinate appended) released once with Gaussian noise N(0, (sigma 2C)^2 I), and a linear classifier fitted on the
noisy copies and the public labels alone (ridge on one-hot targets). The sound counterpart of the penultimate-layer
method: the map is fixed, so the release is a function of one input alone, each example released once, and the model
is a post-processing of the releases; the guarantee holds even locally (each noisy vector is (epsilon, delta)-DP on
its own). One input replaced (its label and membership public) only: under add/remove one more example is one more
vector. THEORY.md, "Sound input-private methods"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from inputdp.core.claims import REPLACE_INPUT
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from . import FEATURE_PERTURBATION_INFO, noise
from .accounting.releases import GaussianReleases
from .base import AUDIT_THRESHOLDS, Calibration, ClaimText, FitContext, FitOutput, Method, ReleaseTrials
from .features import check_clip, clipped_features, feature_map, set_linear_head


class FeaturePerturbation(Method):
    name = "feature_perturbation"
    option_defaults = {"clip": 1.0, "adjacency": REPLACE_INPUT, "ridge": 1.0, "secure_mode": False}
    capabilities = FEATURE_PERTURBATION_INFO.capabilities  # declared with its registry entry (methods/__init__.py)

    def __init__(self, **options: Any):
        super().__init__(**options)
        o = self.options
        check_clip("clip", o["clip"])
        if o["adjacency"] != REPLACE_INPUT:
            raise ConfigError(f"adjacency={o['adjacency']!r} is not allowed for {self.name}: each example's noisy "
                              "vector is released beside its label, so one example more is one vector more "
                              "(add/remove: membership shows) and its label is in the clear (zero-out hides it); use "
                              "adjacency=replace_input")
        ridge = o["ridge"]
        if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not 0 <= ridge < float("inf"):
            raise ConfigError(f"ridge={ridge!r} is not allowed: lambda in units of C^2, a finite number >= 0")
        noise.check_secure_mode(o["secure_mode"])

    def release_family(self, spec: PrivacySpec) -> GaussianReleases:
        """One Gaussian release per example of its clipped features, sensitivity 2C (x replaced by x', both of norm
        <= C), noise in units of it; the examples are disjoint, so the whole release's epsilon is one's (parallel
        composition)."""
        return GaussianReleases((1.0,), REPLACE_INPUT, "sensitivity 2C, one release per example")

    def claim_text(self) -> ClaimText:
        return ClaimText(
            mechanism="gaussian_feature_release", parameters={"clip": self.options["clip"]},
            noise=noise.describe(self.options["secure_mode"]),
            scope=("the released model and everything computed from it: each example's clipped features of a fixed "
                   "data-independent map released once with Gaussian noise, the classifier fitted on the noisy "
                   "copies and the public labels alone (post-processing); the (q, T) of the matched spec are not used"))

    def noisy_features(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The release: clipped rows ``x`` plus N(0, (sigma 2C)^2) per coordinate."""
        std = self.noise() * 2.0 * float(self.options["clip"])
        z = noise.standard_normal(x.shape, generator, secure=self.options["secure_mode"], dtype=x.dtype)
        return x + z.to(x.device) * std

    def release_trials(self, claimed: Calibration, *, trials: int, seed: int,
                       progress: Callable[[str], None] | None = None) -> list[ReleaseTrials]:
        """``noisy_features`` on x = C e_1 (one world) and its replacement x' = -C e_1 (the other), a row a trial;
        scores (r + C) / 2C: N(0, sigma^2) and N(1, sigma^2) under the claim."""
        clip = float(self.options["clip"])
        g = torch.Generator().manual_seed(seed)
        x = torch.full((trials, 1), clip)
        r_in = (self.noisy_features(x, g)[:, 0] + clip) / (2 * clip)
        r_out = (self.noisy_features(-x, g)[:, 0] + clip) / (2 * clip)
        from dp_accounting import dp_event

        # what the claim composes: one Gaussian release of sensitivity 2C (folded into the noise multiplier); the
        # pair C e_1 / -C e_1 reaches it: shift 1
        return [ReleaseTrials(release="one example's noisy features", relation=REPLACE_INPUT,
                              scores_in=r_in.numpy(), scores_out=r_out.numpy(),
                              event=dp_event.GaussianDpEvent(1.0), shift=1.0, thresholds=AUDIT_THRESHOLDS)]

    def fit(self, context: FitContext) -> FitOutput:
        data = context.data
        model = context.new_model()
        clip = float(self.options["clip"])
        x = clipped_features(feature_map(model), data.x_train, clip)
        released = self.noisy_features(x, noise.torch_generator(context.seed, secure=self.options["secure_mode"]))
        del x  # nothing below reads the clean features
        context.report({}, phase="release")
        y = torch.nn.functional.one_hot(data.y_train, data.info.num_classes).to(released.dtype)
        eye = torch.eye(released.shape[1], dtype=released.dtype, device=released.device)
        weights = torch.linalg.lstsq(released.T @ released + float(self.options["ridge"]) * clip**2 * eye,
                                     released.T @ y).solution
        context.report({}, phase="fit")
        return FitOutput(model=set_linear_head(model, weights).eval(), x_eval=data.x_test, y_eval=data.y_test,
                         steps=1, metrics={"feature_dim": float(released.shape[1])})
