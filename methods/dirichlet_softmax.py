"""Dirichlet-softmax: the main paper's Algorithm 1 (THEORY.md, "Dirichlet-softmax").

Each step, on the Poisson batch: s = softmax(f(x)); p~ ~ Dir(r*s + alpha*1) (reparameterised); loss = mean of
-log p~_y with the public label y. r is the largest value whose subsampled-RDP epsilon over T steps meets the
target (the paper's eq. 12). No noise at evaluation.

Expected behaviour (derived in THEORY.md, "The expected loss and kappa"; checked by Monte Carlo in the tests):
E[-log p~_y] = psi(r + d*alpha) - psi(r*s_y + alpha) and grad_z E = kappa * (s - e_y) with
kappa = r * s_y * psi1(r*s_y + alpha): the expected gradient is the cross-entropy gradient scaled by kappa.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from scipy.special import polygamma
from torch.distributions import Gamma

from inputdp.benchmarks.config import PrivacySpec
from inputdp.benchmarks.errors import ConfigError

from .accounting import InfeasibleTarget, calibrate_parameter, dirichlet_epsilon
from .base import Calibration, Method, PrivacyClaim

LR_RULES = ("fixed", "kappa")
#: the paper's Section 3.6 reads kappa at this predicted probability of the true class
KAPPA_REFERENCE_SY = 0.9


def kappa(s_y: float | torch.Tensor, r: float, alpha: float):
    """kappa(z; r, alpha) = r * s_y * psi1(r * s_y + alpha): the scale of the expected logit gradient."""
    if isinstance(s_y, torch.Tensor):
        return r * s_y * torch.polygamma(1, r * s_y + alpha)
    return r * s_y * float(polygamma(1, r * s_y + alpha))


@functools.lru_cache(maxsize=256)
def calibrate_r(*, epsilon: float, delta: float, sampling_rate: float, steps: int, alpha: float) -> tuple[float, float, float]:
    """(r*, achieved epsilon, best order) for the matched spec; cached, since sweeps repeat it."""

    def eps_of(r: float) -> float:
        return dirichlet_epsilon(r=r, alpha=alpha, q=sampling_rate, steps=steps, delta=delta)[0]

    what = f"dirichlet_softmax at q={sampling_rate:g}, T={steps}, alpha={alpha:g}, delta={delta:g}"
    r = calibrate_parameter(eps_of, epsilon, low=alpha * 1e-9, high=alpha * (1 - 1e-12), increasing=True, what=what)
    eps, order = dirichlet_epsilon(r=r, alpha=alpha, q=sampling_rate, steps=steps, delta=delta)
    return r, eps, order


def dirichlet_nll(logits: torch.Tensor, y: torch.Tensor, r: float, alpha: float) -> torch.Tensor:
    """Per-example -log p~_y with p~ ~ Dir(r * softmax(logits) + alpha), sampled by reparameterisation.

    A Dirichlet sample is a vector of independent Gamma(a_j, 1) draws divided by their sum, so
    -log p~_y = log(sum_j G_j) - log G_y; torch's Gamma ``rsample`` differentiates through the draws.
    """
    s = torch.softmax(logits.float(), dim=-1)  # the mechanism in float32, whatever the network computed in
    conc = r * s + alpha
    g = Gamma(conc, conc.new_ones(()), validate_args=False).rsample()
    g = g.clamp_min(torch.finfo(g.dtype).tiny)
    return torch.log(g.sum(dim=1)) - torch.log(g.gather(1, y.view(-1, 1)).squeeze(1))


class DirichletSoftmax(Method):
    name = "dirichlet_softmax"
    option_defaults = {"alpha": 3.0, "lr_rule": "fixed"}

    def __init__(self, **options: Any):
        super().__init__(**options)
        a = self.options["alpha"]
        if not (isinstance(a, (int, float)) and math.isfinite(a) and a > 0):
            raise ConfigError(f"alpha={a!r} is not allowed: alpha must be a finite number > 0")
        self.options["alpha"] = float(a)
        if self.options["lr_rule"] not in LR_RULES:
            raise ConfigError(f"lr_rule={self.options['lr_rule']!r} is not allowed: choose one of {', '.join(LR_RULES)}")

    @property
    def alpha(self) -> float:
        return self.options["alpha"]

    @property
    def r(self) -> float:
        return self._need_calibration()[1].noise["r"]

    def noise_for(self, spec: PrivacySpec) -> Calibration:
        try:
            r, eps, order = calibrate_r(epsilon=spec.epsilon, delta=spec.delta, sampling_rate=spec.sampling_rate,
                                        steps=spec.steps, alpha=self.alpha)
        except InfeasibleTarget as err:
            raise ConfigError(str(err)) from None
        return Calibration(noise={"r": r}, epsilon=eps, order=order,
                           details={"alpha": self.alpha, "r_over_alpha": r / self.alpha})

    def claim(self) -> PrivacyClaim:
        spec, cal = self._need_calibration()
        return PrivacyClaim(
            mechanism="dirichlet", parameters={"r": cal.noise["r"], "alpha": self.alpha},
            sampling=f"poisson(q={spec.sampling_rate:g})", steps=spec.steps, epsilon=cal.epsilon, delta=spec.delta,
            protects="inputs",
            scope=("the noisy softmax vectors released during training (labels are public); the trained "
                   "parameters also depend on each input through the network's backward pass, which the "
                   "guarantee does not cover: the audit measures that leakage"),
        )

    def epsilon_spent(self, steps_done: int) -> float:
        spec, cal = self._need_calibration()
        if steps_done <= 0:
            return 0.0
        return dirichlet_epsilon(r=cal.noise["r"], alpha=self.alpha, q=spec.sampling_rate, steps=steps_done,
                                 delta=spec.delta)[0]

    def learning_rate(self, base_lr: float) -> tuple[float, dict[str, Any]]:
        k = kappa(KAPPA_REFERENCE_SY, self.r, self.alpha)
        if self.options["lr_rule"] == "kappa":
            lr = base_lr / k
        else:
            lr = base_lr
        # gamma_eff = gamma * kappa: the rate the expected (cross-entropy-direction) step actually takes
        return lr, {"lr_rule": self.options["lr_rule"], "lr_effective": lr * k, "kappa_at_0.9": k, "lr_used": lr}

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return dirichlet_nll(logits, y, self.r, self.alpha).mean()
