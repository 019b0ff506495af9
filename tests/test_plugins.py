"""Methods from outside the package: a real installed plug-in found through the ``inputdp.methods`` entry point
(listed, run, and put through the same contract tests as the built-in methods), and the one-line errors for a
plug-in whose name is taken or that does not load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "plugins" / "inputdp-toy-method"
TOY_NAME = "toy_logit_noise"

pytestmark = pytest.mark.slow


def _env(site: Path) -> dict[str, str]:
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def _bench(args: list[str], site: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", *args], capture_output=True, text=True,
                          env=_env(site), timeout=300, **kw)


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """The toy package installed by pip (from a copy, so the build leaves nothing in the repository)."""
    work = tmp_path_factory.mktemp("toy")
    source = work / "src"
    shutil.copytree(TOY, source)
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    assert list(site.glob("inputdp_toy_method-*.dist-info"))
    return site


def test_installed_plugin_is_found_by_a_fresh_interpreter_and_runs(toy_site, shared_data, tmp_path):
    """`bench run` in a new process, where only the installed entry point can make the name known."""
    out = _bench(["run", "--methods", TOY_NAME, "--dataset", "mnist", "--preset", "smoke", "--epsilons", "2",
                  "--no-progress", "--data-dir", str(shared_data), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                 toy_site, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith(TOY_NAME))
    accuracy, spent = float(row.split()[3]), float(row.split()[5])
    assert accuracy > 0.5 and 1.9 < spent <= 2.0  # it learnt, and spent the matched budget


@pytest.fixture
def toy_registered(toy_site, monkeypatch):
    """The installed plug-in loaded in this process, through the same entry-point path; unregistered afterwards."""
    from inputdp.methods import METHODS, load_plugins

    monkeypatch.syspath_prepend(str(toy_site))
    assert load_plugins() == [TOY_NAME]
    yield TOY_NAME
    METHODS._entries.pop(TOY_NAME)
    for module in [m for m in sys.modules if m.startswith("inputdp_toy_method")]:
        del sys.modules[module]


def test_installed_plugin_is_listed(toy_registered, capsys):
    from inputdp.benchmarks.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"  {TOY_NAME} " in out and "(plug-in, for tests)" in out


def test_installed_plugin_passes_the_contract_tests(toy_registered, shared_data):
    """The contract every built-in method passes (tests/test_method_contract.py), run on the plug-in."""
    from . import test_method_contract as contract

    contract.test_registered_and_lazy(TOY_NAME)
    for epsilon in (1.0, 4.0):
        contract.test_calibration_round_trip(TOY_NAME, epsilon)
    contract.test_calibrate_is_idempotent(TOY_NAME)
    contract.STEP_METHODS.append(TOY_NAME)  # a step method: the smoke run checks its steps and its accuracy
    try:
        contract.test_one_epoch_smoke_run_and_determinism(TOY_NAME, shared_data)
        contract.test_empty_batches_are_handled(TOY_NAME, shared_data)
    finally:
        contract.STEP_METHODS.remove(TOY_NAME)


def test_no_file_of_the_package_names_the_plugin():
    for folder in ("methods", "benchmarks", "datasets", "reports"):
        for path in (ROOT / folder).rglob("*.py"):
            assert TOY_NAME not in path.read_text(), path


def _fake_distribution(site: Path, name: str, entry: str, module: str | None) -> Path:
    """What pip writes for an installed distribution, by hand: a dist-info folder with its entry points."""
    info = site / f"{name}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[inputdp.methods]\n{entry}\n")
    if module is not None:
        (site / f"{name}.py").write_text(module)
    return site


def test_plugin_with_a_taken_name_is_one_line(tmp_path):
    module = ("from inputdp.methods import MethodInfo\n"
              "INFO = MethodInfo(name='dpsgd', target='x:y', protects='inputs', summary='an impostor')\n")
    site = _fake_distribution(tmp_path, "impostor_plugin", "dpsgd = impostor_plugin:INFO", module)
    out = _bench(["list"], site)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "'dpsgd'" in lines[0] and "already taken" in lines[0] and "impostor_plugin:INFO" in lines[0]


@pytest.mark.parametrize("entry,module,expected", [
    ("broken = no_such_module_anywhere:INFO", None, "failed to load"),
    ("notinfo = notinfo_plugin:INFO", "INFO = 42\n", "must name a MethodInfo"),
])
def test_plugin_that_does_not_load_is_one_line(tmp_path, monkeypatch, entry, module, expected):
    from inputdp.benchmarks.errors import ConfigError
    from inputdp.methods import load_plugins

    name = entry.split(" = ")[1].split(":")[0]
    monkeypatch.syspath_prepend(str(_fake_distribution(tmp_path, name, entry, module)))
    with pytest.raises(ConfigError, match=expected) as err:
        load_plugins()
    assert "\n" not in str(err.value) and name in str(err.value)
