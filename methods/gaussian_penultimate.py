"""Gaussian noise at the penultimate layer: our reading of Monir & Ghinita (2024, DaWaK).

What is known of their method (THEORY.md, "Gaussian noise at the penultimate layer"; the paper itself was not
available to us): noise is injected
into the penultimate layer "similar to DP-SGD", with per-sample clipping, and its variance grows with the
layer's width. The exact reading implemented here:

1. h = features(x) in R^k, the penultimate activations of each example of the Poisson batch;
2. per-example clipping to L2 norm C: h_c = h * min(1, C / ||h||_2);
3. release h~ = h_c + N(0, sigma^2 C^2 I_k) (independent noise on each of the k coordinates);
4. logits = head(h~); loss = mean cross-entropy with the public label; one optimizer step. No noise at evaluation.

Accounting: each step is a Poisson-subsampled Gaussian mechanism with L2 sensitivity C (an example's
clipped feature vector present or absent, the same add/remove convention Opacus uses for DP-SGD), so sigma
comes from the same subsampled-Gaussian accountant and calibration as DP-SGD for the matched (epsilon, delta, q, T).
The width dependence is
the point of the comparison: the noise vector's norm is about sigma*C*sqrt(k) against a signal of norm <= C,
so the signal-to-noise ratio falls as 1/sqrt(k).

Scope: the guarantee covers the noisy feature vectors h~ released during training. The feature extractor's
parameters are updated by back-propagating through the clean network at the private input, unclipped, so
the trained parameters are not covered by it: the audit measures what they leak.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .base import PrivacyClaim, TrainingSetup
from .gaussian_accounting import SubsampledGaussianMethod


def clip_rows(h: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Scale each row to L2 norm at most ``clip_norm``."""
    norms = h.norm(dim=1, keepdim=True)
    return h * torch.clamp(clip_norm / (norms + 1e-12), max=1.0)


class GaussianPenultimate(SubsampledGaussianMethod):
    name = "gaussian_penultimate"
    clip_option = "clip_norm"
    option_defaults = {"clip_norm": 1.0, "accountant": "rdp"}

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.feature_dim: int | None = None
        self._features = None  # the compiled feature extractor under --compile

    def claim(self) -> PrivacyClaim:
        spec, cal = self._need_calibration()
        return PrivacyClaim(
            mechanism="subsampled_gaussian_features", sampling=f"poisson(q={spec.sampling_rate:g})", steps=spec.steps,
            parameters={"noise_multiplier": cal.noise["noise_multiplier"], "clip_norm": self.options["clip_norm"]},
            epsilon=cal.epsilon, delta=spec.delta, protects="inputs",
            scope=("the clipped, noised penultimate-layer feature vectors released during training (labels are "
                   "public); the feature extractor is trained through the clean network at the private input, "
                   "which the guarantee does not cover: the audit measures that leakage"),
        )

    def prepare(self, model, optimizer, setup: TrainingSetup):
        self.feature_dim = int(model.feature_dim)
        return model, optimizer

    def describe(self) -> dict[str, Any]:
        """The width dependence, logged with every run: noise norm / clipping norm ~ sigma * sqrt(k)."""
        if self.feature_dim is None or self.calibration is None:
            return {}
        return {"feature_dim": self.feature_dim,
                "noise_norm_over_clip_norm": self.sigma * math.sqrt(self.feature_dim)}

    def noisy_features(self, model, x: torch.Tensor) -> torch.Tensor:
        """The released vectors: clipped and noised in float32 whatever the autocast mode."""
        c = self.options["clip_norm"]
        features = self._features or model.features
        with self.autocast(x):
            h = features(x)
        h = clip_rows(h.float(), c)
        return h + torch.randn_like(h) * (self.sigma * c)

    def compile(self, model):
        """The step calls the feature extractor and the head apart: compile the extractor (the costly part)."""
        self._features = torch.compile(model.features, dynamic=True)
        return model

    def train_step(self, model, optimizer, x, y):
        if x.shape[0] == 0:
            return None
        optimizer.zero_grad(set_to_none=True)
        released = self.noisy_features(model, x)
        with self.autocast(x):
            logits = model.head(released)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
