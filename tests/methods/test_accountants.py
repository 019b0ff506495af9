"""The accountant registry (methods/accounting/accountants.py): each accountant's least noise meets its target and
1% less does not; the PLD's is checked by dp_accounting composing the release's own event; what a theorem does not
cover is refused in one line from the record."""

from __future__ import annotations

import pytest

from inputdp.core.errors import ConfigError
from inputdp.methods.accounting.accountants import ACCOUNTANTS, GaussianSteps, accountant, least_noise

STEPS = GaussianSteps(sampling_rate=256 / 60000, steps=1000)


@pytest.mark.parametrize("name", sorted(ACCOUNTANTS))
def test_the_least_noise_meets_the_target_and_one_percent_less_does_not(name):
    acc = accountant(name)
    sigma = least_noise(name, STEPS, 2.0, 1e-5)
    assert acc.epsilon(STEPS, sigma, 1e-5) <= 2.0 * (1 + 1e-9)
    assert acc.epsilon(STEPS, 0.99 * sigma, 1e-5) > 2.0


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
        accountant(name).noise(steps, 1.0, 1e-5)
    with pytest.raises(ConfigError, match=r"^accountant='moments' is not allowed: choose one of pld, rdp, prv$"):
        accountant("moments")
