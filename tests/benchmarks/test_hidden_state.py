"""The hidden-state audit (THEORY.md, "Per-example releases under Poisson sampling"): the probes' released vectors
alone distinguish the target from its replacement better than the target's own vectors can, and the audit finds
nothing where the construction moves nothing."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from inputdp.benchmarks.audits.hidden_state import HiddenStateSetup, ceiling_for, hidden_state_audit, run_score
from inputdp.core.errors import ConfigError

SMALL = HiddenStateSetup(probes=1000)


def test_one_run_in_each_world_scores_apart():
    """The score is positive in world A (the target at the first coordinate flips the first probes) and negative
    in world B, using the probes' vectors only."""
    a = [run_score("dirichlet_softmax", {}, 1.0, SMALL, world_a=True, seed=s) for s in range(3)]
    b = [run_score("dirichlet_softmax", {}, 1.0, SMALL, world_a=False, seed=10 + s) for s in range(3)]
    assert min(a) > 0.02 and max(b) < -0.02, (a, b)


@pytest.mark.slow
def test_the_probes_vectors_spend_more_than_the_targets_own():
    """100 runs at the per-example calibration for epsilon 1: the target's own vectors spend at most 1 (for a fixed
    model), yet the probes' vectors alone bound epsilon above it, at 95%."""
    out = hidden_state_audit("dirichlet_softmax", epsilon=1.0, runs=100, setup=SMALL, seed=0)
    assert out.own_vectors_epsilon <= 1.0
    assert out.ceiling == pytest.approx(ceiling_for(100, SMALL.delta)) and out.ceiling > 1.8
    assert out.epsilon_lb > out.own_vectors_epsilon, out
    assert out.correct >= out.guesses - 1


def test_a_construction_that_moves_nothing_bounds_nothing():
    """The power control: with a small learning rate the target cannot flip the probes, the scores are noise, and
    the bound stays at 0 (the rule is chosen on one half and counted on the other)."""
    still = HiddenStateSetup(probes=300, lr=1.0)
    out = hidden_state_audit("dirichlet_softmax", epsilon=1.0, runs=40, setup=still, seed=3)
    assert out.epsilon_lb < 0.5, out


@pytest.mark.slow
def test_refusals_come_first_in_one_line():
    with pytest.raises(ConfigError, match="releases no per-example vectors"):
        hidden_state_audit("dpsgd", epsilon=1.0, runs=8, setup=SMALL)
    with pytest.raises(ConfigError, match="at least 8 runs"):
        hidden_state_audit("dirichlet_softmax", epsilon=1.0, runs=4, setup=SMALL)
    with pytest.raises(ConfigError, match="probes"):
        HiddenStateSetup(probes=0)
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "hidden-state", "--method", "nonprivate",
                          "--runs", "8"], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "releases no per-example vectors" in out.stderr


@pytest.mark.slow
def test_cli_json():
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "hidden-state", "--method",
                          "dirichlet_softmax", "--runs", "8", "--probes", "200", "--json"],
                         capture_output=True, text=True, check=True)
    data = json.loads(out.stdout)
    assert data["runs"] == 8 and data["guesses"] == 4 and 0 <= data["epsilon_lb"] <= data["ceiling"] + 1e-12
    assert data["own_vectors_epsilon"] <= 1.0 and data["setup"]["probes"] == 200
