"""PATE's student: trained on the public inputs that received a noisy label, and (semi-supervised) on the rest of
the public pool without labels.

Everything the student sees is public (the pool's inputs) or already released (the aggregated labels), so both
students are post-processing of the aggregator's output and cost no privacy.

The semi-supervised student follows FixMatch (Sohn et al. 2020) in a small form: each step takes a batch of
labelled examples (lightly augmented) and ``ratio`` times as many pool inputs; a pool input whose lightly augmented
view the student already classifies with probability >= ``threshold`` gets that class as a pseudo-label, and the
student is trained to give the same class to a strongly augmented view of it (a larger shift and a blanked
square). As in FixMatch, the learning rate decays as cos(7 pi t / 16T) over the T steps, and the student returned
is an exponential moving average of the weights (decay ``ema``). The PATE paper's student is semi-supervised too
(a GAN-based method, Salimans et al. 2016); this is a simpler standard one.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.methods.augment import cutout, shift


def train_supervised(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, *,
                     epochs: int, generator: torch.Generator, batch: int = 32) -> nn.Module:
    """Plain cross-entropy on the labelled examples, ``epochs`` passes in random order."""
    model.train()
    n = x.shape[0]
    if n == 0:
        return model
    batch = min(batch, n)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=generator).to(x.device)
        for s in range(0, n, batch):
            idx = perm[s: s + batch]
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()
    return model


def train_semi_supervised(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                          pool: torch.Tensor, *, epochs: int, generator: torch.Generator, fill: torch.Tensor,
                          threshold: float = 0.95, weight: float = 1.0, ratio: int = 7, batch: int = 32,
                          ema: float = 0.99,
                          on_epoch: Callable[[int, dict[str, float], nn.Module], None] | None = None) -> tuple[nn.Module, float]:
    """FixMatch in a small form (module docstring). An epoch is one pass over ``pool``; returns the model and the
    share of pool inputs that passed the confidence threshold in the last epoch."""
    model.train()
    n, n_pool = x.shape[0], pool.shape[0]
    if n == 0:
        return model, 0.0
    h = x.shape[-1]
    weak, strong, square = max(1, h // 14), max(2, h // 7), max(2, h // 3)
    fill = fill.to(x.device)
    lab_batch, pool_batch = min(batch, n), ratio * batch
    steps = max(1, -(-n_pool // pool_batch))
    total = steps * epochs
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: math.cos(7 * math.pi * t / (16 * total)))
    average = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(ema), use_buffers=True)
    kept = 0.0
    for epoch in range(epochs):
        pool_perm = torch.randperm(n_pool, generator=generator).to(x.device)
        passed = 0
        for s in range(steps):
            li = torch.randint(0, n, (lab_batch,), generator=generator).to(x.device)
            ui = pool_perm[s * pool_batch: (s + 1) * pool_batch]
            xl = shift(x[li], generator, weak, fill)
            xu = pool[ui]
            with torch.no_grad():
                probs = torch.softmax(model(shift(xu, generator, weak, fill)), 1)
            confidence, pseudo = probs.max(1)
            mask = (confidence >= threshold).float()
            passed += int(mask.sum())
            xs = cutout(shift(xu, generator, strong, fill), generator, square, fill)
            logits = model(torch.cat([xl, xs]))
            loss = F.cross_entropy(logits[: xl.shape[0]], y[li])
            loss = loss + weight * (F.cross_entropy(logits[xl.shape[0]:], pseudo, reduction="none") * mask).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            average.update_parameters(model)
        kept = passed / max(n_pool, 1)
        if on_epoch is not None:
            on_epoch(epoch, {"student_pool_confident": kept}, average.module)
    return average.module, kept
