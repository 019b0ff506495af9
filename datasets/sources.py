"""The real torchvision / medmnist loaders, one function per data set.

Each returns ``(x_train, y_train, x_test, y_test)`` as uint8 NCHW and int64 tensors, read from ``root``.
"""

from __future__ import annotations

import os

import numpy as np
import torch

from inputdp.core.errors import ConfigError

from .registry import MEDMNIST


def _as_nchw(images: np.ndarray | torch.Tensor) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(images))
    if x.ndim == 3:  # N, H, W (grey)
        return x.unsqueeze(1).contiguous()
    if x.shape[-1] in (1, 3):  # N, H, W, C
        return x.permute(0, 3, 1, 2).contiguous()
    return x.contiguous()  # already N, C, H, W


def _labels(values) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values).reshape(-1).astype(np.int64))


# idx files (MNIST's format): a 4-byte magic number (0x0803: unsigned bytes in 3 dimensions; 0x0801: in 1), then
# each dimension as a big-endian 4-byte integer, then the data.
_IDX = {"images": (0x0803, 3, "idx3 unsigned-byte images"), "labels": (0x0801, 1, "idx1 unsigned-byte labels")}


def _idx_count(path: str, kind: str, size: int) -> int | None:
    """How many items the idx file at ``path`` holds; None when it is absent (torchvision then looks for it).

    Anything torchvision would fail on with an assertion or a parse error is refused here, naming the file, what
    was expected and what was found.
    """
    if not os.path.isfile(path):
        return None
    magic, ndim, what = _IDX[kind]
    with open(path, "rb") as f:
        header = f.read(4 * (ndim + 1))
    actual = os.path.getsize(path)
    if actual == 0:
        raise ConfigError(f"data file {path} is empty: expected {what}")
    if len(header) < 4 * (ndim + 1):
        raise ConfigError(f"data file {path} holds {actual} bytes, too few for the header of {what}")
    found = int.from_bytes(header[:4], "big")
    if found != magic:
        raise ConfigError(f"data file {path} starts with magic number {found:#010x}, expected {magic:#010x} ({what})")
    dims = [int.from_bytes(header[4 * i:4 * i + 4], "big") for i in range(1, ndim + 1)]
    if dims[1:] != [size, size][: ndim - 1]:
        raise ConfigError(f"data file {path} holds items of shape {tuple(dims[1:])}, expected {(size, size)}")
    expected = len(header) + int(np.prod(dims))
    if actual != expected:
        raise ConfigError(f"data file {path} holds {actual} bytes, but its header promises {expected} "
                          f"({dims[0]} {kind}): it is truncated or corrupt")
    return dims[0]


def _check_idx_pair(raw: str, split: str, size: int) -> None:
    images = os.path.join(raw, f"{split}-images-idx3-ubyte")
    labels = os.path.join(raw, f"{split}-labels-idx1-ubyte")
    n_images, n_labels = _idx_count(images, "images", size), _idx_count(labels, "labels", size)
    if n_images is not None and n_labels is not None and n_images != n_labels:
        raise ConfigError(f"data file {labels} holds {n_labels} labels but {images} holds {n_images} images: "
                          "the two files must come from the same release")


def _torchvision_mnist_like(cls_name: str, root: str, download: bool):
    import torchvision.datasets as tvd

    cls = getattr(tvd, cls_name)
    for split in ("train", "t10k"):
        _check_idx_pair(os.path.join(root, cls_name, "raw"), split, 28)
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


def _medmnist(flag: str, class_name: str):
    def load(root: str, download: bool):
        import medmnist

        cls = getattr(medmnist, class_name)
        train = cls(split="train", root=root, download=download)
        test = cls(split="test", root=root, download=download)
        len(train), len(test)  # medmnist asserts the published split sizes here
        return _as_nchw(train.imgs), _labels(train.labels), _as_nchw(test.imgs), _labels(test.labels)

    load.__name__ = load.__qualname__ = f"load_{flag}"
    load.__doc__ = f"{class_name} (medmnist), its train and test splits at 28x28."
    return load


for _flag, _class, *_ in MEDMNIST:
    globals()[f"load_{_flag}"] = _medmnist(_flag, _class)


#: the synthetic set's generator seed: the same images on every machine and in every release of the suite
SYNTHETIC_SEED = 7


def load_synthetic(root: str, download: bool, *, train: int = 6000, test: int = 1000, classes: int = 10,
                   size: int = 28):
    """Deterministic class-dependent patterns, no files: each class is a fixed random blob pattern on a blank
    background; an image is its class's pattern, shifted by up to 2 pixels, scaled in contrast and noised. A small
    CNN learns it to well above chance in seconds, not to 100%, so a broken method still shows."""
    del root, download
    g = torch.Generator().manual_seed(SYNTHETIC_SEED)
    coarse = (torch.rand(classes, 1, 7, 7, generator=g) > 0.6).float()
    templates = torch.nn.functional.interpolate(coarse, size=(size - 8, size - 8), mode="bilinear", align_corners=False)
    # a blank border of 4: room for the shifts, and an outer ring blank in every image (as MNIST's is), which the
    # white-box exclusive-support audit writes its canaries into
    templates = torch.nn.functional.pad(templates, (4, 4, 4, 4))

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.arange(n) % classes
        y = y[torch.randperm(n, generator=g)]
        dx, dy = (torch.randint(-2, 3, (n,), generator=g) for _ in range(2))
        contrast = 0.5 + 0.5 * torch.rand(n, 1, 1, 1, generator=g)
        x = templates[y] * contrast
        x = torch.stack([torch.roll(img, shifts=(int(a), int(b)), dims=(1, 2)) for img, a, b in zip(x, dy, dx)])
        x = x + 0.35 * torch.randn(x.shape, generator=g) * (x > 0.05)  # noise on the strokes; the background stays blank
        return (x.clamp(0, 1) * 255).round().to(torch.uint8), y.to(torch.int64)

    x_tr, y_tr = draw(train)
    x_te, y_te = draw(test)
    return x_tr, y_tr, x_te, y_te
