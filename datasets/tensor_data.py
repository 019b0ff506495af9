"""The whole data set as tensors on the device, batched by indexing (airbench style, no loader workers)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

from inputdp.benchmarks.errors import ConfigError

from .registry import DATASETS, DatasetInfo, data_dir_from

# Subsets (smoke runs) are drawn with this fixed seed, so every run seed sees the same examples.
SUBSET_SEED = 20240101


@dataclass
class TensorData:
    info: DatasetInfo
    x_train: torch.Tensor  # float, normalised, N C H W, on the device
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def train_size(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]


def _missing(info: DatasetInfo, root, err: Exception) -> ConfigError:
    return ConfigError(
        f"data set {info.name!r} is missing or corrupt under {root} and could not be downloaded: "
        f"put {info.files} in {root} (or pass --data-dir DIR)"
    )


@functools.lru_cache(maxsize=4)
def _load_raw(name: str, root: str, download: bool):
    info = DATASETS.get(name)
    loader = info.load()
    try:
        return loader(root, False)
    except (RuntimeError, FileNotFoundError) as first:
        if "not found" not in str(first).lower() and not isinstance(first, FileNotFoundError):
            raise ConfigError(f"data set {name!r} under {root} is corrupt or unreadable: {_one_line(first)}") from None
        if not download:
            raise _missing(info, root, first) from None
        try:
            return loader(root, True)
        except Exception as second:  # noqa: BLE001 - any download failure means: tell the user where to put files
            raise _missing(info, root, second) from None
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ConfigError(f"data set {name!r} under {root} is corrupt or unreadable: {_one_line(err)}") from None


def _one_line(err: Exception) -> str:
    text = " ".join(str(err).split())
    return (text[:200] + "...") if len(text) > 200 else (text or type(err).__name__)


def _subset(x: torch.Tensor, y: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    if n <= 0 or n >= x.shape[0]:
        return x, y
    g = torch.Generator().manual_seed(SUBSET_SEED)
    idx = torch.randperm(x.shape[0], generator=g)[:n]
    return x[idx], y[idx]


def load_tensor_data(
    name: str,
    *,
    data_dir: str | None = None,
    device: str = "cpu",
    train_examples: int = 0,
    test_examples: int = 0,
    download: bool = True,
) -> TensorData:
    """Load a registered data set once, normalise it, and place it on ``device``."""
    info = DATASETS.get(name)
    root = data_dir_from(data_dir)
    if os.environ.get("INPUTDP_NO_DOWNLOAD", "") not in ("", "0"):
        download = False
    x_tr, y_tr, x_te, y_te = _load_raw(name, str(root), download)
    n_tr, n_te = x_tr.shape[0], x_te.shape[0]
    if tuple(x_tr.shape[1:]) != (info.channels, info.size, info.size) or y_tr.shape[0] != n_tr:
        raise ConfigError(
            f"data set {name!r} under {root} is corrupt: images have shape {tuple(x_tr.shape[1:])}, "
            f"expected {(info.channels, info.size, info.size)}"
        )
    if n_te == 0 or n_tr == 0:
        raise ConfigError(f"data set {name!r} under {root} is corrupt: it holds no examples")
    x_tr, y_tr = _subset(x_tr, y_tr, train_examples)
    x_te, y_te = _subset(x_te, y_te, test_examples)
    mean = torch.tensor(info.mean).view(1, -1, 1, 1)
    std = torch.tensor(info.std).view(1, -1, 1, 1)

    def prep(x: torch.Tensor) -> torch.Tensor:
        return ((x.float() / 255.0 - mean) / std).to(device)

    return TensorData(info, prep(x_tr), y_tr.to(device), prep(x_te), y_te.to(device))
