"""names.py is the only source of the names a run is stored under: no module that writes runs to the store, or reads
them back, spells one out; each concept is defined once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from inputdp.core import names

ROOT = Path(__file__).resolve().parents[2]
#: the modules that write runs (tags, params, metrics) or read them back from MLflow
STORE_MODULES = ["benchmarks/harness.py", "benchmarks/tracking/store.py", "benchmarks/tracking/tracker.py",
                 "benchmarks/tracking/uri.py", "benchmarks/audits/one_run.py",
                 "benchmarks/audits/multi_run.py", "benchmarks/sweep.py", "benchmarks/executors.py",
                 "benchmarks/cli/run.py", "benchmarks/cli/audit.py", "methods/base.py", "methods/pate/method.py",
                 "reports/cli.py"]
#: a column read from MLflow's search_runs frame: built from names.py, never spelled out
STORE_COLUMN = re.compile(r"^(tags|params|metrics)\.[A-Za-z_]")


def store_names() -> set[str]:
    """The names to look for: every tag, metric and parameter name of names.py that cannot be another word. One
    word alone ("method", "seed", "loss": also an audit score) and a parameter named as its RunConfig field
    ("train_examples", also a preset setting) are other things too; those are found as store columns instead."""
    from inputdp.core.config import RunConfig

    fields = {f for f in RunConfig.__dataclass_fields__}
    return {v for k, v in vars(names).items()
            if k.startswith(("TAG_", "METRIC_", "PARAM_")) and isinstance(v, str) and ("_" in v or "." in v)
            and v not in fields}


def literals(source: str) -> list[tuple[int, str]]:
    """Every string constant of the module (f-string parts included), with its line."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
    return out


def docstring_lines(source: str) -> set[int]:
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def spelled_out(source: str, wanted: set[str]) -> list[tuple[int, str]]:
    docs = docstring_lines(source)
    return [(line, v) for line, v in literals(source) if line not in docs and (v in wanted or STORE_COLUMN.match(v))]


def test_store_modules_spell_out_no_store_name():
    wanted = store_names()
    hits = [f"{m}:{line}: {v!r}" for m in STORE_MODULES for line, v in spelled_out((ROOT / m).read_text(), wanted)]
    assert hits == []


def test_no_module_spells_out_a_store_column():
    """``tags.X``, ``params.X``, ``metrics.X`` (the columns of MLflow's runs frame) only through names.py."""
    hits = []
    for folder in ("benchmarks", "methods", "datasets", "reports"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "names.py":
                continue
            text = path.read_text()
            hits += [f"{path.relative_to(ROOT)}:{line}: {v!r}" for line, v in spelled_out(text, set())]
    assert hits == []


def test_the_finder_finds_a_spelled_out_name():
    src = 'x = {"final_test_accuracy": 1}\ny = df["params.model"]\n"""the docstring may say final_test_accuracy"""\n'
    assert [v for _, v in spelled_out(src, store_names())] == ["final_test_accuracy", "params.model"]


def test_each_concept_is_defined_once():
    """The black-box scores and the reference method: one definition each, used everywhere."""
    from inputdp.benchmarks.audits import one_run as audit
    from inputdp.methods import METHODS, reference_method
    from inputdp.reports import leaderboard

    assert leaderboard.BLACK_BOX is audit.BLACK_BOX
    sources = [p for folder in ("benchmarks", "methods", "datasets", "reports") for p in (ROOT / folder).rglob("*.py")]
    defined = [p for p in sources if re.search(r"^BLACK_BOX\s*=", p.read_text(), re.M)]  # the project's, not .venv's
    assert [p.relative_to(ROOT).as_posix() for p in defined] == ["benchmarks/audits/scores.py"]
    assert not METHODS.get(reference_method()).load().capabilities.private
    assert all("protects\"] == \"nothing\"" not in p.read_text() for p in (ROOT / "reports" / "leaderboard").glob("*.py"))
