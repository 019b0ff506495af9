"""The end-to-end CNN of Papernot et al. (2021) for MNIST and Fashion-MNIST, as Tramèr & Boneh (2021) re-ran it:
tempered-sigmoid (tanh) activations bound each layer's output, which keeps per-example gradients small and makes
clipping them lose less (Papernot et al.'s argument).

conv(w, 8x8, stride 2, pad 2) - tanh - maxpool(2, stride 1) - conv(2w, 4x4, stride 2) - tanh - maxpool(2, stride 1)
- fc(32) - tanh - fc(classes); w = 16 gives 26,010 parameters on 28x28 inputs. ``activation="relu"`` builds the same
network with ReLU (the comparison their paper makes); a norm other than "none" puts that normalisation after each
convolution (the published network has none).
"""

from __future__ import annotations

import torch
from torch import nn

from .common import Classifier, norm_layer

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class TanhCNN(Classifier):
    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 16,
                 activation: str = "tanh"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}: choose one of {', '.join(ACTIVATIONS)}")
        act = ACTIVATIONS[activation]
        w = width
        convs = nn.Sequential(
            nn.Conv2d(channels, w, 8, stride=2, padding=2), norm_layer(norm, w), act(), nn.MaxPool2d(2, stride=1),
            nn.Conv2d(w, 2 * w, 4, stride=2), norm_layer(norm, 2 * w), act(), nn.MaxPool2d(2, stride=1),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = convs(torch.zeros(1, channels, size, size)).shape[1]
        self.features = nn.Sequential(*convs, nn.Linear(flat, 32), act())
        self.head = nn.Linear(32, num_classes)


class ReluCNN(TanhCNN):
    """:class:`TanhCNN` with ReLU: the activation comparison of Papernot et al. (2021)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs, activation="relu")
