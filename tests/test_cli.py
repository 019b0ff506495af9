"""The command line: `bench list`, a smoke `bench run`, and missing or corrupt data -> one line, exit 2 (the table
of bad input across every subcommand is test_hostile_input.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inputdp.benchmarks.cli import main

from .helpers import write_mnist


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("nonprivate", "dirichlet_softmax", "mnist", "fashionmnist", "cifar10", "svhn", "dermamnist",
                 "small_cnn", "resnet18", "smoke", "cpu", "paper"):
        assert f"  {name} " in out


@pytest.mark.slow
def test_run_smoke_writes_sqlite_store(tmp_path, capsys):
    code = main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress"])
    assert code == 0
    assert (tmp_path / "mlflow.db").exists()  # the default store, in the working directory
    assert "nonprivate" in capsys.readouterr().out


def test_missing_data_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    code = main(["run", "--methods", "nonprivate", "--dataset", "svhn", "--preset", "smoke",
                 "--data-dir", str(tmp_path / "empty"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "train_32x32.mat" in err


@pytest.mark.slow
def test_corrupt_data_one_line_in_a_subprocess(tmp_path):
    raw = write_mnist(tmp_path)  # MNIST's own file layout, then each file cut short
    for f in raw.iterdir():
        f.write_bytes(f.read_bytes()[:1000])
    proc = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "run", "--methods", "nonprivate",
                           "--dataset", "mnist", "--preset", "smoke", "--data-dir", str(tmp_path), "--no-progress"],
                          capture_output=True, text=True, env={"INPUTDP_NO_DOWNLOAD": "1", "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "corrupt" in proc.stderr and "Traceback" not in proc.stderr
