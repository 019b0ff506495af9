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


def test_every_flag_says_what_it_does_and_its_default():
    """Each subcommand's every option has help text; where it has a default, --help shows it once."""
    import argparse

    from inputdp.benchmarks.cli import build_parser
    from inputdp.benchmarks.cli.common import HelpFormatter

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {a.option_strings[0]}" for name, p in sub.choices.items() for a in p._actions
            if a.option_strings and a.dest != "help" and not a.help]
    assert bare == []
    for name, p in sub.choices.items():
        text = p.format_help()
        assert text.count("(default: reports/out)") <= 1
        for a in p._actions:
            if a.option_strings and a.default not in (None, False, argparse.SUPPRESS) and a.dest != "help":
                assert "(default: " in HelpFormatter("x")._get_help_string(a), (name, a.option_strings)


def test_a_run_without_a_preset_is_announced_with_its_time(tmp_path, capsys):
    """No --preset: the default (cpu) is named on stderr with its measured time per run and the sweep's estimate,
    after every check (a refusal stays one line: tests/test_hostile_input.py)."""
    uri = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--seeds", "0,1", "--steps", "2",
                 "--no-progress", "--tracking-uri", uri]) == 0
    err = capsys.readouterr().err
    assert "no --preset given: the cpu preset" in err and "2 runs: about 1 to 5 minutes" in err
    assert main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--seeds", "0", "--steps", "2",
                 "--preset", "cpu", "--no-progress", "--tracking-uri", uri]) == 0
    assert "no --preset given" not in capsys.readouterr().err
