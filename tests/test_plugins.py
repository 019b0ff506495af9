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


def test_installed_plugin_is_listed(toy_site):
    out = _bench(["list"], toy_site)
    assert out.returncode == 0, out.stderr
    assert f"  {TOY_NAME} " in out.stdout and "(plug-in, for tests)" in out.stdout


def test_installed_plugin_runs(toy_site, shared_data, tmp_path):
    out = _bench(["run", "--methods", TOY_NAME, "--dataset", "mnist", "--preset", "smoke", "--epsilons", "2",
                  "--no-progress", "--data-dir", str(shared_data), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"],
                 toy_site, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith(TOY_NAME))
    accuracy, spent = float(row.split()[3]), float(row.split()[5])
    assert accuracy > 0.5 and 1.9 < spent <= 2.0  # it learnt, and spent the matched budget


def test_installed_plugin_passes_the_contract_tests(toy_site, shared_data):
    out = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_method_contract.py"), "-q",
                          "-p", "no:cacheprovider", "-k", TOY_NAME],
                         capture_output=True, text=True, env={**_env(toy_site), "INPUTDP_SHARED_DATA": str(shared_data)},
                         cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    assert int(summary.split()[0]) >= 5  # registration, calibration at 2 epsilons, smoke run, empty batches


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
def test_plugin_that_does_not_load_is_one_line(tmp_path, entry, module, expected):
    name = entry.split(" = ")[1].split(":")[0]
    site = _fake_distribution(tmp_path, name, entry, module)
    out = _bench(["run", "--methods", "all", "--dataset", "mnist"], site)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and expected in lines[0] and "Traceback" not in out.stderr
