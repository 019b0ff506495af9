"""The contract every registered method passes: calibration round-trip, a one-epoch smoke run, determinism."""

from __future__ import annotations

import math

import pytest

from inputdp.benchmarks.config import PerfFlags, PrivacySpec
from inputdp.benchmarks.harness import run
from inputdp.methods import METHODS, create_method
from inputdp.methods.base import Method, PrivacyClaim

from .helpers import smoke_config

NAMES = METHODS.names()
STEP_METHODS = [n for n in NAMES if not METHODS.get(n).load().own_loop]  # one step per Poisson batch
QUIET = PerfFlags(device="cpu", progress=False)
TIMING_KEYS = ("time", "memory", "seconds", "throughput")


@pytest.mark.parametrize("name", NAMES)
def test_registered_and_lazy(name):
    info = METHODS.get(name)
    cls = info.load()
    assert issubclass(cls, Method) and cls.name == name
    assert info.protects in ("nothing", "inputs", "inputs and labels")


def test_registry_refuses_duplicates():
    from inputdp.methods import register_method

    with pytest.raises(ValueError, match="already registered"):
        register_method(METHODS.get(NAMES[0]))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_calibration_round_trip(name, epsilon):
    spec = PrivacySpec(epsilon=epsilon, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    method = create_method(name)
    cal = method.calibrate(spec)
    claim = method.claim()
    assert isinstance(claim, PrivacyClaim) and claim.scope
    if method.own_loop:  # PATE: the budget is spent by its queries, inside fit()
        assert method.epsilon_spent(0) == 0.0
        assert cal.epsilon <= epsilon * (1 + 1e-9) and cal.epsilon == pytest.approx(epsilon, rel=0.02)
        return
    spent = method.epsilon_spent(spec.steps)
    if name == "nonprivate":
        assert math.isinf(spent) and claim.protects == "nothing"
        return
    assert spent <= epsilon * (1 + 1e-9)
    assert spent == pytest.approx(epsilon, rel=0.02)  # the noise is not wastefully large either
    assert cal.epsilon == pytest.approx(spent, rel=1e-9)
    assert method.epsilon_spent(spec.steps // 2) < spent  # the ledger grows with steps


@pytest.mark.parametrize("name", NAMES)
def test_one_epoch_smoke_run_and_determinism(name, shared_data):
    config = smoke_config(name, shared_data)
    a = run(config, QUIET)
    b = run(config, QUIET)
    if name in STEP_METHODS:
        assert a.metrics["epochs"] == 1 and a.metrics["total_steps"] == config.privacy.steps
    assert 0.0 <= a.metrics["final_test_accuracy"] <= 1.0
    assert math.isfinite(a.epochs[0]["loss"] if "loss" in a.epochs[0] else a.epochs[0]["test_loss"])
    same = {k: v for k, v in a.metrics.items() if not any(t in k for t in TIMING_KEYS)}
    again = {k: v for k, v in b.metrics.items() if not any(t in k for t in TIMING_KEYS)}
    assert same == again
    other = run(config.replace(seed=1), QUIET)
    assert other.metrics != a.metrics  # the seed matters


@pytest.mark.parametrize("name", STEP_METHODS)
def test_empty_batches_are_handled(name, shared_data):
    # q tiny: most batches are empty; the run must still count each step and finish
    config = smoke_config(name, shared_data, sampling_rate=0.0005, steps=30)
    result = run(config, QUIET)
    assert result.metrics["total_steps"] == 30
