"""ScatterNet models of Tramèr & Boneh (2021): a fixed wavelet scattering transform (Oyallon & Mallat 2015; kymatio's
implementation) followed by a normalisation and a trainable linear or small convolutional classifier.

The scattering transform (J = 2 scales, L = 8 angles) has no trainable parameters and is the same function of each
image whatever the data set holds, so applying it costs no privacy; nor does the normalisation after it, a
GroupNorm without affine parameters (each example normalised on its own; 27 groups of the 81 channels of a grey
image). What is trained privately is only what follows: a linear layer (``scatter_linear``) or Tramèr & Boneh's
CNN on the scattering features (``scatter_cnn``: conv 3x3 stride 2, conv 3x3, tanh, a 32-unit tanh layer).

The transform is the :attr:`ScatterNet.frontend`, the first part of ``features``. A model takes either images (it
applies the frontend) or the frontend's output (it does not): the harness computes the features once per data set
when no step augments the images (``benchmarks.harness.prepare``), which is what makes a CPU epoch take seconds, as
in the authors' code.
"""

from __future__ import annotations

import torch
from torch import nn

from .common import Classifier

#: the transform's scales and angles, Tramèr & Boneh's choice for MNIST, Fashion-MNIST and CIFAR-10
SCATTER_J, SCATTER_L = 2, 8


def scattering_transform(size: int) -> nn.Module:
    """kymatio's 2-D scattering (torch backend) for ``size`` x ``size`` images.

    Imported from the 2-D frontend module: ``kymatio.torch`` also imports the 3-D transform, whose filter bank
    needs ``scipy.special.sph_harm``, which SciPy 1.17 removed."""
    try:
        from kymatio.scattering2d.frontend.torch_frontend import ScatteringTorch2D
    except ImportError as err:  # pragma: no cover - kymatio is a dependency
        raise ImportError("the scatter_* models need kymatio (pip install kymatio)") from err
    return ScatteringTorch2D(J=SCATTER_J, shape=(size, size), L=SCATTER_L)


class ScatterFrontend(nn.Module):
    """Images (B, C, H, W) -> scattering features (B, C * K, H / 4, W / 4), K = 1 + J L + L^2 J (J - 1) / 2 = 81.
    No parameters and no gradient: a fixed function of each image."""

    def __init__(self, channels: int, size: int):
        super().__init__()
        self.scattering = scattering_transform(size)
        self.in_shape = (channels, size, size)
        k = 1 + SCATTER_J * SCATTER_L + SCATTER_L**2 * SCATTER_J * (SCATTER_J - 1) // 2
        self.out_shape = (channels * k, size // 2**SCATTER_J, size // 2**SCATTER_J)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = self.scattering(x.float().contiguous())
        return out.reshape(x.shape[0], *self.out_shape)


class FrozenNorm(nn.Module):
    """Each channel standardised by fixed statistics (Tramer & Boneh's frozen BatchNorm): a mean and a variance per
    channel, set once before training by the method (DP-SGD estimates them privately and charges their release:
    ``DPSGD.set_statistics``); no parameter, so no gradient. Until they are set, the identity (mean 0, variance 1)."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(channels))
        self.register_buffer("var", torch.ones(channels))
        self.statistics_set = False

    def set_statistics(self, mean: torch.Tensor, var: torch.Tensor) -> None:
        self.mean.copy_(mean)
        self.var.copy_(var.clamp_min(0))
        self.statistics_set = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return (x - self.mean.view(shape)) / (self.var.view(shape) + self.eps).sqrt()


def input_norm(kind: str, channels: int) -> nn.Module:
    """The normalisation of the features, without affine parameters (Tramèr & Boneh): "group" normalises each
    example over groups of 3 channels (27 groups of a grey image's 81), "batch" uses the batch's statistics
    (non-private baselines only), "frozen" fixed per-channel statistics set before training (DP-SGD: privately
    estimated, charged), "none" leaves the features as they are."""
    if kind == "frozen":
        return FrozenNorm(channels)
    if kind == "group":
        groups = channels // 3 if channels % 3 == 0 else 1
        return nn.GroupNorm(groups, channels, affine=False)
    if kind == "batch":
        return nn.BatchNorm2d(channels, affine=False)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"norm={kind!r}: choose group, batch, frozen or none")


class FrontendThen(nn.Module):
    """``features`` of a scatter model: the frontend for images (not for its own output), then the trainable body.
    Every path to the penultimate layer goes through it (``forward``, and methods that call ``features`` and
    ``head`` apart, such as gaussian_penultimate)."""

    def __init__(self, frontend: ScatterFrontend, body: nn.Module):
        super().__init__()
        self.frontend, self.body = frontend, body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) == self.frontend.in_shape and self.frontend.in_shape != self.frontend.out_shape:
            x = self.frontend(x)
        return self.body(x)


class ScatterNet(Classifier):
    """A classifier on scattering features; it takes images or the frontend's output."""

    features: FrontendThen

    @property
    def frontend(self) -> ScatterFrontend:
        return self.features.frontend


class ScatterLinear(ScatterNet):
    """Scattering, normalisation, one linear layer: 39,700 trainable parameters on 28x28 grey images."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 0):
        super().__init__()
        frontend = ScatterFrontend(channels, size)
        k, h, w = frontend.out_shape
        self.features = FrontendThen(frontend, nn.Sequential(input_norm(norm, k), nn.Flatten()))
        self.head = nn.Linear(k * h * w, num_classes)


class ScatterCNN(ScatterNet):
    """Scattering, normalisation and Tramèr & Boneh's CNN for grey images: conv(w, 3x3, stride 2) - tanh -
    conv(2w, 3x3) - tanh - fc(32) - tanh - fc(classes); w = 16 gives 33,066 trainable parameters at 28x28."""

    def __init__(self, *, num_classes: int, channels: int, size: int, norm: str, width: int = 16):
        super().__init__()
        frontend = ScatterFrontend(channels, size)
        k, h, w = frontend.out_shape
        convs = nn.Sequential(
            input_norm(norm, k),
            nn.Conv2d(k, width, 3, stride=2, padding=1), nn.Tanh(),
            nn.Conv2d(width, 2 * width, 3, stride=1, padding=1), nn.Tanh(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = convs(torch.zeros(2, k, h, w)).shape[1]
        self.features = FrontendThen(frontend, nn.Sequential(*convs, nn.Linear(flat, 32), nn.Tanh()))
        self.head = nn.Linear(32, num_classes)
