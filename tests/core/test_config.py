"""Config validation, property-based: every bad value raises ConfigError naming it; good values pass."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inputdp.core.config import PerfFlags, PrivacySpec, RunConfig
from inputdp.core.errors import ConfigError

good_eps = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False) | st.just(math.inf)
good_delta = st.floats(min_value=1e-12, max_value=0.999999, exclude_min=False)
good_q = st.floats(min_value=1e-9, max_value=1.0)
good_steps = st.integers(min_value=1, max_value=10**7)


@given(good_eps, good_delta, good_q, good_steps)
def test_good_specs_construct(eps, delta, q, steps):
    spec = PrivacySpec(epsilon=eps, delta=delta, sampling_rate=q, steps=steps)
    assert spec.is_private == math.isfinite(eps)


@given(st.floats(max_value=0.0) | st.just(float("nan")))
def test_epsilon_must_be_positive(eps):
    with pytest.raises(ConfigError, match="epsilon"):
        PrivacySpec(epsilon=eps, delta=1e-5, sampling_rate=0.01, steps=10)


@given(st.floats(max_value=0.0) | st.floats(min_value=1.0) | st.just(float("nan")))
def test_delta_must_be_in_unit_interval(delta):
    with pytest.raises(ConfigError, match="delta"):
        PrivacySpec(epsilon=1.0, delta=delta, sampling_rate=0.01, steps=10)


@given(st.floats(max_value=0.0) | st.floats(min_value=1.0, exclude_min=True) | st.just(float("nan")))
def test_q_must_be_in_zero_one(q):
    with pytest.raises(ConfigError, match="sampling rate"):
        PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=q, steps=10)


@given(st.integers(max_value=0))
def test_steps_at_least_one(steps):
    with pytest.raises(ConfigError, match="steps"):
        PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=steps)


@given(st.integers(min_value=1, max_value=10**6), st.floats(min_value=1e-12, max_value=0.5))
def test_delta_below_one_over_n(n, delta):
    spec = PrivacySpec(epsilon=1.0, delta=delta, sampling_rate=0.01, steps=10)
    if delta < 1.0 / n:
        spec.check_delta_for(n)
    else:
        with pytest.raises(ConfigError, match="1/n"):
            spec.check_delta_for(n)


def _config(**kw):
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=10)
    base = dict(method="nonprivate", dataset="mnist", model="small_cnn", privacy=spec)
    return RunConfig(**{**base, **kw})


@given(st.floats(max_value=0.0) | st.just(float("inf")))
def test_lr_must_be_positive_and_finite(lr):
    with pytest.raises(ConfigError, match="lr"):
        _config(lr=lr)


def test_configs_are_frozen_keyword_only_and_hash_stable():
    c = _config(method_options={"alpha": 3.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.lr = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.method_options["alpha"] = 2  # type: ignore[index]
    with pytest.raises(TypeError):
        PrivacySpec(1.0, 1e-5, 0.01, 10)  # type: ignore[misc]
    assert c.key() == _config(method_options={"alpha": 3.0}).key()
    assert c.key() != _config(method_options={"alpha": 2.0}).key()
    assert c.key() == c.replace(data_dir="/elsewhere").key()  # where data lives does not change the run
    assert c.flat()["privacy.epsilon"] == 1.0 and c.flat()["method_options.alpha"] == 3.0


def test_perf_flags_are_apart_from_the_run():
    assert "device" not in _config().to_dict()
    with pytest.raises(ConfigError, match="device"):
        PerfFlags(device="tpu")


def test_presets_are_immutable_and_share_no_state():
    from inputdp.benchmarks.presets import PRESETS

    paper = PRESETS.get("paper")
    mnist, cifar = paper.settings("mnist"), paper.settings("cifar10")
    with pytest.raises(TypeError):
        mnist.method_options["dirichlet_softmax"]["alpha"] = 2.0  # type: ignore[index]
    with pytest.raises(TypeError):
        mnist.method_options["dpsgd"] = {}  # type: ignore[index]
    with pytest.raises(TypeError):
        paper.per_dataset["mnist"] = cifar  # type: ignore[index]
    assert mnist.method_options["dirichlet_softmax"] is not cifar.method_options["dirichlet_softmax"]
    assert cifar.method_options["dirichlet_softmax"]["alpha"] == 3.0


def test_best_preset_gives_each_method_its_own_recipe_and_says_so():
    from inputdp.benchmarks.presets import DatasetSettings, view_of
    from inputdp.benchmarks.sweep import Overrides, build_config

    dp = build_config(method="dpsgd", dataset="mnist", preset="best", epsilon=2.93, seed=0)
    di = build_config(method="dirichlet_softmax", dataset="mnist", preset="best", epsilon=2.93, seed=0)
    assert (dp.model, dp.norm, dp.lr, dp.momentum) == ("scatter_linear", "group", 8.0, 0.9)
    assert dp.privacy.sampling_rate == 4096 / 60000 and dp.privacy.steps == 20 * 15
    assert dp.method_options["max_grad_norm"] == 0.1 and dp.lr_warmup_steps == 0
    assert (di.model, di.optimizer, di.privacy.sampling_rate, di.privacy.steps) == ("small_cnn", "adam", 512 / 60000, 2340)
    assert dp.match_key() != di.match_key()  # not matched: each at its own (q, T)
    # Fashion-MNIST: Tramer & Boneh's published recipe from epsilon 2.93 up, the measured one below it
    fashion = build_config(method="dpsgd", dataset="fashionmnist", preset="best", epsilon=2.93, seed=0)
    assert (fashion.model, fashion.norm, fashion.privacy.sampling_rate, fashion.privacy.steps, fashion.lr) == (
        "scatter_linear", "group", 8192 / 60000, 366, 16.0)
    low = build_config(method="dpsgd", dataset="fashionmnist", preset="best", epsilon=1.0, seed=0)
    assert (low.privacy.sampling_rate, low.privacy.steps, low.lr) == (4096 / 60000, 300, 8.0)
    high = build_config(method="dpsgd", dataset="fashionmnist", preset="best", epsilon=8.0, seed=0)
    assert (high.privacy.steps, high.lr) == (366, 16.0)
    assert view_of("best", "mnist", "dpsgd", 1.0, "add_remove") == ("own_best", 4)
    assert view_of("best", "fashionmnist", "dpsgd", 1.0, "add_remove") == view_of(
        "best", "fashionmnist", "dpsgd", 2.93, "add_remove") == ("own_best", 4)  # the choice counts at both budgets
    assert view_of("best", "mnist", "dirichlet_softmax", 1.0, "auto") == ("own_best", 7)
    assert view_of("cpu", "mnist", "dpsgd", 1.0, "add_remove") == ("matched", 1)
    assert view_of("no-such-preset", "mnist", "dpsgd", 1.0, "add_remove") == ("matched", 1)
    # explicit flags still win over a method's own setting
    flagged = build_config(method="dpsgd", dataset="mnist", preset="best", epsilon=2.93, seed=0,
                           overrides=Overrides(model="small_cnn", lr=0.1, epochs=2))
    assert (flagged.model, flagged.lr, flagged.privacy.steps) == ("small_cnn", 0.1, 2 * 15)
    # the cpu preset trains dirichlet_softmax with Adam; --optimizer sgd (the kappa rows) overrides it, and is keyed
    adam = build_config(method="dirichlet_softmax", dataset="mnist", preset="cpu", epsilon=1.0, seed=0)
    sgd = build_config(method="dirichlet_softmax", dataset="mnist", preset="cpu", epsilon=1.0, seed=0,
                       overrides=Overrides(optimizer="sgd", lr=0.05, momentum=0.9))
    assert (adam.optimizer, sgd.optimizer, sgd.lr, sgd.momentum) == ("adam", "sgd", 0.05, 0.9)
    assert adam.key() != sgd.key()
    with pytest.raises(ValueError, match="method_settings"):
        DatasetSettings(model="small_cnn", sampling_rate=0.01, steps=10, lr=0.1,
                        method_settings={"dpsgd": {"batch_size": 512}})
    with pytest.raises(ValueError, match="method_settings_from_epsilon"):
        DatasetSettings(model="small_cnn", sampling_rate=0.01, steps=10, lr=0.1,
                        method_settings_from_epsilon={"dpsgd": ((2.0, {"batch_size": 512}),)})


def test_a_recipe_from_an_epsilon_may_apply_to_some_relations_only():
    """Fashion-MNIST's DP-SGD takes Tramer & Boneh's recipe (q 8192/60000, T 366, lr 16) from eps 2.93 under the
    relations at whose noise it was tuned (add/remove, zero-out), not one input replaced (twice the sensitivity), which
    keeps the preset's recipe; MNIST has no such recipe; a step naming an unknown relation is refused in one line."""
    from inputdp.benchmarks.presets import DatasetSettings, view_of
    from inputdp.benchmarks.sweep import Overrides, build_config

    def q_steps_lr(dataset, eps, relation=None):
        o = Overrides(method_options={"dpsgd": {"adjacency": relation}} if relation else {})
        c = build_config(method="dpsgd", dataset=dataset, preset="best", epsilon=eps, seed=0, overrides=o)
        return round(c.privacy.sampling_rate * 60000), c.privacy.steps, c.lr

    tb, base = (8192, 366, 16.0), (4096, 300, 8.0)
    assert q_steps_lr("fashionmnist", 2.93) == tb  # the default relation, add/remove
    assert q_steps_lr("fashionmnist", 2.93, "zero_out") == tb
    assert q_steps_lr("fashionmnist", 2.93, "replace_input") == base
    assert q_steps_lr("fashionmnist", 1.0, "zero_out") == q_steps_lr("fashionmnist", 1.0, "replace_input") == base
    assert q_steps_lr("mnist", 2.93, "zero_out") == base
    assert view_of("best", "fashionmnist", "dpsgd", 2.93, "replace_input") == ("own_best", 4)
    # the rule itself: a step naming relations applies under those only, one naming none under every relation, the
    # largest epsilon at or below the run's among those that apply winning
    s = DatasetSettings(model="small_cnn", sampling_rate=0.01, steps=10, lr=0.1,
                        method_settings_from_epsilon={"dpsgd": ((3.0, {"lr": 3.0}), (2.0, {"lr": 2.0}, ("zero_out",)))})
    assert [s.own("dpsgd", e, r).get("lr") for e, r in ((1.0, "zero_out"), (2.5, "zero_out"), (2.5, "add_remove"),
                                                         (3.5, "add_remove"), (3.5, "zero_out"), (3.5, ""))] == [
        None, 2.0, None, 3.0, 3.0, 3.0]
    with pytest.raises(ValueError, match="names relation 'replace_one'"):
        DatasetSettings(model="small_cnn", sampling_rate=0.01, steps=10, lr=0.1,
                        method_settings_from_epsilon={"dpsgd": ((2.0, {"lr": 1.0}, ("replace_one",)),)})
    with pytest.raises(ValueError, match="give a tuple of them"):
        DatasetSettings(model="small_cnn", sampling_rate=0.01, steps=10, lr=0.1,
                        method_settings_from_epsilon={"dpsgd": ((2.0, {"lr": 1.0}, "zero_out"),)})


def test_the_accountant_is_part_of_a_runs_configuration_and_key():
    """The accountant decides the noise and the claim: it is written into the configuration even when it is the
    method's default, so two accountants are two runs, and the paper preset keeps the papers' accountants."""
    from inputdp.benchmarks.sweep import Overrides, build_config

    cpu = build_config(method="dirichlet_softmax", dataset="mnist", preset="cpu", epsilon=1.0, seed=0)
    paper = build_config(method="dirichlet_softmax", dataset="mnist", preset="cpu", epsilon=1.0, seed=0,
                         overrides=Overrides(method_options={"dirichlet_softmax": {"accountant": "paper"}}))
    assert cpu.method_options["accountant"] == "per_example" and paper.method_options["accountant"] == "paper"
    assert cpu.key() != paper.key() and cpu.match_key() == paper.match_key()
    gp = build_config(method="gaussian_penultimate", dataset="mnist", preset="cpu", epsilon=1.0, seed=0)
    dp = build_config(method="dpsgd", dataset="mnist", preset="cpu", epsilon=1.0, seed=0)
    assert gp.method_options["accountant"] == "per_example" and dp.method_options["accountant"] == "pld"
    for method, accountant in (("dirichlet_softmax", "paper"), ("gaussian_penultimate", "rdp")):
        c = build_config(method=method, dataset="mnist", preset="paper", epsilon=1.0, seed=0)
        assert c.method_options["accountant"] == accountant
    assert "accountant" not in build_config(method="nonprivate", dataset="mnist", preset="cpu", epsilon=1.0,
                                            seed=0).method_options
