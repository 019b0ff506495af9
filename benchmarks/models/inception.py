from __future__ import annotations

import torch
from torch import nn

from .common import Classifier, norm_layer


def _cbr(cin: int, cout: int, k: int, norm: str) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2, bias=False), norm_layer(norm, cout), nn.ReLU())


class InceptionModule(nn.Module):
    """Four branches (1x1; 1x1-3x3; 1x1-3x3-3x3 for 5x5; 3x3 pool-1x1) concatenated (Szegedy et al. 2015)."""

    def __init__(self, cin: int, b: int, norm: str):
        super().__init__()
        self.b1 = _cbr(cin, b, 1, norm)
        self.b3 = nn.Sequential(_cbr(cin, b, 1, norm), _cbr(b, b, 3, norm))
        self.b5 = nn.Sequential(_cbr(cin, b // 2, 1, norm), _cbr(b // 2, b, 3, norm), _cbr(b, b, 3, norm))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), _cbr(cin, b, 1, norm))
        self.out_channels = 4 * b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], dim=1)


class SimpleInception(Classifier):
    """A stem conv, two Inception modules with a pool between, global average pooling, a linear head."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 32):
        super().__init__()
        w = width
        m1 = InceptionModule(w, w // 2, norm)
        m2 = InceptionModule(m1.out_channels, w, norm)
        self.features = nn.Sequential(
            _cbr(channels, w, 3, norm), nn.MaxPool2d(2), m1, nn.MaxPool2d(2), m2,
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(m2.out_channels, num_classes)
