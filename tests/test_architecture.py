"""The shape of the code, checked: no import cycle, no method named by the harness, citations that resolve."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from inputdp.methods import METHODS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"benchmarks/core": "inputdp.core", "benchmarks": "inputdp.benchmarks", "methods": "inputdp.methods",
            "datasets": "inputdp.datasets", "reports": "inputdp.reports"}
BUILT_IN = ("nonprivate", "dirichlet", "dpsgd", "pate", "penultimate")


def _modules() -> dict[str, Path]:
    """Every installed module of the project, by import name (perf suite and tests excluded)."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT / folder)
            if rel.parts[:2] == ("performance", "suite") or (folder == "benchmarks" and rel.parts[0] == "core"):
                continue
            parts = [package, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, at any depth of its code (a function-level import is a dependency too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        found.update(t for t in targets if t in modules and t != name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["inputdp.benchmarks.sweep"] >= {"inputdp.benchmarks.executors"}  # the analysis sees imports
    assert _cycles(graph) == []


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    """The project's packages (inputdp.core, .methods, .datasets, .benchmarks, .reports), an edge where any module of
    one imports any module of another: the cycles a module-level graph cannot see."""
    modules = _modules()
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES.values()}
    for name, path in modules.items():
        graph[_package(name)] |= {_package(d) for d in _imports(name, path, modules)} - {_package(name)}
    return graph


def test_no_package_level_cycle():
    graph = _package_graph()
    assert "inputdp.core" in graph["inputdp.methods"] and "inputdp.methods" in graph["inputdp.benchmarks"]
    assert _cycles(graph) == []
    assert graph["inputdp.core"] == set()  # the core types import no other package of the suite
    assert "inputdp.benchmarks" not in graph["inputdp.methods"] | graph["inputdp.datasets"]


def test_package_graph_sees_a_function_level_import_back(tmp_path, monkeypatch):
    """The package graph would catch methods importing the harness again, even inside a function."""
    modules = _modules()
    fake = tmp_path / "base.py"
    fake.write_text("def f():\n    from inputdp.benchmarks import harness\n")
    deps = _imports("inputdp.methods.base", fake, modules)
    assert {_package(d) for d in deps} == {"inputdp.benchmarks"}
    assert _cycles({"m": {"b"}, "b": {"m"}}) == [["b", "m"]]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_harness_names_no_method():
    """`grep -nE "nonprivate|dirichlet|dpsgd|pate|penultimate" benchmarks/*.py` finds only presets, studies, help."""
    pattern = re.compile("|".join([*BUILT_IN, *(re.escape(n) for n in METHODS.names())]))
    hits = []
    for path in sorted([*(ROOT / "benchmarks").glob("*.py"), *(ROOT / "benchmarks" / "cli").glob("*.py"),
                        *(ROOT / "benchmarks" / "core").glob("*.py")]):
        if path.name in ("presets.py", "studies.py"):  # the declared recipes and studies name their methods
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "help=" not in line:
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == []


def _project_text_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "tox.ini"]
    for folder in PACKAGES:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md", ".csv", ".toml")]
    return files


def test_citations_are_to_files_in_the_repository():
    """No module, table or README cites the working notes a user's clone does not have."""
    outside = re.compile(r"REFERENCE\.md|STYLE\.md|\bseeds?/|\bseed 00\d|\.\./shared")
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in _project_text_files()
            for m in outside.finditer(p.read_text(errors="replace"))]
    assert hits == []


def test_theory_citations_name_its_sections():
    theory = (ROOT / "methods" / "THEORY.md").read_text()
    headings = {line.lstrip("#").strip() for line in theory.splitlines() if line.startswith("## ")}
    cited = {}
    for path in _project_text_files():
        if path.name == "THEORY.md":
            continue
        text = " ".join(path.read_text(errors="replace").split())
        for section in re.findall(r'THEORY\.md, "([^"]+)"', text):
            cited.setdefault(section, path.relative_to(ROOT))
    assert len(cited) >= 8  # the accountants, calibration, each method, PATE and the audit cite it
    missing = {s: str(p) for s, p in cited.items() if s not in headings}
    assert missing == {}


@pytest.mark.parametrize("module", ["inputdp.benchmarks.harness", "inputdp.benchmarks.sweep",
                                    "inputdp.benchmarks.executors", "inputdp.benchmarks.performance.speed"])
def test_harness_modules_do_not_reach_into_methods_internals(module):
    """The harness uses the method interface only: no import of a particular method's module."""
    modules = _modules()
    deps = _imports(module, modules[module], modules)
    inner = {d for d in deps if d.startswith("inputdp.methods.") and d not in ("inputdp.methods.base", "inputdp.methods.augment")}
    assert inner == set()


# --- the size of the code's parts ---------------------------------------------------------------------------------

#: a function this long is doing several things; a parser's list of flags (``add_arguments``) is a table, exempt
MAX_FUNCTION_LINES = 60


def _functions(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "suite" in path.relative_to(ROOT / folder).parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def test_no_function_is_over_60_lines_outside_a_parser():
    long = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for folder in ("benchmarks", "methods", "datasets", "reports") for p, n in _functions(folder)
            if n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES and n.name != "add_arguments"]
    assert long == []


#: the longest a module of the suite may be: past it, a module does several jobs (split it by concept)
MAX_MODULE_LINES = 400


def _long_modules(roots) -> list[tuple[Path, int]]:
    return [(p, n) for folder in roots for p in sorted(Path(folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]


def test_no_module_is_over_400_lines(tmp_path):
    long = _long_modules(ROOT / f for f in ("benchmarks", "methods", "datasets", "reports"))
    assert [f"{p.relative_to(ROOT)} ({n} lines)" for p, n in long] == []
    (tmp_path / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))  # the check can fail
    (tmp_path / "short.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert _long_modules([tmp_path]) == [(tmp_path / "long.py", MAX_MODULE_LINES + 1)]


def test_every_public_function_in_benchmarks_has_a_docstring():
    missing = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        if "suite" in path.relative_to(ROOT / "benchmarks").parts:
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_") \
                    and ast.get_docstring(node) is None:
                missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert missing == []


def test_the_size_checks_see_a_long_function_and_a_bare_one(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    node = ast.parse(f"def f():\n{body}\n").body[0]
    assert node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    assert ast.get_docstring(ast.parse("def g():\n    return 1\n").body[0]) is None


# --- a run's configuration, traced from the command line to the store ---------------------------------------------

class _PassTrace:
    """Counts each time a function of a project module is entered, from another module, with the run's configuration
    (a RunConfig, a ResolvedRun or the harness's Prepared run; or a list of them) among its arguments: the run's
    passes through that module. A method of the configuration's own object (``config.key()``) and object construction
    (``__init__``, ``dataclasses.replace``) are not passes; a generator counts once, not at each resumption."""

    def __init__(self):
        from inputdp.benchmarks.resolve import ResolvedRun
        from inputdp.benchmarks.steps import Prepared
        from inputdp.core.config import RunConfig

        self.kinds = (RunConfig, ResolvedRun, Prepared)
        self.passes: dict[str, list[str]] = {}
        self._generators: set = set()

    def _carries(self, value) -> bool:
        return isinstance(value, self.kinds) or (isinstance(value, (list, tuple)) and bool(value)
                                                  and isinstance(value[0], self.kinds))

    def __call__(self, frame, event, arg) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        code = frame.f_code
        if not module.startswith("inputdp.") or caller == module or code.co_name.startswith("__"):
            return
        if code.co_flags & 0x20:  # a generator: its first entry only
            if frame in self._generators:
                return
            self._generators.add(frame)
        names_ = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        if names_ and names_[0] in ("self", "cls"):
            names_ = names_[1:]
        if any(self._carries(frame.f_locals.get(n)) for n in names_):
            self.passes.setdefault(module, []).append(code.co_name)

    def __enter__(self):
        import sys

        sys.setprofile(self)
        return self

    def __exit__(self, *exc) -> None:
        import sys

        sys.setprofile(None)


@pytest.mark.parametrize("argv", [
    ["run", "--methods", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--epsilons", "4",
     "--seeds", "0", "--steps", "4", "--no-progress"],
    ["audit", "--method", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--epsilon", "4",
     "--canaries", "20", "--steps", "4", "--json"]], ids=["run", "audit"])
def test_a_runs_configuration_passes_through_each_module_at_most_twice(argv, tmp_path, capsys):
    """From ``bench`` to the store, the configuration is resolved, checked and fingerprinted once (resolve), handed
    down, and never re-resolved below: the harness is entered with it once, no other module more than twice."""
    from inputdp.benchmarks.cli import main

    with _PassTrace() as trace:
        assert main([*argv, "--tracking-uri", f"sqlite:///{tmp_path / 's.db'}"]) == 0
    assert trace.passes["inputdp.benchmarks.resolve"] == ["check_feasible"]  # the one resolution, above the harness
    assert trace.passes["inputdp.benchmarks.harness"] == ["run"]  # entered once: it reads top to bottom from there
    assert any(m.startswith("inputdp.benchmarks.tracking.") for m in trace.passes)  # the tracker's package
    assert {m: p for m, p in trace.passes.items() if len(p) > 2} == {}


def test_the_pass_trace_counts_each_entry_with_the_configuration():
    from inputdp.benchmarks.resolve import resolve
    from tests.helpers import smoke_config

    config = smoke_config("nonprivate")
    with _PassTrace() as trace:
        for _ in range(3):
            resolve(config)
        config.key()  # the configuration's own method: not a pass
    assert trace.passes["inputdp.benchmarks.resolve"] == ["resolve"] * 3
    assert "inputdp.core.config" not in trace.passes


def test_every_package_of_the_source_is_installed():
    """A folder with an ``__init__.py`` that pyproject's ``packages`` leaves out is missing from a wheel (an editable
    install hides it): ``pip install .`` once shipped no ``inputdp.benchmarks.cli``, so ``bench`` could not start."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, roots = set(tool["packages"]), tool["package-dir"]
    found = set()
    for package, folder in roots.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            if rel.parts[:2] == ("performance", "suite") or (package == "inputdp.benchmarks" and rel.parts[:1] == ("core",)):
                continue  # the perf suite is run from the source tree; core is its own root
            found.add(".".join([package, *rel.parts]))
    assert found == listed


#: the only imports a library module makes inside a function, and why (every other import is at its module's top,
#: where readers and tools see the structure): optional extras a user may not have installed; libraries that take
#: over half a second to import (measured after torch: opacus 1.2 s, torchvision.datasets 1.0, medmnist 0.9,
#: dp_accounting.pld 0.6) on the one path that needs them; imports guarded by try (a dependency's missing part gets a
#: one-line error); and torch in inputdp.core, whose types the command line's parser uses (`bench --help` in 0.1 s).
#: The command line's own modules (benchmarks/cli, reports/cli.py) import the machinery when a command runs, so that
#: help and argument refusals come before any heavy import.
DEFERRED = {"ray": "optional extra", "submitit": "optional extra", "torchcsprng": "optional extra",
            "opacus": "1.2 s; DP-SGD's prepare and Opacus' accountants only",
            "dp_accounting": "0.6 s; the PLD accountants only",
            "torchvision.datasets": "1.0 s; the torchvision loaders only", "medmnist": "0.9 s; its loaders only"}


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    guarded = {id(x) for n in ast.walk(tree) if isinstance(n, ast.Try) for b in n.body for x in ast.walk(b)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Import, ast.ImportFrom)) and id(sub) not in guarded:
                    module = ("." * sub.level + (sub.module or "")) if isinstance(sub, ast.ImportFrom) else sub.names[0].name
                    out.append((sub.lineno, module))
    return out


def test_imports_are_at_module_top_except_the_deferred_ones():
    found = []
    for folder in ("benchmarks", "methods", "datasets", "reports"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:2] == ("benchmarks", "cli") or str(rel) == "reports/cli.py" or "suite" in rel.parts:
                continue
            for line, module in _function_level_imports(path):
                core_torch = rel.parts[:2] == ("benchmarks", "core") and module in ("torch", "importlib.metadata")
                if not core_torch and not any(module == d or module.startswith(d + ".") for d in DEFERRED):
                    found.append(f"{rel}:{line} {module}")
    assert found == []


def test_the_import_check_sees_a_function_level_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import json\n    try:\n        import fcntl\n    except ImportError:\n        pass\n")
    assert _function_level_imports(f) == [(2, "json")]


def test_the_perf_suite_finds_the_repository_root_as_the_tests_do():
    """The regression suite's default data folder is the tests' (``shared/data`` beside the clone): a suite moved one
    folder deeper once looked beside benchmarks/ instead and silently skipped its MNIST gate."""
    import importlib.util

    path = ROOT / "benchmarks" / "performance" / "suite" / "conftest.py"
    spec = importlib.util.spec_from_file_location("perf_suite_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ROOT == ROOT


def test_only_the_tracker_writes_to_mlflow():
    """One owner of the store: no module outside benchmarks/tracking/ calls an MLflow write (a run made, ended,
    tagged, logged to or deleted; an experiment made or tagged), through a client or the fluent API."""
    writes = re.compile(r"\.(create_run|log_batch|set_tag|delete_tag|log_table|set_terminated|log_metric|log_param|"
                        r"log_dict|log_text|log_inputs|log_artifacts?|delete_run|update_run|create_experiment|"
                        r"set_experiment_tag|start_run|end_run)\(")
    found = []
    for folder in ("benchmarks", "methods", "datasets", "reports"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("benchmarks/tracking/"):
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if writes.search(line) and not line.lstrip().startswith("#"):
                    found.append(f"{rel}:{i}: {line.strip()}")
    assert found == []
    tracker = (ROOT / "benchmarks" / "tracking" / "tracker.py").read_text()
    assert writes.search(tracker)  # the check can fail: the tracker's own writes match it


def test_no_method_computes_its_own_epsilon():
    """A method declares what it releases (release_family); the accountant registry computes its calibration, its
    epsilon and its ledger: no method module (nor the toy plug-in) defines noise_for or epsilon_spent."""
    found = []
    for path in [*sorted((ROOT / "methods").rglob("*.py")), *sorted((ROOT / "tests" / "plugins").rglob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found += [f"{path.relative_to(ROOT)}: {node.name}.{f.name}" for f in node.body
                          if isinstance(f, ast.FunctionDef) and f.name in ("noise_for", "epsilon_spent")
                          and node.name != "Method"]
    assert found == []


def test_reports_never_read_a_verdict_or_a_claim_from_its_words():
    """The reports read verdicts and claims from their fields and the board's columns (reports/leaderboard/reading.py):
    the one regular expression in reports/ makes file names of data set names (load.py)."""
    users = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "reports").rglob("*.py")
                   if any(isinstance(n, ast.Import) and any(a.name == "re" for a in n.names)
                          for n in ast.walk(ast.parse(p.read_text()))))
    assert users == ["reports/leaderboard/load.py"]
    tree = ast.parse((ROOT / "reports" / "leaderboard" / "load.py").read_text())
    callers = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
               if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "re"}
    assert callers == {"_file_stem"}


def test_no_audit_searches_a_noise_of_its_own():
    """The audits read the claim's noise from the accountant registry (a mechanism audit's release is the family
    ScaledEvent, which accountants.PLD calibrates): no module under benchmarks/ runs a root search (brentq) or the
    calibration's search (calibrate_parameter) of its own."""
    found = sorted(f"{p.relative_to(ROOT)}: {n.attr if isinstance(n, ast.Attribute) else n.id}"
                   for p in (ROOT / "benchmarks").rglob("*.py") for n in ast.walk(ast.parse(p.read_text()))
                   if (isinstance(n, ast.Attribute) and n.attr in ("brentq", "calibrate_parameter"))
                   or (isinstance(n, ast.Name) and n.id in ("brentq", "calibrate_parameter")))
    assert found == []
