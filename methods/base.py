"""The one small interface every privacy method fills in (AlgoPerf-style: the harness owns the rest).

A method
- calibrates its noise to the matched :class:`~inputdp.benchmarks.config.PrivacySpec`,
- states its :class:`PrivacyClaim` (the mechanism and its *scope*: what exactly the guarantee covers),
- trains, one Poisson batch at a time (``train_step``), or in its own loop (``fit``) when its shape differs.
It never imports the tracker, never samples batches, never times itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.benchmarks.config import PrivacySpec
from inputdp.benchmarks.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """The calibrated noise parameter(s) and the epsilon they reach over the full T steps."""

    noise: Mapping[str, float]
    epsilon: float
    order: float | None = None
    seconds: float = 0.0
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PrivacyClaim:
    """What the run's guarantee is (an event, as dp_accounting calls it) and what it covers."""

    mechanism: str
    parameters: Mapping[str, float]
    sampling: str
    steps: int
    epsilon: float
    delta: float
    protects: str  # "inputs", "inputs and labels", "nothing"
    scope: str  # in words: which released values the guarantee covers
    needs_public_data: bool = False

    def as_tags(self) -> dict[str, str]:
        return {
            "privacy.mechanism": self.mechanism,
            "privacy.protects": self.protects,
            "privacy.scope": self.scope,
            "privacy.needs_public_data": str(self.needs_public_data).lower(),
        }


@dataclass
class FitOutput:
    """What an own-loop method hands back: the model and the held-out data it must be evaluated on."""

    model: nn.Module
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class TrainingSetup:
    """What a method may know about the run when it prepares the model and optimizer."""

    spec: PrivacySpec
    train_size: int
    num_classes: int
    device: str
    model_name: str = ""


class Method(ABC):
    name: ClassVar[str]
    #: option name -> default; options not listed here are refused.
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    #: the normalisation the method's models use unless the run says otherwise
    default_norm: ClassVar[str] = "group"

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            allowed = ", ".join(sorted(self.option_defaults)) or "none"
            raise ConfigError(f"method {self.name!r} has no option {unknown[0]!r}: its options are {allowed}")
        self.options: dict[str, Any] = {**self.option_defaults, **options}
        self.calibration: Calibration | None = None
        self.spec: PrivacySpec | None = None

    # --- privacy -------------------------------------------------------------------------------------------
    @abstractmethod
    def calibrate(self, spec: PrivacySpec) -> Calibration:
        """Choose the noise for ``spec`` and remember it; returns the calibration."""

    @abstractmethod
    def claim(self) -> PrivacyClaim:
        """The guarantee of the calibrated method (after :meth:`calibrate`)."""

    @abstractmethod
    def epsilon_spent(self, steps_done: int) -> float:
        """Epsilon spent after ``steps_done`` steps, from the method's own accountant."""

    # --- training ------------------------------------------------------------------------------------------
    def learning_rate(self, base_lr: float) -> tuple[float, dict[str, Any]]:
        """The rate the optimizer uses, and what to record about how it was chosen."""
        return base_lr, {"lr_rule": "fixed", "lr_effective": base_lr}

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, setup: TrainingSetup
    ) -> tuple[nn.Module, torch.optim.Optimizer]:
        return model, optimizer

    def describe(self) -> dict[str, Any]:
        """Extra facts about the prepared method, logged as run parameters (after ``prepare``)."""
        return {}

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y)

    def train_step(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> float | None:
        """One step on one Poisson batch; returns the batch loss, or None for an empty batch (no update)."""
        if x.shape[0] == 0:
            return None
        optimizer.zero_grad(set_to_none=True)
        loss = self.loss(model(x), y)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    #: methods whose shape is not one step per Poisson batch (PATE) set this and implement ``fit``
    own_loop: ClassVar[bool] = False

    def fit(self, prepared: Any, report: Callable[[int, dict[str, float]], None]) -> FitOutput:
        """The method's own loop: train from the harness's prepared run, return what to evaluate where."""
        raise NotImplementedError(f"method {self.name!r} trains per step; it has no own loop")

    # --- helpers -------------------------------------------------------------------------------------------
    def _need_calibration(self) -> tuple[PrivacySpec, Calibration]:
        if self.calibration is None or self.spec is None:
            raise RuntimeError(f"method {self.name!r} used before calibrate()")
        return self.spec, self.calibration

