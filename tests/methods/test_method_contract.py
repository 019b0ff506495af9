"""The contract every registered method passes: calibration round-trip, a one-epoch smoke run, determinism."""

from __future__ import annotations

import math

import pytest
import torch

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import resolve
from inputdp.core.config import PrivacySpec
from inputdp.datasets import load_tensor_data
from inputdp.methods import METHODS, create_method
from inputdp.methods.base import Method, PrivacyClaim

from ..helpers import QUIET, smoke_config

NAMES = METHODS.names()
STEP_METHODS = [n for n in NAMES if not METHODS.get(n).facts().own_loop]  # one step per Poisson batch
TIMING_KEYS = ("time", "memory", "seconds", "throughput")


@pytest.mark.parametrize("name", NAMES)
def test_registered_and_lazy(name):
    info = METHODS.get(name)
    cls = info.load()
    assert issubclass(cls, Method) and cls.name == name
    assert info.protects in ("nothing", "inputs", "inputs and labels")


def test_registry_refuses_duplicates():
    from inputdp.core.errors import ConfigError
    from inputdp.methods import register_method

    with pytest.raises(ConfigError, match="already registered"):
        register_method(METHODS.get(NAMES[0]))


@pytest.mark.parametrize("name", NAMES)
def test_calibrate_is_idempotent(name):
    """Calibrating again, or for another budget first, gives what one call on a fresh instance gives."""
    one = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    four = PrivacySpec(epsilon=4.0, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    method = create_method(name)
    method.calibrate(one)
    method.calibrate(four)
    again = method.calibrate(one)
    fresh = create_method(name).calibrate(one)
    assert dict(again.noise) == dict(fresh.noise) and dict(again.details) == dict(fresh.details)
    assert again.epsilon == fresh.epsilon and method.spec == one


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_calibration_round_trip(name, epsilon):
    spec = PrivacySpec(epsilon=epsilon, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    method = create_method(name)
    cal = method.calibrate(spec)
    claim = method.claim()
    assert isinstance(claim, PrivacyClaim) and claim.scope
    if method.capabilities.own_loop:  # PATE: the budget is spent by its queries (claim.steps), inside fit()
        assert cal.epsilon <= epsilon * (1 + 1e-9) and cal.epsilon == pytest.approx(epsilon, rel=0.02)
        # before fit every query counts as answered: the ledger of all of them is the calibrated bound
        assert method.epsilon_spent(claim.steps) == pytest.approx(cal.epsilon, rel=1e-12)
        assert 0.0 == method.epsilon_spent(0) < method.epsilon_spent(claim.steps)
        if claim.steps > 1:  # a one-release method (dp_least_squares) has no half-way point
            assert method.epsilon_spent(claim.steps // 2) < cal.epsilon
        return
    spent = method.epsilon_spent(spec.steps)
    if not method.capabilities.private:
        assert math.isinf(spent) and claim.protects == "nothing"
        return
    assert spent <= epsilon * (1 + 1e-9)
    assert spent == pytest.approx(epsilon, rel=0.02)  # the noise is not wastefully large either
    assert cal.epsilon == pytest.approx(spent, rel=1e-9)
    assert method.epsilon_spent(spec.steps // 2) < spent  # the ledger grows with steps


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_one_epoch_smoke_run_and_determinism(name):
    config = smoke_config(name)
    a = run(resolve(config), QUIET, keep_model=True)
    b = run(resolve(config), QUIET)
    if name in STEP_METHODS:
        assert a.metrics["epochs"] == 1 and a.metrics["total_steps"] == config.privacy.steps
        # the accuracy reported is the returned model's, recomputed here without the harness
        data = load_tensor_data(config.dataset, data_dir=config.data_dir, device="cpu", train_examples=config.train_examples,
                                test_examples=config.test_examples)
        a.model.eval()
        with torch.no_grad():
            correct = sum(int((a.model(data.x_test[i: i + 250]).argmax(1) == data.y_test[i: i + 250]).sum())
                          for i in range(0, data.x_test.shape[0], 250))
        assert a.metrics["final_test_accuracy"] == correct / data.x_test.shape[0]
    if a.claim.epsilon < math.inf:  # the ledger logged is the method's own: a step method spends (nearly) all T steps
        floor = 0.9 * config.privacy.epsilon if name in STEP_METHODS else 0.0
        assert floor < a.metrics["final_epsilon_spent"] <= config.privacy.epsilon
    assert math.isfinite(a.epochs[0]["loss"] if "loss" in a.epochs[0] else a.epochs[0]["test_loss"])
    same = {k: v for k, v in a.metrics.items() if not any(t in k for t in TIMING_KEYS)}
    again = {k: v for k, v in b.metrics.items() if not any(t in k for t in TIMING_KEYS)}
    assert same == again
    other = run(resolve(config.replace(seed=1)), QUIET)
    assert other.metrics != a.metrics  # the seed matters


@pytest.mark.slow
@pytest.mark.parametrize("name", STEP_METHODS)
def test_empty_batches_are_handled(name):
    # q tiny: most batches are empty; the run must still count each step and finish
    config = smoke_config(name, sampling_rate=0.0005, steps=30)
    result = run(resolve(config), QUIET)
    assert result.metrics["total_steps"] == 30


@pytest.mark.parametrize("name", [n for n in NAMES if METHODS.get(n).facts().private])
@pytest.mark.parametrize("epsilon,side", [(1e-300, "smallest"), (1e300, "largest"), (math.inf, "largest")])
def test_out_of_range_targets_are_refused_quickly(name, epsilon, side):
    """A target no noise in range reaches (or one that would only buy the range's limit) is refused with the
    feasible end named, in bounded time and memory."""
    import time
    import tracemalloc

    from inputdp.core.errors import ConfigError

    spec = PrivacySpec(epsilon=epsilon, delta=1e-5, sampling_rate=0.05, steps=40)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConfigError, match=f"the {side} feasible epsilon is"):
            create_method(name).calibrate(spec)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0 and peak < 500 * 2**20


def test_a_target_no_noise_meets_is_one_line_whichever_method_forgets_to_say_so():
    """An accountant whose search lets its InfeasibleTarget through (a plug-in's) is refused in one line, named by
    the method, by the one calibration path (Method.calibrate: runs, bench calibrate, the audits)."""
    from inputdp.core.config import PrivacySpec
    from inputdp.core.errors import ConfigError
    from inputdp.methods.accounting.accountants import PLD
    from inputdp.methods.accounting.calibration import InfeasibleTarget
    from inputdp.methods.dpsgd import DPSGD

    class Silent(PLD):  # an accountant whose search finds nothing and raises the bare error
        def least_noise(self, family, epsilon, delta):
            raise InfeasibleTarget(epsilon, 2.5, "a toy mechanism")

    class Forgetful(DPSGD):
        name = "forgetful"
        accountant = Silent()

    with pytest.raises(ConfigError, match=r"^forgetful: epsilon=1 is infeasible for a toy mechanism") as err:
        Forgetful().calibrate(PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=10))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("method", "options"), [
    ("dpsgd", {}), ("dpsgd", {"adjacency": "replace_input"}), ("dpsgd", {"adjacency": "zero_out"}),
    ("dpsgd", {"norm_noise_multiplier": 8.0}),
    ("dp_least_squares", {}), ("dp_least_squares", {"adjacency": "add_remove"}), ("feature_perturbation", {}),
])
def test_a_declared_release_recomputed_by_dp_accounting_gives_the_claim(method, options):
    """A method that declares what it releases as a dp_accounting event (Method.release) has its claim recomputed
    by the library's PLD accountant composing that event under its relation, independently of the method's own
    calibration code: the same epsilon, up to the PLD grid's pessimism (never below the claim by more than the grid)."""
    from inputdp.core.config import PrivacySpec
    from inputdp.methods import create_method

    m = create_method(method, options)
    spec = PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=256 / 60000, steps=1000)
    cal = m.calibrate(spec)
    release = m.release()
    assert release is not None
    recomputed = release.epsilon(spec.delta)
    assert cal.epsilon - 2e-3 <= recomputed <= cal.epsilon + 0.03, (recomputed, cal.epsilon)
    # and the event is the release: half the noise reads a larger epsilon from the same accountant
    half = type(m).calibrated(spec, type(cal)(noise={k: v / 2 for k, v in cal.noise.items()}, epsilon=cal.epsilon,
                                              release_noise=cal.release_noise / 2), options)
    assert half.release().epsilon(spec.delta) > 1.5 * cal.epsilon


def test_methods_without_a_library_event_say_so():
    from inputdp.core.config import PrivacySpec
    from inputdp.methods import create_method

    m = create_method("dirichlet_softmax", {})
    m.calibrate(PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=256 / 60000, steps=100))
    assert m.release() is None


def test_capabilities_are_read_from_the_registry_without_importing_any_method():
    """Listing and filtering methods by their capabilities imports none of them (nor torch): the record sits beside
    the lazy target, as timm's registry keeps a model's facts."""
    import subprocess
    import sys

    code = ("import sys; from inputdp.methods import METHODS; "
            "own = [n for n in METHODS.names() if METHODS.get(n).facts().own_loop]; "
            "loaded = [m for m in sys.modules if m.startswith('inputdp.methods.') or m == 'torch']; print(own, loaded)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert out.strip() == "['pate', 'dp_least_squares', 'feature_perturbation'] []"


@pytest.mark.parametrize("name", NAMES)
def test_a_method_s_class_and_registry_entry_declare_the_same_capabilities(name):
    info = METHODS.get(name)
    assert info.capabilities is None or info.load().capabilities == info.capabilities


def test_a_class_that_contradicts_its_registry_entry_is_refused_in_one_line():
    from inputdp.core.capabilities import Capabilities
    from inputdp.core.errors import ConfigError
    from inputdp.methods import MethodInfo

    info = MethodInfo(name="liar", target="inputdp.methods.dpsgd:DPSGD", protects="inputs", summary="",
                      capabilities=Capabilities(own_loop=True))
    with pytest.raises(ConfigError, match=r"^method 'liar' declares other capabilities in its class"):
        info.load()
    assert MethodInfo(name="silent", target="inputdp.methods.dpsgd:DPSGD", protects="inputs",
                      summary="").facts() == METHODS.get("dpsgd").facts()  # a record without them: the class's
