from __future__ import annotations

import os
from pathlib import Path

import pytest

from inputdp.benchmarks.performance.gates import Gates, check

#: (figure name -> bound, what it is). A figure above its bound fails the gate.
GATES: Gates = {
    "dirichlet_over_nonprivate_step": (1.10, "median step time of dirichlet_softmax / nonprivate, cpu-preset model"),
    "harness_overhead": (0.05, "a full epoch's training time / the sum of its pure training steps - 1"),
    "dirichlet_calibration_s": (1.5, "one calibration of dirichlet_softmax, per-example curve, with the vectors' "
                                     "bracket (seconds)"),
    "dirichlet_paper_calibration_s": (1.0, "one calibration of dirichlet_softmax, the paper's accountant, with the "
                                           "vectors' bracket at its r (seconds)"),
    "dpsgd_calibration_s": (2.0, "one calibration of dpsgd, PLD accountant (dp_accounting; measured 0.6-0.7 s at "
                                 "the cpu preset's eps 1) (seconds)"),
    "dpsgd_rdp_calibration_s": (0.12, "one calibration of dpsgd, RDP accountant (seconds; the vectorised copy "
                                      "measured 0.026-0.057 s on the 2-core CI machine, Opacus' own "
                                      "get_noise_multiplier 0.20-0.22 s)"),
}

ROOT = Path(__file__).resolve().parents[3]  # the repository (benchmarks/performance/suite/conftest.py)
SHARED_DATA = Path(os.environ.get("INPUTDP_SHARED_DATA", ROOT.parent / "shared" / "data"))

_FIGURES: dict[str, float] = {}
_PRINTED: dict[str, float] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "report: measures and prints figures for reports/performance-cpu/README.md; gates nothing")


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
    for r in check(_FIGURES, GATES):
        terminalreporter.write_line(r.line())
    for name, value in _PRINTED.items():
        terminalreporter.write_line(f"figure {name}: {value:.4g} (printed, not gated)")
