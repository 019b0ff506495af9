"""The vectorised subsampled-Gaussian RDP against Opacus' own loops, and the noise multiplier against Opacus'."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inputdp.methods.accounting.gaussian_rdp import (
    OPACUS_ALPHAS,
    gaussian_epsilon_rdp,
    gaussian_noise_multiplier_rdp,
    subsampled_gaussian_rdp,
)


@pytest.mark.parametrize("q,sigma", [(0.004267, 1.16), (0.01, 0.7), (0.001, 5.0), (0.2, 1.0), (0.05, 2.5),
                                     (0.004, 20.0), (0.9, 0.6), (0.5, 2.0), (0.5, 13.44)])
def test_rdp_equals_opacus(q, sigma):
    # q = 1/2 is where the fractional series decays only polynomially (some 10^4 terms at order 1.1): each order
    # stops at its own term, and the sums still equal Opacus' loops
    from opacus.accountants.analysis.rdp import compute_rdp

    ours = subsampled_gaussian_rdp(q, sigma, OPACUS_ALPHAS)
    theirs = compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=OPACUS_ALPHAS)
    np.testing.assert_allclose(ours, theirs, rtol=2e-5)


def test_epsilon_equals_opacus_accountant():
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(1.1, 0.004, 5000)]
    eps, order = gaussian_epsilon_rdp(noise_multiplier=1.1, sampling_rate=0.004, steps=5000, delta=1e-5)
    eps_o, order_o = acc.get_privacy_spent(delta=1e-5)
    assert eps == pytest.approx(eps_o, rel=1e-8) and order == order_o


def _opacus_epsilon(sigma: float, q: float, steps: int) -> float:
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [(sigma, q, steps)]
    return acc.get_epsilon(delta=1e-5)


@pytest.mark.parametrize("eps,q,steps", [(1.0, 0.004267, 2340), (4.0, 0.004267, 2340), (1.0, 0.005, 20000),
                                         (8.0, 0.01, 6006), (0.5, 0.05, 40), (2.0, 250 / 73257, 11722)])
def test_noise_multiplier_is_the_crossing_by_opacus_accountant(eps, q, steps):
    """Our sigma is where Opacus' own RDP accountant crosses the target: it meets it, 1e-6 less noise does not,
    and it is never more than Opacus' get_noise_multiplier (which stops within 0.01 below the target)."""
    from opacus.accountants.utils import get_noise_multiplier

    ours = gaussian_noise_multiplier_rdp(epsilon=eps, delta=1e-5, sampling_rate=q, steps=steps)
    assert _opacus_epsilon(ours, q, steps) <= eps * (1 + 1e-9)  # our sums and Opacus' loops agree to rounding
    assert _opacus_epsilon(ours * (1 - 1e-6), q, steps) > eps
    theirs = get_noise_multiplier(target_epsilon=eps, target_delta=1e-5, sample_rate=q, steps=steps, accountant="rdp")
    assert ours <= theirs and _opacus_epsilon(theirs, q, steps) >= eps - 0.01


def test_infeasible_target_is_refused_with_the_floor():
    """No finite sigma gets below the conversion of zero RDP; the refusal names that floor, at once."""
    from inputdp.methods.accounting import InfeasibleTarget, rdp_to_epsilon

    floor = rdp_to_epsilon(OPACUS_ALPHAS, np.zeros_like(OPACUS_ALPHAS), 1e-5)[0]
    with pytest.raises(InfeasibleTarget, match=f"smallest feasible epsilon is {math.ceil(floor * 1e4) / 1e4:g}"):
        gaussian_noise_multiplier_rdp(epsilon=floor * 0.99, delta=1e-5, sampling_rate=0.05, steps=40)


def test_calibration_just_above_the_floor_is_cheap():
    """Near the floor sigma is large (about 200 here) and the fractional-order series would be long (this took 21 s
    and 2.4 GB before fractional orders that cannot win were skipped); the answer is still the crossing."""
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.perf_counter()
    sigma = gaussian_noise_multiplier_rdp(epsilon=0.1029, delta=1e-5, sampling_rate=256 / 60000, steps=2340)
    seconds, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 2.0 and peak < 500 * 2**20
    # Opacus' loops and our vectorised sums agree to rounding (~1e-13 here): the harness's ledger tolerance, 1e-9
    assert 150 < sigma < 300 and _opacus_epsilon(sigma, 256 / 60000, 2340) <= 0.1029 * (1 + 1e-9)


@pytest.mark.parametrize("q,sigma", [(0.004267, 1.16), (0.01, 0.7), (0.05, 2.5), (0.9, 0.6), (0.004, 20.0)])
def test_skipping_fractional_orders_changes_nothing(q, sigma):
    from inputdp.methods.accounting import rdp_to_epsilon

    full = rdp_to_epsilon(OPACUS_ALPHAS, 1000 * subsampled_gaussian_rdp(q, sigma, OPACUS_ALPHAS), 1e-5)
    assert gaussian_epsilon_rdp(noise_multiplier=sigma, sampling_rate=q, steps=1000, delta=1e-5) == full
