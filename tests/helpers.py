"""Shared builders for tests: smoke configurations, on the generated ``synthetic`` set unless a test asks for
another (so that they run on every clone, with or without real data on disk)."""

from __future__ import annotations

import struct
from pathlib import Path

from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core import names
from inputdp.core.config import PerfFlags

#: a run on the CPU without progress bars: what most tests pass as ``perf``
QUIET = PerfFlags(device="cpu", progress=False)

#: the runs that hold no training: a sweep's or a study's parent run
PARENTS = (names.KIND_SWEEP, names.KIND_STUDY)


def not_parents(runs) -> list:
    """The runs that are not a sweep's or study's parent (``bench run`` nests its runs under one)."""
    return [r for r in runs if r.data.tags.get(names.TAG_KIND) not in PARENTS]


def smoke_config(method: str, data_dir=None, *, epsilon: float = 2.0, seed: int = 0, epochs: int = 1,
                 dataset: str = "synthetic", **overrides):
    return build_config(method=method, dataset=dataset, preset="smoke", epsilon=epsilon, seed=seed,
                        overrides=Overrides(epochs=epochs, data_dir=str(data_dir) if data_dir else None, **overrides))


def idx_file(magic: int, dims: tuple[int, ...], payload: bytes) -> bytes:
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload


def write_mnist(root: Path, n_train: int = 64, n_test: int = 32) -> Path:
    """A small MNIST in torchvision's on-disk layout (idx files under MNIST/raw), valid unless changed after."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        (raw / f"{split}-images-idx3-ubyte").write_bytes(idx_file(0x0803, (n, 28, 28), bytes((i * 7) % 256
                                                                                          for i in range(n * 784))))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(idx_file(0x0801, (n,), bytes(i % 10 for i in range(n))))
    return raw
