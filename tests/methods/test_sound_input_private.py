"""The sound input-private methods (dp_least_squares, feature_perturbation): their sensitivities against the
worst cases, their exact composition against dp_accounting, their claims, runs on the generated set, and their
refusals before any store opens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import resolve
from inputdp.core.claims import ADD_REMOVE, REPLACE_INPUT
from inputdp.core.config import PrivacySpec
from inputdp.methods.accounting.one_release import (
    composed_sigma,
    gaussian_release_epsilon,
    gaussian_release_sigma,
)
from inputdp.methods.dp_least_squares import DPLeastSquares, sensitivities
from inputdp.methods.feature_perturbation import FeaturePerturbation

from ..benchmarks.test_hostile_input import _assert_one_line, _call
from ..helpers import smoke_config

SPEC = PrivacySpec(epsilon=2.0, delta=1e-5, sampling_rate=0.01, steps=100)


def _upper(m: torch.Tensor) -> torch.Tensor:
    return m[torch.triu_indices(m.shape[0], m.shape[1], 0).unbind()]


@pytest.mark.parametrize("relation", [REPLACE_INPUT, ADD_REMOVE])
def test_the_statistics_sensitivities_hold_and_are_reached(relation):
    """Random pairs of rows of norm <= C never move (upper A, B) by more than the stated bounds, and the worst pairs
    (orthogonal rows of norm C for A, antipodal for B; one row and none under add/remove) reach them."""
    c, d, k = 0.7, 6, 3
    g = torch.Generator().manual_seed(0)
    bound_a, bound_b = sensitivities(c, relation)
    e_y = torch.nn.functional.one_hot(torch.tensor(1), k).double()
    worst_a = worst_b = 0.0
    for _ in range(3000):
        x = torch.randn(d, generator=g, dtype=torch.float64)
        x = x * c * float(torch.rand(1, generator=g)) ** 0.2 / x.norm()
        other = torch.randn(d, generator=g, dtype=torch.float64)
        other = other * c * float(torch.rand(1, generator=g)) ** 0.2 / other.norm()
        if relation == ADD_REMOVE:
            other = torch.zeros(d, dtype=torch.float64)
        da = _upper(torch.outer(x, x) - torch.outer(other, other)).norm()
        db = (torch.outer(x, e_y) - torch.outer(other, e_y)).norm()
        worst_a, worst_b = max(worst_a, float(da)), max(worst_b, float(db))
    assert worst_a <= bound_a + 1e-12 and worst_b <= bound_b + 1e-12
    u = torch.zeros(d, dtype=torch.float64)
    u[0] = c
    v = torch.zeros(d, dtype=torch.float64)
    v[1] = c
    if relation == REPLACE_INPUT:
        assert float((torch.outer(u, u) - torch.outer(v, v)).norm()) == pytest.approx(bound_a)
        assert float((u - (-u)).norm()) == pytest.approx(bound_b)
    else:
        assert float(torch.outer(u, u).norm()) == pytest.approx(bound_a) and float(u.norm()) == pytest.approx(bound_b)


@pytest.mark.parametrize("split", [0.5, 0.8])
@pytest.mark.parametrize("epsilon", [0.5, 2.93])
def test_two_releases_compose_exactly_as_dp_accounting_composes_them(split, epsilon):
    """The calibrated noise of (A, B) split into two Gaussians: dp_accounting's PLD of the two mechanisms composed
    (its own code, a fine grid) gives the same epsilon as the one Gaussian they compose to."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    sigma = gaussian_release_sigma(epsilon, 1e-5)
    s_a, s_b = sigma / math.sqrt(split), sigma / math.sqrt(1 - split)
    assert composed_sigma((s_a, s_b)) == pytest.approx(sigma, rel=1e-12)
    both = pld.from_gaussian_mechanism(s_a, value_discretization_interval=1e-4).compose(
        pld.from_gaussian_mechanism(s_b, value_discretization_interval=1e-4))
    assert both.get_epsilon_for_delta(1e-5) == pytest.approx(epsilon, abs=2e-3)
    assert gaussian_release_epsilon(sigma, 1e-5) <= epsilon


def test_the_claims_are_guarantees_for_the_model_under_their_relation():
    for cls, relation in ((DPLeastSquares, REPLACE_INPUT), (DPLeastSquares, ADD_REMOVE), (FeaturePerturbation,
                                                                                            REPLACE_INPUT)):
        m = cls(adjacency=relation)
        cal = m.calibrate(SPEC)
        claim = m.claim()
        assert claim.guarantee and cal.epsilon <= SPEC.epsilon and "post-processing" in claim.scope
        assert claim.protects == ("inputs" if relation == REPLACE_INPUT else "inputs and labels")
        assert m.epsilon_spent(1) == cal.epsilon and m.epsilon_spent(0) == 0.0
    # add/remove costs less noise than one input replaced (sensitivities C^2, C against sqrt(2) C^2, 2C)
    assert sensitivities(1.0, ADD_REMOVE) < sensitivities(1.0, REPLACE_INPUT)


@pytest.mark.parametrize("method", ["dp_least_squares", "feature_perturbation"])
def test_a_smoke_run_learns_more_with_more_budget_and_spends_its_target(method):
    low = run(resolve(smoke_config(method, epsilon=0.5)))
    high = run(resolve(smoke_config(method, epsilon=50.0)))
    assert low.metrics["final_epsilon_spent"] <= 0.5 and high.metrics["final_epsilon_spent"] <= 50.0
    assert high.metrics["final_test_accuracy"] > max(0.3, low.metrics["final_test_accuracy"])


def test_the_noise_is_what_the_calibration_says():
    """The noise added to A's upper triangle and to B has the calibrated standard deviations (zero data)."""
    m = DPLeastSquares()
    cal = m.calibrate(SPEC)
    x = torch.zeros((10, 40), dtype=torch.float64)
    a, b = m.noisy_statistics(x, torch.zeros(10, dtype=torch.long), 5, torch.Generator().manual_seed(1))
    d_a, d_b = sensitivities(1.0, REPLACE_INPUT)
    s_a, s_b = m.release_family(m.spec).multipliers(cal.release_noise)
    assert torch.equal(a, a.T)
    assert float(_upper(a).std()) == pytest.approx(s_a * d_a, rel=0.05)
    assert float(b.std()) == pytest.approx(s_b * d_b, rel=0.1)
    f = FeaturePerturbation()
    f.calibrate(SPEC)
    noisy = f.noisy_features(torch.zeros((2000, 50), dtype=torch.float64), torch.Generator().manual_seed(2))
    assert float(noisy.std()) == pytest.approx(f.calibration.noise["noise_multiplier"] * 2.0, rel=0.02)
    assert np.isfinite(noisy.numpy()).all()


def test_the_psd_projection_is_the_nearest_psd_matrix_and_post_processing():
    """Higham's projection: positive semi-definite, the identity on a PSD matrix, and no PSD matrix tried is nearer
    in Frobenius norm; with it the solve needs no large ridge (the noise is the release's; the solve reads only A~, B~)."""
    from inputdp.methods.dp_least_squares import psd_projection

    g = torch.Generator().manual_seed(3)
    m = torch.randn(30, 30, generator=g, dtype=torch.float64)
    a = (m + m.T) / 2
    p = psd_projection(a)
    assert torch.allclose(p, p.T) and float(torch.linalg.eigvalsh(p).min()) > -1e-10
    x = torch.randn(50, 30, generator=g, dtype=torch.float64)
    assert torch.allclose(psd_projection(x.T @ x), x.T @ x, atol=1e-9)
    best = float(torch.linalg.norm(a - p))
    for _ in range(200):  # random PSD candidates, some near p: none is nearer to a
        c = torch.randn(30, 30, generator=g, dtype=torch.float64) * 0.05
        q = psd_projection(p + (c + c.T) / 2)
        assert float(torch.linalg.norm(a - q)) >= best - 1e-9
    plain, projected = DPLeastSquares(psd=False, ridge=0.1), DPLeastSquares()
    assert projected.options["psd"] is True and projected.options["ridge"] == 0.1
    plain.calibrate(SPEC), projected.calibrate(SPEC)
    # the estimator is not part of the release: the same noise and epsilon
    assert (plain.calibration.noise, plain.calibration.epsilon, plain.calibration.details) == (
        projected.calibration.noise, projected.calibration.epsilon, projected.calibration.details)


RUN_NEW = ["run", "--dataset", "synthetic", "--preset", "smoke", "--no-progress", "--methods"]


@pytest.mark.parametrize("argv,needle", [
    ([*RUN_NEW, "feature_perturbation", "--option", "feature_perturbation.adjacency=add_remove"],
     "adjacency='add_remove' is not allowed for feature_perturbation"),
    ([*RUN_NEW, "dp_least_squares", "--option", "dp_least_squares.adjacency=swap"],
     "adjacency='swap' is not allowed for dp_least_squares"),
    ([*RUN_NEW, "dp_least_squares", "--option", "dp_least_squares.clip=0"], "clip=0 is not allowed"),
    ([*RUN_NEW, "feature_perturbation", "--option", "feature_perturbation.clip=-1"], "clip=-1 is not allowed"),
    ([*RUN_NEW, "dp_least_squares", "--option", "dp_least_squares.split=1"], "split=1 is not allowed"),
    ([*RUN_NEW, "dp_least_squares", "--option", "dp_least_squares.psd=maybe"], "psd='maybe' is not allowed"),
])
def test_bad_options_are_refused_in_one_line_before_any_store(argv, needle, tmp_path):
    store = tmp_path / "m.db"
    code, out, err, seconds = _call([*argv, "--tracking-uri", f"sqlite:///{store}"])
    _assert_one_line(code, out, err, needle)
    assert not store.exists() and seconds < 6


def test_a_feature_map_that_does_not_fit_the_images_is_refused_before_any_store(tmp_path):
    """An npz of 8x8 images with a model that needs 16x16 ones: refused in one line, no store."""
    g = np.random.default_rng(0)
    np.savez(tmp_path / "d.npz", x_train=g.integers(0, 255, (64, 8, 8), dtype=np.uint8), y_train=np.arange(64) % 2,
             x_test=g.integers(0, 255, (16, 8, 8), dtype=np.uint8), y_test=np.arange(16) % 2)
    store = tmp_path / "m.db"
    code, out, err, _ = _call(["run", "--methods", "dp_least_squares", "--dataset", f"npz:{tmp_path / 'd.npz'}",
                               "--preset", "smoke", "--model", "tanh_cnn", "--no-progress",
                               "--tracking-uri", f"sqlite:///{store}"])
    _assert_one_line(code, out, err, "model 'tanh_cnn' is not allowed for 8x8 images")
    assert not store.exists()


def test_zero_out_for_the_fixed_feature_methods():
    """dp_least_squares under zero-out: the null example's row is 0, so its sensitivities are add/remove's and its
    claim hides input and label; feature_perturbation releases each example's label beside its noisy features, so
    it cannot hide the label and refuses zero-out in one line."""
    import pytest as _pytest

    from inputdp.core.config import PrivacySpec
    from inputdp.core.errors import ConfigError
    from inputdp.methods.dp_least_squares import DPLeastSquares, sensitivities
    from inputdp.methods.feature_perturbation import FeaturePerturbation

    assert sensitivities(0.5, "zero_out") == sensitivities(0.5, "add_remove") == (0.25, 0.5)
    m = DPLeastSquares(adjacency="zero_out")
    m.calibrate(PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=10))
    claim = m.claim()
    assert claim.relation.key == "zero_out" and claim.protects == "inputs and labels"
    with _pytest.raises(ConfigError, match="adjacency='zero_out' is not allowed for feature_perturbation"):
        FeaturePerturbation(adjacency="zero_out")
