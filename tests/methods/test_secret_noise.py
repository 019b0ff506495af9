"""Secret noise (methods/noise.py, option ``secure_mode``): seeded noise is the same on two runs with one seed, secret
noise differs; every registered method's claim says where its noise comes from, and logs it as a tag; a non-boolean
secure_mode is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import resolve
from inputdp.core import names
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import METHODS, create_method, noise

from ..benchmarks.test_hostile_input import _assert_one_line, _call
from ..helpers import smoke_config

NAMES = METHODS.names()
PRIVATE = [n for n in NAMES if METHODS.get(n).facts().private]
SPEC = PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=100)


def _weights(result) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in result.model.parameters()])


@pytest.mark.parametrize("method", ["dp_least_squares", "feature_perturbation"])
def test_a_run_is_reproducible_from_its_seed_unless_the_noise_is_secret(method):
    """The released model: equal on two seeded runs with one seed, different on two secure ones with that seed."""
    seeded = [_weights(run(resolve(smoke_config(method)), keep_model=True)) for _ in range(2)]
    secure = [_weights(run(resolve(smoke_config(method, method_options={method: {"secure_mode": True}})),
                           keep_model=True)) for _ in range(2)]
    assert torch.equal(seeded[0], seeded[1])
    assert not torch.equal(secure[0], secure[1]) and not torch.equal(secure[0], seeded[0])


def test_the_generators_are_seeded_or_secret():
    a, b = (noise.torch_generator(7, secure=False) for _ in range(2))
    assert torch.equal(torch.randn(50, generator=a), torch.randn(50, generator=b))
    a, b = (noise.torch_generator(7, secure=True) for _ in range(2))
    assert not torch.equal(torch.randn(50, generator=a), torch.randn(50, generator=b))
    assert np.array_equal(noise.numpy_generator(7, secure=False).normal(size=50),
                          noise.numpy_generator(7, secure=False).normal(size=50))
    assert not np.array_equal(noise.numpy_generator(7, secure=True).normal(size=50),
                              noise.numpy_generator(7, secure=True).normal(size=50))


def test_the_secure_draw_is_a_standard_normal_and_the_seeded_one_unchanged():
    """Secure: (Z1 + Z2 + Z3 + Z4) / 2 is N(0, 1) (mean, variance and fourth moment, 400,000 draws: 6 standard
    errors); seeded: exactly the torch.randn the methods drew before secure_mode existed."""
    z = noise.standard_normal((400_000,), torch.Generator().manual_seed(0), secure=True, dtype=torch.float64)
    n = z.numel()
    assert abs(float(z.mean())) < 6 / n**0.5
    assert abs(float(z.var()) - 1.0) < 6 * 2**0.5 / n**0.5
    assert abs(float((z**4).mean()) - 3.0) < 6 * 96**0.5 / n**0.5
    same = noise.standard_normal((3, 4), torch.Generator().manual_seed(5), secure=False, dtype=torch.float64)
    assert torch.equal(same, torch.randn((3, 4), generator=torch.Generator().manual_seed(5), dtype=torch.float64))


@pytest.mark.parametrize("method", ["gaussian_penultimate", "dirichlet_softmax"])
def test_the_per_step_release_draws_from_the_seeded_stream_or_a_secret_one(method):
    """The released vectors of one batch: the same after one torch.manual_seed (the run's seed), different from one
    another with secure_mode whatever the global seed."""
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.features = torch.nn.Linear(6, 5)
    model.head = torch.nn.Linear(5, 3)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))

    def released(secure: bool) -> torch.Tensor:
        m = create_method(method, {"secure_mode": secure})
        m.calibrate(SPEC)
        seen = []
        m.release_observer = seen.append
        torch.manual_seed(1)
        if method == "gaussian_penultimate":
            return m.noisy_features(model, x).detach()
        m.loss(model.head(model.features(x)), y)
        return seen[0]

    assert torch.equal(released(False), released(False))
    assert not torch.equal(released(True), released(True))


@pytest.mark.parametrize("name", NAMES)
def test_every_claim_says_where_its_noise_comes_from_and_logs_it(name):
    method = create_method(name)
    method.calibrate(SPEC)
    claim = method.claim()
    assert claim.as_tags()[names.TAG_PRIVACY_NOISE] == claim.noise
    if name not in PRIVATE:
        assert claim.noise == noise.NO_NOISE
        return
    assert claim.noise == noise.SEEDED and "assumes the noise is secret; seeded for reproducibility" in claim.noise
    secure = create_method(name, {"secure_mode": True})
    secure.calibrate(SPEC)
    assert secure.claim().noise.startswith("secret (OS entropy): ")
    assert secure.claim().as_tags()[names.TAG_PRIVACY_NOISE] == secure.claim().noise


@pytest.mark.parametrize("name", PRIVATE)
@pytest.mark.parametrize("value", ["true", 1, None])
def test_a_non_boolean_secure_mode_is_refused_in_one_line(name, value):
    with pytest.raises(ConfigError) as err:
        create_method(name, {"secure_mode": value})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"secure_mode={value!r} is not allowed: true")


def test_the_cli_refuses_a_non_boolean_secure_mode_before_any_store(tmp_path):
    store = tmp_path / "m.db"
    code, out, err, _ = _call(["run", "--dataset", "synthetic", "--preset", "smoke", "--no-progress", "--methods",
                               "dp_least_squares", "--option", "dp_least_squares.secure_mode=maybe",
                               "--tracking-uri", f"sqlite:///{store}"])
    _assert_one_line(code, out, err, "secure_mode='maybe' is not allowed")
    assert not store.exists()


class _Stop(Exception):
    pass


@pytest.mark.parametrize("secure", [False, True])
def test_pate_draws_its_votes_noise_from_the_generator_secure_mode_asks_for(secure, monkeypatch):
    """PATE's fit takes its NumPy generator (every noisy vote's, and the sanitised epsilon's, noise) from
    noise.numpy_generator with the run's seed and its secure_mode (a smoke run takes a minute: the wiring is checked,
    the generator's secrecy is checked above)."""
    from types import SimpleNamespace

    import inputdp.methods.pate.method as pate

    asked = []

    def spy(seed, *, secure):
        asked.append((seed, secure))
        raise _Stop

    monkeypatch.setattr(pate.noise_source, "numpy_generator", spy)
    method = create_method("pate", {"secure_mode": secure})
    method.calibrate(SPEC)
    with pytest.raises(_Stop):
        method.fit(SimpleNamespace(seed=11, data=None, device="cpu"))
    assert asked == [(11, secure)]


def test_dpsgd_takes_the_global_seeded_stream_or_a_secret_generator(monkeypatch):
    assert create_method("dpsgd")._noise_generator() is None
    one, two = create_method("dpsgd", {"secure_mode": True}), create_method("dpsgd", {"secure_mode": True})
    a, b = one._noise_generator(), two._noise_generator()
    assert not torch.equal(torch.randn(50, generator=a), torch.randn(50, generator=b))
    assert one.describe()["secure_noise"] == noise.secret_source()
    # made where the parameters are (Opacus draws the noise there with it): the device the harness names
    seen = {}
    monkeypatch.setattr(noise, "torch_generator", lambda seed, *, secure, device="cpu": seen.setdefault("d", device))
    one._noise_generator("cuda:0")
    assert seen["d"] == "cuda:0"


def test_dp_least_squares_scope_says_how_its_estimator_was_chosen_and_what_is_not_charged():
    default = create_method("dp_least_squares")
    default.calibrate(SPEC)
    scope = default.claim().scope
    assert "selection among 6 (psd, ridge) settings on Fashion-MNIST" in scope and "not charged" in scope
    for own in ({"ridge": 0.25}, {"psd": False, "ridge": 2.0}, {"split": 0.7}):
        m = create_method("dp_least_squares", own)
        m.calibrate(SPEC)
        assert m.claim().scope.endswith("the epsilon excludes however they were chosen"), own
