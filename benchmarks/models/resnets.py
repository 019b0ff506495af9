from __future__ import annotations

import torch
from torch import nn

from .common import Classifier, norm_layer


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: str):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = norm_layer(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = norm_layer(norm, cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm_layer(norm, cout))
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        return self.relu(out + self.short(x))


class ResNet18(Classifier):
    """ResNet-18 (He et al. 2016) with the CIFAR stem: a 3x3 conv, no max-pool; blocks [2, 2, 2, 2]."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 64):
        super().__init__()
        w = width
        layers: list[nn.Module] = [nn.Conv2d(channels, w, 3, 1, 1, bias=False), norm_layer(norm, w), nn.ReLU()]
        cin = w
        for i, cout in enumerate((w, 2 * w, 4 * w, 8 * w)):
            for j in range(2):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1, norm))
                cin = cout
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)


def _conv_block(cin: int, cout: int, norm: str, pool: bool = False) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=False), norm_layer(norm, cout), nn.ReLU()]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class _Residual(nn.Module):
    def __init__(self, c: int, norm: str):
        super().__init__()
        self.body = nn.Sequential(_conv_block(c, c, norm), _conv_block(c, c, norm))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNet9(Classifier):
    """ResNet-9 (the Myrtle.ai network used by Hoelzl et al. 2022 on DermaMNIST)."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 64):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            _conv_block(channels, w, norm),
            _conv_block(w, 2 * w, norm, pool=True),
            _Residual(2 * w, norm),
            _conv_block(2 * w, 4 * w, norm, pool=True),
            _conv_block(4 * w, 8 * w, norm, pool=True),
            _Residual(8 * w, norm),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
        )
        self.head = nn.Linear(8 * w, num_classes)
