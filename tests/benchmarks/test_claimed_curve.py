"""The claimed-curve test on independent trials (benchmarks/audits/claimed_curve.py) and the claimed trade-off curve
(methods/accounting/trade_off.py): the curve against the exact Gaussian one; the test against a second, independent
implementation written here (scipy's adaptive quadrature of the p-value, Brent's method over mu in place of the
bisection over the noise scale); its
level on the claimed mechanism over 200 seeds; its power where the mechanism has less noise, which a threshold fixed
on the score would lose."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import ndtr, ndtri

from inputdp.benchmarks.audits.canary_gradients import simulate_scores
from inputdp.benchmarks.audits.claimed_curve import (
    QUADRATURE,
    CurveFamily,
    choose_rates,
    claimed_family,
    curve_test,
    rank_of,
)
from inputdp.methods.accounting.accountants import GaussianSteps, accountant
from inputdp.methods.accounting.events import Release
from inputdp.methods.accounting.one_release import gaussian_release_epsilon
from inputdp.methods.accounting.trade_off import gaussian_curve

DELTA = 1e-5
ALPHAS = np.concatenate([np.geomspace(1e-6, 0.5, 60), np.linspace(0.5, 1.0, 30)])


def gdp_family(mu: float) -> CurveFamily:
    """The claim mu-GDP (one Gaussian release of noise 1/mu): at scale s the noise is s/mu."""
    return CurveFamily(lambda s: gaussian_curve(mu / s), lambda s: gaussian_release_epsilon(s / mu, DELTA), "gdp")


def test_the_curve_of_a_profile_lies_at_or_below_the_exact_gaussian_curve():
    """One Gaussian of noise 2 read under replace_input (sensitivity 2: mu = 1) through dp_accounting's PLD profile:
    never above Phi(Phi^-1(1 - a) - 1), and within the grid's error of it."""
    curve = Release(dp_accounting.GaussianDpEvent(2.0), "replace_input").trade_off()
    assert curve.gdp_mu is None and "PLD" in curve.source
    exact = ndtr(ndtri(1 - ALPHAS) - 1.0)
    got = curve(ALPHAS)
    assert np.all(got <= exact + 1e-12)
    assert np.max(exact - got) < 5e-3


def test_the_envelope_reads_the_supremum_over_every_line():
    """The curve is read from the upper envelope of its lines; the brute force (every epsilon's two lines and 0, the
    maximum taken at each rate) gives the same values, at rates from 0 to 1."""
    curve = GaussianSteps(256 / 60000, 2340, "add_remove").at(1.0522).trade_off()
    a = np.concatenate([[0.0, 1e-12, 1.0], np.geomspace(1e-8, 1.0, 3000), np.random.default_rng(0).random(2000)])
    e, d = curve.epsilons, curve.deltas
    brute = np.maximum(np.maximum(1 - d - np.exp(e) * a[:, None], np.exp(-e) * (1 - d - a[:, None])).max(axis=1), 0)
    np.testing.assert_allclose(curve(a), brute, rtol=0, atol=1e-12)


def test_unsampled_gaussians_under_add_remove_have_the_exact_composed_curve():
    curve = Release(dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2.0),
                                                   dp_accounting.GaussianDpEvent(3.0)]), "add_remove").trade_off()
    assert curve.gdp_mu == pytest.approx(math.sqrt(1 / 4 + 1 / 9))


def test_the_subsampled_gaussian_s_curve_is_the_mechanism_s():
    """mnist-cpu's DP-SGD at eps 1 under replace_input is within the grid's error of mu-GDP with mu = 0.2678
    (shared/REFERENCE.md's check), and the curve rises with the noise (what the certification's bisection needs)."""
    family = claimed_family(GaussianSteps(256 / 60000, 2340, "replace_input"), accountant("pld"), 1.5660, DELTA)
    got = family.curve_at(1.0)(ALPHAS)
    assert np.max(np.abs(got - ndtr(ndtri(1 - ALPHAS) - 0.2678))) < 2e-3
    assert np.all(family.curve_at(0.8)(ALPHAS) <= got + 1e-12) and family.epsilon_at(0.8) > family.epsilon_at(1.0)


def second_implementation(s_in, s_out, rate, mu_claim, level=0.05):
    """The test written again, independently: the threshold by np.partition; the p-value as an integral over the
    threshold's rate by scipy's adaptive quadrature of the Beta density (not equal-probability bins); the curve of
    mu-GDP by its formula; the certified mu where the p-value crosses the level, by Brent's method."""
    n_in, n_out = len(s_in), len(s_out)
    k = min(max(math.ceil(rate * n_out - 1e-9), 1), n_out)
    t = np.partition(s_out, n_out - k)[n_out - k]
    fn = int(np.sum(s_in < t))
    law = stats.beta(k, n_out - k + 1)
    low, high = law.ppf(1e-12), law.ppf(1 - 1e-12)

    def p(mu):
        return integrate.quad(lambda u: stats.binom.cdf(fn, n_in, ndtr(ndtri(1 - u) - mu)) * law.pdf(u), low, high,
                              points=[law.mean()], limit=200, epsabs=1e-10)[0]

    # p falls as mu falls (a higher curve); the largest excluded mu is where it crosses the level
    certified = optimize.brentq(lambda mu: p(mu) - level, 1e-6, 5.0, xtol=1e-5) if p(1e-6) <= level <= p(5.0) else 0.0
    return p(mu_claim) <= level, p(mu_claim), fn, certified


@pytest.mark.parametrize("mu_true", [0.5, 1.0, 1.6])
def test_a_second_implementation_gives_the_same_p_value_verdict_and_certified_mu(mu_true):
    """Gaussian scores (the LR of one Gaussian release is linear in it), the claim 1.0-GDP: the false negatives agree
    exactly, the p-value from above within the quadrature's 1 / QUADRATURE, the verdict exactly, the certified mu (the
    family's 1 / s*) to the bisection's tolerance."""
    rng = np.random.default_rng(int(mu_true * 10))
    s_in, s_out = rng.normal(mu_true, 1.0, 9000), rng.normal(0.0, 1.0, 11000)
    got = curve_test(s_in, s_out, (0.3,), gdp_family(1.0), beta=0.05)
    refuted, p, fn, mu_excluded = second_implementation(s_in, s_out, 0.3, 1.0)
    assert got.false_negatives == (fn,)
    assert p - 1e-9 <= got.p_values[0] <= p + 1.0 / QUADRATURE
    assert got.refuted == refuted == (mu_true > 1.0)
    assert got.noise_ratio == pytest.approx(mu_excluded, abs=1e-3)
    assert got.certified_epsilon == pytest.approx(gaussian_release_epsilon(got.excluded_scale, DELTA))


def test_the_level_holds_on_the_claimed_mechanism_and_the_test_has_power_against_less_noise():
    """200 seeds of the claimed mechanism (the claim 0.5-GDP, 4,000 trials): refuted on at most the binomial count
    beta allows (the Bonferroni bounds make it rarer still); twice the mu refuted on nearly every seed."""
    family, rates = gdp_family(0.5), (0.3,)
    refuted = {0.5: 0, 1.0: 0}
    for seed in range(200):
        rng = np.random.default_rng(seed)
        for mu in refuted:
            refuted[mu] += curve_test(rng.normal(mu, 1.0, 2000), rng.normal(0.0, 1.0, 2000), rates, family,
                                      certify=False).refuted
    assert refuted[0.5] <= stats.binom.ppf(0.99, 200, 0.05)
    assert refuted[1.0] >= 190


def test_a_quantile_threshold_keeps_the_power_a_fixed_score_threshold_loses():
    """The ideal gradient-canary game under add/remove at half the claimed sigma, scored at the claim's sigma: every
    score falls below a threshold the claimed mechanism suggests (all false negatives, no power), while the excluded
    canaries' quantile at the same rate refutes the claim."""
    q, steps, sigma, n = 0.01, 200, 0.97, 4000
    family = claimed_family(GaussianSteps(q, steps, "add_remove"), accountant("pld"), sigma, DELTA)
    kw = {"sampling_rate": q, "steps": steps, "score_sigma": sigma, "trials": n, "replaced": False}
    claimed_out = simulate_scores(sigma=sigma, sign=0.0, seed=1, **kw)
    fixed = float(np.quantile(claimed_out, 1 - 0.2))
    s_in = simulate_scores(sigma=sigma / 2, sign=1.0, seed=2, **kw)
    s_out = simulate_scores(sigma=sigma / 2, sign=0.0, seed=3, **kw)
    assert np.all(s_in < fixed) and np.all(s_out < fixed)  # no guess "in" at all: nothing to learn
    assert curve_test(s_in, s_out, (0.2,), family, certify=False).refuted


@pytest.mark.slow  # about 5 s on 2 cores
def test_the_rates_are_chosen_from_the_claim_alone_and_ties_are_broken_at_random():
    """The rate is where the claimed mechanism's own test certifies the most: for 1-GDP at 20,000 trials a side
    between 0.05 and 0.8 (not at the extremes); scores that all tie are ordered by an independent uniform, so the
    threshold keeps its exact rank among the excluded canaries and the guesses are a coin (nothing refuted)."""
    rng = np.random.default_rng(0)
    (rate,) = choose_rates(rng.normal(1.0, 1.0, 50000), rng.normal(0.0, 1.0, 50000), in_trials=20000,
                           out_trials=20000, family=gdp_family(1.0))
    assert 0.05 < rate < 0.8
    assert rank_of(0.3, 1000) == 300 and rank_of(1e-9, 1000) == 1
    tied = curve_test(np.ones(1000), np.ones(1000), (0.1,), gdp_family(1.0))
    assert tied.ranks == (100,) and 800 < tied.false_negatives[0] < 1000 and not tied.refuted


def test_refusals():
    with pytest.raises(ValueError, match="at least one rate"):
        curve_test(np.ones(3), np.zeros(3), (), gdp_family(1.0))
    with pytest.raises(ValueError, match="both worlds"):
        curve_test(np.ones(3), np.zeros(0), (0.5,), gdp_family(1.0))
