"""The per-example curve (THEORY.md, "Per-example releases under Poisson sampling") against independent computations:
closed forms at q = 1, the exact binomial mixture of Gaussian-DP curves, quadrature, a Monte Carlo with a
confidence bound, a second discretisation written here without dp_accounting, a search over pairs of softmax
vectors, and the refusals."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods.accounting import per_example as pe
from inputdp.methods.accounting.rdp import calibrate_r
from inputdp.methods.dirichlet_softmax import DirichletSoftmax
from inputdp.methods.gaussian_penultimate import GaussianPenultimate

ALPHA = 3.0
CPU = {"q": 256 / 60000, "steps": 2340}  # the cpu preset's (q, T)
PAPER_R_EPS1 = 0.2846  # the paper's accountant's r for epsilon 1 there


def _gaussian_dp_delta(eps: float, mu: np.ndarray) -> np.ndarray:
    """delta(eps) of mu-Gaussian DP (Dong, Roth & Su 2022): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    return special.ndtr(-eps / mu + mu / 2) - np.exp(eps + special.log_ndtr(-eps / mu - mu / 2))


def _exact_gaussian_mixture_delta(eps: float, mu: float, q: float, steps: int) -> float:
    """K ~ Binomial(T, q) releases of N(mu, 1) against N(0, 1), composed exactly: delta is linear in the loss
    law, so it is the Binomial average of the mu sqrt(K)-GDP deltas."""
    k = np.arange(1, min(steps, int(q * steps + 60 * math.sqrt(q * steps + 1) + 60)) + 1)
    return float(np.sum(stats.binom.pmf(k, steps, q) * _gaussian_dp_delta(eps, mu * np.sqrt(k))))


def _exact_gaussian_mixture_epsilon(mu: float, q: float, steps: int, delta: float) -> float:
    return optimize.brentq(lambda e: _exact_gaussian_mixture_delta(e, mu, q, steps) - delta, 1e-6, 1e3, xtol=1e-10)


# --- closed forms -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("r", [0.1, 0.5, 2.0])
@pytest.mark.parametrize("eps", [0.05, 0.5, 2.0])
def test_one_dirichlet_release_at_q1_is_the_closed_form(r, eps):
    """q = 1, T = 1: delta(eps) = P[L > eps] - e^eps P'[L > eps] with L = r logit(B), B ~ Beta(alpha + r, alpha)
    under p and Beta(alpha, alpha + r) under p' (the corner pair)."""
    t = special.expit(eps / r)
    exact = stats.beta(ALPHA + r, ALPHA).sf(t) - math.exp(eps) * stats.beta(ALPHA, ALPHA + r).sf(t)
    got = pe.per_example_delta(pe.dirichlet_corner(r, ALPHA), q=1.0, steps=1, epsilon=eps)
    assert got.lower <= exact + 1e-12 and exact <= got.upper + 1e-12
    assert got.upper - got.lower < 2e-3


@pytest.mark.parametrize("steps", [1, 5, 40])
def test_gaussian_releases_at_q1_are_gaussian_dp(steps):
    """q = 1: T releases of a mu-Gaussian compose to mu sqrt(T)-GDP exactly."""
    mu = 2 / 3.0
    exact = optimize.brentq(lambda e: _gaussian_dp_delta(e, mu * math.sqrt(steps)) - 1e-5, 1e-6, 100)
    got = pe.per_example_epsilon(pe.gaussian_pair(mu), q=1.0, steps=steps, delta=1e-5)
    assert got.lower <= exact <= got.upper and got.upper - got.lower < 0.02 * exact


@pytest.mark.parametrize("sigma,q,steps", [(1.1564, 256 / 60000, 2340), (5.0, 0.05, 200), (26.6, 256 / 60000, 2340)])
def test_gaussian_bracket_holds_the_exact_binomial_mixture(sigma, q, steps):
    """The PLD of the Poisson mixture against the exact Binomial average of GDP curves (no discretisation)."""
    mu = 2 / sigma
    exact = _exact_gaussian_mixture_epsilon(mu, q, steps, 1e-5)
    got = pe.per_example_epsilon(pe.gaussian_pair(mu), q=q, steps=steps, delta=1e-5)
    assert got.lower <= exact <= got.upper, (got, exact)
    assert got.upper - got.lower < 0.02 * max(1.0, exact)


def test_the_cpu_presets_gaussian_sigma_spends_about_54():
    """The issue's figure: DP-SGD's sigma for epsilon 1 (1.1564) on per-example releases, sensitivity 2C."""
    got = pe.gaussian_vectors_epsilon(noise_multiplier=1.1564, sensitivity=2.0, delta=1e-5, **CPU)
    assert 53.6 < got.lower <= got.upper < 53.8
    assert _exact_gaussian_mixture_epsilon(2 / 1.1564, CPU["q"], CPU["steps"], 1e-5) == pytest.approx(53.68, abs=0.02)
    with_c = pe.gaussian_vectors_epsilon(noise_multiplier=1.1564, sensitivity=1.0, delta=1e-5, **CPU)
    assert 19.0 < with_c.lower <= with_c.upper < 19.1  # even with sensitivity C (add/remove's)


def test_mixture_rdp_closed_form_and_quadrature():
    """rho(lambda) = log(1 + q (exp((lambda-1) D) - 1)) / (lambda-1): at q = 1 the single release's divergence; at
    q < 1 the Rényi divergence of the two mixtures, integrated numerically from the Beta densities."""
    r, orders = 0.3, np.array([1.5, 2.0, 4.0, 8.0])
    single = pe.dirichlet_corner(r, ALPHA)
    d = single.renyi(orders)
    assert np.allclose(pe.mixture_rdp(d, orders, 1.0), d)
    p, pp = stats.beta(ALPHA + r, ALPHA), stats.beta(ALPHA, ALPHA + r)
    for lam, rho in zip(orders, pe.mixture_rdp(d, orders, 0.3)):
        integral = integrate.quad(lambda y, lam=lam: p.pdf(y) ** lam * pp.pdf(y) ** (1 - lam), 0, 1, epsabs=1e-13)[0]
        assert math.log(integral) / (lam - 1) == pytest.approx(single.renyi(np.array([lam]))[0], rel=1e-7)
        assert math.log(0.7 + 0.3 * integral) / (lam - 1) == pytest.approx(rho, rel=1e-7)
    assert np.all(pe.mixture_rdp(d, orders, 0.01) >= 0.01 * d * (1 - 1e-12))  # at least q D: linear in q


def test_the_papers_single_release_bound_is_valid_but_loose():
    """The paper's e(lambda) = lambda r^2 psi1(alpha - (lambda-1) r) is at least the corner pair's exact divergence
    (valid), far above it near its pole (5.01 against 0.396 at lambda 10, r = 0.2846); with the mixture it gives
    5.66 at the cpu preset, with the exact divergence 4.44: both above the PLD's 3.92, as RDP conversions are."""
    from inputdp.methods.accounting.rdp import dirichlet_rdp, rdp_to_epsilon

    r = PAPER_R_EPS1
    orders = np.arange(2, int(1 + ALPHA / r) + 1, dtype=float)
    orders = orders[orders < 1 + ALPHA / r]
    exact, paper = pe.dirichlet_corner(r, ALPHA).renyi(orders), dirichlet_rdp(orders, r, ALPHA)
    assert np.all(paper >= exact)
    assert paper[8] == pytest.approx(5.011, abs=1e-3) and exact[8] == pytest.approx(0.3962, abs=1e-4)
    eps_paper = rdp_to_epsilon(orders, CPU["steps"] * pe.mixture_rdp(paper, orders, CPU["q"]), 1e-5)[0]
    eps_exact = rdp_to_epsilon(orders, CPU["steps"] * pe.mixture_rdp(exact, orders, CPU["q"]), 1e-5)[0]
    pld = pe.dirichlet_vectors_epsilon(r=r, alpha=ALPHA, delta=1e-5, **CPU)
    assert eps_paper == pytest.approx(5.66, abs=0.01) and eps_exact == pytest.approx(4.44, abs=0.01)
    assert pld.upper < eps_exact < eps_paper
    assert pld.upper <= pe.rdp_upper_epsilon(pe.dirichlet_corner(r, ALPHA), delta=1e-5, **CPU)


# --- the numbers, and two independent checks of them --------------------------------------------------------

def test_the_papers_r_for_epsilon_1_spends_about_3_9_on_the_vectors():
    r, eps, _ = calibrate_r(epsilon=1.0, delta=1e-5, sampling_rate=CPU["q"], steps=CPU["steps"], alpha=ALPHA)
    assert r == pytest.approx(PAPER_R_EPS1, abs=1e-4) and eps <= 1.0
    vectors = pe.dirichlet_vectors_epsilon(r=r, alpha=ALPHA, delta=1e-5, **CPU)
    assert 3.90 < vectors.lower <= 3.917 <= vectors.upper < 3.93
    d = pe.per_example_delta(pe.dirichlet_corner(PAPER_R_EPS1, ALPHA), epsilon=1.0, **CPU)
    assert 0.0575 < d.lower <= 0.0589 <= d.upper < 0.0605  # 5,900 times the claimed delta of 1e-5


def test_pld_bracket_holds_a_monte_carlo():
    """delta(1) by direct simulation: K ~ Binomial(T, q) releases, each loss r logit(B) drawn, summed; the estimate
    (400,000 trainings' worth) lies within 4 standard errors of the bracket, and the bracket within the MC's range."""
    single = pe.dirichlet_corner(PAPER_R_EPS1, ALPHA)
    d = pe.per_example_delta(single, epsilon=1.0, **CPU)
    mc, se = pe.monte_carlo_delta(single, epsilon=1.0, samples=400_000, seed=1, **CPU)
    assert d.lower - 4 * se <= mc <= d.upper + 4 * se, (d, mc, se)
    assert se < 5e-4
    g = pe.gaussian_pair(2 / 5.0)
    dg = pe.per_example_delta(g, q=0.05, steps=200, epsilon=1.0)
    mc, se = pe.monte_carlo_delta(g, q=0.05, steps=200, epsilon=1.0, samples=400_000, seed=2)
    assert dg.lower - 4 * se <= mc <= dg.upper + 4 * se, (dg, mc, se)


def _own_fft_bracket(r: float, eps: float, q: float, steps: int, h: float = 1e-3) -> tuple[float, float]:
    """A second discretisation without dp_accounting: the single loss rounded down / up to h Z from the Beta CDF,
    its K-fold convolutions by FFT, averaged over K ~ Binomial(T, q); mass beyond the truncation counts fully
    (upper) or not at all (lower)."""
    beta = stats.beta(ALPHA + r, ALPHA)
    ks = np.arange(math.floor(-15 / h), math.ceil(15 / h) + 1)  # |L| > 15 has mass below 1e-40 at r = 0.28
    cdf = beta.cdf(special.expit(ks * h / r))
    mass, tails = np.diff(cdf), cdf[0] + beta.sf(special.expit(ks[-1] * h / r))
    k_max = int(q * steps + 8 * math.sqrt(q * steps) + 8)
    weights = stats.binom.pmf(np.arange(k_max + 1), steps, q)
    out = []
    for offset in (0, 1):  # mass of ((k-1) h, k h] at (k-1) h (down) or k h (up)
        n = 1 << math.ceil(math.log2(len(mass) * k_max))
        spectrum = np.fft.rfft(mass, n)
        delta = 0.0
        for k in range(1, k_max + 1):
            dist = np.clip(np.fft.irfft(spectrum**k, n)[: (len(mass) - 1) * k + 1], 0, None)
            loss = (np.arange(dist.size) + k * (ks[0] + offset)) * h
            with np.errstate(over="ignore"):
                delta_k = float(np.sum(dist * np.clip(-np.expm1(eps - loss), 0, None)))
            delta += weights[k] * (delta_k + (1 - (1 - tails) ** k) * offset)
        out.append(delta + offset * stats.binom.sf(k_max, steps, q))
    return out[0], out[1]


@pytest.mark.slow
def test_pld_agrees_with_an_own_fft_bracket():
    low, high = _own_fft_bracket(PAPER_R_EPS1, 1.0, **CPU)
    d = pe.per_example_delta(pe.dirichlet_corner(PAPER_R_EPS1, ALPHA), epsilon=1.0, **CPU)
    assert low <= d.upper and d.lower <= high  # the two brackets overlap
    assert low <= 0.0589 <= high and high - low < 0.003


# --- the corner pair is the worst pair found -------------------------------------------------------------------------

def _dirichlet_renyi(a: np.ndarray, b: np.ndarray, lam: float) -> np.ndarray:
    """D_lambda(Dir(a) || Dir(b)) = [log B(lam a + (1-lam) b) - lam log B(a) - (1-lam) log B(b)] / (lam - 1),
    B the multivariate Beta function, rows of a and b paired (inf where lam a + (1-lam) b leaves the positives)."""
    def log_b(x):
        return special.gammaln(x).sum(-1) - special.gammaln(x.sum(-1))
    mix = lam * a + (1 - lam) * b
    out = np.full(a.shape[0], np.inf)
    ok = np.all(mix > 0, axis=-1)
    out[ok] = (log_b(mix[ok]) - lam * log_b(a[ok]) - (1 - lam) * log_b(b[ok])) / (lam - 1)
    return out


@pytest.mark.parametrize("r", [0.0843, 0.2846, 1.0])
def test_no_searched_pair_of_softmax_vectors_has_more_renyi_divergence_than_the_corners(r):
    """2,000 random pairs (uniform on the simplex, d = 10) and 1,000 near-corner pairs: at every order, the
    Dirichlet releases' exact divergence is at most the corner pair's (the limit the near-corner pairs approach)."""
    rng = np.random.default_rng(0)
    d = 10
    s, t = rng.dirichlet(np.ones(d), 2000), rng.dirichlet(np.ones(d), 2000)
    eps = 10.0 ** rng.uniform(-6, -1, (1000, 1))
    near = (1 - eps) * np.eye(d)[rng.integers(0, d, 1000)] + eps * rng.dirichlet(np.ones(d), 1000)
    far = (1 - eps) * np.eye(d)[rng.integers(0, d, 1000)] + eps * rng.dirichlet(np.ones(d), 1000)
    s, t = np.vstack([s, near]), np.vstack([t, far])
    corner = pe.dirichlet_corner(r, ALPHA)
    for lam in (1.5, 2.0, 4.0, 8.0):
        if ALPHA + (1 - lam) * r <= 0:
            continue
        worst = corner.renyi(np.array([lam]))[0]
        got = _dirichlet_renyi(r * s + ALPHA, r * t + ALPHA, lam)
        assert np.all(got[np.isfinite(got)] <= worst * (1 + 1e-9)), (lam, got.max(), worst)
        assert got.max() > 0.99 * worst  # the near-corner pairs do approach it


def test_no_searched_pair_has_a_larger_privacy_profile_than_the_corners():
    """d = 2, where the hockey-stick divergence is an integral over one variable: on a grid of pairs (t, u) of
    softmax vectors (t, 1-t), (u, 1-u), delta(eps) = int (p - e^eps p')_+ dy (Simpson's rule on 200,001 points) is at
    most the corner pair's, at every eps. A dominance at every eps of one release carries over to every composition
    (the trade-off functions are ordered)."""
    r = PAPER_R_EPS1
    corner = pe.dirichlet_corner(r, ALPHA)
    y = np.linspace(0, 1, 200_001)
    grid = np.linspace(0, 1, 9)
    dens = {t: stats.beta(ALPHA + r * t, ALPHA + r * (1 - t)).pdf(y) for t in grid}
    for eps in (0.0, 0.05, 0.2, 0.5):
        t = special.expit(eps / r)  # the corner pair's delta in closed form (the first test of this file)
        worst = stats.beta(ALPHA + r, ALPHA).sf(t) - math.exp(eps) * stats.beta(ALPHA, ALPHA + r).sf(t)
        assert worst <= pe.per_example_delta(corner, q=1.0, steps=1, epsilon=eps).upper
        got = {(t, u): integrate.simpson(np.clip(dens[t] - math.exp(eps) * dens[u], 0, None), x=y)
               for t in grid for u in grid}
        assert max(got.values()) <= worst + 1e-6, (eps, max(got.items(), key=lambda kv: kv[1]), worst)
        assert got[1.0, 0.0] == pytest.approx(worst, abs=1e-4)  # the grid's corners are the corner pair


# --- calibration ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,expected", [(1.0, 0.0843), (4.0, 0.2893)])
def test_per_example_calibration_meets_the_target_on_the_exact_curve(target, expected):
    r = pe.calibrate_dirichlet_r(epsilon=target, delta=1e-5, alpha=ALPHA, **CPU)
    assert r == pytest.approx(expected, abs=2e-4)  # the exact-curve values: 0.085 and 0.290
    got = pe.dirichlet_vectors_epsilon(r=r, alpha=ALPHA, delta=1e-5, **CPU)
    assert got.upper <= target and got.lower > 0.98 * target  # the bracket on the calibration grid
    more = pe.dirichlet_vectors_epsilon(r=r * 1.03, alpha=ALPHA, delta=1e-5, **CPU)
    assert more.lower > target  # 3% more r is already over


def test_the_curve_grows_with_r_and_falls_with_sigma():
    rs = [0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 3.0, 10.0]
    eps = [pe.per_example_epsilon(pe.dirichlet_corner(r, ALPHA), delta=1e-5, **CPU).lower for r in rs]
    assert all(a < b for a, b in zip(eps, eps[1:])), eps
    sig = [0.5, 1.0, 2.0, 8.0, 30.0]
    eps = [pe.per_example_epsilon(pe.gaussian_pair(2 / s), delta=1e-5, **CPU).lower for s in sig]
    assert all(a > b for a, b in zip(eps, eps[1:])), eps


def test_gaussian_per_example_sigma_is_the_exact_crossing():
    sigma = pe.calibrate_gaussian_sigma(epsilon=1.0, delta=1e-5, **CPU)
    exact = optimize.brentq(lambda s: _exact_gaussian_mixture_epsilon(2 / s, CPU["q"], CPU["steps"], 1e-5) - 1.0,
                            5, 100, xtol=1e-8)
    assert exact == pytest.approx(26.41, abs=0.01)
    assert exact <= sigma <= exact * 1.01  # safe, and within the grid's pessimism of the exact crossing


def test_a_release_less_likely_than_delta_has_epsilon_0_and_nothing_to_calibrate():
    assert pe.per_example_epsilon(pe.gaussian_pair(1.0), q=1e-9, steps=100, delta=1e-5) == pe.Bracket(0.0, 0.0)
    with pytest.raises(pe.NoFiniteEpsilon, match="nothing to calibrate"):
        pe.calibrate_gaussian_sigma(epsilon=1.0, delta=1e-5, q=1e-9, steps=100)


# --- refusals ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_add_remove_is_refused_in_one_line():
    """Under add/remove the count of vectors reveals a member: no finite epsilon below 1 - (1-q)^T."""
    with pytest.raises(pe.NoFiniteEpsilon, match=r"1-\(1-q\)\^T = 0.99995"):
        pe.per_example_epsilon(pe.dirichlet_corner(0.1, ALPHA), delta=1e-5, adjacency="add_remove", **CPU)
    with pytest.raises(ConfigError, match="reveals membership"):
        DirichletSoftmax(adjacency="add_remove")
    with pytest.raises(ConfigError, match="reveals membership"):
        GaussianPenultimate(adjacency="add_remove")
    with pytest.raises(ConfigError, match="add/remove theorem"):
        DirichletSoftmax(accountant="paper", adjacency="replace_input")
    DirichletSoftmax(accountant="paper", adjacency="add_remove")  # the paper's own relation is accepted
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "calibrate", "--method", "dirichlet_softmax",
                          "--epsilon", "1", "--delta", "1e-5", "--sampling-rate", "0.01", "--steps", "100",
                          "--option", "adjacency=add_remove"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "adjacency=add_remove" in out.stderr


def test_too_many_expected_releases_are_refused():
    with pytest.raises(pe.NoFiniteEpsilon, match="expected releases"):
        pe.per_example_epsilon(pe.gaussian_pair(1.0), q=0.5, steps=4000, delta=1e-5)


@pytest.mark.parametrize("method", [DirichletSoftmax, GaussianPenultimate])
def test_a_papers_accountant_beyond_the_per_example_limit_still_runs_and_says_the_bound_is_not_evaluated(method):
    """q*T = 5000 expected releases: the paper's accountant calibrates; the vectors' bound is absent, not made up."""
    accountant = "paper" if method is DirichletSoftmax else "rdp"
    m = method(accountant=accountant)
    cal = m.calibrate(PrivacySpec(epsilon=100.0, delta=1e-5, sampling_rate=0.05, steps=100_000))
    claim = m.claim()
    assert cal.details["epsilon_vectors_lower"] is None and "expected releases" in cal.details["epsilon_vectors_not_evaluated"]
    assert claim.vectors_epsilon_lb is None and "not evaluated" in claim.scope
    assert "epsilon_vectors_lb" not in claim.as_metrics()

# --- what a run and the CLI report --------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", [DirichletSoftmax, GaussianPenultimate])
def test_each_accountant_reports_the_vectors_lower_bound(method):
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=CPU["q"], steps=CPU["steps"])
    for accountant in method.accountants:
        m = method(accountant=accountant)
        cal, claim = m.calibrate(spec), m.claim()
        assert claim.guarantee is False and claim.accountant == accountant
        lower, upper = cal.details["epsilon_vectors_lower"], cal.details["epsilon_vectors_upper"]
        assert claim.vectors_epsilon_lb == lower <= upper
        assert m.epsilon_spent(spec.steps) <= 1.0 + 1e-9
        if accountant == "per_example":
            assert upper <= 1.0 and cal.epsilon <= 1.0
        else:  # the papers' accountants are refuted for the vectors at their own noise
            assert lower > 3.0 and claim.paper_epsilon == pytest.approx(1.0, abs=2e-3)  # PRV stops within 1e-4


@pytest.mark.slow
def test_bench_calibrate_table_shows_both_accountants_and_the_lower_bound():
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "calibrate", "--method", "dirichlet_softmax",
                          "--preset", "cpu", "--epsilons", "1,4", "--json"], capture_output=True, text=True, check=True)
    rows = [r for r in json.loads(out.stdout) if r["dataset"] == "mnist"]
    by = {(r["accountant"], r["epsilon"]): r for r in rows}
    assert set(by) == {("per_example", 1.0), ("per_example", 4.0), ("paper", 1.0), ("paper", 4.0)}
    assert by["paper", 1.0]["r"] == pytest.approx(0.2846, abs=1e-4)
    assert 3.90 < by["paper", 1.0]["epsilon_vectors_lower"] < 3.92
    assert 11.9 < by["paper", 4.0]["epsilon_vectors_lower"] < 12.1
    assert by["per_example", 1.0]["r"] == pytest.approx(0.0843, abs=2e-4)
    assert by["per_example", 1.0]["epsilon_vectors_upper"] <= 1.0
