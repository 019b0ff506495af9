"""What ``--dataset NAME`` names: a registered data set (built in or a plug-in) or one given by path."""

from __future__ import annotations

from pathlib import Path

from inputdp.core.errors import ConfigError

from .generic import canonical, info_for, is_path_spec
from .registry import DATASETS, MEDMNIST_MULTILABEL, DatasetInfo


def dataset_info(name: str) -> DatasetInfo:
    """What ``--dataset NAME`` names: a registered data set (built in or a plug-in), or one given by path
    (``folder:PATH``, ``npz:FILE``: ``datasets.generic``), read once; a one-line error for anything else."""
    if is_path_spec(name):
        return info_for(name)
    if name in MEDMNIST_MULTILABEL:
        raise ConfigError(f"data set {name!r} is not allowed: {MEDMNIST_MULTILABEL[name]}, and every method here trains "
                          "on one label per image")
    try:
        return DATASETS.get(name)
    except ConfigError as err:
        if name in DATASETS.broken():
            raise

        path = Path(name).expanduser()
        if path.is_dir() or (path.is_file() and path.suffix == ".npz"):  # a path without its kind: say which
            kind = "folder" if path.is_dir() else "npz"
            raise ConfigError(f"data set {name!r} is not allowed: a path needs its kind, --dataset {kind}:{name}") from None
        raise ConfigError(f"{err}; or your own data as folder:PATH or npz:FILE "
                          "(README, \"Your own data\")") from None


def canonical_name(name: str) -> str:
    """The name a run records: a registered name as it is, a data set given by path with its absolute path (and its
    options in a fixed order); refused in one line when it names nothing."""
    info = dataset_info(name)
    return canonical(name) if is_path_spec(name) else info.name
