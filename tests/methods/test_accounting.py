"""The accountant against independent computations: a plain mpmath loop, Opacus, numerical divergences."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln

from inputdp.methods.accounting import (
    InfeasibleTarget,
    dirichlet_epsilon,
    dirichlet_rdp,
    gaussian_rdp,
    integer_orders,
    poisson_subsampled_rdp,
    rdp_to_epsilon,
)
from inputdp.methods.accounting.rdp import calibrate_r


def zhu_wang_loop(q: float, lam: int, eps_hat) -> float:
    """The Zhu & Wang general bound, term by term in 50-digit arithmetic (no logs, no vectorisation)."""
    mpmath.mp.dps = 50
    q = mpmath.mpf(q)
    total = (1 - q) ** (lam - 1) * (lam * q - q + 1)
    total += mpmath.binomial(lam, 2) * q**2 * (1 - q) ** (lam - 2) * mpmath.e ** mpmath.mpf(eps_hat(2))
    for l in range(3, lam + 1):
        total += 3 * mpmath.binomial(lam, l) * q**l * (1 - q) ** (lam - l) * mpmath.e ** ((l - 1) * mpmath.mpf(eps_hat(l)))
    return float(mpmath.log(total) / (lam - 1))


@pytest.mark.parametrize("seed", range(6))
def test_subsampled_bound_matches_plain_loop(seed):
    rng = np.random.default_rng(seed)
    q = float(10 ** rng.uniform(-3.5, -0.5))
    alpha = float(rng.uniform(0.5, 10))
    r = float(alpha * rng.uniform(0.01, 0.3))
    orders = integer_orders(int(rng.integers(4, 40)))
    ours = poisson_subsampled_rdp(q, dirichlet_rdp(orders, r, alpha))
    for lam, value in zip(orders, ours):
        base = lambda l: dirichlet_rdp(np.array([l]), r, alpha)[0]  # noqa: E731
        if not all(np.isfinite(base(l)) for l in range(2, lam + 1)):
            assert value == math.inf
            continue
        assert value == pytest.approx(zhu_wang_loop(q, int(lam), base), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("q,sigma", [(0.001, 1.0), (0.004, 0.8), (0.01, 1.0), (0.05, 2.0), (0.2, 1.0)])
def test_poisson_bound_upper_bounds_opacus_subsampled_gaussian(q, sigma):
    from opacus.accountants.analysis.rdp import compute_rdp

    orders = integer_orders(64)
    ours = poisson_subsampled_rdp(q, gaussian_rdp(orders, sigma))
    exact = compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=orders.astype(float))
    assert np.all(ours >= exact * (1 - 1e-9))
    if q <= 0.001:
        # close where the factor-3 terms are negligible (small orders) ...
        assert np.all(ours[:9] <= exact[:9] * 1.1), (ours / exact)[:9]
        # ... and close in the epsilon a user sees after T steps
        eps_ours, _ = rdp_to_epsilon(orders, 10000 * ours, 1e-5)
        eps_exact, _ = rdp_to_epsilon(orders, 10000 * exact, 1e-5)
        assert eps_exact <= eps_ours <= 1.05 * eps_exact


def test_conversion_equals_opacus_get_privacy_spent():
    from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

    orders = integer_orders(128).astype(float)
    rdp = compute_rdp(q=0.004, noise_multiplier=1.1, steps=2500, orders=orders)
    eps, order = rdp_to_epsilon(orders, rdp, 1e-5)
    eps_o, order_o = get_privacy_spent(orders=orders, rdp=rdp, delta=1e-5)
    assert eps == pytest.approx(eps_o, rel=1e-12)
    assert order == order_o


def test_dirichlet_rdp_is_infinite_beyond_valid_orders():
    r, alpha = 0.5, 3.0  # valid for lambda < 1 + alpha / r = 7
    values = dirichlet_rdp(np.arange(2, 10), r, alpha)
    assert np.all(np.isfinite(values[:5])) and np.all(np.isinf(values[5:]))


def _beta_renyi(a, b, lam):
    """D_lambda(Beta(a) || Beta(b)) by quadrature, a and b the two concentration pairs."""
    p, q = stats.beta(*a), stats.beta(*b)
    integrand = lambda x: math.exp(lam * p.logpdf(x) + (1 - lam) * q.logpdf(x))  # noqa: E731
    val, _ = integrate.quad(integrand, 0, 1, limit=200, epsabs=0, epsrel=1e-10)
    return math.log(val) / (lam - 1)


@pytest.mark.parametrize("lam", [2, 3, 5])
@pytest.mark.parametrize("r,alpha", [(0.24, 3.0), (0.15, 1.0), (0.8, 5.0)])
def test_single_release_bound_holds_d2_quadrature(r, alpha, lam):
    assert lam < 1 + alpha / r  # every case here is a valid order
    bound = dirichlet_rdp(np.array([lam]), r, alpha)[0]
    worst = 0.0
    for s1, s2 in [(1.0, 0.0), (0.0, 1.0), (0.9, 0.1), (0.5, 0.0), (0.3, 0.8)]:
        a = (r * s1 + alpha, r * (1 - s1) + alpha)
        b = (r * s2 + alpha, r * (1 - s2) + alpha)
        d = _beta_renyi(a, b, lam)
        assert d <= bound * (1 + 1e-9)
        worst = max(worst, d)
    assert worst > 0.2 * bound  # the bound is not vacuous: the worst pair comes within a few times of it


def _dirichlet_logpdf(x, a):
    a = np.asarray(a)
    return gammaln(a.sum()) - gammaln(a).sum() + ((a - 1) * np.log(x)).sum(-1)


def _dirichlet_renyi(a, b, lam: float) -> float:
    """D_lam(Dir(a) || Dir(b)) in closed form: log[B(lam a + (1 - lam) b) / (B(a)^lam B(b)^(1 - lam))] / (lam - 1),
    B the multivariate Beta function (finite where lam a + (1 - lam) b > 0)."""
    def log_beta(v):
        return gammaln(v).sum() - gammaln(v.sum())

    mix = lam * a + (1 - lam) * b
    assert np.all(mix > 0)
    return float((log_beta(mix) - lam * log_beta(a) - (1 - lam) * log_beta(b)) / (lam - 1))


@pytest.mark.parametrize("lam", [2, 4])
def test_single_release_bound_holds_d3_monte_carlo(lam):
    """d = 3: E_Q[(p/q)^lambda] by large-sample Monte Carlo under Q, with its standard error, brackets the closed-form
    Renyi divergence of the two Dirichlets (so the estimate is of the right quantity), and that divergence is below the
    single-release bound, which is not vacuous: the worst pair (two vertices) reaches more than half of it."""
    r, alpha = 0.4, 3.0
    rng = np.random.default_rng(0)
    bound = dirichlet_rdp(np.array([lam]), r, alpha)[0]
    exact = {}
    for s, s2 in [((1, 0, 0), (0, 1, 0)), ((0.7, 0.2, 0.1), (0.1, 0.1, 0.8))]:
        a = r * np.array(s, float) + alpha
        b = r * np.array(s2, float) + alpha
        x = rng.dirichlet(b, size=400_000)
        ratio = np.exp(lam * (_dirichlet_logpdf(x, a) - _dirichlet_logpdf(x, b)))
        mean, se = ratio.mean(), ratio.std() / math.sqrt(ratio.size)
        d_upper = math.log(mean + 4 * se) / (lam - 1)
        d_lower = math.log(max(mean - 4 * se, 1e-300)) / (lam - 1)
        exact[s] = _dirichlet_renyi(a, b, lam)
        assert d_lower <= exact[s] <= d_upper, (d_lower, exact[s], d_upper)
        assert exact[s] <= bound, (exact[s], bound)
    assert exact[(1, 0, 0)] > 0.5 * bound  # the bound is within a factor 2 of the worst case


def test_closed_form_renyi_finds_a_bound_that_is_too_small():
    """The check above can fail: a bound at half the paper's is below the exact divergence of two vertices."""
    r, alpha, lam = 0.4, 3.0, 4
    a, b = r * np.array([1.0, 0, 0]) + alpha, r * np.array([0, 1.0, 0]) + alpha
    assert _dirichlet_renyi(a, b, lam) > 0.5 * dirichlet_rdp(np.array([lam]), r, alpha)[0]


def test_paper_table6_r_over_alpha_about_008():
    """Paper Table 6: CIFAR-10 configuration, eps = 1: r* roughly linear in alpha with r*/alpha ~ 0.08."""
    ratios = []
    for alpha in (0.5, 1.0, 2.0, 3.0, 5.0):
        r, eps, _ = calibrate_r(epsilon=1.0, delta=1e-5, sampling_rate=250 / 50000, steps=20000, alpha=alpha)
        assert eps <= 1.0 and eps == pytest.approx(1.0, abs=1e-6)
        ratios.append(r / alpha)
    assert all(0.065 <= x <= 0.095 for x in ratios), ratios


def test_calibration_monotone():
    base = dict(delta=1e-5, alpha=3.0)
    r_eps = [calibrate_r(epsilon=e, sampling_rate=0.005, steps=20000, **base)[0] for e in (1, 2, 4, 8)]
    assert all(a < b for a, b in zip(r_eps, r_eps[1:]))
    r_T = [calibrate_r(epsilon=2, sampling_rate=0.005, steps=t, **base)[0] for t in (2000, 10000, 20000)]
    assert all(a > b for a, b in zip(r_T, r_T[1:]))
    r_q = [calibrate_r(epsilon=2, sampling_rate=q, steps=5000, **base)[0] for q in (0.001, 0.005, 0.02)]
    assert all(a > b for a, b in zip(r_q, r_q[1:]))


def test_calibration_refuses_below_floor_and_names_smallest_feasible():
    floor = dirichlet_epsilon(r=3e-9, alpha=3.0, q=0.005, steps=20000, delta=1e-5)[0]
    assert 0.6 < floor < 0.7
    with pytest.raises(InfeasibleTarget) as info:
        calibrate_r(epsilon=0.5, delta=1e-5, sampling_rate=0.005, steps=20000, alpha=3.0)
    assert "smallest feasible epsilon is 0.67" in str(info.value)
