"""Wide ResNets (Zagoruyko & Komodakis 2016), as De et al. (2022) train them with DP-SGD: pre-activation blocks,
GroupNorm in place of BatchNorm (``norm``), and, with DP-SGD's ``weight_standardisation`` option, standardised
convolution weights. WRN-16-4: depth 16 ((16 - 4) / 6 = 2 blocks per stage), widths 16k, 32k, 64k for k = 4;
about 2.7M parameters on 32x32 colour images."""

from __future__ import annotations

import torch
from torch import nn

from .common import Classifier, norm_layer


class _PreActBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm: str):
        super().__init__()
        self.n1 = norm_layer(norm, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n2 = norm_layer(norm, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.act = nn.ReLU()
        self.short = None if (stride == 1 and cin == cout) else nn.Conv2d(cin, cout, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.n1(x))
        skip = x if self.short is None else self.short(h)
        out = self.conv1(h)
        out = self.conv2(self.act(self.n2(out)))
        return out + skip


class WideResNet(Classifier):
    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 4, depth: int = 16):
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"depth={depth}: a Wide ResNet has depth 6n + 4")
        n = (depth - 4) // 6
        widths = (16 * width, 32 * width, 64 * width)
        layers: list[nn.Module] = [nn.Conv2d(channels, 16, 3, 1, 1, bias=False)]
        cin = 16
        for stage, cout in enumerate(widths):
            for b in range(n):
                layers.append(_PreActBlock(cin, cout, 2 if (b == 0 and stage > 0) else 1, norm))
                cin = cout
        layers += [norm_layer(norm, cin), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(cin, num_classes)


class WRN16(WideResNet):
    """WRN-16-k (``width`` = k; 4 by default)."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 4):
        super().__init__(num_classes=num_classes, channels=channels, size=size, norm=norm, width=width, depth=16)
