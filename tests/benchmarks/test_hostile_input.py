"""Hostile but fair input across every `bench` subcommand: exit code 2, exactly one line on stderr that names the
bad value, no traceback; calibration refusals in bounded time. A table of cases (in-process through `main`, and a
sample again through a real interpreter, where the exit path itself is under test), data files corrupted in each
way a download or a disk can, and a property-based sweep of `bench calibrate`'s numeric flags."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from inputdp.benchmarks.cli import main
from inputdp.benchmarks.resolve import check_feasible

from ..helpers import idx_file as _idx
from ..helpers import write_mnist

RUN = ["run", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--preset", "smoke", "--no-progress"]
RUN_SYNTHETIC = ["run", "--methods", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--no-progress"]
CAL = ["calibrate", "--delta", "1e-5", "--sampling-rate", "0.05", "--steps", "40", "--method"]
SPEED = ["speed", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--synthetic"]
AUDIT = ["audit", "--dataset", "mnist", "--no-track", "--method"]
TUNE = ["tune", "--method", "dpsgd", "--dataset", "synthetic", "--preset", "smoke", "--epsilon", "4", "--no-track"]

# (argv, a piece of the message that names the bad value). Placeholders: {store} a
# fresh sqlite URI, {notdb} a file that is not a database, {file} a plain file, {closed} a port nobody listens on,
# {busy} a port somebody listens on, {missing} a folder that does not exist, {absent} a file that does not exist.
CASES: list[tuple[list[str], str]] = [
    # --- bench run: names, numbers, lists ---------------------------------------------------------------------
    (["run", "--methods", "bogus", "--dataset", "mnist"], "bogus"),
    (["run", "--methods", "", "--dataset", "mnist"], "--methods is empty"),
    (["run", "--methods", "nonprivate", "--dataset", "imagenet"], "imagenet"),
    (["run", "--methods", "nonprivate", "--dataset", "mnist", "--preset", "huge"], "huge"),
    ([*RUN, "--epsilons", "0"], "epsilon=0"),
    ([*RUN, "--epsilons", "-2"], "epsilon=-2"),
    ([*RUN, "--epsilons", "nan"], "epsilon=nan"),
    ([*RUN, "--epsilons", ""], "--epsilons=''"),
    ([*RUN, "--epsilons", "one"], "'one'"),
    ([*RUN, "--epsilons", "inf"], "epsilon=inf"),
    ([*RUN, "--epsilons", "1e300"], "epsilon=1e+300"),
    (["run", "--methods", "dpsgd", "--dataset", "mnist", "--epsilons", "1e-300"], "epsilon=1e-300"),
    (["run", "--methods", "dpsgd", "--dataset", "mnist", "--steps", "2000000"], "is not allowed with accountant=pld"),
    (["run", "--methods", "gaussian_penultimate", "--dataset", "mnist", "--epsilons", "1e-300"], "epsilon=1e-300"),
    ([*RUN, "--delta", "1.5"], "delta=1.5"),
    ([*RUN, "--delta", "0"], "delta=0"),
    ([*RUN_SYNTHETIC, "--delta", "0.001"], "1/n"),
    ([*RUN, "--holdout", "-5"], "holdout=-5"),
    ([*RUN_SYNTHETIC, "--holdout", "999999"], "holdout=999999"),
    (["run", "--methods", "pate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress", "--holdout", "100"],
     "holdout=100 is not allowed with pate"),
    ([*RUN, "--sampling-rate", "1.5"], "q=1.5"),
    ([*RUN, "--sampling-rate", "0"], "q=0"),
    ([*RUN, "--steps", "0"], "T=0"),
    ([*RUN, "--steps", "-3"], "T=-3"),
    ([*RUN, "--steps", "100000000000000000000"], "T=100000000000000000000"),
    ([*RUN, "--steps", "abc"], "'abc'"),
    ([*RUN, "--epochs", "0"], "epochs=0"),
    ([*RUN, "--seeds", "100000000000000000000000"], "seed=100000000000000000000000"),
    ([*RUN, "--seeds", "-1"], "seed=-1"),
    ([*RUN, "--seeds", "a"], "--seeds='a'"),
    ([*RUN, "--lr", "-1"], "lr=-1"),
    ([*RUN, "--lr", "nan"], "lr=nan"),
    ([*RUN, "--momentum", "2"], "momentum=2"),
    ([*RUN, "--optimizer", "rmsprop"], "optimizer='rmsprop'"),
    ([*RUN, "--warmup-steps", "-1"], "lr_warmup_steps=-1"),
    ([*RUN, "--norm", "weird"], "norm='weird'"),
    ([*RUN, "--model", "vgg"], "vgg"),
    ([*RUN, "--device", "tpu"], "device='tpu'"),
    ([*RUN, "--threads", "-1"], "threads=-1"),
    ([*RUN, "--executor", "bogus"], "--executor 'bogus'"),
    ([*RUN, "--executor", "ray", "--tracking-uri", "{store}"], "needs a tracking server"),
    # --- bench run: method options ----------------------------------------------------------------------------
    ([*RUN, "--option", "alpha=-1"], "alpha=-1"),
    ([*RUN, "--option", "alpha"], "--option 'alpha'"),
    ([*RUN, "--option", "foo=1"], "--option 'foo'"),
    ([*RUN, "--option", "dpsgd.max_grad_norm=1"], "dpsgd.max_grad_norm=1"),
    ([*RUN, "--option", "nosuch.x=1"], "nosuch"),
    # --- bench run: the store ---------------------------------------------------------------------------------
    ([*RUN, "--experiment", ""], "--experiment ''"),
    ([*RUN, "--tracking-uri", ""], "--tracking-uri ''"),
    ([*RUN, "--tracking-uri", "foo://bar"], "'foo://bar'"),
    ([*RUN, "--tracking-uri", "hello world"], "'hello world'"),
    ([*RUN, "--tracking-uri", "file:///tmp/x"], "'file:///tmp/x'"),
    ([*RUN, "--tracking-uri", "sqlite:///:memory:"], "'sqlite:///:memory:'"),
    ([*RUN, "--tracking-uri", "sqlite:///{missing}/x.db"], "does not exist"),
    # three slashes are relative: the advice names the four-slash form of the absolute path meant
    ([*RUN, "--tracking-uri", "sqlite:///usr/inputdp-x.db"], "sqlite:////usr/inputdp-x.db (four slashes)"),
    ([*RUN, "--tracking-uri", "sqlite:///{notdb}"], "is not an SQLite database"),
    ([*RUN, "--tracking-uri", "sqlite:////proc/inputdp.db"], "cannot be written"),
    ([*RUN, "--tracking-uri", "http://127.0.0.1:{closed}"], "cannot be reached"),
    ([*RUN, "--tracking-uri", "http://127.0.0.1:99999"], "port is not a number"),
    ([*RUN, "--tracking-uri", "http://:5000"], "name the server"),
    # --- bench run: the data directory ------------------------------------------------------------------------
    ([*RUN, "--data-dir", "{file}", "--tracking-uri", "{store}"], "is not a folder"),
    # --- bench calibrate --------------------------------------------------------------------------------------
    ([*CAL, "nosuch", "--epsilon", "1"], "nosuch"),
    (["calibrate", "--method", "dpsgd", "--epsilon", "1"], "--delta, --sampling-rate, --steps"),
    # the paper's accountant has a floor (its factor 3); the per-example curve's is its grid's pessimism, q T h
    ([*CAL, "dirichlet_softmax", "--epsilon", "0.1", "--option", "accountant=paper"], "epsilon=0.1"),
    ([*CAL, "dirichlet_softmax", "--epsilon", "0.001"], "smallest feasible epsilon is 0.003"),
    ([*CAL, "dirichlet_softmax", "--epsilon", "1", "--option", "accountant=rdp"], "accountant='rdp'"),
    ([*CAL, "dirichlet_softmax", "--epsilon", "1", "--option", "adjacency=add_remove"], "reveals membership"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--option", "adjacency=replace_input", "--option", "accountant=rdp"],
     "adjacency=replace_input is not allowed with accountant=rdp"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--option", "adjacency=swap"], "adjacency='swap' is not allowed for dpsgd"),
    (["run", "--methods", "dpsgd", "--dataset", "mnist", "--preset", "smoke", "--option", "dpsgd.adjacency=swap",
      "--tracking-uri", "{store}"], "adjacency='swap'"),
    (["run", "--methods", "dpsgd", "--dataset", "mnist", "--preset", "smoke", "--option", "dpsgd.max_grad_norm=0",
      "--tracking-uri", "{store}"], "max_grad_norm=0 is not allowed"),
    ([*CAL, "gaussian_penultimate", "--epsilon", "1", "--option", "accountant=rdp", "--option",
      "adjacency=replace_input"], "add/remove theorem"),
    (["calibrate", "--delta", "1e-5", "--sampling-rate", "0.5", "--steps", "1000", "--method", "gaussian_penultimate",
      "--epsilon", "1"], "expected releases"),
    (["hidden-state", "--method", "dpsgd"], "releases no per-example vectors"),
    (["hidden-state", "--method", "dirichlet_softmax", "--runs", "3"], "runs=3"),
    (["hidden-state", "--method", "dirichlet_softmax", "--epsilon", "nan"], "--epsilon nan"),
    ([*CAL, "dpsgd", "--epsilon", "inf"], "epsilon=inf"),
    ([*CAL, "dpsgd", "--epsilon", "1e300"], "epsilon=1e+300"),
    ([*CAL, "dpsgd", "--epsilon", "nan"], "epsilon=nan"),
    ([*CAL, "gaussian_penultimate", "--epsilon", "1e-300"], "epsilon=1e-300"),
    ([*CAL, "pate", "--epsilon", "1e-300"], "epsilon=1e-300"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--delta", "0"], "delta=0"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--sampling-rate", "2"], "q=2"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--steps", "0"], "T=0"),
    ([*CAL, "dirichlet_softmax", "--epsilon", "1", "--option", "alpha=abc"], "alpha='abc'"),
    (["calibrate", "--method", "dpsgd", "--preset", "nope"], "'nope'"),
    # a preset table refuses an unknown method, the flags the preset overrides, and two ways of giving epsilon
    (["calibrate", "--method", "ANYTHING", "--preset", "smoke"], "unknown method 'ANYTHING'"),
    (["calibrate", "--method", "dpsgd", "--preset", "paper", "--steps", "5"], "--steps is not allowed with --preset"),
    (["calibrate", "--method", "dpsgd", "--preset", "paper", "--sampling-rate", "0.1"], "--sampling-rate is not"),
    (["calibrate", "--method", "dpsgd", "--preset", "cpu", "--epsilon", "1", "--epsilons", "1,2"],
     "are not allowed together"),
    ([*CAL, "dpsgd", "--epsilon", "1", "--epsilons", "1,2"], "--epsilons '1,2' is not allowed without --preset"),
    (["calibrate", "--method", "dpsgd", "--preset", "cpu", "--epsilons", "x"], "--epsilons='x'"),
    # --- bench speed ------------------------------------------------------------------------------------------
    ([*SPEED, "--warmup", "-5"], "warmup=-5"),
    ([*SPEED, "--steps", "0"], "steps=0"),
    ([*SPEED, "--batch-size", "0"], "batch-size=0"),
    ([*SPEED, "--norm", "bogus"], "norm='bogus'"),
    ([*SPEED, "--device", "tpu"], "device='tpu'"),
    ([*SPEED, "--preset", "nope"], "'nope'"),
    ([*SPEED, "--model", "vgg"], "'vgg'"),
    (["speed", "--methods", "bogus", "--dataset", "mnist", "--synthetic"], "bogus"),
    (["speed", "--methods", "dirichlet_softmax", "--dataset", "imagenet", "--synthetic"], "imagenet"),
    # a data set's name as registered (no synthetic fallback first), and data that do not read: refused, never
    # replaced by random inputs (--synthetic says so when it is meant)
    (["speed", "--methods", "dirichlet_softmax", "--dataset", "MNIST"], "unknown data set 'MNIST'"),
    (["speed", "--methods", "dirichlet_softmax", "--dataset", "mnist", "--data-dir", "{missing}"],
     "give --synthetic"),
    # --- bench report -----------------------------------------------------------------------------------------
    (["report", "--experiment", " "], "--experiment ' '"),
    (["report", "--out", "{file}"], "is a file"),
    (["report", "--tracking-uri", "foo://x"], "'foo://x'"),
    (["report", "--tracking-uri", "sqlite:///{absent}"], "holds no store yet"),
    (["report", "--tracking-uri", "sqlite:///{notdb}"], "is not an SQLite database"),
    # --- bench audit ------------------------------------------------------------------------------------------
    ([*AUDIT, "dpsgd", "--canary-kind", "glitter"], "glitter"),
    ([*AUDIT, "dpsgd", "--pattern-scale", "0"], "pattern_scale=0"),
    ([*AUDIT, "dpsgd", "--score", "vibes"], "vibes"),
    ([*AUDIT, "dpsgd", "--canaries", "1"], "canaries=1"),
    ([*AUDIT, "sgd"], "sgd"),
    ([*AUDIT, "all"], "--method 'all'"),
    ([*AUDIT, "dpsgd,nonprivate"], "--method 'dpsgd,nonprivate'"),
    ([*AUDIT, "dpsgd", "--epsilon", "-1"], "epsilon=-1"),
    ([*AUDIT, "dpsgd", "--seed", "100000000000000000000000"], "seed=100000000000000000000000"),
    (["audit", "--method", "dpsgd", "--dataset", "mnist", "--tracking-uri", "foo://x"], "'foo://x'"),
    # --- bench server -----------------------------------------------------------------------------------------
    (["server", "--port", "70000"], "--port 70000"),
    (["server", "--port", "-1"], "--port -1"),
    (["server", "--port", "{busy}"], "another process listens"),
    (["server", "--backend-store-uri", "file:///x"], "'file:///x'"),
    (["server", "--backend-store-uri", "sqlite:///{missing}/x.db"], "does not exist"),
    (["server", "--backend-store-uri", "sqlite:///{notdb}"], "is not an SQLite database"),
    # --- the parser itself ------------------------------------------------------------------------------------
    (["frobnicate"], "'frobnicate'"),
    (["list", "extra"], "extra"),
    (["run"], "--dataset"),
    # --- bench tune: the search's own flags, before any data are read -----------------------------------------
    (TUNE + ["--trials-mean", "0"], "--trials-mean 0"),
    (TUNE + ["--trials-mean", "-3"], "--trials-mean -3"),
    (TUNE + ["--trials-shape", "bogus"], "'bogus'"),
    (TUNE + ["--validation", "0.9"], "--validation 0.9"),
    (TUNE + ["--score-noise", "0"], "--score-noise 0"),
    (TUNE + ["--space", "{absent}"], "cannot be read"),
    (TUNE + ["--space", "{file}"], "is not JSON"),
    (["tune", "--method", "bogus", "--dataset", "synthetic", "--epsilon", "1"], "bogus"),
    (["tune", "--method", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--epsilon", "1"],
     "not allowed in a search"),
]


@pytest.fixture
def places(tmp_path, request):
    """The values behind the placeholders; {busy} is held open for the test's length."""
    notdb = tmp_path / "notes.txt"
    notdb.write_text("not a database\n")
    plain = tmp_path / "a-file"
    plain.write_text("x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    values = {"store": f"sqlite:///{tmp_path / 'store.db'}", "notdb": str(notdb), "file": str(plain),
              "closed": str(closed), "busy": str(busy.getsockname()[1]), "missing": str(tmp_path / "no" / "such"),
              "absent": str(tmp_path / "absent.db")}
    yield values, request
    busy.close()


def _fill(argv: list[str], places) -> list[str]:
    values, _ = places
    return [a.format(**values) for a in argv]


def _call(argv: list[str]) -> tuple[int, str, str, float]:
    """main(argv) as the console script runs it: (exit code, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue(), time.perf_counter() - start


def _assert_one_line(code, out, err, needle) -> None:
    assert code == 2, (code, err[-2000:])
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err + out
    assert needle in err, err


def test_the_table_is_large_and_covers_every_subcommand():
    commands = {argv[0] for argv, _ in CASES}
    assert len(CASES) >= 60 and {"run", "calibrate", "speed", "report", "audit", "server", "tune"} <= commands


@pytest.mark.parametrize("argv,needle", CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(argv, needle, places, monkeypatch):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    argv = _fill(argv, places)
    code, out, err, seconds = _call(argv)
    _assert_one_line(code, out, err, needle.format(**places[0]))
    assert seconds < 10  # a refusal comes before any work (calibration refusals: see below, under 2 s)


# Through a real interpreter: what a user's shell sees, exit code included (a sample of the table, run in parallel).
SUBPROCESS = range(0, len(CASES), 8)


@pytest.mark.slow
def test_a_sample_through_the_console_entry_point(places, tmp_path):
    cases = [(_fill(CASES[i][0], places), CASES[i][1].format(**places[0])) for i in SUBPROCESS]
    # each process's default store its own, in this test's folder (not a path left over from another test)
    env = {**os.environ, "INPUTDP_NO_DOWNLOAD": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'default.db'}"}
    procs = [subprocess.Popen([sys.executable, "-m", "inputdp.benchmarks.cli", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path) for argv, _ in cases]
    for proc, (_, needle) in zip(procs, cases):
        out, err = proc.communicate(timeout=120)
        _assert_one_line(proc.returncode, out, err, needle)


# --- data files, corrupted each way a download or a disk can ----------------------------------------------------

def _empty(raw: Path) -> None:
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"")


def _magic(raw: Path) -> None:
    f = raw / "train-images-idx3-ubyte"
    f.write_bytes(b"\x00\x00\x09\x03" + f.read_bytes()[4:])


def _truncated(raw: Path) -> None:
    f = raw / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:5000])


def _fewer_labels(raw: Path) -> None:
    (raw / "train-labels-idx1-ubyte").write_bytes(_idx(0x0801, (60,), bytes(60)))


def _label_out_of_range(raw: Path) -> None:
    f = raw / "train-labels-idx1-ubyte"
    data = bytearray(f.read_bytes())
    data[8 + 5] = 200
    f.write_bytes(bytes(data))


def _header_only(raw: Path) -> None:
    (raw / "train-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08")


def _wrong_shape(raw: Path) -> None:
    (raw / "t10k-images-idx3-ubyte").write_bytes(_idx(0x0803, (32, 32, 32), bytes(32 * 32 * 32)))


DATA_CASES = {
    "empty file": (_empty, "t10k-labels-idx1-ubyte is empty"),
    "wrong magic number": (_magic, "magic number 0x00000903, expected 0x00000803"),
    "truncated images": (_truncated, "holds 5000 bytes, but its header promises 50192"),
    "fewer labels than images": (_fewer_labels, "holds 60 labels but"),
    "label out of range": (_label_out_of_range, "labels range over 0..200, expected 0..9"),
    "header cut short": (_header_only, "holds 3 bytes, too few for the header"),
    "images of the wrong shape": (_wrong_shape, "items of shape (32, 32), expected (28, 28)"),
}


def _run_on(root: Path, tmp_path: Path) -> tuple[int, str, str, float]:
    return _call(["run", "--methods", "nonprivate", "--dataset", "mnist", "--preset", "smoke", "--steps", "2",
                  "--data-dir", str(root), "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])


def test_the_small_mnist_writer_is_valid(tmp_path, monkeypatch):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    write_mnist(tmp_path / "data")
    code, out, err, _ = _run_on(tmp_path / "data", tmp_path)
    assert code == 0 and "nonprivate" in out, err  # so each corruption below is what the error is about


@pytest.mark.parametrize("corrupt,needle", DATA_CASES.values(), ids=list(DATA_CASES))
def test_a_corrupt_data_file_is_named_with_what_was_expected(corrupt, needle, tmp_path, monkeypatch):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    corrupt(write_mnist(tmp_path / "data"))
    _assert_one_line(*_run_on(tmp_path / "data", tmp_path)[:3], needle)


def test_a_missing_data_set_leaves_no_empty_folders(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    (root / "keep").mkdir()  # a folder that was there before stays
    # downloads are allowed but cannot succeed here (no network, or an unreachable mirror): the message says
    # where to put the files, and the folders torchvision made on the way are gone again
    env_before = os.environ.pop("INPUTDP_NO_DOWNLOAD", None)
    try:
        from torchvision.datasets import MNIST

        mirrors = MNIST.mirrors
        MNIST.mirrors = ["http://127.0.0.1:9/"]
        try:
            code, out, err, _ = _run_on(root, tmp_path)
        finally:
            MNIST.mirrors = mirrors
    finally:
        if env_before is not None:
            os.environ["INPUTDP_NO_DOWNLOAD"] = env_before
    _assert_one_line(code, out, err, "is missing under")
    assert sorted(p.name for p in root.rglob("*")) == ["keep"]


def _gzip_all(raw: Path) -> None:
    import gzip

    for f in list(raw.iterdir()):
        (raw / f"{f.name}.gz").write_bytes(gzip.compress(f.read_bytes()))
        f.unlink()


def _gz_cut(raw: Path) -> None:
    _gzip_all(raw)
    f = raw / "train-images-idx3-ubyte.gz"
    f.write_bytes(f.read_bytes()[:-40])


def _gz_not_gzip(raw: Path) -> None:
    _gzip_all(raw)
    (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(b"<html>a proxy's error page</html>")


@pytest.mark.parametrize("corrupt,needle", [
    (_gz_cut, "train-images-idx3-ubyte.gz is not a complete gzip file"),
    (_gz_not_gzip, "t10k-labels-idx1-ubyte.gz is not a complete gzip file"),
], ids=["truncated .gz", "not gzip"])
def test_a_corrupt_gz_is_named_not_called_missing(corrupt, needle, tmp_path, monkeypatch):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    corrupt(write_mnist(tmp_path / "data"))
    code, out, err, _ = _run_on(tmp_path / "data", tmp_path)
    _assert_one_line(code, out, err, needle)
    assert "missing" not in err


def test_a_gz_only_folder_is_read_in_memory_and_left_as_it_was(tmp_path, monkeypatch):
    from inputdp.datasets import load_tensor_data

    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    plain = load_tensor_data("mnist", data_dir=str(tmp_path / "plain"), device="cpu") \
        if write_mnist(tmp_path / "plain") else None
    raw = write_mnist(tmp_path / "data")
    _gzip_all(raw)
    before = sorted(p.name for p in raw.iterdir())
    data = load_tensor_data("mnist", data_dir=str(tmp_path / "data"), device="cpu")
    assert sorted(p.name for p in raw.iterdir()) == before and all(n.endswith(".gz") for n in before)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch_equal(getattr(data, name), getattr(plain, name)), name


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))


@pytest.mark.parametrize("corrupt,needle", [(_magic, "magic number"), (_label_out_of_range, "labels range over")])
def test_bad_data_are_refused_before_the_store_is_opened(corrupt, needle, tmp_path, monkeypatch):
    """A refusal of the data comes before the MLflow store exists: no store is made, no run left RUNNING."""
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    corrupt(write_mnist(tmp_path / "data"))
    code, out, err, _ = _run_on(tmp_path / "data", tmp_path)
    _assert_one_line(code, out, err, needle)
    assert not (tmp_path / "m.db").exists()
    audit = ["audit", "--method", "nonprivate", "--dataset", "mnist", "--preset", "smoke", "--steps", "2",
             "--data-dir", str(tmp_path / "data"), "--tracking-uri", f"sqlite:///{tmp_path / 'a.db'}"]
    _assert_one_line(*_call(audit)[:3], needle)
    assert not (tmp_path / "a.db").exists()


def test_an_unreadable_folder_is_said_to_be_unreadable(tmp_path, monkeypatch):
    monkeypatch.setenv("INPUTDP_NO_DOWNLOAD", "1")
    raw = write_mnist(tmp_path / "data")
    if os.geteuid() == 0:  # root reads everything: make listing the folder fail as it does for other users
        real_scandir = os.scandir

        def scandir(path="."):
            if Path(path) == raw.parent:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)

        monkeypatch.setattr(os, "scandir", scandir)
        monkeypatch.setattr(os.path, "isfile", lambda p: False)  # and stat-ing the files in it
    else:
        raw.parent.chmod(0)
    try:
        _assert_one_line(*_run_on(tmp_path / "data", tmp_path)[:3], "cannot be read (permission denied)")
    finally:
        raw.parent.chmod(0o755)


# --- property-based: calibrate's numeric flags ------------------------------------------------------------------

_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-300, 1e300, 1e-5, 0.05, 0.5, 1.0, 2.0, 8.0]),
).map(repr)
_text = st.sampled_from(["", " ", "abc", "1,2", "--", "0x10", "1e", "∞"])
_steps = st.one_of(st.integers(min_value=-5, max_value=10**13), st.sampled_from([1, 40, 1000])).map(str)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(method="dpsgd", epsilon="0.5", delta="0.5", q="0.5", steps="1000")  # found by CI: 2.7 s before the RDP
# series stopped each order at its own term (q = 1/2: polynomial decay), 0.15 s after
@given(method=st.sampled_from(["dirichlet_softmax", "dpsgd", "gaussian_penultimate", "pate", "nonprivate"]),
       epsilon=st.one_of(_numbers, _text), delta=st.one_of(_numbers, _text), q=st.one_of(_numbers, _text),
       steps=st.one_of(_steps, _text))
def test_calibrate_either_meets_the_target_or_refuses_in_one_line(method, epsilon, delta, q, steps):
    # dpsgd's default PLD takes up to about 3 s at extreme (q, T) (q = 1e-5, T = 1e5: a wide loss distribution); the
    # time bound here is RDP's, and PLD's refusals and answers are tested in tests/methods/test_pld.py. The per-example
    # accountant (dirichlet_softmax, gaussian_penultimate) composes a PLD T times per trial sigma: at q = 1e-5,
    # T = 1,369,556 its calibration took 13 s here (ten dp_accounting self-compositions of 1.3 s), so its bound is
    # "no hang", not "instant"
    extra = ["--option", "accountant=rdp"] if method == "dpsgd" else []
    code, out, err, seconds = _call(["calibrate", "--method", method, "--epsilon", epsilon, "--delta", delta,
                                     "--sampling-rate", q, "--steps", steps, "--json", *extra])
    per_example = method in ("dirichlet_softmax", "gaussian_penultimate")
    assert seconds < (30.0 if per_example else 2.0), (method, epsilon, delta, q, steps, seconds)
    assert "Traceback" not in err + out
    if code == 0:
        result = json.loads(out)
        target = float(epsilon)
        assert math.isfinite(target) and target > 0
        assert result["epsilon"] <= target * (1 + 1e-6) or method == "nonprivate"
    else:
        assert code == 2 and err.count("\n") == 1 and err.startswith("bench"), err


@pytest.mark.parametrize("uri,needle", [("sqlite:////proc/inputdp.db", "cannot be written"),
                                        ("foo://bar", "is not allowed"), ("http://127.0.0.1:9", "cannot be reached")])
def test_the_library_refuses_a_store_it_cannot_use(uri, needle):
    """Not only the CLI: a sweep called from Python meets the same check where every store is opened, at once
    (MLflow itself retried an unwritable sqlite path for 106 s)."""
    from inputdp.benchmarks.sweep import Overrides, expand, run_sweep
    from inputdp.core.errors import ConfigError

    configs = expand(methods=["nonprivate"], dataset="mnist", preset="smoke", epsilons=[1.0], seeds=[0],
                     overrides=Overrides(steps=2))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=needle):
        run_sweep(check_feasible(configs, check_data=False), tracking_uri=uri)  # the data are not read here
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("delta", ["0.001", "0.0005"])
def test_a_delta_the_data_size_forbids_is_refused_before_any_store(delta, tmp_path):
    """smoke trains on 2,000 examples, so delta must be < 1/2000: refused from the data's cached facts, in seconds,
    before a store (or a sweep's parent run) exists."""
    store = tmp_path / "m.db"
    code, out, err, seconds = _call([*RUN_SYNTHETIC, "--delta", delta, "--tracking-uri", f"sqlite:///{store}"])
    _assert_one_line(code, out, err, f"delta={delta} is not allowed for n=2000 training examples")
    assert not store.exists() and seconds < 6


def test_a_diverged_run_ends_failed_in_one_line(tmp_path):
    """lr=1e30 makes the loss NaN in the first epoch: the run ends FAILED in the store, one stderr line says why,
    the exit code is 1 and no table of results is printed."""
    from mlflow.tracking import MlflowClient

    from ..helpers import not_parents

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    code, out, err, _ = _call(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke",
                               "--lr", "1e30", "--no-progress", "--tracking-uri", uri])
    assert code == 1 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "failed: diverged: the training loss became nan in epoch 1 (lr=1e+30" in err, err
    client = MlflowClient(uri)
    (exp,) = [e for e in client.search_experiments() if e.name == "inputdp"]
    (run,) = not_parents(client.search_runs([exp.experiment_id]))
    assert run.info.status == "FAILED"


def test_a_loss_grown_by_orders_of_magnitude_ends_failed(tmp_path):
    """lr=1e4 keeps the loss finite (2e20 in the first epoch, at chance): over 1,000 times chance's cross-entropy, the
    run ends FAILED in one line rather than FINISHED with a broken model."""
    from mlflow.tracking import MlflowClient

    from ..helpers import not_parents

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    code, out, err, _ = _call(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke",
                               "--lr", "1e4", "--no-progress", "--tracking-uri", uri])
    assert code == 1 and out == "", (code, out, err)
    assert err.count("\n") == 1 and "diverged: the training loss reached" in err and "over 1000 times its scale" in err
    client = MlflowClient(uri)
    (exp,) = [e for e in client.search_experiments() if e.name == "inputdp"]
    (run,) = not_parents(client.search_runs([exp.experiment_id]))
    assert run.info.status == "FAILED"


def test_the_growth_rule_leaves_an_ordinary_loss_alone():
    from inputdp.benchmarks.harness import _check_diverged
    from inputdp.core.errors import Diverged

    class C:
        lr, optimizer = 0.05, "sgd"

    _check_diverged(C, 3, 10, 2.3e3 - 1, scale=2.3)  # under 1,000 x scale: trains on
    with pytest.raises(Diverged, match="over 1000 times its scale 2.3"):
        _check_diverged(C, 3, 10, 2.3e3 + 1, scale=2.3)
    _check_diverged(C, 3, 0, float("nan"), scale=2.3)  # an epoch of no batch has no loss to judge


def test_too_many_canaries_are_refused_before_the_store_opens(tmp_path):
    """5,000 canaries against the smoke preset's 2,000 examples: one line naming the allowed range, no store made."""
    db = tmp_path / "a.db"
    code, out, err, seconds = _call(["audit", "--method", "dirichlet_softmax", "--dataset", "synthetic", "--preset",
                                     "smoke", "--canaries", "5000", "--tracking-uri", f"sqlite:///{db}"])
    _assert_one_line(code, out, err, "canaries=5000 is not allowed: it must be an integer in [2, 2000)")
    assert not db.exists() and seconds < 10
