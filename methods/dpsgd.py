"""DP-SGD through Opacus: per-example clipping to C, Gaussian noise sigma*C, on the harness's Poisson batches.

The harness's batches are the ones clipped and noised: no Opacus data loader samples a second time, and
the optimizer averages over the *expected* batch size q*n, as Poisson-sampled DP-SGD requires. sigma is the
smallest noise that Opacus' accountant (RDP or PRV) puts within the matched (epsilon, delta, q, T), found by the
suite's one calibration search (THEORY.md, "The subsampled Gaussian").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.benchmarks.errors import ConfigError

from .base import PrivacyClaim, TrainingSetup
from .gaussian_accounting import SubsampledGaussianMethod

GRAD_SAMPLE_MODES = ("auto", "hooks", "functorch", "ghost")


class DPSGD(SubsampledGaussianMethod):
    name = "dpsgd"
    option_defaults = {"max_grad_norm": 1.0, "accountant": "rdp", "grad_sample_mode": "auto"}

    def __init__(self, **options: Any):
        super().__init__(**options)
        if self.options["grad_sample_mode"] not in GRAD_SAMPLE_MODES:
            raise ConfigError(f"grad_sample_mode={self.options['grad_sample_mode']!r} is not allowed: choose one of "
                              f"{', '.join(GRAD_SAMPLE_MODES)}")
        self.mode: str | None = None
        self._criterion = None

    def claim(self) -> PrivacyClaim:
        spec, cal = self._need_calibration()
        return PrivacyClaim(
            mechanism="subsampled_gaussian", sampling=f"poisson(q={spec.sampling_rate:g})", steps=spec.steps,
            parameters={"noise_multiplier": cal.noise["noise_multiplier"], "max_grad_norm": self.options["max_grad_norm"]},
            epsilon=cal.epsilon, delta=spec.delta, protects="inputs and labels",
            scope="every iterate of the model parameters (each example's input and label, add/remove one example)",
        )

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer, setup: TrainingSetup):
        from opacus.grad_sample.utils import prepare_module
        from opacus.optimizers import get_optimizer_class
        from opacus.validators import ModuleValidator

        spec, cal = self._need_calibration()
        if not ModuleValidator.is_valid(model):  # BatchNorm -> GroupNorm: per-example gradients must exist
            model = ModuleValidator.fix(model)
            optimizer = type(optimizer)(model.parameters(), **optimizer.defaults)
        mode = self.options["grad_sample_mode"]
        if mode == "auto":  # the model registry's measured fastest mode for this model
            mode = setup.grad_sample_mode
            if mode == "ghost" and self.amp != "none":  # ghost norms would be taken in bf16 (see check_amp)
                mode = "hooks"
        self.mode = mode
        kwargs: dict[str, Any] = {"batch_first": True, "loss_reduction": "mean"}
        if mode == "ghost":
            kwargs["max_grad_norm"] = self.options["max_grad_norm"]
        module = prepare_module(model, grad_sample_mode=mode, **kwargs)
        opt_cls = get_optimizer_class(clipping="flat", distributed=False, grad_sample_mode=mode)
        dp_optimizer = opt_cls(optimizer, noise_multiplier=cal.noise["noise_multiplier"],
                               max_grad_norm=self.options["max_grad_norm"],
                               expected_batch_size=max(1, round(spec.sampling_rate * setup.train_size)),
                               loss_reduction="mean")
        if mode == "ghost":
            from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

            self._criterion = DPLossFastGradientClipping(module, dp_optimizer, nn.CrossEntropyLoss(), "mean")
        return module, dp_optimizer

    def unwrap(self, model: nn.Module) -> nn.Module:
        """Opacus' GradSampleModule keeps the user's model as ``_module``."""
        while hasattr(model, "_module"):
            model = model._module
        return model

    def describe(self) -> dict[str, Any]:
        return {"grad_sample_mode": self.mode} if self.mode else {}

    def train_step(self, model, optimizer, x, y):
        """An empty batch is still a step: the optimizer adds noise to a zero gradient, as the accountant assumes.

        Opacus' hooks and ghost modes take an empty batch through the normal path; functorch's vmap cannot,
        so there the per-example gradients are set to empty tensors by hand.
        """
        optimizer.zero_grad(set_to_none=True)
        if x.shape[0] == 0 and self.mode == "functorch":
            _noise_only_step(model, optimizer)
            return None
        with self.autocast(x):
            logits = model(x)
        if self._criterion is not None:
            loss = self._criterion(logits.float(), y)
        else:
            loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        _per_example_gradients_in_float32(model)
        optimizer.step()
        return loss.detach() if x.shape[0] else None

    speed_variants = tuple({"grad_sample_mode": m} for m in GRAD_SAMPLE_MODES if m != "auto")
    compilable = False
    compile_refusal = "Opacus' per-example-gradient hooks do not run under torch.compile"

    def check_amp(self, amp: str) -> None:
        if amp != "none" and (self.mode or self.options["grad_sample_mode"]) == "ghost":
            raise ConfigError(f"--amp {amp} is not allowed for dpsgd with grad_sample_mode=ghost: ghost clipping "
                              "computes the per-example norms inside Opacus' hooks, in the autocast dtype; use hooks "
                              "or functorch")


def _per_example_gradients_in_float32(model: nn.Module) -> None:
    """Under autocast Opacus computes per-example gradients in the autocast dtype; clipping and noise must see
    float32 (the parameters' own dtype)."""
    for p in model.parameters():
        gs = getattr(p, "grad_sample", None)
        if isinstance(gs, torch.Tensor) and gs.dtype != p.dtype:
            p.grad_sample = gs.to(p.dtype)


def _noise_only_step(model: nn.Module, optimizer) -> None:
    """Zero per-example gradients for an empty batch, so Opacus clips nothing and adds only noise."""
    for p in model.parameters():
        if p.requires_grad:
            p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
    optimizer.step()
