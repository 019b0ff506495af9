"""What every model shares: the features/head split and the choice of normalisation."""

from __future__ import annotations

import torch
from torch import nn


def norm_layer(kind: str, channels: int) -> nn.Module:
    """BatchNorm couples the examples of a batch, which per-example privacy analyses assume away, so private
    methods use GroupNorm (the largest of 32, 16, 8, 4, 2, 1 groups that divides ``channels``)."""
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        groups = next(g for g in (32, 16, 8, 4, 2, 1) if channels % g == 0)
        return nn.GroupNorm(groups, channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm={kind!r}: choose group, batch or none")


class Classifier(nn.Module):
    """``features`` maps an image to the penultimate vector of ``feature_dim`` values; ``head`` to logits."""

    features: nn.Module
    head: nn.Linear

    @property
    def feature_dim(self) -> int:
        return self.head.in_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
