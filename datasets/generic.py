"""Data sets given by path: ``folder:PATH`` (the ImageFolder layout) and ``npz:FILE`` (four arrays).

A user's own data (a clinic's images, a bank's records as images) run through the same harness as the built-in sets::

    folder:PATH    PATH/train/CLASS/*.png|jpg|...  and  PATH/test/CLASS/*  (without test/: PATH/train/CLASS or
                   PATH/CLASS, and a fixed-seed split of each class, which the run states)
    npz:FILE       x_train, y_train, x_test, y_test; uint8, or float in [0, 1]; N H W, N H W C or N C H W; grey or colour

Options follow a ``?``: ``size=N`` resizes every image to N x N (without it, images of several sizes, or not square,
are refused in one line), ``mean=`` and ``std=`` (one value, or one per channel) set the normalisation, which is
otherwise the fixed 0.5 (never an estimate from the private training set: THEORY.md, "Normalisation and the data's
identity"), and ``test_fraction=`` (folder without test/, default 0.2) the share of each class split off as the test set.
Classes are the folders' names in sorted order (torchvision's ImageFolder convention); labels are public.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import torch
from PIL import Image

from inputdp.core.errors import ConfigError

from .registry import DatasetInfo

KINDS = ("folder", "npz")
OPTIONS = ("size", "mean", "std", "test_fraction")
#: torchvision's ImageFolder extensions (the ones PIL reads)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
#: the folder split without test/ is drawn with this seed, whatever the run's seed
SPLIT_SEED = 20261202
DEFAULT_TEST_FRACTION = 0.2
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")


def is_path_spec(name: str) -> bool:
    return isinstance(name, str) and name.partition(":")[0] in KINDS and ":" in name


@dataclass(frozen=True)
class PathSpec:
    kind: str
    path: str  # absolute
    size: int = 0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    test_fraction: float = DEFAULT_TEST_FRACTION

    @property
    def text(self) -> str:
        """The canonical spelling: an absolute path and the options that were given, in a fixed order."""
        opts = []
        if self.size:
            opts.append(f"size={self.size}")
        if self.mean:
            opts.append("mean=" + ",".join(f"{v:g}" for v in self.mean))
        if self.std:
            opts.append("std=" + ",".join(f"{v:g}" for v in self.std))
        if self.test_fraction != DEFAULT_TEST_FRACTION:
            opts.append(f"test_fraction={self.test_fraction:g}")
        return f"{self.kind}:{self.path}" + ("?" + "&".join(opts) if opts else "")


def _floats(text: str, what: str, spec: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{what}={text!r} in {spec!r} is not allowed: give one number or one per channel, "
                          "comma-separated")
    return values


def parse(spec: str) -> PathSpec:
    """``folder:PATH[?opts]`` or ``npz:FILE[?opts]`` -> its parts, the path made absolute; one line on a bad one."""
    kind, _, rest = spec.partition(":")
    path, query = rest, ""
    if "?" in rest:
        head, _, tail = rest.rpartition("?")
        pairs = parse_qsl(tail, keep_blank_values=True)
        if pairs and all(k in OPTIONS for k, _ in pairs):
            path, query = head, tail
    if not path:
        raise ConfigError(f"--dataset {spec!r} is not allowed: give {kind}:PATH")
    options: dict = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key == "size":
            if not (value.isdigit() and 1 <= int(value) <= 4096):
                raise ConfigError(f"size={value!r} in {spec!r} is not allowed: it must be an integer in [1, 4096]")
            options["size"] = int(value)
        elif key in ("mean", "std"):
            options[key] = _floats(value, key, spec)
            if key == "std" and any(v <= 0 for v in options[key]):
                raise ConfigError(f"std={value!r} in {spec!r} is not allowed: each std must be > 0")
        else:
            try:
                fraction = float(value)
            except ValueError:
                fraction = -1.0
            if not 0 < fraction < 1:
                raise ConfigError(f"test_fraction={value!r} in {spec!r} is not allowed: it must be in (0, 1)")
            options["test_fraction"] = fraction
    return PathSpec(kind, str(Path(path).expanduser().resolve()), **options)


def canonical(spec: str) -> str:
    """The name a run records for a data set given by path (absolute, options in order)."""
    return parse(spec).text


# -- folder ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _FolderLayout:
    classes: tuple[str, ...]
    train: tuple[tuple[str, int], ...]  # (file, label)
    test: tuple[tuple[str, int], ...]
    split_note: str


def _images_in(folder: Path) -> list[str]:
    return sorted(str(f) for f in folder.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS)


def _class_folders(folder: Path) -> list[Path]:
    return sorted((d for d in folder.iterdir() if d.is_dir() and d.name not in ("train", "test")), key=lambda d: d.name)


def _layout(spec: PathSpec) -> _FolderLayout:
    root = Path(spec.path)
    expected = f"expected {root}/train/CLASS/*.png (and {root}/test/CLASS/*.png)"
    if not root.is_dir():
        raise ConfigError(f"folder:{root} is not allowed: {root} is not a folder; {expected}")
    train_dir = root / "train" if (root / "train").is_dir() else root
    test_dir = root / "test" if (root / "test").is_dir() else None
    classes = [d.name for d in _class_folders(train_dir)]
    if len(classes) < 2:
        raise ConfigError(f"folder:{root} holds {len(classes)} class folder(s) under {train_dir}: a classifier needs "
                          f"at least 2; {expected}")
    label = {c: i for i, c in enumerate(classes)}
    train = [(f, label[c]) for c in classes for f in _images_in(train_dir / c)]
    empty = [c for c in classes if not _images_in(train_dir / c)]
    if empty:
        raise ConfigError(f"folder:{root}: class folder {train_dir / empty[0]} holds no images "
                          f"({', '.join(IMAGE_EXTENSIONS)})")
    if test_dir is not None:
        extra = [d.name for d in _class_folders(test_dir) if d.name not in label]
        if extra:
            raise ConfigError(f"folder:{root}: test class {extra[0]!r} has no training folder (classes: "
                              f"{', '.join(classes)})")
        test = [(f, label[d.name]) for d in _class_folders(test_dir) for f in _images_in(d)]
        if not test:
            raise ConfigError(f"folder:{root}: {test_dir} holds no images; {expected}")
        return _FolderLayout(tuple(classes), tuple(train), tuple(test), "")
    g = np.random.default_rng(SPLIT_SEED)
    kept, held = [], []
    for c in range(len(classes)):
        mine = [item for item in train if item[1] == c]
        n_test = min(len(mine) - 1, max(1, round(spec.test_fraction * len(mine)))) if len(mine) > 1 else 0
        order = g.permutation(len(mine))
        held += [mine[i] for i in sorted(order[:n_test])]
        kept += [mine[i] for i in sorted(order[n_test:])]
    note = (f"{root} has no test/ folder: {len(held)} of its {len(train)} images ({spec.test_fraction:.0%} of each "
            f"class, drawn with seed {SPLIT_SEED}) are the test split, the other {len(kept)} the training split")
    return _FolderLayout(tuple(classes), tuple(kept), tuple(held), note)


def _image_header(path: str) -> tuple[tuple[int, int], bool]:
    try:
        with Image.open(path) as im:
            return im.size, im.mode in _GREY_MODES
    except Exception as err:  # noqa: BLE001 - any unreadable image: one line naming it
        raise ConfigError(f"image {path} cannot be read: {type(err).__name__}: {err}".replace("\n", " ")) from None


def _size_or_refuse(spec: PathSpec, sizes: set[tuple[int, int]], where: str) -> int:
    if spec.size:
        return spec.size
    if len(sizes) == 1:
        (w, h), = sizes
        if w == h:
            return w
    shown = ", ".join(f"{w}x{h}" for w, h in sorted(sizes)[:4]) + (", ..." if len(sizes) > 4 else "")
    raise ConfigError(f"{where} holds images of size {shown}: every model takes square images of one size; pass "
                      f"{spec.kind}:{spec.path}?size=N to resize them all to N x N")


def _stats(spec: PathSpec, channels: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    out = []
    for name, given in (("mean", spec.mean), ("std", spec.std)):
        if not given:
            out.append((0.5,) * channels)
        elif len(given) == 1:
            out.append(given * channels)
        elif len(given) == channels:
            out.append(given)
        else:
            raise ConfigError(f"{name}={','.join(map(str, given))} in {spec.text!r} is not allowed: give one value or "
                              f"{channels} (one per channel)")
    return out[0], out[1]


def _normalisation_note(spec: PathSpec) -> str:
    return "given with the data set" if spec.mean or spec.std else "fixed 0.5 (not estimated from the private data)"


@functools.lru_cache(maxsize=16)
def _folder_info(spec: PathSpec) -> DatasetInfo:
    layout = _layout(spec)
    headers = [_image_header(f) for f, _ in layout.train + layout.test]
    sizes = {s for s, _ in headers}
    size = _size_or_refuse(spec, sizes, f"folder:{spec.path}")
    channels = 1 if all(grey for _, grey in headers) else 3
    mean, std = _stats(spec, channels)
    notes = [layout.split_note] if layout.split_note else []
    if sizes != {(size, size)}:
        notes.append(f"{spec.path}: images resized to {size}x{size} (bilinear)")
    return DatasetInfo(
        name=spec.text, target="inputdp.datasets.generic:load_folder", location=spec.text,
        summary=f"your images in {spec.path}: {len(layout.classes)} classes ({', '.join(layout.classes[:5])}"
                f"{', ...' if len(layout.classes) > 5 else ''}), {'grey' if channels == 1 else 'colour'} {size}x{size}",
        num_classes=len(layout.classes), channels=channels, size=size, train_size=len(layout.train),
        test_size=len(layout.test), mean=mean, std=std, paths=("**/*",), normalisation=_normalisation_note(spec),
        files=f"{spec.path}/train/CLASS/*.png and {spec.path}/test/CLASS/*.png", notes=tuple(notes))


def load_folder(location: str, download: bool):
    """The folder's images as uint8 N C H W and their labels (classes in sorted folder order)."""
    del download

    spec = parse(location)
    info = _folder_info(spec)
    layout = _layout(spec)
    mode = "L" if info.channels == 1 else "RGB"

    def read(items):
        xs = []
        for path, _ in items:
            try:
                with Image.open(path) as im:
                    im = im.convert(mode)
                    if im.size != (info.size, info.size):
                        im = im.resize((info.size, info.size), Image.BILINEAR)
                    xs.append(np.asarray(im, dtype=np.uint8))
            except Exception as err:  # noqa: BLE001 - a header that reads but pixels that do not (a truncated file)
                raise ConfigError(f"image {path} cannot be read: {type(err).__name__}: {err}".replace("\n", " ")) from None
        x = torch.from_numpy(np.stack(xs))
        x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
        return x.contiguous(), torch.tensor([label for _, label in items], dtype=torch.int64)

    return (*read(layout.train), *read(layout.test))


# -- npz -------------------------------------------------------------------------------------------------------------
def _read_npz(spec: PathSpec) -> dict[str, np.ndarray]:
    where = f"npz:{spec.path}"
    if not os.path.isfile(spec.path):
        raise ConfigError(f"{where} is not allowed: {spec.path} is not a file; expected an .npz with "
                          f"{', '.join(NPZ_KEYS)}")
    try:
        with np.load(spec.path, allow_pickle=False) as f:
            missing = [k for k in NPZ_KEYS if k not in f.files]
            if missing:
                raise ConfigError(f"{where} lacks {', '.join(missing)}: it must hold {', '.join(NPZ_KEYS)} "
                                  f"(it holds {', '.join(f.files) or 'nothing'})")
            return {k: f[k] for k in NPZ_KEYS}
    except ConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - not an npz, truncated, pickled objects
        raise ConfigError(f"{where} cannot be read as .npz: {type(err).__name__}: {err}".replace("\n", " ")) from None


def _images(x: np.ndarray, key: str, where: str) -> torch.Tensor:
    if x.dtype == np.uint8:
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif np.issubdtype(x.dtype, np.floating):
        if x.size and (not np.isfinite(x).all() or x.min() < 0 or x.max() > 1):
            raise ConfigError(f"{where}: {key} holds floats outside [0, 1] (min {np.nanmin(x):g}, max {np.nanmax(x):g}):"
                              " give uint8 pixels, or floats in [0, 1]")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    else:
        raise ConfigError(f"{where}: {key} has dtype {x.dtype}: give uint8 pixels, or floats in [0, 1]")
    if t.ndim == 3:
        return t.unsqueeze(1)
    if t.ndim == 4 and t.shape[-1] in (1, 3):
        return t.permute(0, 3, 1, 2)
    if t.ndim == 4 and t.shape[1] in (1, 3):
        return t
    raise ConfigError(f"{where}: {key} has shape {tuple(x.shape)}: give N H W (grey), N H W C or N C H W with C = 1 or 3")


def _npz_labels(y: np.ndarray, n: int, key: str, where: str) -> torch.Tensor:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != n:
        raise ConfigError(f"{where}: {key} has shape {tuple(y.shape)}: give one integer label per image ({n})")
    if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0))):
        raise ConfigError(f"{where}: {key} holds non-integer labels (dtype {y.dtype}): give class indices 0..K-1")
    if y.size and y.min() < 0:
        raise ConfigError(f"{where}: {key} holds a negative label ({int(y.min())}): give class indices 0..K-1")
    return torch.from_numpy(y.astype(np.int64))


def _resize(x: torch.Tensor, size: int) -> torch.Tensor:
    if tuple(x.shape[-2:]) == (size, size):
        return x
    y = torch.nn.functional.interpolate(x.float() if x.dtype == torch.uint8 else x, size=(size, size), mode="bilinear",
                                        align_corners=False, antialias=True)
    return y.round().clamp(0, 255).to(torch.uint8) if x.dtype == torch.uint8 else y.clamp(0, 1)


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _npz_arrays(spec: PathSpec):
    """The arrays, read once per version of the file: the info and the loader share one read, and a rewritten file
    is read again (the cache is keyed by its size and modification time)."""
    if not os.path.isfile(spec.path):
        _read_npz(spec)  # the one-line refusal
    return _npz_arrays_at(spec, _stamp(spec.path))


@functools.lru_cache(maxsize=2)
def _npz_arrays_at(spec: PathSpec, stamp: tuple[int, int]):
    where = f"npz:{spec.path}"
    raw = _read_npz(spec)
    x_tr, x_te = _images(raw["x_train"], "x_train", where), _images(raw["x_test"], "x_test", where)
    y_tr = _npz_labels(raw["y_train"], x_tr.shape[0], "y_train", where)
    y_te = _npz_labels(raw["y_test"], x_te.shape[0], "y_test", where)
    if x_tr.shape[1] != x_te.shape[1]:
        raise ConfigError(f"{where}: x_train has {x_tr.shape[1]} channel(s), x_test {x_te.shape[1]}: they must agree")
    if x_tr.dtype != x_te.dtype:
        raise ConfigError(f"{where}: x_train is {x_tr.dtype}, x_test {x_te.dtype}: give both as uint8 or both as float")
    if x_tr.shape[0] == 0 or x_te.shape[0] == 0:
        raise ConfigError(f"{where}: {'x_train' if x_tr.shape[0] == 0 else 'x_test'} holds no images")
    sizes = {(int(x.shape[3]), int(x.shape[2])) for x in (x_tr, x_te)}
    size = _size_or_refuse(spec, sizes, where)
    return _resize(x_tr, size), y_tr, _resize(x_te, size), y_te, sizes


@functools.lru_cache(maxsize=16)
def _npz_info_at(spec: PathSpec, stamp: tuple[int, int]) -> DatasetInfo:
    x_tr, y_tr, x_te, y_te, sizes = _npz_arrays_at(spec, stamp)
    channels, size = int(x_tr.shape[1]), int(x_tr.shape[2])
    classes = int(max(y_tr.max(), y_te.max())) + 1
    mean, std = _stats(spec, channels)
    notes = (f"{spec.path}: images resized to {size}x{size} (bilinear)",) if sizes != {(size, size)} else ()
    return DatasetInfo(
        name=spec.text, target="inputdp.datasets.generic:load_npz", location=spec.text,
        summary=f"your arrays in {spec.path}: {classes} classes, {'grey' if channels == 1 else 'colour'} {size}x{size}",
        num_classes=classes, channels=channels, size=size, train_size=int(x_tr.shape[0]), test_size=int(x_te.shape[0]),
        mean=mean, std=std, paths=("",), normalisation=_normalisation_note(spec),
        files=f"{spec.path} with {', '.join(NPZ_KEYS)}", notes=notes)


def load_npz(location: str, download: bool):
    del download
    x_tr, y_tr, x_te, y_te, _ = _npz_arrays(parse(location))
    return x_tr.contiguous(), y_tr, x_te.contiguous(), y_te


def _npz_info(spec: PathSpec) -> DatasetInfo:
    if not os.path.isfile(spec.path):
        _read_npz(spec)
    return _npz_info_at(spec, _stamp(spec.path))


def info_for(spec: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a data set given by path (a folder read once per process and spelling; an .npz once
    per version of the file)."""
    parsed = parse(spec)
    return _folder_info(parsed) if parsed.kind == "folder" else _npz_info(parsed)
