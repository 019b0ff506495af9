from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("INPUTDP_SHARED_DATA", ROOT.parent / "shared" / "data"))


def have_mnist() -> bool:
    return (SHARED_DATA / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


requires_mnist = pytest.mark.skipif(not have_mnist(), reason=f"real MNIST not found under {SHARED_DATA}")


@pytest.fixture(autouse=True)
def _quiet(monkeypatch, tmp_path):
    # keep runs from writing an mlflow.db into the repository, and never reach for the network
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture
def shared_data() -> Path:
    if not have_mnist():
        pytest.skip(f"real MNIST not found under {SHARED_DATA}")
    return SHARED_DATA
