from __future__ import annotations

from torch import nn

from .common import Classifier, norm_layer


class SmallCNN(Classifier):
    """conv(w) - pool - conv(2w) - pool - fc(4w) - fc(classes). About 106k parameters at w = 16 on 28x28."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 16):
        super().__init__()
        w = width
        flat = 2 * w * (size // 4) * (size // 4)
        self.features = nn.Sequential(
            nn.Conv2d(channels, w, 3, padding=1), norm_layer(norm, w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), norm_layer(norm, 2 * w), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(flat, 4 * w), nn.ReLU(),
        )
        self.head = nn.Linear(4 * w, num_classes)
