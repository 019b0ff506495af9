"""The whole data set as tensors on the device, batched by indexing (airbench style, no loader workers)."""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from inputdp.core.errors import ConfigError, DataMissing, one_line

from .fingerprint import fingerprint_of_arrays
from .lookup import dataset_info
from .registry import DatasetInfo, data_dir_from

# Subsets (smoke runs) are drawn with this fixed seed, so every run seed sees the same examples.
SUBSET_SEED = 20240101
# The held-out split (``TensorData.hold_out``) is drawn with this one, whatever the run's seed.
HOLDOUT_SEED = 20261201


@dataclass
class TensorData:
    info: DatasetInfo
    x_train: torch.Tensor  # float, normalised, N C H W, on the device
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    #: what the run should say about its data: a split or a resize of a data set given by path, fewer examples than
    #: asked for (logged with the run, printed once when loaded)
    notes: tuple[str, ...] = ()
    #: the content fingerprint of the arrays (``datasets.facts``), when loaded from a source
    fingerprint: str = ""

    @property
    def train_size(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    def checked_fingerprint(self, name: str, expected: str = "") -> str:
        """The arrays' content fingerprint; refused in one line where ``expected`` (a configuration's) names other
        data than these (the files changed since the run was configured)."""
        found = self.fingerprint or fingerprint_of_arrays((self.x_train, self.y_train, self.x_test, self.y_test))
        if expected and expected != found:
            raise ConfigError(f"data set {name!r} has changed since this run was configured: its content fingerprint "
                              f"is {found}, the configuration names {expected}; start it again")
        return found

    def hold_out(self, n: int) -> TensorData:
        """``n`` training examples, drawn with a fixed seed (the same for every run), become the evaluation split
        and leave training; the test split is set aside. What a recipe search should be judged on."""
        total = self.train_size
        check_holdout(n, total)
        perm = torch.randperm(total, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
        held, kept = perm[:n].sort().values, perm[n:].sort().values
        held, kept = held.to(self.x_train.device), kept.to(self.x_train.device)
        return TensorData(self.info, self.x_train[kept], self.y_train[kept], self.x_train[held], self.y_train[held],
                          self.notes, self.fingerprint)


def check_holdout(n: int, total: int) -> None:
    if not (isinstance(n, int) and 0 < n < total):
        raise ConfigError(f"holdout={n!r} is not allowed: it must be an integer in [1, {total - 1}] "
                          f"(the data set has {total} training examples)")


def _missing(info: DatasetInfo, root, err: Exception) -> ConfigError:
    return DataMissing(
        f"data set {info.name!r} is missing under {root} and could not be downloaded: "
        f"put {info.files} in {root} (or pass --data-dir DIR)"
    )


# Loaders create at most root/NAME/raw (torchvision); looking three levels deep covers that and stays cheap even
# when the data directory is a big tree.
_DEPTH = 3


def _walk(root: Path, onerror=None):
    base = len(root.parts)
    for top, dirs, files in os.walk(root, onerror=onerror):
        if len(Path(top).parts) - base >= _DEPTH - 1:
            dirs[:] = []
        yield top, dirs, files


def _folders(root: Path) -> set[str]:
    """Every folder at or below ``root`` (three levels down) that exists now."""
    if not root.is_dir():
        return set()
    return {str(root)} | {os.path.join(top, d) for top, dirs, _ in _walk(root) for d in dirs}


def _unreadable(root: Path) -> str | None:
    """The first folder at or below ``root`` (three levels down) that cannot be listed, if any."""
    found: list[str] = []

    def note(err: OSError) -> None:
        if isinstance(err, PermissionError):
            found.append(str(err.filename))

    for _ in _walk(root, onerror=note):
        if found:
            break
    return found[0] if found else None


def _remove_new_empty_folders(root: Path, before: set[str]) -> None:
    """A failed load or download leaves no empty folders behind that were not there before it."""
    for folder in sorted(_folders(root) - before, key=len, reverse=True):
        try:
            os.rmdir(folder)
        except OSError:
            pass  # not empty: something was written there (a partial download the next try resumes)
    if str(root) not in before and root.is_dir():
        try:
            root.rmdir()
        except OSError:
            pass


_SAID: set[str] = set()


def _say_once(note: str) -> None:
    """A note on the data (a split, a resize, fewer examples than asked for), printed once per process; runs log it."""
    if note not in _SAID:
        _SAID.add(note)
        print(f"data: {note}", file=sys.stderr)


@functools.lru_cache(maxsize=4)
def _load_raw(name: str, root: str, download: bool):
    info = dataset_info(name)
    if info.location:  # given by path: read there, never downloaded
        x = _load_with(info, info.location, False)
        for note in info.notes:
            _say_once(note)
        return x
    where = Path(root)
    if where.exists() and not where.is_dir():
        raise ConfigError(f"data directory {root} is not a folder: pass --data-dir FOLDER")
    before = _folders(where)
    try:
        return _load_with(info, root, download)
    except BaseException:
        _remove_new_empty_folders(where, before)
        raise


def _load_with(info: DatasetInfo, root: str, download: bool):
    loader = info.load()
    name = info.name
    try:
        return loader(root, False)
    except PermissionError as err:
        raise _unreadable_error(name, err.filename or root) from None
    except (RuntimeError, FileNotFoundError) as first:
        if "not found" not in str(first).lower() and not isinstance(first, FileNotFoundError):
            raise ConfigError(f"data set {name!r} under {root} is corrupt or unreadable: {one_line(first)}") from None
        blocked = _unreadable(Path(root))
        if blocked:
            raise _unreadable_error(name, blocked) from None
        if not download:
            raise _missing(info, root, first) from None
        try:
            return loader(root, True)
        except Exception as second:  # noqa: BLE001 - any download failure means: tell the user where to put files
            raise _missing(info, root, second) from None
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ConfigError(f"data set {name!r} under {root} is corrupt or unreadable: {one_line(err)}") from None


def _unreadable_error(name: str, path) -> ConfigError:
    return ConfigError(f"data set {name!r}: {path} cannot be read (permission denied): give this user read access, "
                       "or pass --data-dir DIR")


def check_contents(info: DatasetInfo, root, x_tr, y_tr, x_te, y_te) -> None:
    """What every loader must hand over: images of the registered shape, one label each, labels in range."""
    shape = (info.channels, info.size, info.size)
    for split, x, y in (("training", x_tr, y_tr), ("test", x_te, y_te)):
        where = f"data set {info.name!r} under {root} is corrupt ({info.files})"
        if x.shape[0] == 0:
            raise ConfigError(f"{where}: its {split} split holds no examples")
        if tuple(x.shape[1:]) != shape:
            raise ConfigError(f"{where}: {split} images have shape {tuple(x.shape[1:])}, expected {shape}")
        if y.shape[0] != x.shape[0]:
            raise ConfigError(f"{where}: {x.shape[0]} {split} images but {y.shape[0]} labels")
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= info.num_classes:
            raise ConfigError(f"{where}: {split} labels range over {low}..{high}, expected 0..{info.num_classes - 1}")


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
    info = dataset_info(name)
    root = data_dir_from(data_dir)
    download = _download_allowed(download)
    raw = load_raw(name, data_dir, download=download)
    x_tr, y_tr, x_te, y_te = raw
    check_contents(info, info.location or root, x_tr, y_tr, x_te, y_te)
    notes = list(info.notes)
    for split, asked, have in (("training", train_examples, x_tr.shape[0]), ("test", test_examples, x_te.shape[0])):
        if asked > have:
            note = (f"{info.name} has {have} {split} examples, fewer than the {asked} asked for: the run uses all "
                    f"{have}")
            notes.append(note)
            _say_once(note)
    digest = raw_digest(name, str(root), download)
    x_tr, y_tr = _subset(x_tr, y_tr, train_examples)
    x_te, y_te = _subset(x_te, y_te, test_examples)
    return TensorData(info, normalise(info, x_tr).to(device), y_tr.to(device), normalise(info, x_te).to(device),
                      y_te.to(device), tuple(notes), digest)


def load_raw(name: str, data_dir: str | None = None, *, download: bool = True):
    """The data set's arrays as its source gives them (pixels uint8, or float in [0, 1]; int64 labels), read once
    per process."""
    return _load_raw(name, str(data_dir_from(data_dir)), _download_allowed(download))


def _download_allowed(download: bool) -> bool:
    return download and os.environ.get("INPUTDP_NO_DOWNLOAD", "") in ("", "0")


def normalise(info: DatasetInfo, x: torch.Tensor) -> torch.Tensor:
    """Pixels (N C H W; uint8, or float in [0, 1]) to the model's input: (x / 255 - mean) / std per channel (no
    division for floats)."""
    mean = torch.tensor(info.mean).view(1, -1, 1, 1)
    std = torch.tensor(info.std).view(1, -1, 1, 1)
    scaled = x.float() / 255.0 if x.dtype == torch.uint8 else x.float()
    return (scaled - mean) / std


def blank_value(info: DatasetInfo) -> tuple[float, ...]:
    """What a pixel of value 0 becomes, per channel: computed by :func:`normalise` itself, so it is bit for bit
    the value every blank pixel of the loaded data holds (the ``mlp`` model measures its input from it)."""
    zero = torch.zeros((1, info.channels, 1, 1), dtype=torch.uint8)
    return tuple(float(v) for v in normalise(info, zero).flatten())


@functools.lru_cache(maxsize=8)
def raw_digest(name: str, root: str, download: bool = True) -> str:
    """The fingerprint of the arrays loaded now (once per process and data set)."""
    return fingerprint_of_arrays(_load_raw(name, root, download))
