"""A run's model, untrained, and the features of its fixed frontend (a parameter-free map of each image, e.g. the
scattering transform), computed once per data set in place of the images."""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from inputdp.core.config import RunConfig
from inputdp.datasets import DatasetInfo, TensorData, blank_value

from .models import build_model
from .steps import progress_bar


def zero_head(model: nn.Module) -> None:
    """Every run's model starts with its classification head at zero: every class then starts at softmax 1/d for
    every input, for every method alike. The Dirichlet loss needs it (its gradient scales with s_y, so a class that
    starts near s_y = 0 can stay dead); De et al. (2022) zero the last layer for DP-SGD too."""
    head = getattr(model, "head", None)
    if isinstance(head, nn.Linear):
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)


def model_for(config: RunConfig, info: DatasetInfo, norm: str) -> nn.Module:
    """The configuration's model, untrained, for a data set (dense-input models measure from its blank pixel)."""
    return build_model(config.model, num_classes=info.num_classes, channels=info.channels, size=info.size,
                       norm=norm, width=config.model_width, input_zero=blank_value(info))


#: the scattering transform runs fastest on large batches (CPU: 1.15x faster at 4096 than at 1000 images)
FRONTEND_BATCH = 4096
#: the last computed frontend features, by (data set, data directory, subset sizes, device, frontend): the
#: runs of one sweep (seeds, epsilons) compute them once; one entry (MNIST's are about 1.1 GB)
_FRONTEND_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def with_frontend_features(model: nn.Module, data: TensorData, *, augmented: bool, cache_key: tuple | None = None,
                           progress: bool = False) -> tuple[TensorData, float]:
    """(the data the run trains and evaluates on, seconds spent making it). A model with a fixed frontend (a
    parameter-free map of each image, e.g. the scattering transform) gets the frontend's output, computed once, in
    place of the images, unless the images are augmented per step (each augmented image must pass the frontend).
    ``cache_key`` names data loaded from disk for this run, whose features may be reused by the next run."""
    frontend = getattr(model, "frontend", None)
    if frontend is None or augmented:
        return data, 0.0
    if tuple(data.x_train.shape[1:]) == tuple(frontend.out_shape) != tuple(frontend.in_shape):
        return data, 0.0  # already the frontend's output (an audit that appends rows in feature space)
    t0 = time.perf_counter()
    if cache_key is not None:
        cache_key = (*cache_key, type(frontend).__name__, tuple(frontend.in_shape))
    if cache_key is not None and cache_key in _FRONTEND_CACHE:
        x_train, x_test = _FRONTEND_CACHE[cache_key]
    else:
        total = data.x_train.shape[0] + data.x_test.shape[0]
        bar = progress_bar(total, "the fixed frontend, once per data set", progress, unit="image")

        def mapped(x: torch.Tensor) -> torch.Tensor:
            parts = []
            for i in range(0, x.shape[0], FRONTEND_BATCH):
                parts.append(frontend(x[i : i + FRONTEND_BATCH]))
                if bar is not None:
                    bar.update(parts[-1].shape[0])
            return torch.cat(parts) if parts else x.new_zeros((0, *frontend.out_shape))

        x_train, x_test = mapped(data.x_train), mapped(data.x_test)
        if bar is not None:
            bar.close()
        _FRONTEND_CACHE.clear()
        if cache_key is not None:
            _FRONTEND_CACHE[cache_key] = (x_train, x_test)
    return dataclasses.replace(data, x_train=x_train, x_test=x_test), time.perf_counter() - t0
