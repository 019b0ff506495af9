"""A toy method written only against inputdp's public interface: clip each example's logits to L2 norm C, add
N(0, sigma^2 C^2) to them, train on the noisy logits. Each step is a Poisson-subsampled Gaussian mechanism on the
logits, accounted with inputdp's RDP accountant for the subsampled Gaussian."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inputdp.core.config import PrivacySpec
from inputdp.methods.accounting.gaussian_rdp import gaussian_epsilon_rdp, gaussian_noise_multiplier_rdp
from inputdp.methods.base import Calibration, Method, PrivacyClaim


class ToyLogitNoise(Method):
    name = "toy_logit_noise"
    option_defaults = {"clip_norm": 5.0}

    def noise_for(self, spec: PrivacySpec) -> Calibration:
        sigma = gaussian_noise_multiplier_rdp(epsilon=spec.epsilon, delta=spec.delta,
                                              sampling_rate=spec.sampling_rate, steps=spec.steps)
        eps, order = gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=spec.sampling_rate, steps=spec.steps,
                                          delta=spec.delta)
        return Calibration(noise={"noise_multiplier": sigma}, epsilon=eps, order=order)

    def claim(self) -> PrivacyClaim:
        spec, cal = self._need_calibration()
        return PrivacyClaim(mechanism="subsampled_gaussian_logits", parameters=dict(cal.noise),
                            sampling=f"poisson(q={spec.sampling_rate:g})", steps=spec.steps, epsilon=cal.epsilon,
                            delta=spec.delta, protects="inputs", scope="the noisy logits released during training")

    def epsilon_spent(self, steps_done: int) -> float:
        spec, cal = self._need_calibration()
        if steps_done <= 0:
            return 0.0
        return gaussian_epsilon_rdp(noise_multiplier=cal.noise["noise_multiplier"], sampling_rate=spec.sampling_rate,
                                    steps=steps_done, delta=spec.delta)[0]

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = self.options["clip_norm"]
        clipped = logits * torch.clamp(c / (logits.norm(dim=1, keepdim=True) + 1e-12), max=1.0)
        noisy = clipped + torch.randn_like(clipped) * (self._need_calibration()[1].noise["noise_multiplier"] * c)
        return F.cross_entropy(noisy, y)
