from __future__ import annotations

import os
from pathlib import Path

import pytest

from inputdp.benchmarks.perf_gates import check

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("INPUTDP_SHARED_DATA", ROOT.parent / "shared" / "data"))

_FIGURES: dict[str, float] = {}
_PRINTED: dict[str, float] = {}


@pytest.fixture(scope="session")
def figures() -> dict[str, float]:
    """Gate figures measured in this run; checked and printed at the end of the session."""
    return _FIGURES


@pytest.fixture(scope="session")
def printed() -> dict[str, float]:
    """Figures that are reported, not gated."""
    return _PRINTED


def pytest_terminal_summary(terminalreporter):
    if not _FIGURES and not _PRINTED:
        return
    terminalreporter.section("performance gates (figures measured side by side in this run)")
    for r in check(_FIGURES):
        terminalreporter.write_line(r.line())
    for name, value in _PRINTED.items():
        terminalreporter.write_line(f"figure {name}: {value:.4g} (printed, not gated)")
