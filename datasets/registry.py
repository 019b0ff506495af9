"""The data-set registry: what each data set is, and where its files must lie."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from inputdp.core.registry import Entry, Registry


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
    #: the files the data are read from, as globs under the data directory (or under ``location``): their sizes and
    #: modification times key the cached content fingerprint (``datasets.facts``); empty: never cached
    paths: tuple[str, ...] = ()
    #: where the mean and std come from: never an estimate from the private training set (THEORY.md,
    #: "Normalisation and the data's identity")
    normalisation: str = "published constants of the public benchmark"
    #: for a data set given by path (``folder:PATH``, ``npz:FILE``): the path, read in place of the data directory
    location: str = ""
    #: how a data set given by path was read (resized, split): said once when it is loaded and logged with the run
    notes: tuple[str, ...] = ()


#: the entry-point group that installed packages use to add data sets (an entry point naming a DatasetInfo)
ENTRY_POINT_GROUP = "inputdp.datasets"
DATASETS: Registry[DatasetInfo] = Registry("data set", group=ENTRY_POINT_GROUP, entry_type=DatasetInfo)


def register_dataset(info: DatasetInfo, *, force: bool = False) -> DatasetInfo:
    return DATASETS.register(info, force=force)


_S = "inputdp.datasets.sources:"
register_dataset(DatasetInfo(
    name="mnist", target=_S + "load_mnist", summary="MNIST digits, 60,000/10,000 grey 28x28, 10 classes (torchvision)",
    num_classes=10, channels=1, size=28, train_size=60000, test_size=10000, mean=(0.1307,), std=(0.3081,),
    files="MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]", paths=("MNIST/raw/*",)))
register_dataset(DatasetInfo(
    name="fashionmnist", target=_S + "load_fashionmnist",
    summary="Fashion-MNIST, 60,000/10,000 grey 28x28, 10 classes (torchvision)",
    num_classes=10, channels=1, size=28, train_size=60000, test_size=10000, mean=(0.2860,), std=(0.3530,),
    files="FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]", paths=("FashionMNIST/raw/*",)))
register_dataset(DatasetInfo(
    name="cifar10", target=_S + "load_cifar10", summary="CIFAR-10, 50,000/10,000 colour 32x32, 10 classes (torchvision)",
    num_classes=10, channels=3, size=32, train_size=50000, test_size=10000,
    mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616),
    files="cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta} (from cifar-10-python.tar.gz)",
    paths=("cifar-10-batches-py/*",)))
register_dataset(DatasetInfo(
    name="svhn", target=_S + "load_svhn", summary="SVHN digits, 73,257/26,032 colour 32x32, 10 classes (torchvision)",
    num_classes=10, channels=3, size=32, train_size=73257, test_size=26032,
    mean=(0.4377, 0.4438, 0.4728), std=(0.1980, 0.2010, 0.1970),
    files="train_32x32.mat and test_32x32.mat", paths=("train_32x32.mat", "test_32x32.mat")))

# MedMNIST v2 (Yang et al. 2023), every 2-D set at 28x28 through the medmnist package: (name, medmnist's class,
# channels, train, test, classes, what). medmnist publishes no normalisation constants; its own examples normalise
# with 0.5, and so does the suite (an estimate from the training images would be a release of the private set that no
# claim covers). DermaMNIST keeps the constants the suite has always used for it (THEORY.md,
# "Normalisation and the data's identity"); tests/datasets/test_own_data.py checks each entry against medmnist.INFO.
MEDMNIST = (
    ("pathmnist", "PathMNIST", 3, 89996, 7180, 9, "colon pathology"),
    ("dermamnist", "DermaMNIST", 3, 7007, 2005, 7, "skin lesions"),
    ("octmnist", "OCTMNIST", 1, 97477, 1000, 4, "retinal OCT"),
    ("pneumoniamnist", "PneumoniaMNIST", 1, 4708, 624, 2, "chest X-ray, pneumonia or not"),
    ("retinamnist", "RetinaMNIST", 3, 1080, 400, 5, "fundus images, 5 severity grades (an ordinal label, classified here)"),
    ("breastmnist", "BreastMNIST", 1, 546, 156, 2, "breast ultrasound"),
    ("bloodmnist", "BloodMNIST", 3, 11959, 3421, 8, "blood cell microscopy"),
    ("tissuemnist", "TissueMNIST", 1, 165466, 47280, 8, "kidney cortex microscopy"),
    ("organamnist", "OrganAMNIST", 1, 34561, 17778, 11, "abdominal CT, axial"),
    ("organcmnist", "OrganCMNIST", 1, 12975, 8216, 11, "abdominal CT, coronal"),
    ("organsmnist", "OrganSMNIST", 1, 13932, 8827, 11, "abdominal CT, sagittal"),
)
#: medmnist's multi-label sets: one label per image is what every method here trains on, so they are refused
MEDMNIST_MULTILABEL = {"chestmnist": "ChestMNIST is multi-label (14 findings per image)"}
_DERMA_CONSTANTS = ((0.7632, 0.5381, 0.5614), (0.1366, 0.1543, 0.1692))

for _name, _cls, _c, _train, _test, _k, _what in MEDMNIST:
    _mean, _std = _DERMA_CONSTANTS if _name == "dermamnist" else ((0.5,) * _c, (0.5,) * _c)
    register_dataset(DatasetInfo(
        name=_name, target=_S + f"load_{_name}",
        summary=f"{_cls} {_what}, {_train:,}/{_test:,} {'colour' if _c == 3 else 'grey'} 28x28, "
                f"{_k} classes (medmnist)",
        num_classes=_k, channels=_c, size=28, train_size=_train, test_size=_test, mean=_mean, std=_std,
        files=f"{_name}.npz", paths=(f"{_name}.npz",),
        normalisation="published constants" if _name == "dermamnist" else "fixed 0.5 (medmnist's own examples)"))

register_dataset(DatasetInfo(
    name="synthetic", target=_S + "load_synthetic",
    summary="deterministic class-dependent patterns, 6,000/1,000 grey 28x28, 10 classes; generated, no files",
    num_classes=10, channels=1, size=28, train_size=6000, test_size=1000, mean=(0.5,), std=(0.5,),
    files="nothing (generated)", normalisation="fixed 0.5"))


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/inputdp``, else ``~/.cache/inputdp``: downloads, the audits' journals, the fingerprints."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "inputdp"


def data_dir_from(explicit: str | None) -> Path:
    """``--data-dir``, else ``$INPUTDP_DATA``, else the user cache directory."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("INPUTDP_DATA")
    if env:
        return Path(env).expanduser()
    return user_cache_dir() / "data"
