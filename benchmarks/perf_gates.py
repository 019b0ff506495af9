"""Performance gates: plain functions of figures measured side by side in one run (never absolute times)."""

from __future__ import annotations

from dataclasses import dataclass

#: (figure name, bound, what it is). A figure above its bound fails the gate.
GATES: dict[str, tuple[float, str]] = {
    "dirichlet_over_nonprivate_step": (1.10, "median step time of dirichlet_softmax / nonprivate, cpu-preset model"),
    "harness_overhead": (0.05, "a full epoch's training time / the sum of its pure training steps - 1"),
    "dirichlet_calibration_s": (0.050, "one calibration of dirichlet_softmax (seconds)"),
    "dpsgd_calibration_s": (0.050, "one calibration of dpsgd, RDP accountant (seconds)"),
}


@dataclass(frozen=True)
class GateResult:
    name: str
    value: float
    bound: float
    passed: bool

    def line(self) -> str:
        verdict = "ok" if self.passed else "FAILED"
        return f"gate {self.name}: {self.value:.4g} (bound {self.bound:g}) {verdict} — {GATES[self.name][1]}"


def check(figures: dict[str, float], gates: dict[str, tuple[float, str]] = GATES) -> list[GateResult]:
    """Every gate whose figure is present; a figure above its bound fails."""
    out = []
    for name, (bound, _) in gates.items():
        if name in figures:
            value = float(figures[name])
            out.append(GateResult(name, value, bound, value <= bound))
    return out


def failures(results: list[GateResult]) -> list[str]:
    return [r.line() for r in results if not r.passed]
