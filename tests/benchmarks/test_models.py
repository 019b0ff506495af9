"""Every registered model: shapes, the features/head split, and the normalisation actually used."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inputdp.benchmarks.models import MODELS, build_model


@pytest.mark.parametrize("name", MODELS.names())
@pytest.mark.parametrize("norm", ["group", "batch"])
def test_forward_shapes_and_norm(name, norm):
    # narrower than their defaults, for speed; a model not listed here (a plug-in's) is built at its default width
    width = {"small_cnn": 8, "resnet18": 8, "resnet9": 8, "inception_simple": 8, "mlp": 16, "tanh_cnn": 4,
             "relu_cnn": 4, "wrn16_4": 1, "scatter_linear": 0, "scatter_cnn": 4}.get(name, 0)
    for channels, size in ((1, 28), (3, 32)):
        model = build_model(name, num_classes=7, channels=channels, size=size, norm=norm, width=width)
        x = torch.randn(3, channels, size, size)
        assert model(x).shape == (3, 7)
        assert model.features(x).shape == (3, model.feature_dim)
        kinds = {type(m) for m in model.modules()}
        if MODELS.get(name).dense_input:  # dense layers only: nothing for a norm to act on
            assert not kinds & {nn.GroupNorm, nn.BatchNorm2d, nn.Conv2d}
        elif norm == "group":
            assert nn.BatchNorm2d not in kinds and (nn.GroupNorm in kinds)
        else:
            assert nn.GroupNorm not in kinds and nn.BatchNorm2d in kinds


def test_resnet18_size():
    model = build_model("resnet18", num_classes=10, channels=3, size=32, norm="group")
    n = sum(p.numel() for p in model.parameters())
    assert 11.0e6 < n < 11.3e6  # the CIFAR ResNet-18 has about 11.17M parameters


def test_published_model_sizes_and_activations():
    """Papernot et al. 2021's MNIST CNN has 26,010 parameters and tanh activations (its ReLU twin the same shape);
    WRN-16-4 on CIFAR-10 about 2.75M."""
    tanh = build_model("tanh_cnn", num_classes=10, channels=1, size=28, norm="none")
    relu = build_model("relu_cnn", num_classes=10, channels=1, size=28, norm="none")
    assert sum(p.numel() for p in tanh.parameters()) == 26010 == sum(p.numel() for p in relu.parameters())
    kinds = {type(m) for m in tanh.modules()}
    assert nn.Tanh in kinds and nn.ReLU not in kinds
    assert nn.ReLU in {type(m) for m in relu.modules()} and nn.Tanh not in {type(m) for m in relu.modules()}
    wrn = build_model("wrn16_4", num_classes=10, channels=3, size=32, norm="group")
    assert 2.7e6 < sum(p.numel() for p in wrn.parameters()) < 2.8e6
    convs = [m for m in wrn.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 1 + 2 * 6 + 3  # stem, two convs in each of 6 blocks, a projection into each stage
