"""Audits at the mechanism: each private method's own release, tight at its calibrated noise and refuted at half of
it; the statistics checked against independent computations (scipy's exact binomial interval, dp_accounting's
Gaussian PLD); the CLI's refusals before any store; the leaderboard's verdict from a real store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from inputdp.benchmarks.audits import mechanism as ma
from inputdp.benchmarks.cli import main
from inputdp.benchmarks.resolve import check_feasible
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

SPEC = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=256 / 60000, steps=2000)


def test_clopper_pearson_upper_is_scipys_exact_interval():
    for k, n, alpha in ((0, 1000, 0.01), (37, 5000, 0.0025), (999, 1000, 0.05)):
        upper = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact").high
        assert ma.clopper_pearson_upper(k, n, alpha) == pytest.approx(upper, rel=1e-9)


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.0])
def test_gdp_epsilon_is_dp_accountings_gaussian_mechanism(mu):
    from dp_accounting.pld import privacy_loss_distribution as pld

    delta = 1e-5
    gaussian = pld.from_gaussian_mechanism(standard_deviation=1.0 / mu, sensitivity=1.0,
                                           value_discretization_interval=1e-4)
    assert ma.gdp_epsilon(mu, delta) == pytest.approx(gaussian.get_epsilon_for_delta(delta), abs=2e-3)


def test_the_bound_covers_the_truth_and_comes_close_to_it():
    """Gaussian scores of known mu: mu_lb below mu in every trial of 20 (confidence 0.95 each), and within 6%."""
    rng = np.random.default_rng(0)
    grid = np.asarray(ma.THRESHOLDS)
    got = []
    for _ in range(20):
        b = ma.bounds(rng.normal(1.0, 1.0, 200_000), rng.normal(0.0, 1.0, 200_000), grid, delta=1e-5)
        got.append(b.mu_lb)
    assert max(got) < 1.0 and min(got) > 0.94


def test_the_audited_methods_are_those_with_release_trials():
    assert set(ma.audited_methods()) == {"dpsgd", "dp_least_squares", "feature_perturbation", "pate"}


def test_scores_that_do_not_tell_the_worlds_apart_give_zero():
    rng = np.random.default_rng(1)
    b = ma.bounds(rng.normal(0, 1, 50_000), rng.normal(0, 1, 50_000), np.asarray(ma.THRESHOLDS), delta=1e-5)
    assert b.mu_lb == 0.0 and b.epsilon_free == 0.0


@pytest.mark.parametrize("method,options", [
    ("dpsgd", {}), ("dpsgd", {"adjacency": "replace_input"}), ("dpsgd", {"grad_sample_mode": "bk"}),
    ("dpsgd", {"grad_sample_mode": "functorch"}), ("dp_least_squares", {}),
    ("dp_least_squares", {"adjacency": "add_remove"}), ("feature_perturbation", {}), ("pate", {}),
])
def test_each_implementation_is_tight_at_its_noise_and_refuted_at_half_of_it(method, options):
    tight = ma.audit_mechanism(method, SPEC, options, trials=50_000, seed=3)
    for r in tight:
        assert not r.refuted, r.row()
        assert r.tightness >= ma.TIGHT_FRACTION and r.verdict.startswith("tight"), r.row()
        assert r.epsilon_free <= r.epsilon_claim  # the family-free bound: valid for any mechanism, so below too
    halved = ma.audit_mechanism(method, SPEC, options, trials=50_000, seed=4, noise_scale=0.5)
    for r in halved:
        assert r.refuted and r.verdict == "refuted", r.row()
        assert r.mu_lb > 1.4 * r.mu_claim  # half the noise: about twice the claim's mu (1.76 x for dp_least_squares)


def test_dpsgd_with_a_clipping_bug_is_refuted(monkeypatch):
    """The audit reads the step's release itself: per-example gradients left unclipped (a bug the claim cannot
    see) move each canary's column by more than C, and the audit says so."""
    from opacus.optimizers import optimizer as opt

    monkeypatch.setattr(opt.DPOptimizer, "clip_and_accumulate", _sum_unclipped)
    (r,) = ma.audit_mechanism("dpsgd", SPEC, {}, trials=20_000)
    assert r.refuted


def _sum_unclipped(self):
    for p in self.params:
        grad_sample = self._get_flat_grad_sample(p)
        g = grad_sample.sum(dim=0)
        p.summed_grad = g if p.summed_grad is None else p.summed_grad + g


def test_dp_least_squares_worst_pair_is_below_its_claimed_sensitivity():
    """Both sensitivities of (X^T X, X^T Y) are not reached by one pair: the worst angle's mu is below the claim's
    (the claim is conservative, the audit shows by how much)."""
    from inputdp.methods.dp_least_squares import worst_pair

    c, mu = worst_pair(math.sqrt(2), math.sqrt(2), math.sqrt(2), 2.0, 1.0)
    assert -0.3 < c < 0.0 and 0.85 < mu < 0.9  # at sigma 1: claimed mu 1


def test_cli_refuses_bad_arguments_before_any_store(tmp_path, capsys):
    store = tmp_path / "m.db"
    uri = f"sqlite:///{store}"
    cases = [
        (["--method", "dirichlet_softmax"], "has no mechanism audit"),
        (["--method", "dpsgd", "--trials", "10"], "--trials 10 is not allowed"),
        (["--method", "dpsgd", "--noise-scales", "0"], "--noise-scale 0.0 is not allowed"),
        (["--method", "dpsgd", "--canaries", "100"], "--canaries is not allowed with --mechanism"),
        (["--method", "dpsgd", "--epsilons", "1,x"], "--epsilons='1,x' is not allowed"),
        (["--method", "dpsgd", "--option", "max_grad_norm=0"], "max_grad_norm"),
    ]
    for extra, message in cases:
        with pytest.raises((ConfigError, SystemExit)) as err:
            rc = main(["audit", "--mechanism", "--dataset", "mnist", "--preset", "cpu", "--tracking-uri", uri, *extra])
            raise SystemExit(rc)
        text = str(err.value) + capsys.readouterr().err
        assert message in text, (extra, text)
        assert not store.exists()


def test_cli_writes_the_table_and_the_leaderboard_says_tight(tmp_path, capsys):
    """A real store: one dpsgd smoke run and its mechanism audit at the same (epsilon, delta, q, T, relation); the
    leaderboard's verdict for the row is "tight to X at the mechanism", the halved run kept apart."""
    from inputdp.benchmarks.sweep import Overrides, expand, run_sweep
    from inputdp.core.config import PerfFlags
    from inputdp.reports.leaderboard import leaderboard, load_runs, tidy

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    configs = expand(methods=["dpsgd"], dataset="synthetic", preset="smoke", epsilons=[2], seeds=[0],
                     overrides=Overrides(epochs=1))
    run_sweep(check_feasible(configs), tracking_uri=uri, perf=PerfFlags(device="cpu", progress=False))
    rc = main(["audit", "--mechanism", "--method", "dpsgd", "--dataset", "synthetic", "--preset", "smoke",
               "--epsilons", "2", "--epochs", "1", "--noise-scales", "1,0.5", "--trials", "40000", "--tracking-uri", uri,
               "--out", str(tmp_path / "out")])
    assert rc == 0  # the halved run is refuted, as it must be; the calibrated one is not
    printed = capsys.readouterr().out
    assert "-> refuted" in printed and "-> tight to" in printed
    table = (tmp_path / "out" / "mechanism_audits.md").read_text()
    assert table.count("\n") == 4 and "| refuted |" in table
    assert "tight x1" in (tmp_path / "out" / "mechanism_summary.md").read_text()
    train, audits = tidy(load_runs(uri))
    assert len(train) == 1 and len(audits) == 2
    board = leaderboard(train, audits)
    (row,) = board.to_dict("records")
    assert row["verdict"].startswith("tight to ") and "at the mechanism (one step" in row["verdict"]
    assert row["mechanism audit"].startswith("tight to ")


def test_append_keeps_the_rows_not_measured_again(tmp_path):
    import pandas as pd

    def rows(method: str, seeds, tightness: float):
        return [{"dataset": "mnist", "preset": "cpu", "method": method, "options": "", "release": "r",
                 "spec_epsilon": 1.0, "run_epsilon": 1.0, "delta": 1e-5, "noise_scale": 1.0,
                 "trials_per_world": 1000, "seed": s, "mu_claim": 1.0, "mu_lb": tightness, "epsilon_claim": 4.0,
                 "epsilon_empirical": 4.0 * tightness, "epsilon_free": 1.0, "tightness": tightness,
                 "verdict": f"tight to {tightness:.2f}"} for s in seeds]

    ma.write_table(rows("a", [0, 1], 0.9) + rows("b", [0], 0.8), str(tmp_path))
    ma.write_table(rows("b", [0], 0.95), str(tmp_path), append=True)
    df = pd.read_csv(tmp_path / "mechanism_audits.csv")
    assert len(df) == 3 and sorted(df[df["method"] == "b"]["tightness"]) == [0.95]
    assert "0.950 (0.950-0.950)" in (tmp_path / "mechanism_summary.md").read_text()
