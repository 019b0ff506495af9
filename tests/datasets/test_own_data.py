"""A user's own data: folder:PATH and npz:FILE, the MedMNIST sets (offline, in medmnist's exact file format), the
generated synthetic set, and the data as part of a run's identity (content fingerprint, MLflow input, rows)."""

from __future__ import annotations

import math

import mlflow
import numpy as np
import pytest
import torch
from PIL import Image

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.models import MODELS, build_model
from inputdp.benchmarks.resolve import check_feasible, resolve, with_checked_data
from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core.errors import ConfigError
from inputdp.datasets import DATASETS, canonical_name, dataset_info, load_tensor_data
from inputdp.datasets import facts as fp
from inputdp.datasets.generic import SPLIT_SEED
from inputdp.datasets.registry import MEDMNIST
from inputdp.datasets.sources import load_synthetic
from inputdp.datasets.tensor_data import _load_raw
from inputdp.reports.leaderboard import leaderboard, load_runs, tidy

from ..helpers import not_parents, write_mnist


@pytest.fixture(autouse=True)
def _fresh_caches():
    _load_raw.cache_clear()
    fp.raw_digest.cache_clear()
    yield
    _load_raw.cache_clear()
    fp.raw_digest.cache_clear()


def arrays(n_train=60, n_test=30, classes=3, size=28):
    """Class-dependent patterns (the synthetic set's generator at a small size), uint8 N 1 H W."""
    return load_synthetic("", False, train=n_train, test=n_test, classes=classes, size=size)


def write_folder(root, x_tr, y_tr, x_te=None, y_te=None, *, colour=False, names=("class0", "class1", "class2")):
    for split, x, y in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        if x is None:
            continue
        for i, (img, label) in enumerate(zip(x, y)):
            folder = root / split / names[int(label)]
            folder.mkdir(parents=True, exist_ok=True)
            a = img[0].numpy()
            im = Image.fromarray(np.stack([a, a // 2, 255 - a], -1) if colour else a)
            im.save(folder / f"{i:04d}.png")
    return root


def in_folder_order(x, y):
    """The order a folder is read in: by class (sorted folder names), then by file name."""
    order = sorted(range(len(y)), key=lambda i: (int(y[i]), i))
    return x[order], y[order]


# --- folder:PATH --------------------------------------------------------------------------------------------------
def test_folder_reads_every_image_exactly_with_its_class(tmp_path):
    x_tr, y_tr, x_te, y_te = arrays()
    write_folder(tmp_path / "mine", x_tr, y_tr, x_te, y_te)
    info = dataset_info(f"folder:{tmp_path / 'mine'}")
    assert (info.num_classes, info.channels, info.size, info.train_size, info.test_size) == (3, 1, 28, 60, 30)
    assert info.mean == (0.5,) and info.std == (0.5,) and "not estimated" in info.normalisation
    raw = _load_raw(info.name, str(tmp_path), False)
    for got, want in zip(raw, (*in_folder_order(x_tr, y_tr), *in_folder_order(x_te, y_te))):
        assert torch.equal(got, want)  # PNG is lossless: every pixel, every label
    d = load_tensor_data(f"folder:{tmp_path / 'mine'}")
    assert torch.allclose(d.x_train, (raw[0].float() / 255 - 0.5) / 0.5)  # the fixed 0.5, not the data's own mean


def test_folder_without_test_split_is_drawn_once_and_said(tmp_path, capsys):
    x_tr, y_tr, _, _ = arrays(n_train=100)
    write_folder(tmp_path / "mine", x_tr, y_tr)
    info = dataset_info(f"folder:{tmp_path / 'mine'}")
    assert info.train_size + info.test_size == 100 and 18 <= info.test_size <= 22
    assert f"seed {SPLIT_SEED}" in info.notes[0] and "no test/ folder" in info.notes[0]
    d = load_tensor_data(f"folder:{tmp_path / 'mine'}")
    assert "no test/ folder" in capsys.readouterr().err and d.notes[0] == info.notes[0]
    train_labels = d.y_train.bincount(minlength=3)
    assert (d.y_test.bincount(minlength=3) > 0).all() and (train_labels > 0).all()  # every class on both sides
    again = dataset_info(f"folder:{tmp_path / 'mine'}?test_fraction=0.2")  # the default, spelled out
    assert again.name == info.name


def test_folder_of_several_sizes_is_refused_or_resized(tmp_path):
    x_tr, y_tr, x_te, y_te = arrays()
    root = write_folder(tmp_path / "mine", x_tr, y_tr, x_te, y_te)
    Image.fromarray(np.zeros((30, 32), np.uint8)).save(root / "train" / "class1" / "odd.png")
    with pytest.raises(ConfigError, match=r"28x28, 32x30.*\?size=N") as err:
        dataset_info(f"folder:{root}")
    assert "\n" not in str(err.value)
    info = dataset_info(f"folder:{root}?size=20")
    assert info.size == 20 and any("resized to 20x20" in n for n in info.notes)
    d = load_tensor_data(info.name)
    assert d.x_train.shape == (61, 1, 20, 20)


def test_colour_folder_and_a_model_that_refuses_a_small_size(tmp_path):
    x_tr, y_tr, x_te, y_te = arrays(size=12)
    root = write_folder(tmp_path / "mine", x_tr, y_tr, x_te, y_te, colour=True)
    info = dataset_info(f"folder:{root}?mean=0.4,0.5,0.6&std=0.2")
    assert info.channels == 3 and info.mean == (0.4, 0.5, 0.6) and info.std == (0.2,) * 3
    assert info.normalisation == "given with the data set"
    with pytest.raises(ConfigError, match=r"tanh_cnn.*12x12.*at least 16x16") as err:
        build_model("tanh_cnn", num_classes=3, channels=3, size=12, norm="group")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", MODELS.names())
def test_every_model_takes_its_smallest_size_and_a_larger_one(name):
    info = MODELS.get(name)
    for channels in (1, 3):
        for size in (info.min_size if info.min_size > 1 else 2, 2 * max(info.min_size, 8) + 3):
            model = build_model(name, num_classes=4, channels=channels, size=size, norm="group")
            model.train()
            assert model(torch.zeros(2, channels, size, size)).shape == (2, 4)
    if info.min_size > 1:
        with pytest.raises(ConfigError, match="at least"):
            build_model(name, num_classes=4, channels=1, size=info.min_size - 1, norm="group")


def _ghost_test_class(r):
    write_folder(r / "t", *arrays()[:2])
    (r / "t" / "test" / "ghost").mkdir(parents=True)
    Image.fromarray(np.zeros((28, 28), np.uint8)).save(r / "t" / "test" / "ghost" / "a.png")
    return r / "t"


def _unreadable_image(r):
    write_folder(r / "b", *arrays()[:2])
    (r / "b" / "train" / "class0" / "bad.png").write_bytes(b"no")
    return r / "b"


def _one_class(r):
    (r / "one" / "train" / "only").mkdir(parents=True)
    return r / "one"


def test_a_truncated_image_is_named(tmp_path):
    """A PNG whose header reads but whose pixels are cut off: the one-line error names the file."""
    from inputdp.datasets import load_tensor_data

    write_folder(tmp_path / "t", *arrays()[:2])
    root = tmp_path / "t"
    png = sorted((root / "train").rglob("*.png"))[0]
    png.write_bytes(png.read_bytes()[:60])
    with pytest.raises(ConfigError, match=f"image {png} cannot be read") as err:
        load_tensor_data(f"folder:{root}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("make,expected", [
    (lambda r: r / "absent", "is not a folder"),
    (_one_class, "at least 2"),
    (_ghost_test_class, "test class 'ghost' has no training folder"),
    (_unreadable_image, "bad.png cannot be read"),
])
def test_bad_folders_are_one_line(tmp_path, make, expected):
    root = make(tmp_path)
    with pytest.raises(ConfigError, match=expected) as err:
        dataset_info(f"folder:{root}")
    assert "\n" not in str(err.value)


# --- npz:FILE -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["NHW", "NHWC", "NCHW", "float"])
def test_npz_layouts_and_dtypes(tmp_path, layout):
    x_tr, y_tr, x_te, y_te = arrays()
    a, b = x_tr[:, 0].numpy(), x_te[:, 0].numpy()
    if layout == "NHWC":
        a, b = a[..., None], b[..., None]
    elif layout == "NCHW":
        a, b = a[:, None], b[:, None]
    elif layout == "float":
        a, b = a.astype(np.float32) / 255, b.astype(np.float32) / 255
    np.savez(tmp_path / "d.npz", x_train=a, y_train=y_tr.numpy()[:, None], x_test=b, y_test=y_te.numpy())
    d = load_tensor_data(f"npz:{tmp_path / 'd.npz'}")
    assert d.x_train.shape == (60, 1, 28, 28) and d.info.num_classes == 3
    assert torch.allclose(d.x_train, (x_tr.float() / 255 - 0.5) / 0.5, atol=1e-6)
    assert torch.equal(d.y_train, y_tr)


@pytest.mark.parametrize("change,expected", [
    (lambda d: d.pop("y_test"), "lacks y_test"),
    (lambda d: d.update(x_train=d["x_train"].astype(np.float32) / 255), "x_train is torch.float32, x_test torch.uint8"),
    (lambda d: d.update(x_train=d["x_train"].astype(np.float32) * 2, x_test=d["x_test"].astype(np.float32)),
     "floats outside"),
    (lambda d: d.update(y_train=d["y_train"] + 0.5), "non-integer labels"),
    (lambda d: d.update(y_train=d["y_train"] - 1), "negative label"),
    (lambda d: d.update(x_train=d["x_train"].astype(np.int32)), "dtype int32"),
    (lambda d: d.update(y_train=d["y_train"][:5]), "one integer label per image"),
    (lambda d: d.update(x_test=d["x_test"][:, :20]), r"28x20, 28x28.*\?size=N"),
])
def test_bad_npz_is_one_line(tmp_path, change, expected):
    x_tr, y_tr, x_te, y_te = arrays()
    d = {"x_train": x_tr[:, 0].numpy(), "y_train": y_tr.numpy(), "x_test": x_te[:, 0].numpy(), "y_test": y_te.numpy()}
    change(d)
    np.savez(tmp_path / "d.npz", **d)
    with pytest.raises(ConfigError, match=expected) as err:
        dataset_info(f"npz:{tmp_path / 'd.npz'}")
    assert "\n" not in str(err.value)


def test_unknown_names_and_bad_specs_say_how_to_bring_data(tmp_path):
    (tmp_path / "d.npz").write_bytes(b"")
    for name, expected in ((str(tmp_path / "absent"), "folder:PATH or npz:FILE"),
                           (str(tmp_path), f"--dataset folder:{tmp_path}"), (str(tmp_path / "d.npz"), "--dataset npz:"),
                           ("imagefolder", "folder:PATH"),
                           ("chestmnist", "multi-label"), (f"folder:{tmp_path}?size=0", "size='0'"),
                           (f"npz:{tmp_path}/x.npz?std=0", "std='0'"), (f"npz:{tmp_path}/x.npz", "is not a file")):
        with pytest.raises(ConfigError, match=expected) as err:
            dataset_info(name)
        assert "\n" not in str(err.value)


def test_bench_run_refuses_a_bad_folder_before_any_store_is_opened(tmp_path, capsys):
    code = main(["run", "--methods", "nonprivate", "--dataset", f"folder:{tmp_path / 'nothing'}", "--preset", "smoke",
                 "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is not a folder" in err
    assert not (tmp_path / "m.db").exists()
    x_tr, y_tr, x_te, y_te = arrays(size=12)
    write_folder(tmp_path / "small", x_tr, y_tr, x_te, y_te)
    code = main(["run", "--methods", "nonprivate", "--dataset", f"folder:{tmp_path / 'small'}", "--model", "tanh_cnn",
                 "--preset", "smoke", "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "at least 16x16" in err and not (tmp_path / "m.db").exists()


# --- MedMNIST, offline --------------------------------------------------------------------------------------------
def write_medmnist(root, flag: str, channels: int, counts: dict[str, int], classes: int, seed: int = 0):
    """An .npz exactly as medmnist's loader reads it: {split}_images (N 28 28 [3], uint8), {split}_labels (N 1)."""
    g = np.random.default_rng(seed)
    arrays_ = {}
    for split, n in counts.items():
        shape = (n, 28, 28, 3) if channels == 3 else (n, 28, 28)
        arrays_[f"{split}_images"] = g.integers(0, 256, shape, dtype=np.uint8)
        arrays_[f"{split}_labels"] = g.integers(0, classes, (n, 1)).astype(np.uint8)
    np.savez_compressed(root / f"{flag}.npz", **arrays_)
    return arrays_


def test_registered_medmnist_sets_agree_with_medmnist_info():
    from medmnist import INFO

    for flag, class_name, channels, train, test, classes, _ in MEDMNIST:
        info, theirs = DATASETS.get(flag), INFO[flag]
        assert theirs["python_class"] == class_name and theirs["n_channels"] == channels == info.channels
        assert theirs["n_samples"]["train"] == train == info.train_size
        assert theirs["n_samples"]["test"] == test == info.test_size
        assert len(theirs["label"]) == classes == info.num_classes
        assert "multi-label" not in theirs["task"]
    two_d = {k for k in INFO if not k.endswith("3d")}
    assert two_d == {m[0] for m in MEDMNIST} | {"chestmnist"}  # every 2-D set, chestmnist refused


@pytest.mark.parametrize("flag,channels,counts,classes", [
    ("breastmnist", 1, {"train": 546, "val": 78, "test": 156}, 2),
    ("retinamnist", 3, {"train": 1080, "val": 120, "test": 400}, 5),
])
def test_medmnist_set_loads_offline_through_medmnist(tmp_path, flag, channels, counts, classes):
    written = write_medmnist(tmp_path, flag, channels, counts, classes)
    d = load_tensor_data(flag, data_dir=str(tmp_path), download=False)
    assert d.x_train.shape == (counts["train"], channels, 28, 28) and d.x_test.shape[0] == counts["test"]
    want = torch.from_numpy(written["train_images"])
    want = want.unsqueeze(1) if channels == 1 else want.permute(0, 3, 1, 2)
    assert torch.allclose(d.x_train, (want.float() / 255 - 0.5) / 0.5)
    assert torch.equal(d.y_train, torch.from_numpy(written["train_labels"][:, 0].astype(np.int64)))


def test_medmnist_file_of_the_wrong_size_is_one_line(tmp_path):
    write_medmnist(tmp_path, "breastmnist", 1, {"train": 100, "val": 10, "test": 20}, 2)
    with pytest.raises(ConfigError, match="breastmnist") as err:
        load_tensor_data("breastmnist", data_dir=str(tmp_path), download=False)
    assert "\n" not in str(err.value)


# --- synthetic ------------------------------------------------------------------------------------------------------
def test_synthetic_is_deterministic_and_fast():
    import time

    t0 = time.perf_counter()
    a = load_synthetic("", False)
    elapsed = time.perf_counter() - t0
    b = load_synthetic("", False)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and elapsed < 10
    x_tr, y_tr, _, _ = a
    assert x_tr.shape == (6000, 1, 28, 28) and x_tr.dtype == torch.uint8
    assert y_tr.bincount().tolist() == [600] * 10
    ring = torch.ones(28, 28, dtype=torch.bool)
    ring[2:-2, 2:-2] = False
    assert int(x_tr[:, 0][:, ring].max()) == 0  # an outer ring blank in every image (the exclusive-support canaries)


# --- the data in a run's identity -----------------------------------------------------------------------------------
def test_fingerprint_is_cached_by_file_stat_and_follows_a_change(tmp_path, monkeypatch):
    x_tr, y_tr, x_te, y_te = arrays()
    np.savez(tmp_path / "d.npz", x_train=x_tr[:, 0].numpy(), y_train=y_tr.numpy(), x_test=x_te[:, 0].numpy(),
             y_test=y_te.numpy())
    name = f"npz:{tmp_path / 'd.npz'}"
    first = fp.data_fingerprint(name)
    assert first == fp.fingerprint_of_arrays((x_tr, y_tr, x_te, y_te))  # the arrays, as the source gives them
    fp.raw_digest.cache_clear()
    monkeypatch.setattr(fp, "raw_digest", lambda *a: pytest.fail("the cached digest should have been used"))
    assert fp.data_fingerprint(name) == first
    monkeypatch.undo()
    monkeypatch.setenv("INPUTDP_CACHE", str(tmp_path / "cache"))
    y_tr[0] = (y_tr[0] + 1) % 3  # one label changed: other data
    np.savez(tmp_path / "d.npz", x_train=x_tr[:, 0].numpy(), y_train=y_tr.numpy(), x_test=x_te[:, 0].numpy(),
             y_test=y_te.numpy())
    _load_raw.cache_clear()
    fp.raw_digest.cache_clear()
    assert fp.data_fingerprint(name) != first


def test_the_same_images_as_folder_and_npz_are_the_same_data(tmp_path):
    x_tr, y_tr, x_te, y_te = arrays()
    write_folder(tmp_path / "mine", x_tr, y_tr, x_te, y_te)
    (a, b), (c, d) = in_folder_order(x_tr, y_tr), in_folder_order(x_te, y_te)
    np.savez(tmp_path / "d.npz", x_train=a[:, 0].numpy(), y_train=b.numpy(), x_test=c[:, 0].numpy(), y_test=d.numpy())
    assert fp.data_fingerprint(f"folder:{tmp_path / 'mine'}") == fp.data_fingerprint(f"npz:{tmp_path / 'd.npz'}")


def _sweep(dataset, data_dir, uri, seeds=(0,)):
    from inputdp.benchmarks.sweep import expand, run_sweep
    from inputdp.core.config import PerfFlags

    configs = expand(methods=["nonprivate"], dataset=dataset, preset="smoke", epsilons=[1.0], seeds=list(seeds),
                     overrides=Overrides(steps=3, data_dir=str(data_dir)))
    return run_sweep(check_feasible(configs), tracking_uri=uri, perf=PerfFlags(device="cpu", progress=False))


def test_other_images_under_a_registered_name_are_another_configuration_and_row(tmp_path):
    """A user's images written in MNIST's files: the key, the match key and the leaderboard row follow the data,
    not the name (they were skipped as "already FINISHED" and merged into the real MNIST rows before)."""
    write_mnist(tmp_path / "a", n_train=200, n_test=50)
    raw_b = write_mnist(tmp_path / "b", n_train=200, n_test=50)
    f = raw_b / "train-labels-idx1-ubyte"
    f.write_bytes(f.read_bytes()[:8] + bytes((i * 3) % 10 for i in range(200)))  # other labels: other data
    ka, kb = (with_checked_data(build_config(method="nonprivate", dataset="mnist", preset="smoke",
                                                 epsilon=1.0, seed=0, overrides=Overrides(data_dir=str(tmp_path / x))))
              for x in "ab")
    assert ka.data_fingerprint != kb.data_fingerprint and ka.key() != kb.key() and ka.match_key() != kb.match_key()
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    first = _sweep("mnist", tmp_path / "a", uri)
    second = _sweep("mnist", tmp_path / "b", uri, seeds=(0, 2))
    assert len(first.ran) == 1 and len(second.ran) == 2 and not second.skipped  # seed 0 of b is not a's seed 0
    assert len(_sweep("mnist", tmp_path / "a", uri).skipped) == 1  # a's own rerun is still found
    train, audits = tidy(load_runs(uri))
    board = leaderboard(train, audits)
    assert len(board) == 2 and sorted(board["seeds"]) == [1, 2]
    assert sorted(board["dataset"]) == ["mnist [data A]", "mnist [data B]"]  # a letter, never the private data's hash
    a = board[board["dataset"] == "mnist [data A]"].iloc[0]
    assert a["seeds"] == 1  # A: the folder the store saw first


def test_a_run_logs_its_data_as_an_mlflow_input_and_says_when_it_has_fewer_examples(tmp_path, capsys):
    x_tr, y_tr, x_te, y_te = arrays()
    write_folder(tmp_path / "mine", x_tr, y_tr, x_te, y_te)
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    assert main(["run", "--methods", "nonprivate", "--dataset", f"folder:{tmp_path / 'mine'}", "--preset", "smoke",
                 "--steps", "3", "--no-progress", "--tracking-uri", uri]) == 0
    err = capsys.readouterr().err
    assert "has 60 training examples, fewer than the 2000 asked for" in err
    client = mlflow.MlflowClient(uri)
    (run,) = not_parents(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    assert run.data.tags["dataset"] == canonical_name(f"folder:{tmp_path / 'mine'}") == f"folder:{tmp_path / 'mine'}"
    assert "fewer than the 2000 asked for" in run.data.params["data.notes"]
    assert run.data.params["train_size"] == "60" and run.data.params["data.normalisation"].startswith("fixed 0.5")
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.digest == run.data.params["data_fingerprint"] == fp.data_fingerprint(f"folder:{tmp_path / 'mine'}")
    assert inp.dataset.name == run.data.tags["dataset"] and '"train_examples": 60' in inp.dataset.profile


def test_a_configuration_stamped_with_other_data_is_refused(tmp_path):
    from inputdp.benchmarks.harness import run
    from inputdp.core.config import PerfFlags

    x_tr, y_tr, x_te, y_te = arrays()
    np.savez(tmp_path / "d.npz", x_train=x_tr[:, 0].numpy(), y_train=y_tr.numpy(), x_test=x_te[:, 0].numpy(),
             y_test=y_te.numpy())
    config = build_config(method="nonprivate", dataset=f"npz:{tmp_path / 'd.npz'}", preset="smoke", epsilon=math.inf,
                          seed=0, overrides=Overrides(steps=2)).replace(data_fingerprint="0" * 16)
    with pytest.raises(ConfigError, match="has changed since this run was configured"):
        run(resolve(config), PerfFlags(device="cpu", progress=False))
