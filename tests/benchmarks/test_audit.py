"""The audit: its statistics against direct computations, soundness on DP-SGD, power on non-private training,
and the mechanism of leakage in one deterministic step."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
import torch

from inputdp.benchmarks.audits.one_run import (
    audit,
    black_box_scores,
    epsilon_lower_bound,
    k_grid,
    make_canaries,
    p_value,
    relearn_scores,
    white_box_scores,
)
from inputdp.benchmarks.resolve import resolve
from inputdp.core.errors import ConfigError
from inputdp.methods.dirichlet_softmax import dirichlet_nll

from ..helpers import QUIET, smoke_config


def direct_p_value(eps: float, r: int, v: int, m: int, delta: float) -> float:
    """The same p-value from exact binomial sums (fractions), no scipy."""
    q = Fraction(math.exp(eps) / (1 + math.exp(eps)))

    def f(t: int) -> Fraction:
        return sum((math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(max(t, 0), r + 1)), Fraction(0))

    fv = f(v)
    spread = max(((f(v - i) - fv) / i for i in range(1, v + 1)), default=Fraction(0))
    return float(fv + 2 * m * Fraction(delta) * spread)


@pytest.mark.parametrize("eps,r,v,m", [(0.0, 20, 14, 100), (0.7, 40, 33, 200), (1.5, 10, 10, 50), (2.0, 60, 41, 1000)])
def test_p_value_against_direct_binomial(eps, r, v, m):
    assert p_value(eps, r=r, v=v, m=m, delta=1e-5) == pytest.approx(direct_p_value(eps, r, v, m, 1e-5), rel=1e-9)


def test_bound_properties():
    lbs = [epsilon_lower_bound(r=100, v=v, m=1000, delta=1e-5, beta=0.05) for v in (50, 60, 75, 90, 100)]
    assert lbs[0] == 0.0 and all(a <= b for a, b in zip(lbs, lbs[1:])) and lbs[-1] > 2.5
    lb = epsilon_lower_bound(r=100, v=90, m=1000, delta=1e-5, beta=0.05)
    assert p_value(lb, r=100, v=90, m=1000, delta=1e-5) < 0.05 <= p_value(lb + 1e-6, r=100, v=90, m=1000, delta=1e-5)
    assert k_grid(1000) == [50, 100, 150, 200, 300, 400, 500] and k_grid(200) == [10, 20, 30, 40, 60, 80, 100]


def test_reference_rank_discounts_what_an_unseen_canary_would_get():
    """Logits are the inputs (identity model). Unseen canaries labelled 0 get p_0 ~ 0.9 anyway, those labelled 1
    get p_1 ~ 0.01: a canary at p_0 = 0.9 is ordinary, one at p_1 = 0.5 is not. Loss ranks them the other way."""
    g = torch.Generator().manual_seed(0)
    ref0 = torch.zeros(200, 10)
    ref0[:, 0] = math.log(81) + 0.05 * torch.randn(200, generator=g)  # p_0 ~ 0.9
    ref1 = torch.zeros(200, 10)
    ref1[:, 1] = -2.0 + 0.05 * torch.randn(200, generator=g)  # p_1 ~ 0.015
    x_ref = torch.cat([ref0, ref1])
    y_ref = torch.cat([torch.zeros(200, dtype=torch.long), torch.ones(200, dtype=torch.long)])
    x = torch.zeros(2, 10)
    x[0, 0] = math.log(81)  # label 0, p ~ 0.9: what an unseen canary of label 0 gets
    x[1, 1] = math.log(9)  # label 1, p = 0.5: far above every unseen canary of label 1
    y = torch.tensor([0, 1])
    s = black_box_scores(torch.nn.Identity(), x, y, x_ref, y_ref)
    assert s["loss"][0] > s["loss"][1]
    assert s["reference_rank"][1] > s["reference_rank"][0]
    assert 0.9 < s["reference_rank"][1] <= 1.0 and 0.2 < s["reference_rank"][0] < 0.8


def _bn_net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    net.train()
    with torch.no_grad():  # running statistics away from their initial values
        net(torch.randn(64, 12) * 3 + 1)
    return net


def test_relearn_is_full_batch_descent_on_a_copy():
    """The score equals a hand-written full-batch descent in eval mode (so chunking changes nothing), leaves the
    audited model as it was, and treats every canary alike (permuting the canaries permutes the scores)."""
    import copy

    net = _bn_net(0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(23, 12, generator=g), torch.randint(0, 4, (23,), generator=g)
    before = copy.deepcopy(net.state_dict())
    got = relearn_scores(net, x, y, lr=0.3, steps=4, chunk=5)
    for k, v in net.state_dict().items():
        assert torch.equal(v, before[k]), k
    ref = copy.deepcopy(net).eval()
    for _ in range(4):
        loss = torch.nn.functional.cross_entropy(ref(x), y)
        grads = torch.autograd.grad(loss, list(ref.parameters()))
        with torch.no_grad():
            for p, gr in zip(ref.parameters(), grads):
                p -= 0.3 * gr
    with torch.no_grad():
        want = -torch.nn.functional.cross_entropy(ref(x), y, reduction="none").numpy()
    assert abs(got - want).max() < 1e-5
    start = -torch.nn.functional.cross_entropy(copy.deepcopy(net).eval()(x), y, reduction="none").detach().numpy()
    assert got.mean() > start.mean()  # the steps did descend
    perm = torch.randperm(23, generator=g)
    assert abs(relearn_scores(net, x[perm], y[perm], lr=0.3, steps=4, chunk=7) - got[perm.numpy()]).max() < 1e-5


def test_white_box_scores_computes_only_what_is_asked():
    """A single white-box score does not pay for the others, and gives the same values as in the full set."""
    initial = _bn_net(2)
    final = _bn_net(3)
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(9, 12, generator=g), torch.randint(0, 4, (9,), generator=g)
    full = white_box_scores(final, initial.state_dict(), x, y)
    assert set(full) == {"gradient_alignment", "relearn", "first_layer_projection"}
    for name in full:
        one = white_box_scores(final, initial.state_dict(), x, y, [name])
        assert set(one) == {name} and abs(one[name] - full[name]).max() < 1e-6


def test_canaries_are_recorded_and_kept_out_of_the_base():
    from inputdp.datasets import load_tensor_data

    data = load_tensor_data("synthetic", train_examples=1000, test_examples=100)
    c = make_canaries("mislabeled", data, 100, seed=3)
    assert c.base.train_size == 900 and 30 < c.included.sum() < 70
    for kind in ("random_pattern", "blank_patch"):
        c = make_canaries(kind, data, 50, seed=3)
        assert c.x.shape == (50, 1, 28, 28) and c.base.train_size == 1000
    # random patterns: pixel spread = pattern_scale x the data's (2 x by default), same draw otherwise
    spread = float(data.x_train.std())
    c2 = make_canaries("random_pattern", data, 400, seed=3)
    c1 = make_canaries("random_pattern", data, 400, seed=3, pattern_scale=1.0)
    assert float(c2.x.std()) == pytest.approx(2 * spread, rel=0.01)
    assert torch.allclose(c2.x, 2 * c1.x) and torch.equal(c2.y, c1.y) and (c2.included == c1.included).all()
    # the reference: same kind, its own generator, never part of the training data; canaries do not depend on it
    assert c2.x_ref.shape == (5000, 1, 28, 28) and float(c2.x_ref.std()) == pytest.approx(2 * spread, rel=0.01)
    small = make_canaries("random_pattern", data, 400, seed=3, reference=100)
    assert torch.equal(small.x, c2.x) and torch.equal(small.x_ref, c2.x_ref[:100])
    assert not any(torch.equal(c2.x[0], r) for r in c2.x_ref[:100])
    mis = make_canaries("mislabeled", data, 100, seed=3)
    assert mis.x_ref.shape[0] == 100  # the test split here has 100 images: all of them, each given a wrong label
    for xr, yr in zip(mis.x_ref, mis.y_ref):
        (j,) = [j for j in range(100) if torch.equal(data.x_test[j], xr)][:1]
        assert int(yr) != int(data.y_test[j])
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="pattern_scale"):
            make_canaries("random_pattern", data, 50, seed=3, pattern_scale=bad)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_soundness_on_dpsgd(seed):
    """A correct mechanism: the bound never exceeds the claimed epsilon, for any score."""
    config = smoke_config("dpsgd", epsilon=1.0, seed=seed, epochs=6)
    result = audit(resolve(config), canaries=200, canary_kind="random_pattern", perf=QUIET)
    for o in result.outcomes:
        assert o.epsilon_lb <= 1.0, (o.score, o.epsilon_lb)


@pytest.mark.slow
def test_power_on_nonprivate():
    """Non-private training memorises input-space canaries: a clearly positive bound."""
    config = smoke_config("nonprivate", epochs=10)
    result = audit(resolve(config), canaries=200, canary_kind="random_pattern", perf=QUIET)
    assert result.best.epsilon_lb >= 0.5, result.as_json()
    assert result.best.epsilon_lb <= result.best.ceiling
    json.dumps(result.as_json())


def _dirichlet_step(model, x, y, r, alpha, seed):
    """The update of one SGD step (lr 1) on the Dirichlet loss of one example, its draw seeded."""
    torch.manual_seed(seed)
    loss = dirichlet_nll(model(x), y, r, alpha).sum()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([-g.flatten() for g in grads])


def _dpsgd_step(model, x, y, spec):
    """The update of one DP-SGD step (lr 1, sum over the batch) with a fixed noise draw."""
    from inputdp.methods.base import TrainingSetup
    from inputdp.methods.dpsgd import DPSGD

    m = torch.nn.Linear(model.in_features, model.out_features, bias=False)
    m.load_state_dict(model.state_dict())
    method = DPSGD(max_grad_norm=1.0, grad_sample_mode="hooks")
    method.calibrate(spec)
    module, opt = method.prepare(m, torch.optim.SGD(m.parameters(), lr=1.0),
                                 TrainingSetup(spec=spec, train_size=100, num_classes=10, device="cpu"))
    opt.generator = torch.Generator().manual_seed(7)
    before = torch.cat([p.detach().flatten().clone() for p in module.parameters()])
    method.train_step(module, opt, x, y)
    after = torch.cat([p.detach().flatten() for p in module.parameters()])
    return (after - before) * opt.expected_batch_size


def test_mechanism_of_leakage_one_step():
    """Two private inputs with the same logits give the same release (same softmax, same Dirichlet draw), yet
    different parameter updates: the update uses the input beyond the release, through the Jacobian.

    For a linear model f(x) = W x and x_b = x_a + t*n with W n = 0, the two releases are identical while the
    Dirichlet updates differ by a term that grows with t without bound. Under DP-SGD, with the same noise
    draw, the two updates differ by at most 2C (each example's gradient is clipped to C).
    """
    from inputdp.core.config import PrivacySpec

    torch.manual_seed(0)
    model = torch.nn.Linear(20, 10, bias=False)
    w = model.weight.detach()
    null = torch.linalg.svd(w, full_matrices=True).Vh[-1]  # W @ null = 0 (rank 10 < 20)
    assert float((w @ null).abs().max()) < 1e-5
    x_a, y = torch.randn(1, 20), torch.tensor([3])
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=100)
    dirichlet_diffs, dpsgd_diffs = [], []
    for t in (1.0, 10.0, 100.0):
        x_b = x_a + t * null
        torch.testing.assert_close(model(x_b), model(x_a), atol=1e-3 * t, rtol=1e-5)  # the same release
        d = _dirichlet_step(model, x_b, y, 0.3, 3.0, seed=1) - _dirichlet_step(model, x_a, y, 0.3, 3.0, seed=1)
        dirichlet_diffs.append(float(d.norm()))
        dpsgd_diffs.append(float((_dpsgd_step(model, x_b, y, spec) - _dpsgd_step(model, x_a, y, spec)).norm()))
    assert dirichlet_diffs[0] > 0
    assert dirichlet_diffs[2] / dirichlet_diffs[0] == pytest.approx(100.0, rel=0.05)  # unbounded in t
    assert all(d <= 2.0 + 1e-4 for d in dpsgd_diffs)  # bounded by 2C whatever t


def test_a_zero_bound_reports_the_largest_ceiling_of_its_family():
    """When no k gives a bound, the outcome shown is the k whose ceiling is largest (the most the score could
    have shown), not the first k tried."""
    import numpy as np

    from inputdp.benchmarks.audits.one_run import bound_for_scores

    rng = np.random.default_rng(0)
    included = rng.random(67) < 0.5
    out = bound_for_scores(rng.random(67), included, delta=1e-5, beta=0.05, n_tests=35, score="loss")
    ceilings = [epsilon_lower_bound(r=2 * k, v=2 * k, m=67, delta=1e-5, beta=0.05 / 35) for k in k_grid(67)]
    assert out.epsilon_lb == 0.0 and out.k == 33 and out.ceiling == pytest.approx(max(ceilings)) and out.ceiling > 2


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_an_audit_run_is_finished_only_with_its_bounds(tmp_path, monkeypatch):
    """While the canaries are scored the audit's run stays RUNNING; a process stopped then leaves it KILLED, which a
    resumed study audits again, never FINISHED without bounds (a study stopped during the scoring of an audit kept
    one such run, and its leaderboard row showed no black-box bound). An audit that completes is FINISHED with its
    bounds and the training's metrics."""
    from inputdp.benchmarks.audits import one_run
    from inputdp.benchmarks.tracking import MLflowTracker, finished_with_key
    from inputdp.core import names

    uri = f"sqlite:///{tmp_path / 'audits.db'}"
    config = resolve(smoke_config("nonprivate", steps=10))

    def tracker_for(key: str) -> MLflowTracker:
        tracker = MLflowTracker(uri, "audits")
        tracker.extra_tags.update({names.TAG_KIND: names.KIND_AUDIT, names.TAG_CONFIG_KEY: key})
        return tracker

    seen, real = [], one_run.black_box_scores

    def spy(*args, **kwargs):
        seen.append(tracker.client.get_run(tracker.run_id).info.status)
        return real(*args, **kwargs)

    tracker = tracker_for("done")
    monkeypatch.setattr(one_run, "black_box_scores", spy)
    audit(config, canaries=20, canary_kind="random_pattern", perf=QUIET, tracker=tracker)
    done = tracker.client.get_run(tracker.run_id)
    assert seen == ["RUNNING"] and done.info.status == "FINISHED"
    assert done.data.tags[names.TAG_CANARY_KIND] == "random_pattern"
    assert {names.METRIC_EPSILON_LB, names.METRIC_FINAL_TEST_ACCURACY} <= set(done.data.metrics)
    assert finished_with_key(tracker.client, tracker.experiment_id, "done")

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    tracker = tracker_for("stopped")
    monkeypatch.setattr(one_run, "black_box_scores", stopped)
    with pytest.raises(KeyboardInterrupt):
        audit(config, canaries=20, canary_kind="random_pattern", perf=QUIET, tracker=tracker)
    killed = tracker.client.get_run(tracker.run_id)
    assert killed.info.status == "KILLED" and names.METRIC_EPSILON_LB not in killed.data.metrics
    assert names.METRIC_FINAL_TEST_ACCURACY in killed.data.metrics  # the training it did is kept
    assert not finished_with_key(tracker.client, tracker.experiment_id, "stopped")
