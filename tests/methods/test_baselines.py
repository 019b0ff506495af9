"""DP-SGD (Opacus) and Gaussian-penultimate: noise levels measured, calibration checked by Opacus' accountant."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from torch import nn

from inputdp.benchmarks.models import build_model
from inputdp.core.config import PrivacySpec
from inputdp.methods.base import TrainingSetup
from inputdp.methods.dpsgd import DPSGD
from inputdp.methods.gaussian_penultimate import GaussianPenultimate, clip_rows

SPEC = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.004267, steps=2340)


@pytest.mark.slow
def test_bench_calibrate_dpsgd_meets_opacus_accountant():
    from opacus.accountants import RDPAccountant
    from opacus.accountants.utils import get_noise_multiplier

    out = subprocess.run(
        [sys.executable, "-m", "inputdp.benchmarks.cli", "calibrate", "--method", "dpsgd", "--epsilon", "1", "--delta",
         "1e-5", "--sampling-rate", "0.004267", "--steps", "2340", "--option", "accountant=rdp", "--json"],
        capture_output=True, text=True, check=True,
    )
    data = json.loads(out.stdout)
    expected = get_noise_multiplier(target_epsilon=1, target_delta=1e-5, sample_rate=0.004267, steps=2340,
                                    accountant="rdp")
    acc = RDPAccountant()
    acc.history = [(data["noise_multiplier"], 0.004267, 2340)]
    # the crossing by Opacus' own accountant, a little below Opacus' search (which stops within 0.01 of it)
    assert 1.0 - 1e-6 <= acc.get_epsilon(delta=1e-5) <= 1.0
    assert expected * 0.98 <= data["noise_multiplier"] <= expected
    assert data["epsilon"] <= 1.0 and "calibration_seconds" in data


def test_prv_accountant_option():
    m = DPSGD(accountant="prv")
    cal = m.calibrate(SPEC)
    assert cal.epsilon <= 1.0 + 1e-6
    rdp = DPSGD(accountant="rdp").calibrate(SPEC).noise["noise_multiplier"]
    assert cal.noise["noise_multiplier"] < rdp  # PRV is the tighter accountant: less noise for the same budget


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost", "bk"])
def test_dpsgd_noise_std_on_zero_signal(mode):
    """Zero per-example gradients: the update is pure noise with std sigma * C / expected batch size."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(400, 250, bias=False))
    m = DPSGD(max_grad_norm=2.0, grad_sample_mode=mode)
    m.calibrate(SPEC)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    setup = TrainingSetup(spec=SPEC, train_size=60000, num_classes=10, device="cpu")
    module, dp_opt = m.prepare(model, opt, setup)
    x = torch.zeros(64, 1, 20, 20)  # zero input: every per-example gradient of the linear layer is zero
    y = torch.zeros(64, dtype=torch.long)
    m.train_step(module, dp_opt, x, y)
    grad = next(module.parameters()).grad
    expected = m.calibration.noise["noise_multiplier"] * 2.0 / round(SPEC.sampling_rate * 60000)
    assert float(grad.std()) == pytest.approx(expected, rel=0.02)
    assert abs(float(grad.mean())) < 5 * expected / math.sqrt(grad.numel())


def test_dpsgd_clips_each_example():
    """One example with a huge gradient moves the summed update by at most C (noise switched off)."""
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    m = DPSGD(max_grad_norm=1.0, grad_sample_mode="hooks")
    m.calibrate(SPEC)
    setup = TrainingSetup(spec=SPEC, train_size=1000, num_classes=3, device="cpu")
    module, dp_opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0), setup)
    dp_opt.noise_multiplier = 0.0
    x = torch.randn(1, 5) * 1e4
    with torch.no_grad():
        wrong = module(x).argmin(1)  # the least likely label: a per-example gradient of norm ~1e4
    m.train_step(module, dp_opt, x, wrong)
    total = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in module.parameters()))
    assert total * dp_opt.expected_batch_size == pytest.approx(1.0, rel=1e-4)


def test_penultimate_clip_and_noise_level():
    torch.manual_seed(0)
    m = GaussianPenultimate(clip_norm=0.5)
    m.calibrate(SPEC)
    model = build_model("small_cnn", num_classes=10, channels=1, size=28, norm="group", width=16)
    m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), None)
    h = torch.randn(300, 64) * 10
    assert torch.all(clip_rows(h, 0.5).norm(dim=1) <= 0.5 + 1e-6)
    x = torch.randn(300, 1, 28, 28)
    with torch.no_grad():
        noisy = m.noisy_features(model, x)
        clean = clip_rows(model.features(x), 0.5)
    noise = noisy - clean
    assert float(noise.std()) == pytest.approx(m.sigma * 0.5, rel=0.02)
    d = m.describe()
    assert d["feature_dim"] == 64 and d["noise_norm_over_clip_norm"] == pytest.approx(m.sigma * 8.0)


def test_penultimate_noise_grows_with_width():
    m = GaussianPenultimate()
    m.calibrate(SPEC)
    ratios = []
    for width in (8, 32):
        model = build_model("small_cnn", num_classes=10, channels=1, size=28, norm="group", width=width)
        m.prepare(model, None, None)
        ratios.append(m.describe()["noise_norm_over_clip_norm"])
    assert ratios[1] == pytest.approx(2 * ratios[0])  # k = 4w: 4x the width, 2x the noise norm


def test_claims_state_what_they_cover():
    d, g = DPSGD(), GaussianPenultimate()
    d.calibrate(SPEC)
    g.calibrate(SPEC)
    assert d.claim().protects == "inputs and labels" and "every iterate" in d.claim().scope
    assert g.claim().protects == "inputs" and "audit" in g.claim().scope


@pytest.mark.parametrize("model_name", ["small_cnn", "resnet9"])
def test_grad_sample_modes_agree_without_noise(model_name):
    """hooks, functorch, ghost clipping and book-keeping give the same clipped update: any of them is a valid
    default."""
    import copy

    torch.manual_seed(0)
    channels = 1 if model_name == "small_cnn" else 3
    base = build_model(model_name, num_classes=10, channels=channels, size=28, norm="group", width=8)
    x, y = torch.randn(12, channels, 28, 28), torch.randint(0, 10, (12,))
    updates = {}
    for mode in ("hooks", "functorch", "ghost", "bk"):
        model = copy.deepcopy(base)
        m = DPSGD(grad_sample_mode=mode, max_grad_norm=0.1)
        m.calibrate(SPEC)
        setup = TrainingSetup(spec=SPEC, train_size=60000, num_classes=10, device="cpu")
        module, opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.0), setup)
        opt.noise_multiplier = 0.0
        m.train_step(module, opt, x, y)
        updates[mode] = torch.cat([p.grad.flatten() for p in module.parameters()])
    scale = float(updates["hooks"].abs().max())
    for mode in ("functorch", "ghost", "bk"):
        assert torch.allclose(updates[mode], updates["hooks"], atol=1e-5 * scale)


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost", "bk"])
def test_dpsgd_empty_batch_is_a_noise_only_step(mode):
    torch.manual_seed(0)
    model = build_model("small_cnn", num_classes=10, channels=1, size=28, norm="group", width=8)
    m = DPSGD(grad_sample_mode=mode)
    m.calibrate(SPEC)
    setup = TrainingSetup(spec=SPEC, train_size=60000, num_classes=10, device="cpu")
    module, opt = m.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), setup)
    assert m.train_step(module, opt, torch.zeros(0, 1, 28, 28), torch.zeros(0, dtype=torch.long)) is None
    grad = torch.cat([p.grad.flatten() for p in module.parameters()])
    expected = m.calibration.noise["noise_multiplier"] * 1.0 / round(SPEC.sampling_rate * 60000)
    assert float(grad.std()) == pytest.approx(expected, rel=0.05)
