"""Data: real MNIST from $INPUTDP_SHARED_DATA, and small files in the exact on-disk formats for the others."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch

from inputdp.benchmarks.sampling import batch_size_interval, epoch_lengths, poisson_batches
from inputdp.core.errors import ConfigError
from inputdp.datasets import load_tensor_data
from inputdp.datasets.tensor_data import _load_raw
from inputdp.methods.augment import random_crop_flip

from ..helpers import write_mnist


@pytest.fixture(autouse=True)
def _fresh_cache():
    _load_raw.cache_clear()
    yield
    _load_raw.cache_clear()


def test_mnist_real(shared_data):
    d = load_tensor_data("mnist", data_dir=str(shared_data), download=False)
    assert d.x_train.shape == (60000, 1, 28, 28) and d.x_test.shape == (10000, 1, 28, 28)
    assert d.y_train.dtype == torch.int64 and set(d.y_train.unique().tolist()) == set(range(10))
    assert abs(float(d.x_train.mean())) < 0.05 and abs(float(d.x_train.std()) - 1) < 0.05


def test_fashionmnist_real(shared_data):
    d = load_tensor_data("fashionmnist", data_dir=str(shared_data), download=False, train_examples=500)
    assert d.x_train.shape == (500, 1, 28, 28) and d.x_test.shape[0] == 10000


def test_subset_is_seed_independent():
    a = load_tensor_data("synthetic", download=False, train_examples=300)
    b = load_tensor_data("synthetic", download=False, train_examples=300)
    assert torch.equal(a.y_train, b.y_train)


def write_cifar10(root: Path, n_per_batch: int = 20, n_test: int = 30) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, n in [*[(f"data_batch_{i}", n_per_batch) for i in range(1, 6)], ("test_batch", n_test)]:
        entry = {"batch_label": name, "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 "labels": rng.integers(0, 10, n).tolist(), "filenames": [f"{i}.png" for i in range(n)]}
        with open(folder / name, "wb") as f:
            pickle.dump(entry, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"c{i}" for i in range(10)], "num_cases_per_batch": n_per_batch}, f)


def test_cifar10_pickled_batches(tmp_path, monkeypatch):
    import torchvision.datasets.cifar as cifar

    write_cifar10(tmp_path)
    # the files are ours, not the published ones, so only torchvision's md5 check is bypassed; parsing is real
    monkeypatch.setattr(cifar, "check_integrity", lambda path, md5=None: True)
    d = load_tensor_data("cifar10", data_dir=str(tmp_path), download=False)
    assert d.x_train.shape == (100, 3, 32, 32) and d.x_test.shape == (30, 3, 32, 32)


def test_svhn_mat(tmp_path, monkeypatch):
    import torchvision.datasets.svhn as svhn

    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("test", 25)):
        y = rng.integers(1, 11, (n, 1)).astype(np.uint8)  # SVHN's labels are 1..10, 10 meaning digit 0
        scipy.io.savemat(tmp_path / f"{split}_32x32.mat",
                         {"X": rng.integers(0, 256, (32, 32, 3, n), dtype=np.uint8), "y": y})
    monkeypatch.setattr(svhn, "check_integrity", lambda path, md5=None: True)
    d = load_tensor_data("svhn", data_dir=str(tmp_path), download=False)
    assert d.x_train.shape == (40, 3, 32, 32) and d.x_test.shape == (25, 3, 32, 32)
    assert int(d.y_train.max()) <= 9 and int(d.y_train.min()) >= 0


def test_dermamnist_npz(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", 7007), ("val", 1003), ("test", 2005)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, 28, 28, 3), dtype=np.uint8)
        arrays[f"{split}_labels"] = rng.integers(0, 7, (n, 1)).astype(np.uint8)
    np.savez(tmp_path / "dermamnist.npz", **arrays)
    d = load_tensor_data("dermamnist", data_dir=str(tmp_path), download=False)
    assert d.x_train.shape == (7007, 3, 28, 28) and d.x_test.shape == (2005, 3, 28, 28)


def test_dermamnist_wrong_split_size_is_corrupt(tmp_path):
    arrays = {}
    for split, n in (("train", 100), ("val", 10), ("test", 20)):
        arrays[f"{split}_images"] = np.zeros((n, 28, 28, 3), np.uint8)
        arrays[f"{split}_labels"] = np.zeros((n, 1), np.uint8)
    np.savez(tmp_path / "dermamnist.npz", **arrays)
    with pytest.raises(ConfigError, match="corrupt"):
        load_tensor_data("dermamnist", data_dir=str(tmp_path), download=False)


def test_missing_dataset_says_which_files_where(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_tensor_data("cifar10", data_dir=str(tmp_path), download=False)
    msg = str(info.value)
    assert "\n" not in msg and str(tmp_path) in msg and "cifar-10-batches-py" in msg


def test_corrupt_mnist_file(tmp_path):
    raw = write_mnist(tmp_path, n_train=200)
    f = raw / "train-images-idx3-ubyte"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigError, match="corrupt"):
        load_tensor_data("mnist", data_dir=str(tmp_path), download=False)


def test_poisson_batches_sizes_and_empty():
    g = torch.Generator().manual_seed(0)
    n, q = 5000, 0.02
    sizes = [len(b) for b in poisson_batches(n, q, 400, g)]
    lo, hi = batch_size_interval(n, q)
    assert all(lo <= s <= hi for s in sizes)
    assert abs(np.mean(sizes) - n * q) < 4 * np.sqrt(n * q * (1 - q) / 400)
    assert len(set(sizes)) > 10  # sizes vary
    tiny = [len(b) for b in poisson_batches(10, 0.05, 200, torch.Generator().manual_seed(1))]
    assert 0 in tiny  # a batch can be empty


def test_poisson_inclusion_is_independent_per_example():
    g = torch.Generator().manual_seed(3)
    n, q, steps = 50, 0.3, 4000
    counts = torch.zeros(n)
    for b in poisson_batches(n, q, steps, g):
        counts[b] += 1
    freq = counts / steps
    assert torch.all((freq - q).abs() < 5 * (q * (1 - q) / steps) ** 0.5)


def test_epoch_lengths():
    assert epoch_lengths(250 / 60000, 9600) == [240] * 40
    assert sum(epoch_lengths(250 / 73257, 11722)) == 11722


def test_random_crop_flip_keeps_content():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    out = random_crop_flip(x, torch.Generator().manual_seed(0), pad=2)
    assert out.shape == x.shape
    assert random_crop_flip(x[:0], torch.Generator()).shape[0] == 0
    same = random_crop_flip(x, torch.Generator().manual_seed(0), pad=0)
    assert all(torch.equal(same[i], x[i]) or torch.equal(same[i], x[i].flip(-1)) for i in range(2))


def test_poisson_indices_match_coin_flips_in_distribution():
    """Geometric-gap sampling against n independent coin flips: sizes Binomial(n, q), every index uniform."""
    from scipy import stats

    from inputdp.benchmarks.sampling import poisson_indices

    g = torch.Generator().manual_seed(5)
    n, q, reps = 200, 0.1, 3000
    sizes, counts = [], torch.zeros(n)
    for _ in range(reps):
        idx = poisson_indices(n, q, g)
        assert torch.all(idx[1:] > idx[:-1]) and (len(idx) == 0 or (idx.min() >= 0 and idx.max() < n))
        sizes.append(len(idx))
        counts[idx] += 1
    # batch sizes: chi-square goodness of fit to Binomial(n, q) over pooled bins
    observed = np.bincount(sizes, minlength=n + 1)
    expected = stats.binom.pmf(np.arange(n + 1), n, q) * reps
    lo, hi = 10, 30
    obs = [observed[:lo].sum(), *observed[lo:hi], observed[hi:].sum()]
    exp = [expected[:lo].sum(), *expected[lo:hi], expected[hi:].sum()]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # inclusion frequency of each index
    assert torch.all((counts / reps - q).abs() < 5 * (q * (1 - q) / reps) ** 0.5)
    assert torch.equal(poisson_indices(7, 1.0, g), torch.arange(7))
