"""A toy method written only against inputdp's public interface: DP-SGD in a few lines. Each step clips every
example's gradient (computed with ``torch.func``) to L2 norm C, sums the batch's, adds N(0, sigma^2 C^2) to the sum
and divides by the expected batch size: one Poisson-subsampled Gaussian release of an aggregate per step, the event
dp_accounting composes. Three relations (option ``adjacency``): add/remove one example (the sum moves by C), one
input replaced (by 2C; dp_accounting's REPLACE_ONE pair), and zero-out (add/remove's pair: the null example's
gradient is 0). It declares its release (``release_family``); inputdp's PLD accountant calibrates it, claims it and
keeps its ledger."""

from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad, vmap

from inputdp.core.claims import ADD_REMOVE, RELATION_TEXT, RELATIONS
from inputdp.core.errors import ConfigError
from inputdp.methods.accounting.releases import GaussianSteps
from inputdp.methods.base import ClaimText, Method

from . import INFO


class ToyClippedSGD(Method):
    name = "toy_clipped_sgd"
    option_defaults = {"max_grad_norm": 1.0, "adjacency": ADD_REMOVE}
    capabilities = INFO.capabilities

    def __init__(self, **options):
        super().__init__(**options)
        c = self.options["max_grad_norm"]
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < math.inf:
            raise ConfigError(f"max_grad_norm={c!r} is not allowed: give a finite number > 0")
        if self.options["adjacency"] not in RELATIONS:
            raise ConfigError(f"adjacency={self.options['adjacency']!r} is not allowed for {self.name}: choose one of "
                              f"{', '.join(RELATIONS)}")
        self._expected = 1

    # --- privacy: what it releases; the accountant (pld, the family's own) computes the rest ----------------------
    def release_family(self, spec):
        return GaussianSteps(spec.sampling_rate, spec.steps, self.options["adjacency"])

    def claim_text(self) -> ClaimText:
        return ClaimText(mechanism="subsampled_gaussian", parameters={"max_grad_norm": self.options["max_grad_norm"]},
                         scope="every iterate of the model parameters (each step one noised sum of clipped gradients), "
                               f"under {RELATION_TEXT[self.options['adjacency']]}",
                         noise="seeded from the run's seed (torch's generator)")

    # --- training: clip each example's gradient, noise the sum once ---------------------------------------------
    def prepare(self, model, optimizer, setup):
        self._expected = max(1, round(self._need_calibration()[0].sampling_rate * setup.train_size))
        return model, optimizer

    def train_step(self, model, optimizer, x, y):
        params = {k: p for k, p in model.named_parameters() if p.requires_grad}
        c, sigma = float(self.options["max_grad_norm"]), self.noise()
        optimizer.zero_grad(set_to_none=True)
        loss = None
        if x.shape[0]:
            def one(p, xi, yi):
                logits = functional_call(model, p, (xi.unsqueeze(0),))
                return torch.nn.functional.cross_entropy(logits, yi.unsqueeze(0))

            per_example = vmap(grad(one), in_dims=(None, 0, 0))(params, x, y)
            norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in per_example.values()))
            scale = torch.clamp(c / (norms + 1e-12), max=1.0)
            with torch.no_grad():
                loss = torch.nn.functional.cross_entropy(model(x), y)
        for k, p in params.items():
            total = (per_example[k] * scale.view(-1, *[1] * (p.dim()))).sum(0) if x.shape[0] else torch.zeros_like(p)
            p.grad = (total + torch.randn_like(p) * sigma * c) / self._expected
        optimizer.step()
        return loss
