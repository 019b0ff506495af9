"""The command line: `bench list`, a smoke `bench run`, and bad input -> one line, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inputdp.benchmarks.cli import main


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("nonprivate", "dirichlet_softmax", "mnist", "fashionmnist", "cifar10", "svhn", "dermamnist",
                 "small_cnn", "resnet18", "smoke", "cpu", "paper"):
        assert f"  {name} " in out


def test_run_smoke_writes_sqlite_store(shared_data, tmp_path, capsys):
    code = main(["run", "--methods", "nonprivate", "--dataset", "mnist", "--preset", "smoke", "--no-progress",
                 "--data-dir", str(shared_data)])
    assert code == 0
    assert (tmp_path / "mlflow.db").exists()  # the default store, in the working directory
    assert "nonprivate" in capsys.readouterr().out


BAD = [
    (["run", "--methods", "bogus", "--dataset", "mnist"], "bogus"),
    (["run", "--methods", "nonprivate", "--dataset", "imagenet"], "imagenet"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--preset", "huge"], "huge"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--epsilons", "0"], "epsilon"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--epsilons", "-2"], "epsilon"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--delta", "1.5"], "delta"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--sampling-rate", "1.5"], "q="),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--sampling-rate", "0"], "q="),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--steps", "0"], "steps"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--model", "vgg"], "vgg"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--epsilons", "one"], "one"),
    (["calibrate", "--method", "dirichlet_softmax", "--epsilon", "0.1", "--delta", "1e-5", "--sampling-rate",
      "0.005", "--steps", "20000"], "smallest feasible epsilon"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--option", "alpha=-1"], "alpha"),
    (["audit", "--method", "dpsgd", "--dataset", "mnist", "--canary-kind", "glitter"], "glitter"),
    (["audit", "--method", "dpsgd", "--dataset", "mnist", "--pattern-scale", "0"], "pattern_scale=0"),
    (["audit", "--method", "dpsgd", "--dataset", "mnist", "--score", "vibes"], "vibes"),
    (["audit", "--method", "dpsgd", "--dataset", "mnist", "--canaries", "1"], "canaries=1"),
    (["audit", "--method", "sgd", "--dataset", "mnist"], "sgd"),
    (["audit", "--method", "all", "--dataset", "mnist"], "an audit is of one method"),
    (["audit", "--method", "dpsgd,nonprivate", "--dataset", "mnist"], "an audit is of one method"),
    (["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--option", "dpsgd.max_grad_norm=1"],
     "would be ignored"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--experiment", ""], "--experiment ''"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--tracking-uri", ""], "--tracking-uri ''"),
    (["report", "--experiment", " "], "--experiment ' '"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--seeds", "100000000000000000000000"], "2**63 - 1"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--steps", "100000000000000000000"], "T must be"),
    (["speed", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--warmup", "-5", "--synthetic"], "warmup=-5"),
    (["calibrate", "--method", "dpsgd", "--epsilon", "inf", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps",
      "40"], "largest feasible epsilon"),
    (["calibrate", "--method", "dpsgd", "--epsilon", "1e300", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps",
      "40"], "largest feasible epsilon"),
]


def test_report_out_on_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("x")
    assert main(["report", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file" in err and target.read_text() == "x"


@pytest.mark.parametrize("argv,needle", BAD, ids=[" ".join(a[1:5]) for a, _ in BAD])
def test_bad_input_one_line_exit_2(argv, needle, capsys):
    with pytest.raises(SystemExit) as info:
        raise SystemExit(main(argv))
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_delta_above_one_over_n(shared_data, capsys):
    code = main(["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--preset", "smoke", "--delta",
                 "0.001", "--data-dir", str(shared_data), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "1/n" in err


def test_missing_data_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    code = main(["run", "--methods", "nonprivate", "--dataset", "svhn", "--preset", "smoke",
                 "--data-dir", str(tmp_path / "empty"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "train_32x32.mat" in err


def test_corrupt_data_one_line_in_a_subprocess(tmp_path, shared_data):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in (shared_data / "MNIST" / "raw").iterdir():
        if not f.name.endswith(".gz"):
            (raw / f.name).write_bytes(f.read_bytes()[:1000])
    proc = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "run", "--methods", "nonprivate",
                           "--dataset", "mnist", "--preset", "smoke", "--data-dir", str(tmp_path), "--no-progress"],
                          capture_output=True, text=True, env={"INPUTDP_NO_DOWNLOAD": "1", "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "corrupt" in proc.stderr and "Traceback" not in proc.stderr
