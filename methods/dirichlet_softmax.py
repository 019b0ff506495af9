"""Dirichlet-softmax: the main paper's Algorithm 1 (THEORY.md, "Dirichlet-softmax").

Each step, on the Poisson batch: s = softmax(f(x)); p~ ~ Dir(r*s + alpha*1) (reparameterised); loss = mean of
-log p~_y with the public label y. No noise at evaluation. r is the largest value whose epsilon over T steps meets
the target by the run's accountant (THEORY.md, "Per-example releases under Poisson sampling"):

- ``accountant=per_example`` (the default): the exact curve of one example's own vectors for a fixed model, one
  input replaced (the corner pair s = e_1, s' = e_2), a lower bound on what the training releases;
- ``accountant=paper``: the paper's subsampled-RDP accountant (its eq. 12), reported for comparison with the paper;
  its theorem does not apply to a per-example release, and each run logs what the vectors spend at least.

Expected behaviour (derived in THEORY.md, "The expected loss and kappa"; checked by Monte Carlo in the tests):
E[-log p~_y] = psi(r + d*alpha) - psi(r*s_y + alpha) and grad_z E = kappa * (s - e_y) with
kappa = r * s_y * psi1(r*s_y + alpha): the expected gradient is the cross-entropy gradient scaled by kappa.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from scipy.special import polygamma
from torch.distributions import Gamma

from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from . import DIRICHLET_SOFTMAX_INFO, noise
from . import input_private_claims as claims
from .accounting.releases import PerExampleVectors
from .base import ClaimText, Method

LR_RULES = ("fixed", "kappa")
ACCOUNTANTS = (claims.PER_EXAMPLE, "paper")
#: the paper's Section 3.6 reads kappa at this predicted probability of the true class
KAPPA_REFERENCE_SY = 0.9


def kappa(s_y: float | torch.Tensor, r: float, alpha: float):
    """kappa(z; r, alpha) = r * s_y * psi1(r * s_y + alpha): the scale of the expected logit gradient."""
    if isinstance(s_y, torch.Tensor):
        return r * s_y * torch.polygamma(1, r * s_y + alpha)
    return r * s_y * float(polygamma(1, r * s_y + alpha))


def dirichlet_nll(logits: torch.Tensor, y: torch.Tensor, r: float, alpha: float,
                  observe: Callable[[torch.Tensor], None] | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Per-example -log p~_y with p~ ~ Dir(r * softmax(logits) + alpha), sampled by reparameterisation.

    A Dirichlet sample is a vector of independent Gamma(a_j, 1) draws divided by their sum, so
    -log p~_y = log(sum_j G_j) - log G_y; torch's Gamma ``rsample`` differentiates through the draws. ``observe``,
    if given, receives the released vectors p~ (detached, one row per example). ``generator``: None draws from the
    run's seeded global stream (Gamma.rsample); a generator (secure_mode) is passed to ``torch._standard_gamma``, the
    draw Gamma.rsample makes, with the same reparameterised gradient.
    """
    s = torch.softmax(logits.float(), dim=-1)  # the mechanism in float32, whatever the network computed in
    conc = r * s + alpha
    if generator is None:
        g = Gamma(conc, conc.new_ones(()), validate_args=False).rsample()
    else:
        g = torch._standard_gamma(conc, generator=generator)
    g = g.clamp_min(torch.finfo(g.dtype).tiny)
    if observe is not None:
        observe((g / g.sum(dim=1, keepdim=True)).detach())
    return torch.log(g.sum(dim=1)) - torch.log(g.gather(1, y.view(-1, 1)).squeeze(1))


class DirichletSoftmax(Method):
    name = "dirichlet_softmax"
    option_defaults = {"alpha": 3.0, "lr_rule": "fixed", "accountant": claims.PER_EXAMPLE,
                       "adjacency": claims.AUTO, "secure_mode": False}
    #: the accountant makes another claim, and another noise: its own leaderboard row
    capabilities = DIRICHLET_SOFTMAX_INFO.capabilities  # declared with its registry entry (methods/__init__.py)
    #: the accountants a run may choose (option ``accountant``); ``bench calibrate`` shows them side by side
    accountants = ACCOUNTANTS

    def __init__(self, **options: Any):
        super().__init__(**options)
        a = self.options["alpha"]
        if not (isinstance(a, (int, float)) and math.isfinite(a) and a > 0):
            raise ConfigError(f"alpha={a!r} is not allowed: alpha must be a finite number > 0")
        self.options["alpha"] = float(a)
        if self.options["lr_rule"] not in LR_RULES:
            raise ConfigError(f"lr_rule={self.options['lr_rule']!r} is not allowed: choose one of {', '.join(LR_RULES)}")
        if self.options["accountant"] not in ACCOUNTANTS:
            raise ConfigError(f"accountant={self.options['accountant']!r} is not allowed: choose one of "
                              f"{', '.join(ACCOUNTANTS)}")
        self.adjacency = claims.resolve_adjacency(self.name, self.options["accountant"],
                                                       self.options["adjacency"])
        noise.check_secure_mode(self.options["secure_mode"])
        self._secret: dict[torch.device, torch.Generator] = {}  # secure_mode: one secret generator per device

    @property
    def alpha(self) -> float:
        return self.options["alpha"]

    @property
    def r(self) -> float:
        return self.noise()

    def release_family(self, spec: PrivacySpec) -> PerExampleVectors:
        """One Dirichlet vector per sampled example at each step (the corner pair is its worst)."""
        return PerExampleVectors("dirichlet", spec.sampling_rate, spec.steps, spec.steps, alpha=self.alpha)

    def claim_text(self) -> ClaimText:
        spec, _ = self._need_calibration()
        lower = claims.vectors_and_paper(self.release_family(spec), self.r, spec.delta)["vectors_epsilon_lb"]
        return ClaimText(mechanism="dirichlet", parameters={"alpha": self.alpha}, protects="inputs",
                         adjacency=claims.ADJACENCY_TEXT[self.adjacency],
                         noise=noise.describe(self.options["secure_mode"], four_sums=False),
                         scope=claims.scope(accountant=self.options["accountant"], released="noisy softmax vectors",
                                            lower_bound=lower))

    def learning_rate(self, base_lr: float) -> tuple[float, dict[str, Any]]:
        k = kappa(KAPPA_REFERENCE_SY, self.r, self.alpha)
        if self.options["lr_rule"] == "kappa":
            lr = base_lr / k
        else:
            lr = base_lr
        # gamma_eff = gamma * kappa: the rate the expected (cross-entropy-direction) step actually takes
        return lr, {"lr_rule": self.options["lr_rule"], "lr_effective": lr * k, "kappa_at_0.9": k, "lr_used": lr}

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        generator = None
        if self.options["secure_mode"]:
            if logits.device not in self._secret:
                self._secret[logits.device] = noise.torch_generator(0, secure=True, device=logits.device)
            generator = self._secret[logits.device]
        return dirichlet_nll(logits, y, self.r, self.alpha, self.release_observer, generator).mean()
