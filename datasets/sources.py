"""The real torchvision / medmnist loaders, one function per data set.

Each returns ``(x_train, y_train, x_test, y_test)`` as uint8 NCHW and int64 tensors, read from ``root``.
"""

from __future__ import annotations

import gzip
import os
import zlib

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


def _check_idx_header(path: str, header: bytes, actual: int, kind: str, size: int) -> int:
    """How many items an idx file holds, from its first bytes and its length; anything torchvision would fail on
    with an assertion or a parse error is refused here, naming the file, what was expected and what was found."""
    magic, ndim, what = _IDX[kind]
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
    expected = 4 * (ndim + 1) + int(np.prod(dims))
    if actual != expected:
        raise ConfigError(f"data file {path} holds {actual} bytes, but its header promises {expected} "
                          f"({dims[0]} {kind}): it is truncated or corrupt")
    return dims[0]


def _idx_count(path: str, kind: str, size: int) -> int | None:
    """How many items the idx file at ``path`` holds; None when it is absent (torchvision then looks for it)."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        header = f.read(4 * (_IDX[kind][1] + 1))
    return _check_idx_header(path, header, os.path.getsize(path), kind, size)


def _read_gz_idx(path: str, kind: str, size: int) -> torch.Tensor:
    """An idx file compressed as released (``*-idx3-ubyte.gz``), read in memory (nothing is extracted to disk);
    a file that is not gzip, or is cut short, is refused naming it."""

    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise ConfigError(f"data file {path} is not a complete gzip file ({err.__class__.__name__}: {err}): it is "
                          "truncated or corrupt; download it again") from None
    ndim = _IDX[kind][1]
    n = _check_idx_header(path + " (decompressed)", data[: 4 * (ndim + 1)], len(data), kind, size)
    array = np.frombuffer(data, dtype=np.uint8, offset=4 * (ndim + 1))
    return torch.from_numpy(array.reshape(n, size, size).copy() if kind == "images" else array.copy())


def _check_idx_pair(raw: str, split: str, size: int) -> None:
    images = os.path.join(raw, f"{split}-images-idx3-ubyte")
    labels = os.path.join(raw, f"{split}-labels-idx1-ubyte")
    n_images, n_labels = _idx_count(images, "images", size), _idx_count(labels, "labels", size)
    if n_images is not None and n_labels is not None and n_images != n_labels:
        raise ConfigError(f"data file {labels} holds {n_labels} labels but {images} holds {n_images} images: "
                          "the two files must come from the same release")


def _gz_only(raw: str) -> bool:
    """True when the four idx files are there only compressed (as downloaded): each with its ``.gz``, none plain."""
    files = [os.path.join(raw, f"{split}-{kind}-idx{d}-ubyte") for split in ("train", "t10k")
             for kind, d in (("images", 3), ("labels", 1))]
    return all(os.path.isfile(f + ".gz") for f in files) and not any(os.path.isfile(f) for f in files)


def _from_gz(raw: str, size: int):
    out = []
    for split in ("train", "t10k"):
        x = _read_gz_idx(os.path.join(raw, f"{split}-images-idx3-ubyte.gz"), "images", size)
        y = _read_gz_idx(os.path.join(raw, f"{split}-labels-idx1-ubyte.gz"), "labels", size)
        if x.shape[0] != y.shape[0]:
            raise ConfigError(f"data files under {raw} hold {y.shape[0]} {split} labels but {x.shape[0]} images: the "
                              "two files must come from the same release")
        out += [_as_nchw(x), _labels(y)]
    return tuple(out)


def _torchvision_mnist_like(cls_name: str, root: str, download: bool):
    import torchvision.datasets as tvd

    raw = os.path.join(root, cls_name, "raw")
    if _gz_only(raw):  # the release's files, still compressed: read as they are, not extracted next to themselves
        return _from_gz(raw, 28)
    cls = getattr(tvd, cls_name)
    for split in ("train", "t10k"):
        _check_idx_pair(raw, split, 28)
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
