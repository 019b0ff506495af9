"""The data as part of a run's identity: a content fingerprint of the arrays a run trains and tests on.

Two different data under one name (a user's images written in MNIST's files, say) are two configurations, never one
row. The fingerprint is a BLAKE2b digest of the arrays exactly as the source hands them over (dtype, shape, bytes;
before any subset, which the run's configuration names with its fixed seed). Hashing MNIST takes a fraction of a
second, decoding it a few; so the digest is cached per data set by the sizes and modification times of the files it
was read from (``DatasetInfo.paths``), in ``$INPUTDP_CACHE`` (default: the user cache directory): on a rerun it
costs a few ``stat`` calls. A file rewritten in place with the same size and modification time would keep a stale
digest; the cache keys by nanosecond mtime, which every write moves.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .fingerprint import VERSION, fingerprint_of_arrays
from .generic import parse
from .lookup import dataset_info
from .registry import DatasetInfo, data_dir_from, user_cache_dir
from .tensor_data import check_contents, load_raw, raw_digest


def cache_file() -> Path:
    base = os.environ.get("INPUTDP_CACHE")
    if base:
        return Path(base).expanduser() / "fingerprints.json"
    return user_cache_dir() / "fingerprints.json"


def _source_files(info: DatasetInfo, root: Path) -> list[list]:
    """[relative path, size, mtime_ns] of each file the data set is read from, sorted; [] when it names none."""
    out = []
    for pattern in info.paths:
        found = [root] if pattern == "" else sorted(root.glob(pattern))
        for f in found:
            if f.is_file():
                st = f.stat()
                out.append([str(f.relative_to(root)) if pattern else f.name, st.st_size, st.st_mtime_ns])
    return sorted(out)


def _read_cache(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(path: Path, key: str, entry: dict) -> None:
    """Atomic: a concurrent writer loses at most its own entry (the next run computes it again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache = _read_cache(path)
        cache[key] = entry
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=0, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache directory costs a hash per process, nothing else


@dataclass(frozen=True)
class DataFacts:
    """What a run must know of its data before any store opens: their fingerprint and split sizes (the labels were
    checked in range when these were computed; only data that pass the loaders' checks are cached)."""

    fingerprint: str
    train_size: int
    test_size: int


def data_facts(name: str, data_dir: str | None = None, *, download: bool = True) -> DataFacts:
    """The facts of data set ``name`` as it would be loaded now (from the cache when its files are unchanged)."""

    info = dataset_info(name)
    if info.location:
        spec = parse(info.location)
        root = Path(spec.path)
    else:
        root = data_dir_from(data_dir)
    files = _source_files(info, root) if root.exists() else []
    key = f"{info.name}|{root.resolve() if root.exists() else root}"
    path = cache_file()
    if files:
        entry = _read_cache(path).get(key)
        if entry and entry.get("version") == VERSION and entry.get("files") == files and "train_size" in entry:
            return DataFacts(str(entry["digest"]), int(entry["train_size"]), int(entry["test_size"]))
    where = str(data_dir_from(data_dir))
    x_tr, y_tr, x_te, y_te = load_raw(name, data_dir, download=download)
    check_contents(info, info.location or where, x_tr, y_tr, x_te, y_te)
    facts = DataFacts(raw_digest(name, where, download), int(x_tr.shape[0]), int(x_te.shape[0]))
    if files:
        _write_cache(path, key, {"version": VERSION, "files": files, "digest": facts.fingerprint,
                                 "train_size": facts.train_size, "test_size": facts.test_size})
    return facts


def data_fingerprint(name: str, data_dir: str | None = None, *, download: bool = True) -> str:
    """The fingerprint of data set ``name`` as it would be loaded now (from the cache when its files are unchanged)."""
    return data_facts(name, data_dir, download=download).fingerprint


__all__ = ["VERSION", "DataFacts", "cache_file", "data_facts", "data_fingerprint", "fingerprint_of_arrays", "raw_digest"]
