"""The accountant registry (methods/accounting/accountants.py): each accountant's least noise of a release family it
reads meets its target and 1% less noise does not; the PLD's is checked by dp_accounting composing the release's own
event; what a theorem does not cover is refused in one line from the record; a name is registered once."""

from __future__ import annotations

import math

import pytest

from inputdp.core.errors import ConfigError
from inputdp.methods.accounting.accountants import (
    ACCOUNTANTS,
    PLD,
    GaussianSteps,
    accountant,
    least_noise,
    register_accountant,
    sound,
)
from inputdp.methods.accounting.releases import GaussianReleases, NonPrivate, PateQueries, PerExampleVectors

STEPS = GaussianSteps(sampling_rate=256 / 60000, steps=1000)
#: a family each accountant reads, and whether more of its noise is less privacy (Dirichlet's r)
FAMILIES = {"pld": (STEPS, False), "rdp": (STEPS, False), "prv": (STEPS, False),
            "analytic_gaussian": (GaussianReleases((0.5, 0.5), "replace_input", "two"), False),
            "gnmax_data_independent_rdp": (PateQueries(640, 40.0, 150.0), False),
            "per_example": (PerExampleVectors("gaussian", 256 / 60000, 1000, 1000), False),
            "paper": (PerExampleVectors("dirichlet", 256 / 60000, 1000, 1000, alpha=3.0), True)}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_least_noise_meets_the_target_and_one_percent_less_noise_does_not(name):
    acc, (family, more_is_less) = accountant(name), FAMILIES[name]
    acc.check(family)
    noise = acc.least_noise(family, 2.0, 1e-5)
    assert acc.epsilon(family, noise, 1e-5) <= 2.0 * (1 + 1e-9)
    assert acc.epsilon(family, noise * (1.01 if more_is_less else 0.99), 1e-5) > 2.0
    assert acc.epsilon(family.with_steps(0), noise, 1e-5) == 0.0  # nothing released yet


def test_every_registered_accountant_has_a_family_here_and_the_registry_refuses_a_name_taken():
    assert set(ACCOUNTANTS) == set(FAMILIES) | {"none"}
    with pytest.raises(ConfigError, match="^accountant 'pld' is already registered$"):
        register_accountant(PLD())
    assert register_accountant(PLD(), force=True) is ACCOUNTANTS["pld"]


def test_soundness_is_the_accountant_s_for_what_it_reads():
    """The papers' readings of a per-example release are not guarantees; the reference has no finite epsilon."""
    vectors = PerExampleVectors("gaussian", 0.01, 100, 100)
    assert sound(accountant("per_example"), vectors) and not sound(accountant("rdp"), vectors)
    assert sound(accountant("rdp"), STEPS) and not sound(accountant("paper"), FAMILIES["paper"][0])
    assert math.isinf(accountant("none").epsilon(NonPrivate(10, 0.01), 0.0, 1e-5))


@pytest.mark.parametrize("relation", ["add_remove", "zero_out", "replace_input"])
def test_the_pld_noise_recomputed_by_dp_accounting_from_the_release_event(relation):
    steps = GaussianSteps(256 / 60000, 1000, relation, (8.0, 2))
    sigma = least_noise("pld", steps, 2.0, 1e-5)
    # the library's own accountant composing the release's event reads the suite's epsilon at that noise, within the target
    recomputed = steps.at(sigma).epsilon(1e-5)
    assert recomputed == pytest.approx(accountant("pld").epsilon(steps, sigma, 1e-5), abs=1e-9) and recomputed <= 2.0
    if relation == "zero_out":  # zero-out's pair is add/remove's
        assert sigma == least_noise("pld", GaussianSteps(256 / 60000, 1000, "add_remove", (8.0, 2)), 2.0, 1e-5)


@pytest.mark.parametrize(("name", "steps", "message"), [
    ("rdp", GaussianSteps(0.01, 10, "replace_input"), r"^adjacency=replace_input is not allowed with accountant=rdp: "),
    ("prv", GaussianSteps(0.01, 10, "add_remove", (8.0, 2)), r"^accountant=prv is not allowed with private "),
])
def test_what_a_theorem_does_not_cover_is_refused_in_one_line(name, steps, message):
    with pytest.raises(ConfigError, match=message):
        least_noise(name, steps, 1.0, 1e-5)
    with pytest.raises(ConfigError, match=r"^accountant='moments' is not allowed: choose one of pld, rdp, prv, "):
        accountant("moments")


def test_a_scaled_event_is_calibrated_by_the_registry_and_meets_its_claim():
    """A mechanism audit's release (any dp_accounting event, its noise scaled: ScaledEvent) goes through the one
    calibration (accountants.calibrate): PLD's least scale meets the target and 1% less noise does not; unsampled
    Gaussians under add/remove take the exact mu-GDP composition, which the PLD of the same event confirms."""
    from dp_accounting import dp_event

    from inputdp.core.config import PrivacySpec
    from inputdp.methods.accounting.accountants import accountant, calibrate
    from inputdp.methods.accounting.releases import ScaledEvent

    spec = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=1)
    sampled = ScaledEvent(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(
        0.05, dp_event.GaussianDpEvent(1.0)), 20), "replace_input")
    cal, pld = calibrate(sampled, accountant("pld"), spec, "a toy release"), accountant("pld")
    assert cal.epsilon <= 1.0 and pld.epsilon(sampled, 0.99 * pld.least_noise(sampled, 1.0, 1e-5), 1e-5) > 1.0
    assert pld.label(sampled).startswith("dp_accounting PLD")
    gaussians = ScaledEvent(dp_event.ComposedDpEvent([dp_event.GaussianDpEvent(1.0), dp_event.GaussianDpEvent(2.0)]))
    s = pld.least_noise(gaussians, 1.0, 1e-5)
    assert pld.label(gaussians).startswith("exact composition") and pld.epsilon(gaussians, s, 1e-5) == pytest.approx(
        1.0, abs=2e-3)
