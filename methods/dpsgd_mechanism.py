"""DP-SGD's mechanism audit (``bench audit --mechanism``): one step of the method's own clipping, noise and update
per trial, on canaries whose clipped gradients are Diracs of norm C in columns of their own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from inputdp.core.claims import REPLACE_INPUT

from .base import AUDIT_THRESHOLDS, Method, ReleaseTrials, TrainingSetup


def one_step_trials(method: Method, *, trials: int, seed: int,
                    progress: Callable[[str], None] | None = None, columns: int = 2000) -> list[ReleaseTrials]:
    """One step of ``method`` (a calibrated DP-SGD: its own ``prepare`` and ``train_step``) per trial on a linear
    model whose inputs are scaled basis vectors, so each canary's clipped gradient is a Dirac of norm exactly C in a
    weight column no other example touches (Nasr et al. 2023): ``columns`` trials a step, half the columns in each
    world (the canary present / absent, or x / -x with its label kept); the step's parameter change is the release.
    The claim's event is the run's T Poisson-subsampled Gaussian steps at rate q under the run's relation; the
    pair's shift is 1 (present / absent) or 2 (x / -x) in units of C."""
    spec, _ = method._need_calibration()
    clip = float(method.options["max_grad_norm"])
    torch.manual_seed(seed)
    half = columns // 2
    model: nn.Module = nn.Sequential(nn.Linear(columns, 2, bias=False))
    nn.init.zeros_(model[0].weight)
    optimizer: Any = torch.optim.SGD(model.parameters(), lr=1.0)
    setup = TrainingSetup(spec=spec, train_size=max(1, round(half / spec.sampling_rate)), num_classes=2,
                          device="cpu", grad_sample_mode="hooks")
    model, optimizer = method.begin(model, optimizer, setup)
    expected = optimizer.expected_batch_size  # what the optimizer divides the noisy sum by
    weight = method.unwrap(model)[0].weight
    scale = 100.0 * clip  # the input's norm: its gradient (norm scale x 0.71 at uniform logits) is clipped to C
    # label 0 at uniform logits: d loss / d W[:, j] = x_j (-1/2, 1/2); after the step W[:, j] = -grad
    direction = torch.tensor([1.0, -1.0]) / math.sqrt(2.0)
    replace = method.relation == REPLACE_INPUT
    s_in, s_out = [], []
    steps = max(1, math.ceil(trials / half))
    cols = torch.arange(columns)
    for step in range(steps):
        world = torch.zeros(columns, dtype=torch.bool)
        world[torch.randperm(columns)[:half]] = True
        if replace:  # every column holds one example: x_j, or its replacement -x_j
            rows, signs = cols, torch.where(world, 1.0, -1.0)
        else:  # the canary present, or absent
            rows, signs = cols[world], torch.ones(int(world.sum()))
        x = torch.zeros(len(rows), columns)
        x[torch.arange(len(rows)), rows] = signs * scale
        with torch.no_grad():
            weight.zero_()
        method.train_step(model, optimizer, x, torch.zeros(len(rows), dtype=torch.long))
        with torch.no_grad():  # in units of C: N(shift, sigma^2), shift 1 (or +1 / -1 replaced)
            release = (weight.detach().T @ direction * expected / clip + (1.0 if replace else 0.0)).numpy()
            weight.zero_()
        s_in.append(release[world.numpy()])
        s_out.append(release[~world.numpy()])
        if progress and (step + 1) % max(1, steps // 10) == 0:
            progress(f"{method.name}: step {step + 1}/{steps}")
    from dp_accounting import dp_event

    shift = 2.0 if replace else 1.0
    # what the claim composes: T Poisson-subsampled steps of a Gaussian of noise multiplier 1 (sensitivity C)
    step = dp_event.PoissonSampledDpEvent(spec.sampling_rate, dp_event.GaussianDpEvent(1.0))
    return [ReleaseTrials(release=f"one step (grad_sample_mode={method.mode})", relation=method.relation,
                          scores_in=np.concatenate(s_in), scores_out=np.concatenate(s_out),
                          event=dp_event.SelfComposedDpEvent(step, spec.steps), shift=shift,
                          event_relation=method.relation, thresholds=tuple(t * shift for t in AUDIT_THRESHOLDS))]
