"""Gaussian noise at the penultimate layer: our reading of Monir & Ghinita (2024, DaWaK).

What is known of their method (THEORY.md, "Gaussian noise at the penultimate layer"; the paper itself was not
available to us): noise is injected
into the penultimate layer "similar to DP-SGD", with per-sample clipping, and its variance grows with the
layer's width. The exact reading implemented here:

1. h = features(x) in R^k, the penultimate activations of each example of the Poisson batch;
2. per-example clipping to L2 norm C: h_c = h * min(1, C / ||h||_2);
3. release h~ = h_c + N(0, sigma^2 C^2 I_k) (independent noise on each of the k coordinates);
4. logits = head(h~); loss = mean cross-entropy with the public label; one optimizer step. No noise at evaluation.

Accounting (THEORY.md, "Per-example releases under Poisson sampling"): each step releases one noisy vector per
sampled example, not a noised sum, so DP-SGD's subsampled-Gaussian theorem does not apply to it.

- ``accountant=per_example`` (the default): the exact curve of one example's own vectors for a fixed model, one
  input replaced: sensitivity 2C (h' = -h on the clipping sphere), mu = 2 / sigma per release, composed over the
  Poisson steps; a lower bound on what the training releases.
- ``accountant=rdp`` or ``prv``: DP-SGD's subsampled-Gaussian accountant with sensitivity C, as "similar to
  DP-SGD" reads; a number for comparison, logged with what the vectors spend at least at that sigma.

The width dependence is the point of the comparison: the noise vector's norm is about sigma*C*sqrt(k) against a
signal of norm <= C, so the signal-to-noise ratio falls as 1/sqrt(k).

Scope: neither number is a guarantee of any output of the training. The feature extractor's parameters are
updated by back-propagating through the clean network at the private input, unclipped: the audit measures what
they leak.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from . import GAUSSIAN_PENULTIMATE_INFO, noise
from . import input_private_claims as claims
from .accounting.releases import PerExampleVectors
from .base import ClaimText, Method, TrainingSetup

#: with one input replaced, two clipped vectors are at most 2C apart
REPLACE_SENSITIVITY = 2.0


def clip_rows(h: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """Scale each row to L2 norm at most ``clip_norm``."""
    norms = h.norm(dim=1, keepdim=True)
    return h * torch.clamp(clip_norm / (norms + 1e-12), max=1.0)


class GaussianPenultimate(Method):
    name = "gaussian_penultimate"
    option_defaults = {"clip_norm": 1.0, "accountant": claims.PER_EXAMPLE, "adjacency": claims.AUTO,
                       "secure_mode": False}
    #: the accountants a run may choose (option ``accountant``): the per-example curve, or DP-SGD's (its paper's
    #: reading, not a guarantee)
    accountants = (claims.PER_EXAMPLE, "rdp", "prv")
    #: the accountant makes another claim, and another noise: its own leaderboard row
    capabilities = GAUSSIAN_PENULTIMATE_INFO.capabilities  # declared with its registry entry (methods/__init__.py)

    def __init__(self, **options: Any):
        super().__init__(**options)
        c = self.options["clip_norm"]
        if not (isinstance(c, (int, float)) and c > 0 and c < float("inf")):
            raise ConfigError(f"clip_norm={c!r} is not allowed: the clipping norm must be a finite number > 0")
        if self.options["accountant"] not in self.accountants:
            raise ConfigError(f"accountant={self.options['accountant']!r} is not allowed: choose one of "
                              f"{', '.join(self.accountants)}")
        self.adjacency = claims.resolve_adjacency(self.name, self.options["accountant"],
                                                       self.options["adjacency"])
        self.feature_dim: int | None = None
        self._features = None  # the compiled feature extractor under --compile
        noise.check_secure_mode(self.options["secure_mode"])
        self._secret: dict[torch.device, torch.Generator] = {}  # secure_mode: one secret generator per device

    def release_family(self, spec: PrivacySpec) -> PerExampleVectors:
        """One noisy feature vector per sampled example: a Gaussian of sensitivity 2C (one input replaced: h' = -h
        on the clipping sphere) at each step that samples it."""
        return PerExampleVectors("gaussian", spec.sampling_rate, spec.steps, spec.steps,
                                 sensitivity=REPLACE_SENSITIVITY)

    @property
    def sigma(self) -> float:
        return self.noise()

    def claim_text(self) -> ClaimText:
        spec, _ = self._need_calibration()
        lower = claims.vectors_and_paper(self.release_family(spec), self.noise(), spec.delta)["vectors_epsilon_lb"]
        return ClaimText(
            mechanism="subsampled_gaussian_features", parameters={"clip_norm": self.options["clip_norm"]},
            protects="inputs", adjacency=claims.ADJACENCY_TEXT[self.adjacency],
            noise=noise.describe(self.options["secure_mode"]),
            scope=claims.scope(accountant=self.options["accountant"],
                               released="clipped, noised penultimate feature vectors", lower_bound=lower,
                               reference="DP-SGD's subsampled-Gaussian accountant"))

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
        if not self.options["secure_mode"]:
            return h + torch.randn_like(h) * (self.sigma * c)  # the run's seeded global stream
        if h.device not in self._secret:
            self._secret[h.device] = noise.torch_generator(0, secure=True, device=h.device)
        g = self._secret[h.device]
        return h + noise.standard_normal(h.shape, g, secure=True, dtype=h.dtype) * (self.sigma * c)

    def compile(self, model):
        """The step calls the feature extractor and the head apart: compile the extractor (the costly part)."""
        self._features = torch.compile(model.features, dynamic=True)
        return model

    def train_step(self, model, optimizer, x, y):
        if x.shape[0] == 0:
            return None
        optimizer.zero_grad(set_to_none=True)
        released = self.noisy_features(model, x)
        if self.release_observer is not None:
            self.release_observer(released.detach())
        with self.autocast(x):
            logits = model.head(released)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        optimizer.step()
        return loss.detach()
