"""What a run's steps need, shared by the harness, ``bench speed``, gpu-check and the audits: seeding, the
optimizer, evaluation, :class:`Prepared` (everything built before the first step) and the one timing loop."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData
from inputdp.methods import METHODS
from inputdp.methods.augment import random_crop_flip
from inputdp.methods.base import Calibration, Method, PrivacyClaim

from .resolve import ResolvedRun


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's generators from the run's seed."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def synchronize(device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def make_optimizer(config: RunConfig, params, lr: float) -> torch.optim.Optimizer:
    """The configuration's optimizer (SGD with momentum, or Adam) over ``params`` at rate ``lr``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=config.momentum, weight_decay=config.weight_decay)
    return torch.optim.Adam(params, lr=lr, weight_decay=config.weight_decay)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the clean model: no noise at evaluation."""
    was_training = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, x.shape[0], batch_size):
        logits = model(x[i : i + batch_size])
        yy = y[i : i + batch_size]
        correct += int((logits.argmax(1) == yy).sum())
        loss_sum += float(torch.nn.functional.cross_entropy(logits, yy, reduction="sum"))
    model.train(was_training)
    n = max(1, x.shape[0])
    return correct / n, loss_sum / n


@dataclass
class Prepared:
    """Everything a run builds before its first step (also used by ``bench speed``, gpu-check and the audit)."""

    resolved: ResolvedRun  # the configuration (with its data's fingerprint), its calibration and claim
    device: str
    data: TensorData
    method: Method
    model: nn.Module
    optimizer: torch.optim.Optimizer
    lr_info: dict[str, Any]
    perf: PerfFlags = field(default_factory=PerfFlags)
    initial_state: dict[str, torch.Tensor] | None = None
    step_model: nn.Module | None = None  # what train_step is called with (the compiled model under --compile)
    frontend_seconds: float = 0.0  # computing a fixed frontend's features once (scattering models), else 0

    @property
    def config(self) -> RunConfig:
        return self.resolved.config

    @property
    def calibration(self) -> Calibration:
        return self.resolved.calibration

    @property
    def claim(self) -> PrivacyClaim:
        return self.resolved.claim

    @property
    def norm(self) -> str:
        return self.resolved.norm

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        """One training step with the run's speed flags (channels-last input; the method applies autocast)."""
        if self.perf.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        model = self.step_model if self.step_model is not None else self.model
        return self.method.train_step(model, self.optimizer, x, y)


@dataclass
class Steps:
    """What :func:`timed_steps` measured: the wall time of the steps (device synchronised at both ends), the batch
    sizes, and the losses summed on the device (read once, by the caller)."""

    seconds: float
    sizes: list[int]
    loss_sum: torch.Tensor
    losses: int
    cpu_seconds: float = 0.0  # the process's CPU time over the same block (all its threads)


def timed_steps(p: Prepared, batches: Iterable[torch.Tensor], *, augmenter: torch.Generator | None = None,
                before: Callable[[], None] | None = None,
                after: Callable[[torch.Tensor], None] | None = None) -> Steps:
    """The one timing loop: the steps of ``p`` on the index batches, timed as one block (an epoch of a run, one
    interleaved step of ``bench speed``, the timed steps of gpu-check). Each step takes the batch's examples,
    augments them when the run does, calls ``before`` (the learning-rate warm-up) and ``after(idx)`` around it."""
    data = p.data
    loss_sum, losses, sizes = torch.zeros((), device=p.device), 0, []
    synchronize(p.device)
    t0, c0 = time.perf_counter(), time.process_time()
    for idx in batches:
        x, y = data.x_train[idx], data.y_train[idx]
        if augmenter is not None:
            x = random_crop_flip(x, augmenter)
        if before is not None:
            before()
        loss = p.step(x, y)
        if after is not None:
            after(idx)
        if loss is not None:  # summed on the device, read once per block
            loss_sum += loss.float()
            losses += 1
        sizes.append(int(idx.shape[0]))  # the shape is known on the host: no sync
    synchronize(p.device)
    return Steps(time.perf_counter() - t0, sizes, loss_sum, losses, time.process_time() - c0)


def check_speed_flags(method: str, perf: PerfFlags) -> None:
    """The speed flags a method's capabilities refuse, in one line (an autocast mode its mechanism cannot keep
    in float32 is refused by the method itself, when it prepares)."""
    caps = METHODS.get(method).facts()
    if caps.own_loop and (perf.amp != "none" or perf.channels_last or perf.compile):
        raise ConfigError(f"--amp, --channels-last and --compile are not allowed for {method}: it trains in its "
                          "own loop, which they do not reach")
    if perf.compile and not caps.compilable:
        raise ConfigError(f"--compile is not allowed for {method}: {caps.compile_refusal}")


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "epoch"):
    """A tqdm bar of ``total`` units, or None where progress is off (a study's runs, the tests)."""
    if not enabled:
        return None

    return tqdm(total=total, desc=desc, unit=unit, leave=False)
