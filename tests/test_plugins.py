"""Methods from outside the package: a real installed plug-in found through the ``inputdp.methods`` entry point
(listed, run, and put through the same contract tests as the built-in methods), and the one-line errors for a
plug-in whose name is taken or that does not load."""

from __future__ import annotations

import inspect
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import not_parents

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"
TOY_NAME = "toy_clipped_sgd"
#: (package folder, distribution, registered name) of each toy plug-in: a method, a data set, a model, a preset
TOYS = [("inputdp-toy-method", "inputdp-toy-method", TOY_NAME), ("inputdp-toy-dataset", "inputdp-toy-dataset", "toy_stripes"),
        ("inputdp-toy-model", "inputdp-toy-model", "toy_linear"), ("inputdp-toy-preset", "inputdp-toy-preset", "toy_quick")]

pytestmark = pytest.mark.slow


def _env(site: Path) -> dict[str, str]:
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def _bench(args: list[str], site: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", *args], capture_output=True, text=True,
                          env=_env(site), timeout=300, **kw)


@pytest.fixture(scope="module")
def toy_site(tmp_path_factory) -> Path:
    """The four toy packages installed by pip (from copies, so the build leaves nothing in the repository)."""
    work = tmp_path_factory.mktemp("toy")
    site = work / "site"
    for folder, _, _ in TOYS:
        source = work / folder
        shutil.copytree(PLUGINS / folder, source)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                        "--no-index", "--target", str(site), str(source)], check=True, capture_output=True, timeout=300)
    for _, dist, _ in TOYS:
        assert list(site.glob(dist.replace("-", "_") + "-*.dist-info")), dist
    return site


def test_installed_plugin_is_found_by_a_fresh_interpreter_and_runs(toy_site, tmp_path):
    """`bench run` in a new process, where only the installed entry point can make the name known."""
    out = _bench(["run", "--methods", TOY_NAME, "--dataset", "synthetic", "--preset", "smoke", "--epsilons", "2",
                  "--no-progress", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], toy_site, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith(TOY_NAME))
    accuracy, spent = float(row.split()[3]), float(row.split()[5])
    assert accuracy > 0.5 and 1.9 < spent <= 2.0  # it learnt, and spent the matched budget


def test_data_set_model_and_preset_plugins_run_together(toy_site, tmp_path):
    """A data set, a model and a preset that only installed packages name, in one `bench run` of a fresh process."""
    out = _bench(["run", "--methods", "nonprivate,dirichlet_softmax", "--dataset", "toy_stripes", "--model",
                  "toy_linear", "--preset", "toy_quick", "--epsilons", "4", "--no-progress", "--tracking-uri",
                  f"sqlite:///{tmp_path / 'm.db'}"], toy_site, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()
            if line.split() and line.split()[0] in ("nonprivate", "dirichlet_softmax")}
    assert float(rows["nonprivate"][3]) > 0.6  # 4 classes: chance is 0.25
    assert 3.9 < float(rows["dirichlet_softmax"][5]) <= 4.0
    import mlflow

    c = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    runs = not_parents(c.search_runs([e.experiment_id for e in c.search_experiments()]))
    assert len(runs) == 2
    assert {r.data.params["model"] for r in runs} == {"toy_linear"}
    assert {r.data.params["train_examples"] for r in runs} == {"400"}  # the preset's setting, from the plug-in
    assert {r.data.tags["dataset"] for r in runs} == {"toy_stripes"}


def test_plugins_are_listed_with_their_origin(toy_site):
    out = _bench(["list"], toy_site)
    assert out.returncode == 0, out.stderr
    for _, dist, name in TOYS:
        line = next(line for line in out.stdout.splitlines() if line.startswith(f"  {name} "))
        assert "(plug-in, for tests)" in line and line.endswith(f"[plug-in {dist}]"), line
    assert "  mnist " in out.stdout and "[plug-in" not in next(
        line for line in out.stdout.splitlines() if line.startswith("  mnist "))


@pytest.fixture
def toy_registered(toy_site, monkeypatch):
    """The installed plug-in loaded in this process, through the same entry-point path; unregistered afterwards."""
    from inputdp.methods import METHODS, load_plugins

    monkeypatch.syspath_prepend(str(toy_site))
    assert load_plugins() == [TOY_NAME]
    yield TOY_NAME
    METHODS.unregister(TOY_NAME)
    for module in [m for m in sys.modules if m.startswith("inputdp_toy_method")]:
        del sys.modules[module]


def test_installed_plugin_is_listed(toy_registered, capsys):
    from inputdp.benchmarks.cli import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert f"  {TOY_NAME} " in out and "(plug-in, for tests)" in out


#: the toy's options in the contract tests that take (method, options): each of its relations
TOY_OPTIONS = [{}, {"adjacency": "replace_input"}, {"adjacency": "zero_out"}]


def _contract_cases(contract, name: str):
    """Every test of tests/methods/test_method_contract.py that takes a method (``name``, or ``method`` with its ``options``),
    with the plug-in in the method's place and each value of the test's other parameters."""
    for test_name, test in sorted(vars(contract).items()):
        if not test_name.startswith("test_") or not callable(test):
            continue
        params = inspect.signature(test).parameters
        if "name" not in params and "method" not in params:
            continue
        grids = []
        for mark in getattr(test, "pytestmark", []):
            if mark.name != "parametrize":
                continue
            names = mark.args[0]
            names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
            if names == ["name"]:
                continue
            values = [(name, options) for options in TOY_OPTIONS] if names == ["method", "options"] else mark.args[1]
            grids.append([dict(zip(names, v if len(names) > 1 else (v,))) for v in values])
        for combo in itertools.product(*grids):
            kwargs = {k: v for d in combo for k, v in d.items()}
            if "name" in params:
                kwargs["name"] = name
            yield test_name, test, kwargs


def test_installed_plugin_passes_every_contract_test(toy_registered):
    """The contract every built-in method passes (tests/methods/test_method_contract.py), every test of it that takes a
    method, refusals included, run on the plug-in under each of its relations where a test takes options."""
    from .methods import test_method_contract as contract

    contract.STEP_METHODS.append(TOY_NAME)  # a step method: the smoke run checks its steps and its accuracy
    ran = set()
    try:
        for test_name, test, kwargs in _contract_cases(contract, TOY_NAME):
            test(**kwargs)
            ran.add(test_name)
    finally:
        contract.STEP_METHODS.remove(TOY_NAME)
    takes_a_method = {n for n, f in vars(contract).items() if n.startswith("test_") and callable(f)
                      and {"name", "method"} & set(inspect.signature(f).parameters)}
    assert ran == takes_a_method and len(ran) >= 7


def test_the_toy_method_s_relations_are_its_claims(toy_registered):
    """A second relation costs the plug-in one option: one input replaced needs more noise than add/remove for the
    same budget (the sum moves by up to 2C), zero-out exactly add/remove's, and each claim names its relation."""
    from inputdp.core.config import PrivacySpec
    from inputdp.methods import create_method

    spec = PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=256 / 60000, steps=1000)
    sigma = {rel: create_method(TOY_NAME, {"adjacency": rel}).calibrate(spec).noise["noise_multiplier"]
             for rel in ("add_remove", "zero_out", "replace_input")}
    assert sigma["zero_out"] == sigma["add_remove"] < sigma["replace_input"]
    method = create_method(TOY_NAME, {"adjacency": "replace_input"})
    method.calibrate(spec)
    assert method.claim().relation.key == "replace_input" and method.claim().protects == "inputs"


def test_no_file_of_the_package_names_the_plugins():
    for folder in ("methods", "benchmarks", "datasets", "reports"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            for _, _, name in TOYS:
                assert name not in text, (path, name)


def _fake_distribution(site: Path, name: str, entry: str, module: str | None, group: str = "inputdp.methods") -> Path:
    """What pip writes for an installed distribution, by hand: a dist-info folder with its entry points."""
    info = site / f"{name}-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    if module is not None:
        (site / f"{name}.py").write_text(module)
    return site


def test_plugin_with_a_taken_name_is_one_line_and_stops_nothing_else(tmp_path):
    module = ("from inputdp.methods import MethodInfo\n"
              "INFO = MethodInfo(name='dpsgd', target='x:y', protects='inputs', summary='an impostor')\n")
    site = _fake_distribution(tmp_path, "impostor_plugin", "dpsgd = impostor_plugin:INFO", module)
    out = _bench(["list"], site)
    assert out.returncode == 2 and "  nonprivate " in out.stdout  # the rest is listed
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert "'dpsgd'" in lines[0] and "already taken" in lines[0] and "impostor_plugin:INFO" in lines[0]
    # the built-in dpsgd is untouched: a command that names it runs
    out = _bench(["calibrate", "--method", "dpsgd", "--epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.01",
                  "--steps", "100"], site)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("entry,module,expected", [
    ("broken = no_such_module_anywhere:INFO", None, "failed to load"),
    ("notinfo = notinfo_plugin:INFO", "INFO = 42\n", "must name a MethodInfo"),
])
def test_plugin_that_does_not_load_is_one_line(tmp_path, monkeypatch, entry, module, expected):
    from inputdp.core.errors import ConfigError
    from inputdp.methods import METHODS, load_plugins

    name = entry.split(" = ")[1].split(":")[0]
    ep_name = entry.split(" = ")[0]
    monkeypatch.syspath_prepend(str(_fake_distribution(tmp_path, name, entry, module)))
    try:
        assert load_plugins() == []  # set aside, not raised: only a command that asks for it stops
        assert "dirichlet_softmax" in METHODS.names()
        with pytest.raises(ConfigError, match=expected) as err:
            METHODS.get(ep_name)
        assert "\n" not in str(err.value) and name in str(err.value)
        with pytest.raises(ConfigError, match=expected):
            METHODS.check_all_load()  # what --methods all asks
    finally:
        METHODS.unregister(ep_name)


def test_a_broken_dataset_plugin_stops_only_the_runs_that_name_it(tmp_path):
    site = _fake_distribution(tmp_path, "broken_data", "brokenset = broken_data_nowhere:INFO", None,
                              group="inputdp.datasets")
    out = _bench(["run", "--methods", "nonprivate", "--dataset", "brokenset", "--preset", "smoke", "--no-progress",
                  "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], site, cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "data set plug-in 'brokenset'" in out.stderr and "failed to load" in out.stderr
    out = _bench(["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress",
                  "--steps", "2", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"], site, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
