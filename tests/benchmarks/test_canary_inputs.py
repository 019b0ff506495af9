"""Canaries with input coordinates of their own (any data set, any model) and the f-DP one-run bound: the widened
model's exactness (a canary's column moves iff the canary was trained on), the frontend path, the refusals before any
store, and the f-DP bound against a Monte Carlo of mechanisms of known privacy, its closed form, and Steinke's."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inputdp.benchmarks.audits import fdp_bound
from inputdp.benchmarks.audits.one_run import (
    audit,
    canary_input_change,
    check_arguments,
    epsilon_lower_bound,
    make_canaries,
    resolve_scores,
    with_canaries,
)
from inputdp.benchmarks.cli import main as cli_main
from inputdp.benchmarks.frontend import model_for
from inputdp.benchmarks.models import build_model
from inputdp.benchmarks.models.canary_inputs import CanaryInputs, extra_channels
from inputdp.benchmarks.resolve import resolve
from inputdp.core.claims import ADD_REMOVE, RELATION_VALUES
from inputdp.core.errors import ConfigError
from inputdp.datasets import load_tensor_data

from ..helpers import QUIET, smoke_config


@pytest.fixture(scope="module")
def small():
    return load_tensor_data("synthetic", train_examples=600, test_examples=200)


# --- the canaries and the widened model ----------------------------------------------------------------------
def test_each_canary_has_a_coordinate_of_its_own_and_the_data_none(small):
    m = 50
    made = make_canaries("canary_inputs", small, m, seed=2)
    c, h, w = small.shape
    e = extra_channels(m, h, w)
    assert made.base.shape == (c + e, h, w) and made.base.info == small.info and made.widen is not None
    assert made.base.x_train[:, c:].abs().sum() == 0 and made.base.x_test[:, c:].abs().sum() == 0
    coords = made.x[:, c:].flatten(1)
    assert torch.equal(coords[:, :m], torch.eye(m))  # canary j is 1 on coordinate j, 0 on every other
    assert coords[:, m:].abs().sum() == 0
    train = with_canaries(made, relation=RELATION_VALUES[ADD_REMOVE])
    assert train.train_size == small.train_size + int(made.included.sum())


def test_the_widened_model_reads_the_image_as_before_and_each_coordinate_through_its_own_column(small):
    made = make_canaries("canary_inputs", small, 30, seed=0)
    config = smoke_config("nonprivate")
    torch.manual_seed(0)
    model = made.widen(model_for(config, made.base.info, "group"))
    assert isinstance(model, CanaryInputs) and model.canary_weight.shape == (model.feature_dim, 30)
    assert model.canary_weight.abs().sum() == 0  # zero at initialisation
    c = small.info.channels
    x = made.base.x_train[:8]
    with torch.no_grad():
        model.features.canary.weight.normal_()
        out = model(made.x[:4])
        # canary j's features are the base's of its image plus column j of A: its own column, nothing else
        expected = torch.stack([model.head(model.features.base(made.x[j: j + 1, :c])[0] + model.canary_weight[:, j])
                                for j in range(4)])
    assert torch.allclose(out, expected, atol=1e-5)
    with torch.no_grad():  # an example of the data (zero on every extra coordinate) is read as the image alone
        assert torch.allclose(model(x), model.head(model.features.base(x[:, :c])), atol=1e-6)


def test_a_frontend_model_keeps_its_frontend_once_for_the_images_and_passes_the_coordinates(small):
    made = make_canaries("canary_inputs", small, 20, seed=0)
    model = made.widen(model_for(smoke_config("dpsgd", model="scatter_linear"), made.base.info, "group"))
    front = model.frontend
    assert front is not None and front.in_shape == made.base.shape
    with torch.no_grad():
        model.features.canary.weight.normal_()
        direct = model(made.x[:6])
        via_frontend = model(front(made.x[:6]))  # what the harness does: the frontend once, then the rest
    assert torch.allclose(direct, via_frontend, atol=1e-5)


@pytest.mark.slow
def test_canary_input_change_is_exactly_zero_for_every_canary_a_noise_free_method_never_saw(tmp_path, capsys):
    """Dirichlet-softmax adds no noise to the parameters: a column moves iff its canary was trained on, so no
    canary is wrongly guessed "in"; the test reaches its ceiling (every included canary sampled at least once).
    Logged to a store of audits alone, bench report writes its audit table (no leaderboard: no training row)."""
    from inputdp.benchmarks.tracking import MLflowTracker
    from inputdp.core import names

    uri = f"sqlite:///{tmp_path / 'audits.db'}"
    config = smoke_config("dirichlet_softmax", epsilon=4.0, steps=120)
    tracker = MLflowTracker(uri, "audits")  # tagged as bench audit tags it
    tracker.extra_tags.update({names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: config.match_key()})
    result = audit(resolve(config), canaries=60, canary_kind="canary_inputs", perf=QUIET, tracker=tracker)
    (o,) = result.outcomes
    assert result.tests == 2 and o.score == "canary_input_change" and o.guesses == 60  # one guess set, two analyses
    assert o.correct >= 57 and o.epsilon_lb > 2.0  # q = 0.05, 120 steps: P(never sampled) = 0.2%
    assert o.fdp_epsilon_lb == pytest.approx(fdp_bound.eps_lower_bound(m=60, guesses=60, correct=o.correct, tau=0.025,
                                                                       delta=result.delta))
    assert cli_main(["report", "--tracking-uri", uri, "--experiment", "audits", "--out", str(tmp_path / "rep")]) == 0
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["audits.csv", "audits.md"]
    table = (tmp_path / "rep" / "audits.csv").read_text()
    assert "canary_inputs" in table and f"{o.fdp_epsilon_lb:.2f} (ceiling" in table


@pytest.mark.slow
def test_the_decisive_test_stays_below_the_claim_for_dpsgd():
    dpsgd = audit(resolve(smoke_config("dpsgd", epsilon=1.0, steps=80)), canaries=60, canary_kind="canary_inputs", perf=QUIET)
    assert dpsgd.best.epsilon_lb <= 1.0 and dpsgd.best.fdp_epsilon_lb <= 1.0


def test_scores_of_an_unwidened_model_are_refused():
    plain = build_model("small_cnn", num_classes=10, channels=1, size=28, norm="group")
    with pytest.raises(ConfigError, match="widened"):
        canary_input_change(plain, plain)


def test_canary_inputs_scores_and_refusals():
    assert resolve_scores("auto", "canary_inputs", "small_cnn") == ("canary_input_change",)
    assert "reference_rank" not in resolve_scores("all", "canary_inputs", "small_cnn")
    with pytest.raises(ConfigError, match="use --canary-kind canary_inputs"):
        check_arguments(canary_kind="random_pattern", canaries=10, pattern_scale=2.0, scores=("canary_input_change",))
    with pytest.raises(ConfigError, match="reference_rank"):
        check_arguments(canary_kind="canary_inputs", canaries=10, pattern_scale=2.0, scores=("reference_rank",))


@pytest.mark.parametrize("argv,needle", [
    (["--method", "dp_least_squares"], "features fixed at initialisation"),
    (["--method", "dirichlet_softmax", "--runs", "8"], "not allowed with --runs"),
])
def test_the_cli_refuses_in_one_line_before_any_store(tmp_path, capsys, argv, needle):
    store = tmp_path / "s.db"
    rc = cli_main(["audit", *argv, "--dataset", "synthetic", "--preset", "smoke", "--canary-kind", "canary_inputs",
                   "--tracking-uri", f"sqlite:///{store}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0]
    assert not store.exists()


# --- the f-DP bound ------------------------------------------------------------------------------------------
def test_fdp_bound_with_every_guess_right_and_no_delta_is_the_closed_form():
    """All c' = m guesses right, delta = 0: the (epsilon, 0) curve is rejected iff (e^eps / (1 + e^eps))^m < tau,
    so the bound is log(p / (1 - p)), p = tau^(1/m); Steinke's bound is the same number."""
    for m in (20, 67, 300):
        p = 0.05 ** (1 / m)
        closed = math.log(p / (1 - p))
        assert fdp_bound.eps_lower_bound(m=m, guesses=m, correct=m, tau=0.05, delta=0.0) == pytest.approx(closed, abs=2e-3)
        assert epsilon_lower_bound(r=m, v=m, m=m, delta=0.0, beta=0.05) == pytest.approx(closed, abs=2e-3)


@pytest.mark.parametrize("m,r,v", [(1000, 1000, 700), (1000, 200, 190), (67, 67, 43), (500, 100, 100)])
def test_fdp_bound_on_the_eps_delta_curve_agrees_with_steinkes(m, r, v):
    """Both analyse the same guesses against the same (epsilon, delta) claim; they differ by their slack only."""
    f = fdp_bound.eps_lower_bound(m=m, guesses=r, correct=v, tau=0.05, delta=1e-5)
    s = epsilon_lower_bound(r=r, v=v, m=m, delta=1e-5, beta=0.05)
    assert abs(f - s) < 0.06


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_fdp_bounds_reject_the_true_mechanism_in_at_most_their_level_of_games():
    """mu-GDP canaries (score N(mu b, 1), k guessed each way) and pure-DP randomised response (each guess right
    with e^eps / (1 + e^eps)): at tau = 0.05 at most 5% of games may reject the true mechanism; of 200 games of
    each, more than 20 would be a 1-in-1000 event for a valid bound (seeded, so the count is fixed)."""
    rng = np.random.default_rng(0)
    mu_true, m, k, games = 1.5, 600, 60, 200
    over_mu = 0
    for _ in range(games):
        b = rng.random(m) < 0.5
        order = np.argsort(-rng.normal(mu_true * b, 1.0))
        v = int(b[order[:k]].sum() + (~b[order[-k:]]).sum())
        over_mu += fdp_bound.mu_lower_bound(m=m, guesses=2 * k, correct=v, tau=0.05) > mu_true
    eps_true = 2.0
    right = rng.binomial(400, math.exp(eps_true) / (1 + math.exp(eps_true)), size=games)
    over_eps = sum(fdp_bound.eps_lower_bound(m=400, guesses=400, correct=int(v), tau=0.05, delta=1e-5) > eps_true
                   for v in right)
    assert over_mu <= 20 and over_eps <= 20, (over_mu, over_eps)


def test_fdp_bound_grows_with_the_right_guesses_and_gdp_reads_higher_than_eps_delta():
    lbs = [fdp_bound.mu_lower_bound(m=500, guesses=500, correct=v, tau=0.05) for v in (260, 300, 350, 400, 500)]
    assert lbs == sorted(lbs) and lbs[0] == 0.0 and lbs[-1] > 1.5
    # the same 67 of 67 the MNIST exclusive-support audit gets: 3.08 against (eps, delta); mu >= 1.57 for mu-GDP
    mu = fdp_bound.mu_lower_bound(m=67, guesses=67, correct=67, tau=0.05)
    assert mu == pytest.approx(1.567, abs=0.01)
    assert fdp_bound.gdp_epsilon(mu, 1e-5) > 7.0 > fdp_bound.eps_lower_bound(m=67, guesses=67, correct=67, tau=0.05,
                                                                            delta=1e-5)
