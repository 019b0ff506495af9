"""Each Opacus internal the suite relies on, as the code calls it (methods/dpsgd.py, methods/fast_clipping.py,
methods/subsampled_gaussian.py), on the pinned range: a new Opacus that moves or changes one fails here, by name."""

from __future__ import annotations

import math
import re
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


def test_the_installed_opacus_is_in_the_pinned_range():
    from packaging.specifiers import SpecifierSet

    pin = re.search(r'"opacus([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert version("opacus") in SpecifierSet(pin), (version("opacus"), pin)
    assert "<" in pin  # an upper bound: the next minor release is tested before it is allowed


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost"])
def test_prepare_module_wraps_the_model_as_dpsgd_calls_it(mode):
    from opacus.grad_sample.utils import prepare_module

    model = _model()
    kwargs = {"batch_first": True, "loss_reduction": "mean", **({"max_grad_norm": 1.0} if mode == "ghost" else {})}
    module = prepare_module(model, grad_sample_mode=mode, **kwargs)
    assert module._module is model  # what DPSGD.unwrap walks
    from inputdp.methods.dpsgd import DPSGD

    assert DPSGD().unwrap(module) is model


@pytest.mark.parametrize("mode,cls", [("hooks", "DPOptimizer"), ("functorch", "DPOptimizer"),
                                      ("ghost", "DPOptimizerFastGradientClipping")])
def test_get_optimizer_class_and_its_constructor(mode, cls):
    from opacus.optimizers import get_optimizer_class

    opt_cls = get_optimizer_class(clipping="flat", distributed=False, grad_sample_mode=mode)
    assert opt_cls.__name__ == cls
    model = _model()
    opt = opt_cls(torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=1.0, max_grad_norm=1.0,
                  expected_batch_size=8, loss_reduction="mean", generator=None, secure_mode=False)
    assert opt.noise_multiplier == 1.0 and opt.max_grad_norm == 1.0 and opt.expected_batch_size == 8


def test_ghost_clipping_loss_wrapper_clips_each_example():
    """DPLossFastGradientClipping(module, optimizer, criterion, "mean"): its loss's backward leaves the clipped,
    summed gradient (no noise at noise_multiplier 0) that the optimizer steps with."""
    from opacus.grad_sample.utils import prepare_module
    from opacus.optimizers import get_optimizer_class
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

    model = _model()
    module = prepare_module(model, grad_sample_mode="ghost", batch_first=True, loss_reduction="mean",
                            max_grad_norm=1e-3)
    opt = get_optimizer_class(clipping="flat", distributed=False, grad_sample_mode="ghost")(
        torch.optim.SGD(model.parameters(), lr=1.0), noise_multiplier=0.0, max_grad_norm=1e-3, expected_batch_size=4,
        loss_reduction="mean")
    loss_fn = DPLossFastGradientClipping(module, opt, nn.CrossEntropyLoss(), "mean")
    x, y = torch.randn(4, 1, 8, 8, generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2, 0])
    opt.zero_grad()
    loss_fn(module(x), y).backward()
    got = [p.grad.detach().clone() for p in model.parameters()]
    # by hand: each example's gradient on a plain copy, clipped to 1e-3, summed
    plain = _model()
    want = [torch.zeros_like(p) for p in plain.parameters()]
    for i in range(4):
        plain.zero_grad()
        nn.functional.cross_entropy(plain(x[i:i + 1]), y[i:i + 1]).backward()
        grads = [p.grad for p in plain.parameters()]
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
        for w, g in zip(want, grads):
            w += g * min(1.0, 1e-3 / norm)
    for g, w in zip(got, want):
        assert torch.allclose(g, w, rtol=1e-4, atol=1e-9)


def test_generate_noise_as_the_bk_optimizer_calls_it():
    from opacus.optimizers.optimizer import _generate_noise

    ref = torch.zeros(200, 100)
    g = torch.Generator().manual_seed(0)
    noise = _generate_noise(std=2.0, reference=ref, generator=g, secure_mode=False)
    assert noise.shape == ref.shape and abs(float(noise.std()) - 2.0) < 0.05 and abs(float(noise.mean())) < 0.05
    again = _generate_noise(std=2.0, reference=ref, generator=torch.Generator().manual_seed(0), secure_mode=False)
    assert torch.equal(noise, again)  # drawn from the generator it is given
    assert float(_generate_noise(std=0.0, reference=ref, generator=g, secure_mode=False).abs().max()) == 0.0
    secure = _generate_noise(std=2.0, reference=ref, generator=g, secure_mode=True)
    assert abs(float(secure.std()) - 2.0) < 0.05


def test_an_accountants_history_as_subsampled_gaussian_writes_it():
    """history = [(noise_multiplier, sampling_rate, steps)] is what T public ``step`` calls leave behind."""
    from opacus.accountants import create_accountant

    from inputdp.methods.accounting.accountants import GaussianSteps, accountant

    public = {}
    for name in ("prv", "rdp"):
        stepped = create_accountant(name)
        for _ in range(300):
            stepped.step(noise_multiplier=1.1, sample_rate=0.01)
        assert stepped.history == [(1.1, 0.01, 300)]
        written = create_accountant(name)
        written.history = [(1.1, 0.01, 300)]
        public[name] = stepped.get_epsilon(delta=1e-5)
        assert written.get_epsilon(delta=1e-5) == pytest.approx(public[name], rel=1e-12)
    ours = accountant("prv").epsilon(GaussianSteps(0.01, 300), 1.1, 1e-5)
    assert ours == pytest.approx(public["prv"], rel=1e-12)


def test_module_validator_fixes_batchnorm_into_groupnorm():
    from opacus.validators import ModuleValidator

    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4))
    assert not ModuleValidator.is_valid(model)
    fixed = ModuleValidator.fix(model)
    assert ModuleValidator.is_valid(fixed) and isinstance(fixed[1], nn.GroupNorm)
