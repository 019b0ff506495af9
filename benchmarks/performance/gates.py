"""Performance gates: plain functions of figures measured side by side in one run (never absolute times).

The gates themselves (figure name -> bound, what it is) belong to the suite that measures them
(``benchmarks/performance/suite/conftest.py``); this module only checks figures against the gates it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

Gates = dict[str, tuple[float, str]]


@dataclass(frozen=True)
class GateResult:
    name: str
    value: float
    bound: float
    passed: bool
    what: str = ""

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        return f"gate {self.name}: {self.value:.4g} (bound {self.bound:g}) {verdict} — {self.what}"


def check(figures: dict[str, float], gates: Gates) -> list[GateResult]:
    """Every gate whose figure is present; a figure above its bound fails."""
    out = []
    for name, (bound, what) in gates.items():
        if name in figures:
            value = float(figures[name])
            out.append(GateResult(name, value, bound, value <= bound, what))
    return out


def failures(results: list[GateResult]) -> list[str]:
    """One line per gate that failed."""
    return [r.line() for r in results if not r.passed]
