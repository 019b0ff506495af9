"""What the sound input-private methods share: a fixed, data-independent feature map (the run's model's ``features``
at its seeded initialisation: ScatterNet's scattering transform, or a random network), each example's feature vector
with a constant coordinate appended, clipped to L2 norm C. Nothing of the map depends on the private data, so the
clipped vector is a function of one input alone (THEORY.md, "Sound input-private methods")."""

from __future__ import annotations

import torch
from torch import nn

from inputdp.core.errors import ConfigError

#: examples mapped per forward pass (memory only; the map is per example)
FEATURE_BATCH = 1024


def check_clip(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < float("inf")):
        raise ConfigError(f"{name}={value!r} is not allowed: the clipping norm must be a finite number > 0")
    return float(value)


def feature_map(model: nn.Module) -> nn.Module:
    """The model's ``features`` as a fixed map: in eval mode (a BatchNorm at initialisation then normalises each
    example by its fixed running statistics, never by its batch's), no parameter trained."""
    features = getattr(model, "features", None)
    if features is None or not isinstance(getattr(model, "head", None), nn.Linear):
        raise ConfigError(f"model {type(model).__name__} has no features -> linear head split: the feature map of a "
                          "sound input-private method is a model's features (use scatter_linear or a built-in model)")
    return features.eval()


@torch.no_grad()
def clipped_features(features: nn.Module, x: torch.Tensor, clip: float) -> torch.Tensor:
    """(n, d + 1) float64: each example's features with a constant 1 appended, scaled to L2 norm at most ``clip``."""
    parts = []
    for i in range(0, x.shape[0], FEATURE_BATCH):
        h = features(x[i : i + FEATURE_BATCH]).flatten(1).double()
        h = torch.cat([h, torch.ones_like(h[:, :1])], dim=1)
        norms = h.norm(dim=1, keepdim=True)
        parts.append(h * torch.clamp(clip / (norms + 1e-12), max=1.0))
    return torch.cat(parts)


def set_linear_head(model: nn.Module, weights: torch.Tensor) -> nn.Module:
    """The released classifier: the model's head set to ``weights`` ((d + 1) x K, the last row on the constant
    coordinate). Clipping scales a row by a positive factor, which no argmax sees, so the head on unclipped
    features predicts what the solved linear model predicts on clipped ones."""
    head = model.head
    head.weight.data.copy_(weights[:-1].T.to(head.weight.dtype))
    head.bias.data.copy_(weights[-1].to(head.bias.dtype))
    return model
