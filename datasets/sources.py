"""The real torchvision / medmnist loaders, one function per data set.

Each returns ``(x_train, y_train, x_test, y_test)`` as uint8 NCHW and int64 tensors, read from ``root``.
"""

from __future__ import annotations

import numpy as np
import torch


def _as_nchw(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(images))
    if x.ndim == 3:  # N, H, W (grey)
        return x.unsqueeze(1).contiguous()
    if x.shape[-1] in (1, 3):  # N, H, W, C
        return x.permute(0, 3, 1, 2).contiguous()
    return x.contiguous()  # already N, C, H, W


def _labels(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values).reshape(-1).astype(np.int64))


def _torchvision_mnist_like(cls_name: str, root: str, download: bool):
    import torchvision.datasets as tvd

    cls = getattr(tvd, cls_name)
    train, test = cls(root, train=True, download=download), cls(root, train=False, download=download)
    return _as_nchw(train.data), _labels(train.targets), _as_nchw(test.data), _labels(test.targets)


def load_mnist(root: str, download: bool):
    return _torchvision_mnist_like("MNIST", root, download)


def load_fashionmnist(root: str, download: bool):
    return _torchvision_mnist_like("FashionMNIST", root, download)


def load_cifar10(root: str, download: bool):
    from torchvision.datasets import CIFAR10

    train, test = CIFAR10(root, train=True, download=download), CIFAR10(root, train=False, download=download)
    return _as_nchw(train.data), _labels(train.targets), _as_nchw(test.data), _labels(test.targets)


def load_svhn(root: str, download: bool):
    from torchvision.datasets import SVHN

    train, test = SVHN(root, split="train", download=download), SVHN(root, split="test", download=download)
    # torchvision already stores SVHN as N, C, H, W and maps label 10 to 0
    return _as_nchw(train.data), _labels(train.labels), _as_nchw(test.data), _labels(test.labels)


def load_dermamnist(root: str, download: bool):
    from medmnist import DermaMNIST

    train = DermaMNIST(split="train", root=root, download=download)
    test = DermaMNIST(split="test", root=root, download=download)
    len(train), len(test)  # medmnist asserts the published split sizes here
    return _as_nchw(train.imgs), _labels(train.labels), _as_nchw(test.imgs), _labels(test.labels)
