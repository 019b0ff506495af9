"""DP-SGD's recipe options (augmentation multiplicity, EMA, weight standardisation, the clipping norm): each changes
what it claims to change, checked against an independent computation, and none changes the privacy claim."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from inputdp.benchmarks.resolve import resolve
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import augment
from inputdp.methods import dpsgd as dpsgd_module
from inputdp.methods.base import TrainingSetup
from inputdp.methods.dpsgd import DPSGD
from inputdp.methods.weight_standardisation import WSConv2d, standardise_weights

SPEC = PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=500)
SETUP = TrainingSetup(spec=SPEC, train_size=400, num_classes=3, device="cpu")


def _tiny(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(2 * 6 * 6, 3))


def _record_grad_samples(module: nn.Module, opt) -> dict:
    """Wrap the optimizer's step so that the per-example gradients it is about to clip are kept in the dict."""
    seen: dict = {}
    real_step = opt.step

    def spy(*a, **kw):
        seen["grad_sample"] = [p.grad_sample.clone() for p in module.parameters()]
        return real_step(*a, **kw)

    opt.step = spy
    return seen


def _prepared(**options):
    m = DPSGD(grad_sample_mode="hooks", **options)
    m.calibrate(SPEC)
    model = _tiny()
    module, opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), SETUP)
    return m, model, module, opt


def test_recipe_options_do_not_change_the_privacy_claim():
    base = DPSGD()
    base.calibrate(SPEC)
    for options in ({"augmult": 4}, {"ema": 0.999}, {"weight_standardisation": True},
                    {"augmult": 8, "ema": 0.99, "weight_standardisation": True}):
        m = DPSGD(**options)
        m.calibrate(SPEC)
        assert m.calibration.noise == base.calibration.noise and m.calibration.epsilon == base.calibration.epsilon
        assert m.claim().as_tags() == base.claim().as_tags()
        assert m.variant()  # a recipe of its own: its own leaderboard row
    # the variant is named against the preset's own options: the best preset's C = 0.1 is no variant there
    assert DPSGD(max_grad_norm=0.1).variant({"max_grad_norm": 0.1}) == ""
    assert DPSGD(max_grad_norm=0.1).variant() == "max_grad_norm=0.1"
    clipped = DPSGD(max_grad_norm=0.1)
    clipped.calibrate(SPEC)
    assert clipped.calibration.noise["noise_multiplier"] == base.calibration.noise["noise_multiplier"]
    assert clipped.claim().parameters["max_grad_norm"] == 0.1


def test_augmult_clips_the_mean_of_each_examples_copies(monkeypatch):
    """With K = 3 copies (a known, deterministic 'augmentation' here), the per-example gradient Opacus clips is the
    mean of that example's three copy gradients, computed independently with autograd."""
    k = 3

    def copies(x, kk, kind, generator):
        rep = x.repeat_interleave(kk, dim=0)
        return rep + torch.arange(kk, dtype=x.dtype).repeat(x.shape[0]).view(-1, 1, 1, 1) * 0.5

    monkeypatch.setattr(dpsgd_module, "augment_copies", copies)
    m, model, module, opt = _prepared(augmult=k)
    reference = _tiny()
    reference.load_state_dict(model.state_dict())
    seen = _record_grad_samples(module, opt)
    torch.manual_seed(1)
    x, y = torch.randn(4, 1, 6, 6), torch.tensor([0, 1, 2, 1])
    m.train_step(module, opt, x, y)
    augmented = copies(x, k, "auto", None)
    for i in range(4):
        grads = []
        for j in range(k):
            reference.zero_grad()
            F.cross_entropy(reference(augmented[i * k + j: i * k + j + 1]), y[i: i + 1]).backward()
            grads.append([p.grad.clone() for p in reference.parameters()])
        for pi, got in enumerate(seen["grad_sample"]):
            assert got.shape[0] == 4
            want = torch.stack([g[pi] for g in grads]).mean(0)
            torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-6)


def test_augment_copies_are_shifts_or_crops_of_the_image():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(5, 1, 12, 12)
    out = augment.augment_copies(x, 4, "auto", g)
    assert out.shape == (20, 1, 12, 12)
    assert not torch.equal(out[0], out[1]) or not torch.equal(out[1], out[2])  # the copies differ
    colour = augment.augment_copies(torch.rand(2, 3, 8, 8), 2, "auto", g)
    assert colour.shape == (4, 3, 8, 8)


def test_ema_releases_the_average_of_the_iterates():
    """The released model is the warmed-up exponential average of the trained iterates, computed here from the
    iterates themselves; the trained model itself is untouched."""
    decay = 0.9
    m, model, module, opt = _prepared(ema=decay)
    iterates = [[p.detach().clone() for p in model.parameters()]]
    torch.manual_seed(2)
    for _ in range(6):
        x, y = torch.randn(5, 1, 6, 6), torch.randint(0, 3, (5,))
        m.train_step(module, opt, x, y)
        iterates.append([p.detach().clone() for p in model.parameters()])
    average = [t.clone() for t in iterates[0]]
    for t, params in enumerate(iterates[1:], start=1):
        d = min(decay, (1 + t) / (10 + t))
        average = [d * a + (1 - d) * p for a, p in zip(average, params)]
    released = m.released(module)
    assert released is not module
    for got, want, live in zip(released.parameters(), average, model.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        assert not torch.allclose(got, live)
    plain = DPSGD()
    assert plain.released(module) is module


def test_weight_standardisation_standardises_and_keeps_per_example_gradients_exact():
    torch.manual_seed(0)
    model = standardise_weights(_tiny())
    conv = model[0]
    assert isinstance(conv, WSConv2d)
    x = torch.randn(3, 1, 6, 6)
    w = conv.weight
    ws = (w - w.mean(dim=(1, 2, 3), keepdim=True)) / torch.sqrt(w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
                                                                 + 1e-5)
    torch.testing.assert_close(conv(x), F.conv2d(x, ws, conv.bias, padding=1))
    # through Opacus (functorch for the new layer): each per-example gradient equals autograd on that example alone
    m, model, module, opt = _prepared(weight_standardisation=True)
    assert isinstance(model[0], WSConv2d)
    seen = _record_grad_samples(module, opt)
    reference = standardise_weights(_tiny())
    reference.load_state_dict(model.state_dict())
    x, y = torch.randn(3, 1, 6, 6), torch.tensor([2, 0, 1])
    m.train_step(module, opt, x, y)
    for i in range(3):
        reference.zero_grad()
        F.cross_entropy(reference(x[i: i + 1]), y[i: i + 1]).backward()
        for got, p in zip(seen["grad_sample"], reference.parameters()):
            torch.testing.assert_close(got[i], p.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("options", "word"), [({"augmult": -1}, "augmult="), ({"augmult": 2.5}, "augmult="),
                                               ({"ema": 1.0}, "ema="), ({"augmult_kind": "rotate"}, "augmult_kind="),
                                               ({"weight_standardisation": "yes"}, "weight_standardisation="),
                                               ({"augmult": 2, "grad_sample_mode": "ghost"}, "ghost")])
def test_bad_recipe_options_are_refused_in_one_line(options, word):
    with pytest.raises(ConfigError, match=word) as err:
        DPSGD(**options)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_cifar_shaped_best_dpsgd_runs_a_few_steps_on_the_cpu():
    """The best preset's CIFAR-10 DP-SGD recipe (WRN-16-4, GroupNorm + weight standardisation, augmentation
    multiplicity 16, EMA, micro-batches) end to end through the harness for two steps, on synthetic data of
    CIFAR-10's shape; the full run is GPU work."""
    from inputdp.benchmarks.harness import run
    from inputdp.benchmarks.performance.speed import synthetic_data
    from inputdp.benchmarks.sweep import Overrides, build_config
    from inputdp.core.config import PerfFlags

    preset = build_config(method="dpsgd", dataset="cifar10", preset="best", epsilon=1.0, seed=0)
    assert (preset.model, preset.method_options["augmult"], preset.method_options["micro_batch"]) == ("wrn16_4", 16, 32)
    # about 6 examples a step here, 2 per backward pass: the micro-batched path of the full-size run
    config = build_config(method="dpsgd", dataset="cifar10", preset="best", epsilon=1.0, seed=0,
                          overrides=Overrides(steps=2, sampling_rate=0.125, method_options={"dpsgd": {"micro_batch": 2}}))
    result = run(resolve(config), PerfFlags(device="cpu", progress=False), data=synthetic_data("cifar10", 48, "cpu"),
                 keep_model=True)
    assert result.metrics["total_steps"] == 2 and 0.0 <= result.metrics["final_test_accuracy"] <= 1.0
    assert isinstance(result.model.features[1].conv1, WSConv2d)  # weight-standardised, and the EMA copy released


@pytest.mark.parametrize("channels", [1, 3])
def test_an_examples_copies_do_not_depend_on_the_other_examples(channels):
    """Changing (or removing) another example of the batch leaves an example's augmented copies as they were, with
    the same random draws: its clipped gradient cannot carry another example's pixels."""
    x = torch.rand(4, channels, 10, 10)
    other = x.clone()
    other[1:] = torch.rand(3, channels, 10, 10) * 5 - 2
    a = augment.augment_copies(x, 3, "auto", torch.Generator().manual_seed(3))
    b = augment.augment_copies(other, 3, "auto", torch.Generator().manual_seed(3))
    torch.testing.assert_close(a[:3], b[:3], rtol=0, atol=0)
    fill = x[0].amin(dim=(1, 2))
    if channels == 1:  # what came into view is the image's own darkest value
        assert torch.all((a[:3] == fill.view(1, -1, 1, 1)) | torch.isin(a[:3], x[0]))


@pytest.mark.parametrize("mode", ["hooks", "functorch"])
@pytest.mark.parametrize("augmult", [0, 2])
def test_micro_batches_give_the_whole_batchs_update_with_the_noise_added_once(mode, augmult):
    """Without noise, the update of a batch of 7 taken 3, 3 and 1 examples at a time (with each example's augmult
    copies in its group) is the update of the whole batch at once; with noise, the noise is drawn once per step."""
    x, y = torch.randn(7, 1, 6, 6), torch.randint(0, 3, (7,))
    grads, noise_draws = {}, {}
    for micro in (0, 3):
        m = DPSGD(grad_sample_mode=mode, augmult=augmult, micro_batch=micro, max_grad_norm=0.5)
        m.calibrate(SPEC)
        model = _tiny()
        module, opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0), SETUP)
        m._augmenter.manual_seed(11)  # the same copies both ways
        opt.noise_multiplier = 0.0
        calls: list[int] = []

        def counted(real=opt.add_noise, calls=calls):
            calls.append(1)
            return real()

        opt.add_noise = counted
        loss = m.train_step(module, opt, x, y)
        grads[micro] = torch.cat([p.grad.flatten() for p in module.parameters()])
        noise_draws[micro] = len(calls)
        assert loss is not None and torch.isfinite(loss)
    torch.testing.assert_close(grads[3], grads[0], rtol=1e-5, atol=1e-7)
    assert noise_draws == {0: 1, 3: 1}
    assert float(grads[0].abs().max()) > 0


def test_micro_batch_changes_neither_the_claim_nor_the_recipe_and_is_refused_with_ghost():
    base, micro = DPSGD(), DPSGD(micro_batch=256)
    base.calibrate(SPEC)
    micro.calibrate(SPEC)
    assert micro.claim().as_tags() == base.claim().as_tags() and micro.variant() == ""
    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="micro_batch"):
            DPSGD(micro_batch=bad)
    with pytest.raises(ConfigError, match="ghost"):
        DPSGD(micro_batch=8, grad_sample_mode="ghost")


# --- the frozen normalisation with private statistics (Tramer & Boneh's MNIST recipe) ------------------------------
def _frozen_model() -> nn.Module:
    from inputdp.benchmarks.models.scatternet import FrozenNorm

    torch.manual_seed(0)
    return nn.Sequential(FrozenNorm(4), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))


def _statistics_only(**options) -> DPSGD:
    """A DP-SGD whose statistics release is looked at alone: born with a plain DP-SGD's calibration (a noise
    multiplier of 1e-9 has no finite PLD to calibrate against)."""
    return DPSGD.calibrated(SPEC, DPSGD().calibrate(SPEC), {"grad_sample_mode": "hooks", **options})


def test_the_released_statistics_are_the_clipped_means_plus_their_noise():
    """With clipping norms no example reaches and negligible noise, the frozen normalisation gets the features'
    exact per-channel mean and variance (over examples and positions); with a small clipping norm, the mean of the
    clipped per-example means; rows that are not finite (an audit's marked canary rows) are left out."""
    torch.manual_seed(1)
    x = torch.randn(500, 4, 3, 3) * torch.tensor([1.0, 2.0, 0.5, 3.0]).view(1, 4, 1, 1) + torch.tensor(
        [0.5, -1.0, 2.0, 0.0]).view(1, 4, 1, 1)
    marked = torch.cat([x, torch.full((7, 4, 3, 3), float("nan"))])
    setup = TrainingSetup(spec=SPEC, train_size=507, num_classes=3, device="cpu", x_train=marked)
    m = _statistics_only(norm_noise_multiplier=1e-9, norm_clip_mean=1e6, norm_clip_square=1e6)
    model = _frozen_model()
    m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), setup)
    norm = model[0]
    torch.testing.assert_close(norm.mean, x.mean(dim=(0, 2, 3)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(norm.var, x.var(dim=(0, 2, 3), unbiased=False), rtol=1e-4, atol=1e-4)
    # clipped: each example's 4-vector of channel means scaled to norm <= 0.1
    m = _statistics_only(norm_noise_multiplier=1e-9, norm_clip_mean=0.1, norm_clip_square=1e6)
    model = _frozen_model()
    m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), setup)
    rows = x.mean(dim=(2, 3))
    clipped = rows / (rows.norm(dim=1, keepdim=True) / 0.1).clamp_min(1)
    torch.testing.assert_close(model[0].mean, clipped.mean(dim=0), rtol=1e-5, atol=1e-6)
    # the noise: sigma_r * c / n per channel (seeded: the run's global stream)
    m = _statistics_only(norm_noise_multiplier=8.0, norm_clip_mean=0.1, norm_clip_square=1e6)
    model = _frozen_model()
    torch.manual_seed(5)
    m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), setup)
    torch.manual_seed(5)
    expected = clipped.sum(dim=0).double() + torch.randn(4, dtype=torch.float64) * 8.0 * 0.1
    torch.testing.assert_close(model[0].mean, (expected / 500).float(), rtol=1e-5, atol=1e-7)


def test_the_statistics_release_is_charged_by_the_composition_of_its_two_gaussians():
    """Two Gaussian releases of noise sigma_r (sensitivity 1 each) are one Gaussian with mu = sqrt(2)/sigma_r: the
    PLD's epsilon of the releases alone is at least the exact one (Balle & Wang's formula) and within its grid; with
    the steps, the suite's PLD equals dp_accounting's PLD accountant composing the same events, the calibrated sigma
    grows, and the ledger charges the releases from step 0."""
    import math

    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from scipy import optimize, stats

    from inputdp.methods.accounting.pld import gaussian_epsilon_pld

    sigma_r, delta = 8.0, 1e-5
    mu = math.sqrt(2) / sigma_r

    def exact_delta(eps):
        return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)

    exact = optimize.brentq(lambda e: exact_delta(e) - delta, 1e-6, 50)
    alone = gaussian_epsilon_pld(noise_multiplier=1.0, sampling_rate=0.0, steps=0, delta=delta,
                                 releases=(sigma_r, 2))
    assert exact <= alone <= exact + 0.02
    q, steps, sigma = 4096 / 60000, 700, 2.8
    ours = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=delta,
                                releases=(sigma_r, 2))
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.GaussianDpEvent(sigma_r), 2)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert ours == pytest.approx(acc.get_epsilon(delta), abs=5e-3)
    plain, frozen = DPSGD(), DPSGD(norm_noise_multiplier=sigma_r)
    spec = PrivacySpec(epsilon=2.93, delta=delta, sampling_rate=q, steps=steps)
    s_plain = plain.calibrate(spec).noise["noise_multiplier"]
    cal = frozen.calibrate(spec)
    assert cal.noise["noise_multiplier"] > s_plain and cal.epsilon <= 2.93
    assert frozen.epsilon_spent(0) == pytest.approx(alone) and plain.epsilon_spent(0) == 0.0
    assert frozen.epsilon_spent(steps) == pytest.approx(cal.epsilon)
    assert frozen.claim().parameters["norm_noise_multiplier"] == sigma_r
    assert "frozen normalisation" in frozen.claim().scope


@pytest.mark.parametrize(("method", "norm", "options", "word"), [
    ("dpsgd", "frozen", {}, "norm_noise_multiplier=0"),
    ("dpsgd", "group", {"norm_noise_multiplier": 8.0}, "norm=group"),
    ("dirichlet_softmax", "frozen", {}, "no option of it"),
    ("dpsgd", "frozen", {"norm_noise_multiplier": 8.0, "accountant": "rdp"}, "accountant=rdp"),
    ("dpsgd", "frozen", {"norm_noise_multiplier": -1.0}, "norm_noise_multiplier=-1"),
])
def test_a_frozen_normalisation_is_refused_unless_its_statistics_are_charged(method, norm, options, word):
    from inputdp.benchmarks.sweep import Overrides, build_config

    cfg = build_config(method=method, dataset="mnist", preset="best", epsilon=2.93, seed=0,
                       overrides=Overrides(norm=norm, method_options={method: options}))
    with pytest.raises(ConfigError, match=word.replace("(", r"\(")) as err:
        resolve(cfg)
    assert "\n" not in str(err.value)
