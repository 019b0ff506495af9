"""The data-set registry: what each data set is, and where its files must lie."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inputdp.benchmarks.registry import Entry, Registry


@dataclass(frozen=True, kw_only=True)
class DatasetInfo(Entry):
    num_classes: int
    channels: int
    size: int
    train_size: int
    test_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    files: str  # where the files must lie under the data directory, for the "missing" message


DATASETS: Registry[DatasetInfo] = Registry("data set")


def register_dataset(info: DatasetInfo, *, force: bool = False) -> DatasetInfo:
    return DATASETS.register(info, force=force)


_S = "inputdp.datasets.sources:"
register_dataset(DatasetInfo(
    name="mnist", target=_S + "load_mnist", summary="MNIST digits, 60,000/10,000 grey 28x28, 10 classes (torchvision)",
    num_classes=10, channels=1, size=28, train_size=60000, test_size=10000, mean=(0.1307,), std=(0.3081,),
    files="MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"))
register_dataset(DatasetInfo(
    name="fashionmnist", target=_S + "load_fashionmnist",
    summary="Fashion-MNIST, 60,000/10,000 grey 28x28, 10 classes (torchvision)",
    num_classes=10, channels=1, size=28, train_size=60000, test_size=10000, mean=(0.2860,), std=(0.3530,),
    files="FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]"))
register_dataset(DatasetInfo(
    name="cifar10", target=_S + "load_cifar10", summary="CIFAR-10, 50,000/10,000 colour 32x32, 10 classes (torchvision)",
    num_classes=10, channels=3, size=32, train_size=50000, test_size=10000,
    mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616),
    files="cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta} (from cifar-10-python.tar.gz)"))
register_dataset(DatasetInfo(
    name="svhn", target=_S + "load_svhn", summary="SVHN digits, 73,257/26,032 colour 32x32, 10 classes (torchvision)",
    num_classes=10, channels=3, size=32, train_size=73257, test_size=26032,
    mean=(0.4377, 0.4438, 0.4728), std=(0.1980, 0.2010, 0.1970),
    files="train_32x32.mat and test_32x32.mat"))
register_dataset(DatasetInfo(
    name="dermamnist", target=_S + "load_dermamnist",
    summary="DermaMNIST skin lesions, 7,007/2,005 colour 28x28, 7 classes (medmnist)",
    num_classes=7, channels=3, size=28, train_size=7007, test_size=2005,
    mean=(0.7632, 0.5381, 0.5614), std=(0.1366, 0.1543, 0.1692),
    files="dermamnist.npz"))


def data_dir_from(explicit: str | None) -> Path:
    """``--data-dir``, else ``$INPUTDP_DATA``, else the user cache directory."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("INPUTDP_DATA")
    if env:
        return Path(env).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "inputdp" / "data"
