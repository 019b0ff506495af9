from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("INPUTDP_SHARED_DATA", ROOT.parent / "shared" / "data"))


def have_mnist() -> bool:
    return (SHARED_DATA / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


#: the only tests that need the real data on disk are the ones about the real data (their loaders, their numbers);
#: everything else runs on the generated ``synthetic`` set or on files the tests write in the real formats
requires_mnist = pytest.mark.skipif(not have_mnist(), reason=f"real MNIST not found under {SHARED_DATA}")


@pytest.fixture(scope="session")
def _fingerprint_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inputdp-cache")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch, tmp_path, _fingerprint_cache):
    # keep runs from writing an mlflow.db into the repository, the data fingerprints' cache out of the user's home,
    # and never reach for the network
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("INPUTDP_CACHE", str(_fingerprint_cache))


@pytest.fixture
def shared_data() -> Path:
    if not have_mnist():
        pytest.skip(f"real MNIST not found under {SHARED_DATA}")
    return SHARED_DATA
