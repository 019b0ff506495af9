"""The ScatterNet models (Tramèr & Boneh 2021): the fixed scattering frontend, its features computed once by the
harness, and what that must not change (the predictions, the privacy claim, augmented runs)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from inputdp.benchmarks import frontend, harness
from inputdp.benchmarks.models import MODELS, build_model
from inputdp.benchmarks.models.scatternet import ScatterFrontend
from inputdp.benchmarks.performance.speed import synthetic_data
from inputdp.benchmarks.resolve import resolve
from inputdp.benchmarks.sweep import Overrides, build_config
from inputdp.core.config import PerfFlags


def test_the_frontend_has_no_parameters_and_the_documented_shape():
    front = ScatterFrontend(1, 28)
    assert list(front.parameters()) == []
    assert front.out_shape == (81, 7, 7)
    assert ScatterFrontend(3, 32).out_shape == (243, 8, 8)
    assert front(torch.randn(5, 1, 28, 28)).shape == (5, 81, 7, 7)


def test_scattering_of_a_constant_image_is_its_value_in_the_low_pass_channel_and_zero_elsewhere():
    """An independent check of the transform: the averaging filter phi sums to 1, so a constant image c gives c in
    the order-0 channel; every wavelet has zero mean, so the order-1 and order-2 channels (moduli of wavelet
    responses, averaged) are 0 up to float error."""
    c = 0.7
    out = ScatterFrontend(1, 28)(torch.full((1, 1, 28, 28), c))
    torch.testing.assert_close(out[0, 0], torch.full((7, 7), c), rtol=0, atol=1e-4)
    assert out[0, 1:].abs().max() < 1e-4


def test_the_transform_is_stable_to_a_small_shift_unlike_the_pixels():
    """What the features are for (Mallat's argument): moving a digit by one pixel changes the scattering features
    relatively much less than it changes the pixels."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(1, 1, 28, 28)
    x[0, 0, 8:20, 10:18] = torch.rand(12, 8, generator=g) + 0.5
    shifted = torch.roll(x, 1, dims=3)
    front = ScatterFrontend(1, 28)
    f, fs = front(x), front(shifted)
    pixel_change = float((shifted - x).norm() / x.norm())
    feature_change = float((fs - f).norm() / f.norm())
    assert feature_change < 0.5 * pixel_change


@pytest.mark.parametrize("name", ["scatter_linear", "scatter_cnn"])
def test_a_scatter_model_gives_the_same_logits_on_images_and_on_their_features(name):
    model = build_model(name, num_classes=10, channels=1, size=28, norm="group").eval()
    x = torch.randn(6, 1, 28, 28)
    torch.testing.assert_close(model(x), model(model.frontend(x)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.features(x), model.features(model.frontend(x)), rtol=1e-5, atol=1e-5)
    trainable = sum(p.numel() for p in model.parameters())
    assert trainable == {"scatter_linear": 81 * 49 * 10 + 10, "scatter_cnn": 33066}[name]


def _config(method="dpsgd", *, augment=False, options=None, **overrides):
    base = {"model": "scatter_linear", "steps": 3, "sampling_rate": 0.05}
    config = build_config(method=method, dataset="mnist", preset="smoke", epsilon=2.0, seed=0,
                          overrides=Overrides(**{**base, **overrides}, method_options={method: options or {}}))
    return dataclasses.replace(config, augment=augment)


def test_the_harness_trains_on_features_computed_once_and_no_privacy_figure_depends_on_it():
    """Features replace the images (computed once, reused by the next run of the same data), the run logs the time
    it took, and the privacy claim and spent epsilon are those of the same run on the small CNN: a fixed frontend
    changes no privacy figure."""
    frontend._FRONTEND_CACHE.clear()
    data = synthetic_data("mnist", 64, "cpu")
    p = harness.prepare(resolve(_config()), PerfFlags(device="cpu", progress=False), data)
    assert tuple(p.data.x_train.shape[1:]) == (81, 7, 7) and tuple(p.data.x_test.shape[1:]) == (81, 7, 7)
    assert p.frontend_seconds > 0 and tuple(data.x_train.shape[1:]) == (1, 28, 28)  # the caller's data untouched
    assert harness.params_and_tags(p)[0]["feature_dim"] == 81 * 7 * 7  # read through Opacus' wrapper
    result = harness.run(resolve(_config()), PerfFlags(device="cpu", progress=False), data=data)
    plain = harness.run(resolve(_config(model="small_cnn")), PerfFlags(device="cpu", progress=False), data=data)
    assert result.metrics["frontend_seconds"] > 0 and plain.metrics["frontend_seconds"] == 0.0
    assert result.claim == plain.claim
    assert math.isclose(result.metrics["final_epsilon_spent"], plain.metrics["final_epsilon_spent"], rel_tol=1e-12)


def test_features_of_data_loaded_by_the_run_are_reused_by_the_next_run(monkeypatch):
    frontend._FRONTEND_CACHE.clear()
    data = synthetic_data("mnist", 40, "cpu")
    monkeypatch.setattr(harness, "load_tensor_data", lambda *a, **k: data)
    perf = PerfFlags(device="cpu", progress=False)
    first = harness.prepare(resolve(_config()), perf)
    second = harness.prepare(resolve(_config(model="scatter_cnn")), perf)
    assert second.data.x_train is first.data.x_train  # the same frontend: its features were not computed again
    assert len(frontend._FRONTEND_CACHE) == 1


@pytest.mark.parametrize(("method", "augment", "options"), [
    ("dpsgd", False, {"augmult": 2, "grad_sample_mode": "hooks"}),
    ("nonprivate", True, {}),
    ("gaussian_penultimate", True, {}),  # calls features and head apart: the frontend is inside features
])
def test_augmented_runs_keep_the_images_and_apply_the_frontend_per_step(method, augment, options):
    """Each augmented copy must pass the frontend: the harness leaves the images, and the model maps them per step."""
    data = synthetic_data("mnist", 32, "cpu")
    config = _config(method, augment=augment, options=options, steps=2)
    p = harness.prepare(resolve(config), PerfFlags(device="cpu", progress=False), data)
    assert tuple(p.data.x_train.shape[1:]) == (1, 28, 28) and p.frontend_seconds == 0.0
    result = harness.run(resolve(config), PerfFlags(device="cpu", progress=False), data=data)
    assert result.metrics["total_steps"] == 2


def test_the_scatter_models_are_registered_with_a_valid_gradient_mode():
    for name in ("scatter_linear", "scatter_cnn"):
        assert MODELS.get(name).grad_sample_mode in ("hooks", "functorch", "ghost", "bk")


@pytest.mark.parametrize("name", ["scatter_linear", "scatter_cnn"])
@pytest.mark.parametrize("mode", ["hooks", "ghost", "bk"])
@pytest.mark.parametrize("inputs", ["features", "images"])
def test_dpsgd_on_a_scatter_model_clips_each_examples_own_gradient(name, mode, inputs):
    """Without noise, DP-SGD's update on a scatter model is the sum of each example's gradient clipped to C, over
    the expected batch size, computed here one example at a time with plain autograd: on stored features (the run
    without augmentation) and on images (the frontend inside the forward pass, where no input needs a gradient)."""
    import copy

    import torch.nn.functional as F

    from inputdp.core.config import PrivacySpec
    from inputdp.methods.base import TrainingSetup
    from inputdp.methods.dpsgd import DPSGD

    torch.manual_seed(0)
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.004267, steps=2340)
    base = build_model(name, num_classes=10, channels=1, size=28, norm="group")
    x, y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
    if inputs == "features":
        x = base.frontend(x)
    c = 0.05
    expected = None
    for i in range(x.shape[0]):
        ref = copy.deepcopy(base)
        F.cross_entropy(ref(x[i : i + 1]), y[i : i + 1]).backward()
        g = torch.cat([p.grad.flatten() for p in ref.parameters()])
        g = g * min(1.0, c / float(g.norm()))
        expected = g if expected is None else expected + g
    expected = expected / round(spec.sampling_rate * 60000)
    model = copy.deepcopy(base)
    m = DPSGD(grad_sample_mode=mode, max_grad_norm=c)
    m.calibrate(spec)
    setup = TrainingSetup(spec=spec, train_size=60000, num_classes=10, device="cpu")
    module, opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0), setup)
    opt.noise_multiplier = 0.0
    m.train_step(module, opt, x, y)
    got = torch.cat([p.grad.flatten() for p in module.parameters()])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


def test_the_first_layer_projection_of_a_scatter_model_reads_the_features_its_first_layer_receives():
    """The white-box score projects the canary onto the first weight layer's change, so it must use what that layer
    reads: for scatter_linear the head's input (the normalised scattering features), not the pixels."""
    from inputdp.benchmarks.audits.one_run import white_box_scores

    torch.manual_seed(0)
    initial = build_model("scatter_linear", num_classes=10, channels=1, size=28, norm="group")
    final = build_model("scatter_linear", num_classes=10, channels=1, size=28, norm="group")
    x, y = torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,))
    got = white_box_scores(final, initial.state_dict(), x, y, ["first_layer_projection"])["first_layer_projection"]
    with torch.no_grad():
        u = final.eval().features(x)  # (6, 3969): frontend, GroupNorm, flatten
        dw = final.head.weight - initial.head.weight
        want = ((u @ dw.T).pow(2).sum(1) / u.pow(2).sum(1)).numpy()
    assert u.shape == (6, 81 * 7 * 7) and abs(got - want).max() < 1e-5 * max(1.0, abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["scatter_linear", "scatter_cnn"])
def test_a_scatter_model_can_be_audited_with_every_general_score(name):
    """`bench audit` on the best preset's DP-SGD model: the run trains on features (canaries included), the scores
    read the images through the model's frontend, and every score gives a bound within [0, its ceiling]."""
    from inputdp.benchmarks.audits.one_run import GENERAL_SCORES, audit

    data = synthetic_data("mnist", 200, "cpu")
    result = audit(resolve(_config(model=name, steps=2)), canaries=20, canary_kind="random_pattern",
                   perf=PerfFlags(device="cpu", progress=False), data=data)
    assert {o.score for o in result.outcomes} == set(GENERAL_SCORES)
    assert all(0.0 <= o.epsilon_lb <= o.ceiling for o in result.outcomes)
