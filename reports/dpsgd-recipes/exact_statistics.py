"""A diagnostic, not a private method: DP-SGD at the best preset on MNIST with its ScatterNet features standardised by
the training set's *exact* per-channel mean and variance (read from the private data without noise, uncharged), or
by GroupNorm, at a chosen number of steps. It bounds what Tramer & Boneh's privately estimated statistics could buy
(reports/dpsgd-recipes/README.md); the suite's sound version is ``--norm frozen --option
dpsgd.norm_noise_multiplier=8``.

    python reports/dpsgd-recipes/exact_statistics.py exact|group EPSILON SEED STEPS DATA_DIR
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from inputdp.benchmarks import harness
from inputdp.benchmarks.resolve import resolve
from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core.config import PerfFlags


class ExactNorm(nn.Module):
    def __init__(self, mean: torch.Tensor, var: torch.Tensor):
        super().__init__()
        self.register_buffer("mean", mean.view(1, -1, 1, 1))
        self.register_buffer("std", (var + 1e-5).sqrt().view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


def _with_exact_statistics(original):
    def patched(model, data, **kw):
        data, seconds = original(model, data, **kw)
        x = data.x_train  # (n, channels, h, w): the frontend's features
        mean = x.mean(dim=(0, 2, 3))
        body = model.features.body
        body[0] = ExactNorm(mean, x.pow(2).mean(dim=(0, 2, 3)) - mean**2)  # in place of the BatchNorm placeholder
        return data, seconds

    return patched


def main(mode: str, epsilon: float, seed: int, steps: int, data_dir: str) -> float:
    if mode == "exact":
        harness.with_frontend_features = _with_exact_statistics(harness.with_frontend_features)
    config = build_config(method="dpsgd", dataset="mnist", preset="best", epsilon=epsilon, seed=seed,
                          overrides=Overrides(data_dir=data_dir, steps=steps, norm="batch" if mode == "exact" else None))
    result = harness.run(resolve(config), PerfFlags(device="cpu", progress=False))
    return result.metrics["final_test_accuracy"]


if __name__ == "__main__":
    m, e, s, t, d = sys.argv[1:6]
    print(m, e, s, t, main(m, float(e), int(s), int(t), d))
