"""The command line: `bench list`, a smoke `bench run`, and missing or corrupt data -> one line, exit 2 (the table
of bad input across every subcommand is test_hostile_input.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from inputdp.benchmarks.cli import main

from ..helpers import write_mnist


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
    out = capsys.readouterr()
    assert "nonprivate" in out.out
    # without progress bars, still a line per finished run (the flag's help says so), on stderr
    assert re.search(r"^\[1/1\] ran nonprivate synthetic eps=inf seed=0: accuracy [01]\.\d{4} in \d+\.\d min$",
                     out.err, re.M), out.err
    code = main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress"])
    assert code == 0 and "[1/1] already finished nonprivate synthetic eps=inf seed=0: accuracy" in capsys.readouterr().err


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


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_a_run_without_a_preset_is_announced_with_its_time(tmp_path, capsys):
    """No --preset: the default (cpu) is named on stderr with its measured time per run and the sweep's estimate,
    after every check (a refusal stays one line: tests/benchmarks/test_hostile_input.py)."""
    uri = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--seeds", "0,1", "--steps", "2",
                 "--no-progress", "--tracking-uri", uri]) == 0
    err = capsys.readouterr().err
    assert "no --preset given: the cpu preset" in err and "2 runs: about 1 to 5 minutes" in err
    assert main(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--seeds", "0", "--steps", "2",
                 "--preset", "cpu", "--no-progress", "--tracking-uri", uri]) == 0
    assert "no --preset given" not in capsys.readouterr().err


def test_the_terminal_table_shows_the_whole_sweep_its_guarantee_and_what_cannot_be_read(tmp_path, capsys):
    """After a resume the table holds every run of the sweep (the store's too); each row says whether its epsilon
    is a guarantee (yes, no, none for the reference, refuted where a stored audit of its claim exceeds it); a run
    evaluated on a handful of examples is flagged (a small test split, of which PATE's public pool takes a part)."""
    import numpy as np

    from inputdp.benchmarks.tracking import open_store
    from inputdp.core import names
    from inputdp.core.verdicts import one_run_fields

    rng = np.random.default_rng(0)  # a user's own data with a test split of 30 examples
    np.savez(tmp_path / "d.npz", x_train=rng.integers(0, 256, (300, 12, 12), dtype=np.uint8),
             y_train=rng.integers(0, 3, 300), x_test=rng.integers(0, 256, (30, 12, 12), dtype=np.uint8),
             y_test=rng.integers(0, 3, 30))
    uri = f"sqlite:///{tmp_path / 's.db'}"
    argv = ["run", "--methods", "nonprivate,dirichlet_softmax,pate", "--dataset", f"npz:{tmp_path / 'd.npz'}",
            "--preset", "smoke", "--epsilons", "4", "--steps", "10", "--option", "pate.queries=10",
            "--option", "pate.public_pool=10", "--no-progress", "--tracking-uri", uri]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "dirichlet_softmax" in first and "  no" in first and "none (reference)" in first
    assert "note: pate eps=4 seed=0: evaluated on 20 example(s), so its accuracy says nothing" in first
    assert "note: nonprivate eps=inf seed=0: evaluated on 30 example(s)" in first
    # random labels: every model is at chance, which the table notes and the store tags
    assert "note: nonprivate eps=inf seed=0: its accuracy is at chance (1/3 = 0.333)" in first
    # an audit of dirichlet_softmax's claim in the store whose bound exceeds it, under the claim's relation
    client, exp = open_store(uri, "inputdp", create=False)
    trained = client.search_runs([exp], filter_string="tags.method = 'dirichlet_softmax'")[0]
    assert trained.data.tags[names.TAG_AT_CHANCE] == "true"
    audit = client.create_run(exp, tags={names.TAG_KIND: names.KIND_AUDIT, names.TAG_METHOD: "dirichlet_softmax",
                                         names.TAG_VARIANT: "", names.TAG_AUDIT_OF: trained.data.tags[names.TAG_MATCH_KEY],
                                         names.TAG_PRIVACY_RELATION: "replace_input", names.TAG_AUDIT_DESIGN: "replaced"})
    client.log_param(audit.info.run_id, names.PARAM_EPSILON, "4.0")
    bounds = {f"{names.METRIC_EPSILON_LB}.white_box": 5.6}
    fields = one_run_fields(bounds, {names.TAG_AUDIT_DESIGN: "replaced"}, claimed_epsilon=4.0, delta=1e-5, canaries=20)
    for k, v in {**bounds, **fields[0]}.items():  # the bound, and the verdict as fields (as an audit logs them)
        client.log_metric(audit.info.run_id, k, v)
    for k, v in fields[1].items():
        client.set_tag(audit.info.run_id, k, v)
    client.set_terminated(audit.info.run_id, "FINISHED")
    assert main(argv) == 0
    again = capsys.readouterr().out
    rows = [line for line in again.splitlines() if line.startswith(("nonprivate", "dirichlet_softmax", "pate"))]
    assert len(rows) == 3 and "skipped 3 configuration(s) already FINISHED in the store: their rows above" in again
    assert "refuted (5.60 > 4, a stored audit)" in next(r for r in rows if r.startswith("dirichlet_softmax"))
