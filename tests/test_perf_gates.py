"""The gate logic is a plain function of measured figures: figures that pass, figures that fail."""

from __future__ import annotations

from inputdp.benchmarks.perf_gates import GATES, check, failures


def test_passing_figures():
    figures = {"dirichlet_over_nonprivate_step": 1.02, "harness_overhead": 0.01, "dirichlet_calibration_s": 0.012,
               "dpsgd_calibration_s": 0.03}
    results = check(figures)
    assert len(results) == len(GATES) and all(r.passed for r in results) and failures(results) == []


def test_failing_figures_name_value_and_bound():
    results = check({"dirichlet_over_nonprivate_step": 1.25, "harness_overhead": 0.049, "dpsgd_calibration_s": 0.2})
    bad = failures(results)
    assert len(bad) == 2
    assert "dirichlet_over_nonprivate_step: 1.25 (bound 1.1) FAILED" in bad[0]
    assert "dpsgd_calibration_s: 0.2 (bound 0.05) FAILED" in bad[1]


def test_bound_is_inclusive_and_missing_figures_are_not_gated():
    results = check({"harness_overhead": 0.05})
    assert [r.name for r in results] == ["harness_overhead"] and results[0].passed
