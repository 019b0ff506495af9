"""DP-SGD's frozen normalisation with privately released statistics (Tramer & Boneh's MNIST recipe; THEORY.md, "DP-SGD
recipes"): each example's per-channel mean m_i and mean square s_i of its features, clipped to public norms c_m and
c_s; the two sums plus N(0, (sigma_r c)^2) noise per channel, over the public n; the variance E[s] - E[m]^2, floored at
0. The release is charged by the method's accountant (``DPSGD.prior_releases``: two Gaussians of noise sigma_r)."""

from __future__ import annotations

import torch
from torch import nn

from inputdp.core.errors import ConfigError

from . import noise


def frozen_norms(model: nn.Module) -> list[nn.Module]:
    """The model's frozen normalisations (benchmarks/models/scatternet.py, FrozenNorm): any module that takes its
    statistics by ``set_statistics(mean, var)``."""
    return [m for m in model.modules() if callable(getattr(m, "set_statistics", None))]


def release_statistics(norm: nn.Module, features: torch.Tensor, *, sigma_r: float, clip_mean: float,
                       clip_square: float, generator: torch.Generator | None, secure: bool) -> None:
    """Set ``norm``'s statistics from ``features`` (n, channels, ...) as released with noise. Rows that are not finite
    (an audit's marked canary rows) are left out. ``generator`` None: the run's seeded global stream."""
    if features is None:
        raise ConfigError("norm=frozen needs the training features at prepare (TrainingSetup.x_train)")
    channels = getattr(norm, "mean", torch.empty(0)).numel()
    if features.dim() < 2 or features.shape[1] != channels:
        raise ConfigError(f"norm=frozen is not allowed here: the training inputs have shape {tuple(features.shape[1:])}, "
                          f"not the {channels} channels the normalisation reads (augmented images reach the "
                          "frontend each step; train without augmentation)")
    features = features[torch.isfinite(features.reshape(features.shape[0], -1)).all(dim=1)]
    n, spatial = features.shape[0], tuple(range(2, features.dim()))

    def released(rows: torch.Tensor, clip: float) -> torch.Tensor:
        total = (rows / (rows.norm(dim=1, keepdim=True) / clip).clamp_min(1.0)).sum(dim=0)
        if generator is None:
            z = torch.randn(total.shape, dtype=torch.float64)
        else:
            z = noise.standard_normal(total.shape, generator, secure=secure, dtype=torch.float64)
        return (total + z.to(total.device) * sigma_r * clip) / n

    mean = released(features.mean(dim=spatial).double(), clip_mean)
    square = released(features.pow(2).mean(dim=spatial).double(), clip_square)
    norm.set_statistics(mean.float(), (square - mean**2).float())
