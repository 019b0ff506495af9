"""The gate logic is a plain function of measured figures: figures that pass, figures that fail."""

from __future__ import annotations

from inputdp.benchmarks.performance.gates import check, failures

GATES = {"step_ratio": (1.10, "a step-time ratio"), "overhead": (0.05, "harness overhead"),
         "calibration_a_s": (0.050, "one calibration (seconds)"), "calibration_b_s": (0.050, "another (seconds)")}


def test_passing_figures():
    figures = {"step_ratio": 1.02, "overhead": 0.01, "calibration_a_s": 0.012, "calibration_b_s": 0.03}
    results = check(figures, GATES)
    assert len(results) == len(GATES) and all(r.passed for r in results) and failures(results) == []


def test_failing_figures_name_value_and_bound():
    results = check({"step_ratio": 1.25, "overhead": 0.049, "calibration_b_s": 0.2}, GATES)
    bad = failures(results)
    assert len(bad) == 2
    assert "step_ratio: 1.25 (bound 1.1) FAILED — a step-time ratio" in bad[0]
    assert "calibration_b_s: 0.2 (bound 0.05) FAILED" in bad[1]


def test_bound_is_inclusive_and_missing_figures_are_not_gated():
    results = check({"overhead": 0.05}, GATES)
    assert [r.name for r in results] == ["overhead"] and results[0].passed
