"""The PLD accountant of the subsampled Gaussian (methods/accounting/pld.py) against independent computations: the
RDP accountant (never tighter), the analytic Gaussian mechanism's exact epsilon (Balle & Wang 2018), Opacus' PRV
accountant, and dp_accounting's published-grid values quoted in the project's issue."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from inputdp.core.config import PrivacySpec
from inputdp.methods.accounting.gaussian_rdp import gaussian_epsilon_rdp
from inputdp.methods.accounting.pld import (
    SIGMA_RTOL,
    VALUE_INTERVAL,
    discretisation_gap,
    gaussian_epsilon_pld,
    gaussian_noise_multiplier_pld,
)
from inputdp.methods.dpsgd import DPSGD


def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """The exact epsilon of one Gaussian mechanism of sensitivity 1 and noise sigma at delta (Balle & Wang 2018,
    Theorem 8): delta(eps) = Phi(1/(2 sigma) - eps sigma) - e^eps Phi(-1/(2 sigma) - eps sigma)."""

    def gap(eps: float) -> float:
        return norm.cdf(0.5 / sigma - eps * sigma) - math.exp(eps) * norm.cdf(-0.5 / sigma - eps * sigma) - delta

    return brentq(gap, 0.0, 200.0, xtol=1e-12)


@pytest.mark.parametrize("sigma", [0.6, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("q,steps", [(0.004267, 2340), (0.0683, 293), (1.0, 1), (1.0, 10)])
def test_pld_is_never_above_rdp(sigma, q, steps):
    pld = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)
    rdp = gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)[0]
    assert pld <= rdp


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_one_full_batch_step_is_the_analytic_gaussian_within_the_grid(sigma, delta):
    """At q = 1, T = 1 the mechanism is one Gaussian: the pessimistic PLD lies at or above the exact epsilon and at
    most a few grid steps above it."""
    exact = analytic_gaussian_epsilon(sigma, delta)
    got = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=1.0, steps=1, delta=delta)
    assert exact - 1e-9 <= got <= exact + 3 * VALUE_INTERVAL


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.004267, 2340), (0.8, 0.02, 500), (2.0, 0.0683, 293)])
def test_pld_agrees_with_opacus_prv_within_its_stated_error(sigma, q, steps):
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(sigma, q, steps)]
    eps_error = 0.01
    prv = acc.get_epsilon(delta=1e-5, eps_error=eps_error)
    pld = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)
    gap = discretisation_gap(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)
    assert abs(pld - prv) <= eps_error + gap + 1e-3


@pytest.mark.parametrize("sigma,batch,epochs,rdp_quoted,pld_quoted", [
    (1.5, 256, 30, 1.235, 1.134), (1.0, 256, 30, 2.373, 2.162), (0.75, 256, 30, 4.752, 4.201),
    (3.0, 4096, 100, 4.709, 4.346),
])
@pytest.mark.slow
def test_the_issues_quoted_values(sigma, batch, epochs, rdp_quoted, pld_quoted):
    """The RDP-vs-PLD figures the issue quotes from dp_accounting 0.6.0 (n = 50,000, delta = 1e-5, T = floor(epochs
    n / batch)). The RDP ones are met to their rounding; the PLD ones are up to 0.007 above what dp_accounting's own
    PLDAccountant gives here (1.1271, 2.1579, 4.1987, 4.3457), which the suite's PLD on the finer grid equals."""
    import dp_accounting
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    q = batch / 50000
    steps = int(epochs * 50000 / batch)
    rdp = gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)[0]
    fine = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5,
                                interval=VALUE_INTERVAL / 10)
    ours = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5)
    assert rdp == pytest.approx(rdp_quoted, abs=2e-3)
    reference = PLDAccountant()  # its default grid 1e-4: the suite's finer grid
    reference.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert fine == pytest.approx(reference.get_epsilon(1e-5), abs=1e-9)
    assert fine == pytest.approx(pld_quoted, abs=1e-2) and fine < rdp
    assert fine <= ours <= fine * 1.01  # the coarser grid costs under 1% here (0.0066 at T = 5859)


@pytest.mark.parametrize("epsilon,q,steps", [(1.0, 256 / 60000, 2340), (4.0, 256 / 60000, 2340),
                                             (2.93, 4096 / 60000, 293), (1.0, 0.01, 100), (1.0, 1.0, 1)])
def test_pld_calibration_is_the_safe_side_of_the_crossing(epsilon, q, steps):
    sigma = gaussian_noise_multiplier_pld(epsilon=epsilon, delta=1e-5, sampling_rate=q, steps=steps)
    assert gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5) <= epsilon
    # a little less noise than the answer overshoots: the answer is at the crossing, not merely safe
    lower = sigma * (1 - 20 * SIGMA_RTOL)
    assert gaussian_epsilon_pld(noise_multiplier=lower, sampling_rate=q, steps=steps, delta=1e-5) > epsilon


def test_dpsgd_defaults_to_pld_with_less_noise_than_rdp_and_says_which():
    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    pld, rdp = DPSGD(), DPSGD(accountant="rdp")
    pld.calibrate(spec)
    rdp.calibrate(spec)
    assert pld.options["accountant"] == "pld"
    # the issue's figures: RDP 1.1564, PLD (finer grid) 1.0498
    assert rdp.sigma == pytest.approx(1.1564, abs=1e-3)
    assert 1.0498 <= pld.sigma <= 1.0498 * 1.005
    claim = pld.claim()
    assert claim.accountant.startswith("pld (dp_accounting ") and claim.epsilon <= 1.0
    assert pld.epsilon_spent(2340) == pytest.approx(claim.epsilon)
    assert pld.epsilon_spent(1170) < claim.epsilon


@pytest.mark.parametrize("epsilon,q,steps,needle", [
    (1e-300, 256 / 60000, 2340, "infeasible"),  # RDP's floor, an upper bound on PLD's, refuses it
    (0.05, 0.5, 1000, "infeasible"),
])
def test_pld_refuses_what_rdp_cannot_reach_in_one_line(epsilon, q, steps, needle):
    from inputdp.methods.accounting.calibration import InfeasibleTarget

    with pytest.raises(InfeasibleTarget, match=needle):
        gaussian_noise_multiplier_pld(epsilon=epsilon, delta=1e-5, sampling_rate=q, steps=steps)


def test_pld_refuses_more_steps_than_it_composes():
    from inputdp.core.errors import ConfigError

    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=200_000)
    with pytest.raises(ConfigError, match="steps=200000 is not allowed with accountant=pld"):
        DPSGD().calibrate(spec)


# --- one input replaced (adjacency=replace_input) ---------------------------------------------------------------

def replace_one_epsilon_by_fft(sigma: float, q: float, steps: int, delta: float, h: float = 1e-3) -> float:
    """An independent computation of T Poisson-subsampled Gaussian steps under one input replaced, written from the
    mixtures themselves (not dp_accounting's code): P = q N(-1, s^2) + (1-q) N(0, s^2) against Q = q N(1, s^2) +
    (1-q) N(0, s^2) in units of C (the sampled example's clipped contribution moved from -C to +C, the worst case
    of two vectors of norm <= C). The privacy loss L = log P/Q under P, tabulated on a fine grid of x, rounded to
    the nearest multiple of h (unbiased), composed T times by FFT; delta(eps) = E[(1 - e^(eps - L))_+], solved for
    eps. An estimate to about sqrt(T) h, not a bound: the test allows for it."""

    return pair_epsilon_by_fft(sigma, q, steps, delta, (-1.0, 1.0), h)


def pair_epsilon_by_fft(sigma: float, q: float, steps: int, delta: float, shifts: tuple[float, float],
                        h: float = 1e-3, q_of: tuple[float, float] | None = None) -> float:
    """The FFT composition above for the mixtures P = qP N(a, s^2) + (1-qP) N(0, s^2) against Q = qQ N(b, s^2) +
    (1-qQ) N(0, s^2), (a, b) = ``shifts``, (qP, qQ) = ``q_of`` (default both q): the loss of P against Q under P."""
    import numpy as np
    from scipy.special import logsumexp

    x = np.linspace(-1 - 14 * sigma, 1 + 14 * sigma, 2_000_001)
    dx = x[1] - x[0]
    qp, qq = q_of or (q, q)

    def log_mix(shift: float, qm: float) -> np.ndarray:
        if qm <= 0:
            return norm.logpdf(x, 0, sigma)
        l1 = math.log1p(-qm) if qm < 1 else -np.inf
        return logsumexp([math.log(qm) + norm.logpdf(x, shift, sigma), np.full_like(x, l1) + norm.logpdf(x, 0, sigma)],
                         axis=0)

    lp = log_mix(shifts[0], qp)
    loss = lp - log_mix(shifts[1], qq)
    mass = np.exp(lp) * dx
    idx = np.rint(loss / h).astype(np.int64)
    lo = idx.min()
    one = np.bincount(idx - lo, weights=mass)
    one /= one.sum()
    size = 1 << int(math.ceil(math.log2(steps * (len(one) - 1) + 1)))
    composed = np.fft.irfft(np.fft.rfft(one, size) ** steps, size)[: steps * (len(one) - 1) + 1]
    composed = np.clip(composed, 0.0, None)
    values = (np.arange(len(composed)) + steps * lo) * h

    def delta_of(eps: float) -> float:
        above = values > eps
        return float(np.sum(composed[above] * (1.0 - np.exp(eps - values[above]))))

    return brentq(lambda e: delta_of(e) - delta, 0.0, 60.0, xtol=1e-6)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.05, 100), (2.0, 0.0683, 300),
                                            pytest.param(0.8, 0.01, 300, marks=pytest.mark.slow), (3.0, 1.0, 1)])
def test_replace_one_pld_agrees_with_an_independent_composition(sigma, q, steps):
    """dp_accounting's REPLACE_ONE subsampled Gaussian (what dpsgd's adjacency=replace_input calibrates with) against
    the FFT composition written above from the two mixtures: within the grid's pessimism (PLD is an upper bound,
    the FFT an unbiased estimate), so PLD at or above it less the estimate's error, and within 2% of it."""
    ours = replace_one_epsilon_by_fft(sigma, q, steps, 1e-5)
    pld = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5,
                               relation="replace_input")
    assert ours - 0.01 <= pld <= ours * 1.02 + 0.01, (pld, ours)


@pytest.mark.parametrize("sigma", [0.7, 2.0])
def test_replace_one_at_full_batch_is_one_gaussian_of_twice_the_sensitivity(sigma):
    """At q = 1 the two neighbours' sums differ by 2C: the exact epsilon is the analytic Gaussian's at sigma / 2."""
    exact = analytic_gaussian_epsilon(sigma / 2, 1e-5)
    got = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=1.0, steps=1, delta=1e-5,
                               relation="replace_input")
    assert exact - 1e-9 <= got <= exact + 3 * VALUE_INTERVAL


@pytest.mark.parametrize("q,steps", [(0.004267, 2340), (0.0683, 300)])
@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_replace_one_needs_between_one_and_two_times_the_add_remove_noise(q, steps, epsilon):
    """The relations at one budget: replace-one is never cheaper than add/remove (removing, then adding, is a
    replacement; group privacy of size 2 gives the upper side: sigma at (eps/2, delta/(1+e^(eps/2))) add/remove
    meets (eps, delta) replace-one). The calibrated replace-one sigma meets its target and lies between."""
    kw = {"delta": 1e-5, "sampling_rate": q, "steps": steps}
    ar = gaussian_noise_multiplier_pld(epsilon=epsilon, **kw)
    rep = gaussian_noise_multiplier_pld(epsilon=epsilon, relation="replace_input", **kw)
    group = gaussian_noise_multiplier_pld(epsilon=epsilon / 2, delta=1e-5 / (1 + math.exp(epsilon / 2)),
                                          sampling_rate=q, steps=steps)
    assert ar <= rep <= group * (1 + SIGMA_RTOL)
    assert gaussian_epsilon_pld(noise_multiplier=rep, relation="replace_input", **kw) <= epsilon
    assert gaussian_epsilon_pld(noise_multiplier=rep * (1 - 5 * SIGMA_RTOL), relation="replace_input", **kw) > epsilon


def test_dpsgd_states_the_relation_in_its_claim_and_key():
    from inputdp.benchmarks.resolve import resolve

    from ..helpers import smoke_config

    plain = smoke_config("dpsgd", epsilon=2.0)
    replaced = smoke_config("dpsgd", epsilon=2.0, method_options={"dpsgd": {"adjacency": "replace_input"}})
    assert plain.key() != replaced.key()
    a, b = resolve(plain), resolve(replaced)
    ca, cb = a.method().claim(), b.method().claim()
    assert ca.adjacency == "add/remove one example" and cb.adjacency.startswith("one input replaced")
    assert cb.protects == "inputs" and cb.guarantee and "2C" in cb.scope
    assert b.method().sigma > a.method().sigma


# --- zero-out (adjacency=zero_out) ------------------------------------------------------------------------------

@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.05, 100), pytest.param(0.8, 0.01, 300, marks=pytest.mark.slow)])
def test_zero_out_pld_agrees_with_an_independent_composition(sigma, q, steps):
    """dp_accounting's REPLACE_SPECIAL (what adjacency=zero_out calibrates with) against the FFT composition of its
    pair written from the mixtures: the example sampled with probability q against the null example, which adds 0
    (P = q N(1) + (1-q) N(0) against N(0), and the reverse), the larger of the two directions."""
    forward = pair_epsilon_by_fft(sigma, q, steps, 1e-5, (1.0, 0.0), q_of=(q, 0.0))
    backward = pair_epsilon_by_fft(sigma, q, steps, 1e-5, (0.0, 1.0), q_of=(0.0, q))
    ours = max(forward, backward)
    pld = gaussian_epsilon_pld(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5, relation="zero_out")
    assert ours - 0.01 <= pld <= ours * 1.02 + 0.01, (pld, ours)


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_zero_out_costs_what_add_remove_costs(epsilon):
    """At the cpu preset the zero-out sigma is add/remove's (the issue's 1.0522 at eps 1; a check of the wiring, as
    dp_accounting composes REPLACE_SPECIAL by add/remove's code: the FFT test above is the independent one), and
    dp_accounting's own RDP accountant under REPLACE_SPECIAL reads the suite's RDP epsilon at that sigma (the
    suite's RDP is a copy of Opacus', a second code path)."""
    import dp_accounting
    from dp_accounting import NeighboringRelation, rdp

    spec = PrivacySpec(epsilon=epsilon, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    zero = DPSGD(adjacency="zero_out").calibrate(spec).noise["noise_multiplier"]
    assert zero == DPSGD().calibrate(spec).noise["noise_multiplier"]
    if epsilon == 1.0:
        assert zero == pytest.approx(1.0522, abs=1e-4)
    accountant = rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(spec.sampling_rate, dp_accounting.GaussianDpEvent(zero)), spec.steps))
    theirs = accountant.get_epsilon(spec.delta)
    from inputdp.methods.accounting.accountants import GaussianSteps
    from inputdp.methods.accounting.accountants import accountant as named

    mine = named("rdp").epsilon(GaussianSteps(spec.sampling_rate, spec.steps, "zero_out"), zero, spec.delta)
    assert mine == pytest.approx(theirs, rel=0.02) and epsilon <= mine


def test_zero_out_claim_says_what_it_protects_and_audits_build_its_null_example():
    """The claim: inputs and labels protected, n public, its own relation (so its run key differs from
    add/remove's); input canaries cannot build the null example and are refused in one line."""
    from inputdp.benchmarks.audits.one_run import check_input_design, design_suffix
    from inputdp.core.claims import RELATION_VALUES
    from inputdp.core.errors import ConfigError

    m = DPSGD(adjacency="zero_out")
    m.calibrate(PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=100))
    claim = m.claim()
    assert claim.relation.key == "zero_out" and claim.protects == "inputs and labels"
    assert "null example" in claim.scope and "zero-out" in claim.adjacency
    assert design_suffix(claim) == ":null"
    with pytest.raises(ConfigError, match="not allowed under zero_out"):
        check_input_design(RELATION_VALUES["zero_out"])
