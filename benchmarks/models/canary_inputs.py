"""A model widened by input coordinates that belong to an audit's canaries alone (THEORY.md, "Auditing": canaries
with input coordinates of their own).

The data gain ``extra`` coordinates, laid out as ``ceil(extra / (H W))`` more channels of the image (zero in every
example of the data set; canary j is 1 on coordinate j and 0 elsewhere, so no two canaries share one). The model
reads its image channels as before and adds ``A e`` to its penultimate vector, ``e`` the extra coordinates and ``A``
a (feature_dim x extra) linear map with no bias, zero at initialisation. So column j of A receives gradient from
canary j alone, and only when canary j is in the batch: a method that adds no noise to the parameters moves it
exactly when canary j was trained on, whatever the image shape or model. The penultimate vector is where every
layer-output method (Dirichlet-softmax, the penultimate Gaussian) applies its mechanism, so the new coordinates pass
through the same release as the image; the widening exists for the audited run only.

A model with a fixed frontend (the scatter models) keeps it for the image channels; the extra coordinates pass the
frontend unchanged (laid out as channels of the frontend's output size), so the harness still computes the frontend
once per data set.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .common import Classifier


def extra_channels(extra: int, height: int, width: int) -> int:
    """The channels that hold ``extra`` coordinates in an image of ``height`` x ``width``."""
    return math.ceil(extra / (height * width))


class _ExtraFrontend(nn.Module):
    """The base frontend on the image channels; the extra coordinates repacked as channels of its output size."""

    def __init__(self, frontend: nn.Module, channels: int, extra: int):
        super().__init__()
        self.base, self.channels, self.extra = frontend, channels, extra
        c, h, w = frontend.in_shape
        k, oh, ow = frontend.out_shape
        self.in_shape = (c + extra_channels(extra, h, w), h, w)
        self.out_shape = (k + extra_channels(extra, oh, ow), oh, ow)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image, coords = x[:, : self.channels], x[:, self.channels :].flatten(1)[:, : self.extra]
        out = self.base(image)
        k, oh, ow = self.out_shape
        packed = coords.new_zeros((x.shape[0], (k - out.shape[1]) * oh * ow))
        packed[:, : self.extra] = coords
        return torch.cat([out, packed.view(x.shape[0], -1, oh, ow)], dim=1)


class WidenedFeatures(nn.Module):
    """The base ``features`` on the image channels plus ``canary(e)``, e the extra coordinates."""

    def __init__(self, features: nn.Module, channels: int, extra: int, feature_dim: int, frontend: nn.Module | None):
        super().__init__()
        self.base, self.channels, self.extra = features, channels, extra
        self.canary = nn.Linear(extra, feature_dim, bias=False)
        nn.init.zeros_(self.canary.weight)
        self.frontend = _ExtraFrontend(frontend, channels, extra) if frontend is not None else None

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(what the base features read, the extra coordinates) of images or of the widened frontend's output."""
        if self.frontend is not None and tuple(x.shape[1:]) == self.frontend.out_shape:
            k = self.frontend.base.out_shape[0]
            return x[:, :k], x[:, k:].flatten(1)[:, : self.extra]
        return x[:, : self.channels], x[:, self.channels :].flatten(1)[:, : self.extra]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        image, coords = self.split(x)
        return self.base(image) + self.canary(coords)


class CanaryInputs(Classifier):
    """``base`` widened by ``extra`` input coordinates of the canaries' own; the head is the base's."""

    features: WidenedFeatures

    def __init__(self, base: Classifier, *, channels: int, extra: int):
        super().__init__()
        self.features = WidenedFeatures(base.features, channels, extra, base.feature_dim, getattr(base, "frontend", None))
        self.head = base.head

    @property
    def canary_weight(self) -> torch.Tensor:
        """A: column j is canary j's coordinate's weight."""
        return self.features.canary.weight

    @property
    def frontend(self) -> nn.Module | None:
        """The widened fixed frontend (None for a model without one): the harness computes it once per data set."""
        return self.features.frontend
