from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .common import Classifier


class FromBlank(nn.Module):
    """Measures the input from the data set's blank pixel: x - blank, per channel (a constant of the data set's
    public normalisation, not learned). A pixel that is blank in an image is then exactly 0 in the dense layer's
    input, so the weights on a coordinate that is blank in every training image receive no gradient from them."""

    def __init__(self, blank: Sequence[float], channels: int):
        super().__init__()
        values = list(blank) if blank else [0.0] * channels
        if len(values) != channels:
            raise ValueError(f"input_zero has {len(values)} values; the input has {channels} channels")
        self.register_buffer("blank", torch.tensor(values, dtype=torch.float32).view(1, channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.blank


class MLP(Classifier):
    """Dense layers on the flattened input: fc(w) - ReLU - fc(w) - ReLU - fc(classes); no normalisation layers
    (``norm`` is accepted and has nothing to act on). Every input coordinate has its own first-layer weights,
    which is what the white-box ``exclusive_support`` audit needs (Abadi et al. 2016 trained such a network with
    DP-SGD). About 670k parameters at w = 512 on 28x28."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 512,
                 input_zero: Sequence[float] = ()):
        super().__init__()
        if norm not in ("group", "batch", "none"):
            raise ValueError(f"norm={norm!r}: choose group, batch or none")
        self.features = nn.Sequential(
            FromBlank(input_zero, channels), nn.Flatten(),
            nn.Linear(channels * size * size, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
        )
        self.head = nn.Linear(width, num_classes)
