"""Dirichlet-softmax: Theorem 10's expectations by Monte Carlo, and the method's own calibration."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
from scipy.special import digamma, polygamma

from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods.dirichlet_softmax import DirichletSoftmax, dirichlet_nll, kappa


def test_expected_loss_and_gradient_monte_carlo():
    torch.manual_seed(0)
    d, r, alpha = 10, 0.7, 3.0
    z0 = torch.randn(d, dtype=torch.float64)
    y = torch.tensor([3])
    s = torch.softmax(z0, 0)
    s_y = float(s[3])
    batches, per = 20, 20000
    losses, grads = [], []
    for _ in range(batches):
        z = z0.clone().requires_grad_(True)
        loss = dirichlet_nll(z.expand(per, d), y.expand(per), r, alpha)
        mean = loss.mean()
        (g,) = torch.autograd.grad(mean, z)
        losses.append(loss.detach())
        grads.append(g)
    all_loss = torch.cat(losses)
    g = torch.stack(grads)
    expected_loss = digamma(r + d * alpha) - digamma(r * s_y + alpha)
    se = float(all_loss.std()) / math.sqrt(all_loss.numel())
    assert abs(float(all_loss.mean()) - expected_loss) < 5 * se
    expected_var = polygamma(1, r * s_y + alpha) - polygamma(1, r + d * alpha)
    assert float(all_loss.var()) == pytest.approx(expected_var, rel=0.03)
    k = r * s_y * polygamma(1, r * s_y + alpha)
    expected_grad = k * (s - torch.nn.functional.one_hot(y, d).double().squeeze(0))
    g_mean, g_se = g.mean(0), g.std(0) / math.sqrt(batches)
    assert torch.all((g_mean - expected_grad).abs() < 5 * g_se + 1e-6), (g_mean, expected_grad)
    assert float(kappa(s_y, r, alpha)) == pytest.approx(k)


@pytest.mark.parametrize("accountant,low,high", [("paper", 0.085, 0.1), ("per_example", 0.025, 0.035)])
def test_lr_rules_record_effective_rate(accountant, low, high):
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    fixed = DirichletSoftmax(lr_rule="fixed", accountant=accountant)
    kap = DirichletSoftmax(lr_rule="kappa", accountant=accountant)
    fixed.calibrate(spec)
    kap.calibrate(spec)
    lr_f, info_f = fixed.learning_rate(0.1)
    lr_k, info_k = kap.learning_rate(0.1)
    assert lr_f == 0.1 and info_f["lr_effective"] == pytest.approx(0.1 * info_f["kappa_at_0.9"])
    assert lr_k == pytest.approx(0.1 / info_k["kappa_at_0.9"]) and info_k["lr_effective"] == pytest.approx(0.1)
    # kappa(0.9) = 0.9 r psi1(0.9 r + 3): r = 0.2846 (paper) gives 0.092, r = 0.0843 (per-example) 0.029
    r = kap.r
    assert info_k["kappa_at_0.9"] == pytest.approx(0.9 * r * float(polygamma(1, 0.9 * r + 3.0)))
    assert low < info_k["kappa_at_0.9"] < high


@pytest.mark.parametrize("accountant", ["per_example", "paper"])
def test_claim_states_scope(accountant):
    m = DirichletSoftmax(accountant=accountant)
    m.calibrate(PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=1000))
    claim = m.claim()
    assert claim.protects == "inputs" and "softmax" in claim.scope and "audit" in claim.scope
    assert claim.parameters["r"] == m.r and claim.epsilon <= 2.0
    # neither accountant's number is a guarantee of an output of the training, and the claim says which it is
    assert claim.guarantee is False and claim.accountant == accountant and "not a guarantee" in claim.scope
    assert claim.as_tags()["privacy.guarantee"] == "false" and claim.as_tags()["privacy.accountant"] == accountant
    if accountant == "paper":  # the paper's r spends more than its epsilon on the vectors, and the scope says so
        assert claim.vectors_epsilon_lb > claim.epsilon and f"{claim.vectors_epsilon_lb:.3g}" in claim.scope
        assert "add/remove" in claim.adjacency
    else:
        assert claim.vectors_epsilon_lb <= claim.epsilon and "replaced" in claim.adjacency


def test_bad_options_are_refused():
    with pytest.raises(ConfigError, match="alpha"):
        DirichletSoftmax(alpha=-1)
    with pytest.raises(ConfigError, match="lr_rule"):
        DirichletSoftmax(lr_rule="cosine")
    with pytest.raises(ConfigError, match="no option 'sigma'"):
        DirichletSoftmax(sigma=1)


@pytest.mark.slow
def test_bench_calibrate_json():
    out = subprocess.run(
        [sys.executable, "-m", "inputdp.benchmarks.cli", "calibrate", "--method", "dirichlet_softmax", "--epsilon", "1",
         "--delta", "1e-5", "--sampling-rate", "0.005", "--steps", "20000", "--option", "alpha=3",
         "--option", "accountant=paper", "--json"],
        capture_output=True, text=True, check=True,
    )
    data = json.loads(out.stdout)
    assert {"method", "epsilon", "r", "alpha", "order", "calibration_seconds"} <= set(data)
    assert data["epsilon"] <= 1.0 and 0.07 < data["r"] / data["alpha"] < 0.09
    assert data["order"] == int(data["order"]) >= 2
