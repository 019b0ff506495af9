"""The white-box test that decides (exclusive-support canaries on a dense model) and the multi-run audit: the
canary construction, the score's exactness, the refusals, the Clopper-Pearson statistics against direct
computations and a Monte Carlo of a mechanism of known epsilon, and the audit end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from inputdp.benchmarks.audits.multi_run import (
    Counts,
    assign_inclusion,
    choose_rule,
    clopper_pearson,
    counts,
    multi_run_audit,
    rate_bound,
    split_halves,
)
from inputdp.benchmarks.audits.one_run import (
    audit,
    exclusive_weight_change,
    free_coordinates,
    make_canaries,
    resolve_scores,
    with_canaries,
)
from inputdp.benchmarks.frontend import model_for
from inputdp.benchmarks.harness import run
from inputdp.benchmarks.models import build_model
from inputdp.benchmarks.resolve import resolve
from inputdp.benchmarks.tracking import client, experiment_id
from inputdp.core.claims import NULL, RELATION_VALUES
from inputdp.core.errors import ConfigError
from inputdp.datasets import blank_value, load_tensor_data

from ..helpers import QUIET, smoke_config


@pytest.fixture(scope="module")
def small_mnist():
    """The smoke runs' data: the generated set, whose outer ring is blank in every image (as MNIST's border is)."""
    return load_tensor_data("synthetic", train_examples=2000, test_examples=1000)


# --- the canaries --------------------------------------------------------------------------------------------
def test_canaries_use_disjoint_coordinates_blank_in_every_training_example(small_mnist):
    data = small_mnist
    blank = blank_value(data.info)[0]
    free = free_coordinates(data)
    flat = data.x_train.flatten(1)
    # an independent count: a coordinate is free iff its largest value over the data is the blank value
    assert set(free.tolist()) == set(torch.nonzero(flat.max(0).values == blank).flatten().tolist())
    assert 67 < len(free) < 784
    m = 20
    made = make_canaries("exclusive_support", data, m, seed=3)
    supports = [set(s.tolist()) for s in made.support]
    assert all(len(s) == len(free) // m for s in supports)
    assert sum(len(s) for s in supports) == len(set().union(*supports))  # disjoint
    assert set().union(*supports) <= set(free.tolist())
    assert bool((flat[:, sorted(set().union(*supports))] == blank).all())  # blank in every base example
    xc = made.x.flatten(1)
    for i, s in enumerate(supports):
        own = torch.tensor(sorted(s))
        assert bool((xc[i, own] > blank).all())
        others = torch.ones(xc.shape[1], dtype=torch.bool)
        others[own] = False
        assert bool((xc[i, others] == blank).all())  # bright on its own coordinates, blank everywhere else
    assert made.base is data and made.x_ref is None
    again = make_canaries("exclusive_support", data, m, seed=3)
    assert torch.equal(again.x, made.x) and (again.included == made.included).all()


def test_more_canaries_than_free_coordinates_is_one_line_saying_how_many(small_mnist):
    n = len(free_coordinates(small_mnist))
    with pytest.raises(ConfigError, match=f"give --canaries <= {n}") as err:
        make_canaries("exclusive_support", small_mnist, n + 1, seed=0)
    assert "\n" not in str(err.value)
    assert len(make_canaries("exclusive_support", small_mnist, n, seed=0).support) == n


def test_the_mlp_sees_blank_pixels_as_exact_zeros(small_mnist):
    model = build_model("mlp", num_classes=10, channels=1, size=28, norm="none", width=16,
                        input_zero=blank_value(small_mnist.info))
    shifted = model.features[0](small_mnist.x_train[:50])
    raw_zero = small_mnist.x_train[:50] == blank_value(small_mnist.info)[0]
    assert bool((shifted[raw_zero] == 0).all()) and bool((shifted[~raw_zero] > 0).all())
    assert model(small_mnist.x_train[:5]).shape == (5, 10)


# --- the score -----------------------------------------------------------------------------------------------
def test_score_is_exactly_zero_without_the_canary_and_positive_with_it(small_mnist):
    """Non-private SGD with momentum: the weights of a coordinate blank in every training example never move."""
    config = smoke_config("nonprivate", model="mlp", steps=200)
    made = make_canaries("exclusive_support", small_mnist, 10, seed=1)
    # the excluded canaries absent (add/remove) or replaced by the blank image in their slots (replace_input)
    designs = [with_canaries(made, relation=r) for r in RELATION_VALUES.values() if r.excluded != NULL]
    assert designs[1].train_size == small_mnist.train_size + 10
    for data, expect_moved in ((made.base, np.zeros(10, bool)), *((d, made.included) for d in designs)):
        result = run(resolve(config), QUIET, data=data, keep_model=True)
        initial = model_for(config, data.info, result.norm)
        initial.load_state_dict(result.initial_state)
        change = exclusive_weight_change(result.model, initial, made.support)
        assert (change[~expect_moved] == 0.0).all()  # exactly, not approximately
        assert (change[expect_moved] > 0).all()
    assert 0 < made.included.sum() < 10


def test_conv_models_are_refused_not_scored_zero(small_mnist):
    config = smoke_config("nonprivate")  # small_cnn
    with pytest.raises(ConfigError, match="first layer is a convolution.*--model mlp"):
        audit(resolve(config), canaries=10, canary_kind="exclusive_support", scores=("exclusive_weight_change",), perf=QUIET)
    cnn = build_model("small_cnn", num_classes=10, channels=1, size=28, norm="group", width=8)
    made = make_canaries("exclusive_support", small_mnist, 4, seed=0)
    with pytest.raises(ConfigError, match="Conv2d, not dense"):
        exclusive_weight_change(cnn, cnn, made.support)
    with pytest.raises(ConfigError, match="use --canary-kind exclusive_support"):
        audit(resolve(smoke_config("nonprivate", model="mlp")), canaries=10, canary_kind="random_pattern",
              scores=("exclusive_weight_change",), perf=QUIET)
    # on a conv model, "auto" means the general scores, and the kind's reference-free ones only
    assert resolve_scores("auto", "exclusive_support", "mlp") == ("exclusive_weight_change",)
    assert "exclusive_weight_change" not in resolve_scores("all", "exclusive_support", "small_cnn")
    assert "reference_rank" not in resolve_scores("all", "exclusive_support", "small_cnn")
    assert resolve_scores("auto", "exclusive_support", "small_cnn") == (
        "loss", "margin", "gradient_alignment", "relearn", "first_layer_projection")


@pytest.mark.slow
def test_cli_refuses_exclusive_score_on_a_conv_model_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "audit", "--method", "dirichlet_softmax",
                          "--dataset", "synthetic", "--preset", "smoke", "--canary-kind", "exclusive_support",
                          "--score", "exclusive_weight_change", "--no-track"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "INPUTDP_NO_DOWNLOAD": "1"})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "model 'small_cnn'" in lines[0] and "--model mlp" in lines[0]


# --- the one-run audit, end to end (smoke size) --------------------------------------------------------------
def test_one_run_exclusive_audit_decides_dirichlet_and_stays_sound_for_dpsgd():
    """The decisive test on the smoke preset: Dirichlet-softmax, whose noise never reaches the parameters, has
    every guess right (the one-test ceiling); DP-SGD at the same claimed epsilon stays below its claim."""
    dirichlet = audit(resolve(smoke_config("dirichlet_softmax", epsilon=1.0, model="mlp", steps=200)),
                      canaries=40, canary_kind="exclusive_support", perf=QUIET)
    (o,) = dirichlet.outcomes
    assert dirichlet.tests == 2 and o.score == "exclusive_weight_change"  # one guess set, read twice
    assert o.correct == o.guesses == 40 and o.epsilon_lb == o.ceiling > 2.3  # 40 of 40 at level 0.05/2: 2.34
    assert "one test" in dirichlet.family()
    dpsgd = audit(resolve(smoke_config("dpsgd", epsilon=1.0, model="mlp", steps=200)),
                  canaries=40, canary_kind="exclusive_support", perf=QUIET)
    assert dpsgd.best.epsilon_lb <= 1.0


# --- the multi-run statistics --------------------------------------------------------------------------------
@pytest.mark.parametrize("k,n", [(0, 50), (3, 50), (25, 50), (50, 50), (199, 200)])
def test_clopper_pearson_against_the_binomial_tails(k, n):
    lo, hi = clopper_pearson(k, n, 0.025)
    if k > 0:  # the lower bound is the p at which seeing k or more has probability alpha
        assert stats.binom.sf(k - 1, n, lo) == pytest.approx(0.025, rel=1e-6)
    else:
        assert lo == 0
    if k < n:
        assert stats.binom.cdf(k, n, hi) == pytest.approx(0.025, rel=1e-6)
    else:
        assert hi == 1
    if k == n:  # closed form
        assert lo == pytest.approx(0.025 ** (1 / n), rel=1e-12)


def test_perfect_separation_bound_in_closed_form():
    # 100 runs with, 100 without, all guessed right: log((0.025^(1/100) - delta) / (1 - 0.025^(1/100)))
    a = 0.025 ** (1 / 100)
    assert rate_bound(100, 100, 0, 100, delta=1e-5, beta=0.05) == pytest.approx(math.log((a - 1e-5) / (1 - a)))
    assert Counts(100, 0, 0, 100).bound("with", delta=1e-5, beta=0.05) > 3.2
    assert Counts(100, 0, 0, 100).bound("without", delta=1e-5, beta=0.05) > 3.2


def test_rule_choice_split_and_assignment():
    included = assign_inclusion(400, seed=7)
    assert included.sum() == 200 and not (assign_inclusion(400, seed=8) == included).all()
    choose = split_halves(included, seed=7)
    assert choose.sum() == 200 and (choose & included).sum() == 100
    scores = np.where(included, 1.0 + np.arange(400) / 400, 0.0)
    rule, bound = choose_rule(scores[choose], included[choose], delta=1e-5, beta=0.05)
    assert (rule.tau, rule.direction) == (0.0, "above") and bound > 3
    c = counts(scores[~choose], included[~choose], rule.tau, rule.direction)
    assert (c.tp, c.fn, c.fp, c.tn) == (100, 0, 0, 100)
    # the reverse rule when "with" lowers the score
    rule, _ = choose_rule(-scores[choose], included[choose], delta=1e-5, beta=0.05)
    assert rule.direction == "below"


@pytest.mark.slow
def test_multi_run_bound_is_sound_on_a_mechanism_of_known_epsilon():
    """Randomised response at epsilon 1 (the score is one bit, 1 with probability e/(1+e) with the canary, else
    1/(1+e)): over 300 simulated audits of 400 runs, the 95% bound exceeds the true epsilon in at most ~5%,
    and it is not vacuous (it finds a good part of the true epsilon)."""
    rng = np.random.default_rng(0)
    p_with = math.e / (1 + math.e)
    over, bounds = 0, []
    for trial in range(300):
        included = assign_inclusion(400, seed=trial)
        bit = rng.random(400) < np.where(included, p_with, 1 - p_with)
        scores = bit.astype(float) + rng.random(400) * 1e-3  # ties broken at random: the rule may split them
        choose = split_halves(included, seed=trial)
        rule, _ = choose_rule(scores[choose], included[choose], delta=1e-5, beta=0.05)
        b = counts(scores[~choose], included[~choose], rule.tau, rule.direction).bound(rule.side, delta=1e-5,
                                                                                         beta=0.05)
        bounds.append(b)
        over += b > 1.0
    assert over <= 0.08 * 300  # 5% in expectation; a binomial's spread above it
    assert np.median(bounds) > 0.4


# --- the multi-run audit, end to end -------------------------------------------------------------------------
@pytest.mark.slow
def test_multi_run_audit_logs_one_mlflow_run_with_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a journal of its own
    uri = f"sqlite:///{tmp_path / 'runs.db'}"
    from inputdp.benchmarks.tracking import MLflowTracker

    config = smoke_config("dirichlet_softmax", epsilon=4.0, model="mlp", steps=120)
    tracker = MLflowTracker(uri, "mr", extra_tags={"kind": "audit", "audit_of_match_key": config.match_key()})
    result = multi_run_audit(resolve(config), runs=16, canary_kind="exclusive_support", score="exclusive_weight_change",
                             perf=QUIET, tracker=tracker)
    # the scores themselves: exactly 0 for every run without the canary, positive with it
    for r in result.scores:
        assert (r.score > 0) == r.included and (r.included or r.score == 0.0)
    c = result.counts
    assert (c.tp, c.fn, c.fp, c.tn) == (4, 0, 0, 4) and result.rule.direction == "above" and result.rule.tau == 0.0
    assert result.epsilon_lb == pytest.approx(result.ceiling) and result.failed == 0
    mc = client(uri)
    (logged,) = mc.search_runs([experiment_id(mc, "mr")])
    assert logged.info.status == "FINISHED" and logged.data.tags["audit_mode"] == "multi_run"
    assert logged.data.metrics["audit_runs"] == 16 and logged.data.metrics["audit_tp"] == 4
    assert logged.data.metrics["epsilon_lb.white_box"] == pytest.approx(result.epsilon_lb)
    assert json.loads(json.dumps(result.as_json()))["test_half"] == {"tp": 4, "fn": 0, "fp": 0, "tn": 4}


@pytest.mark.slow
def test_multi_run_refusals():
    from inputdp.benchmarks.audits.multi_run import check_runs

    for bad in (7, 0, -2, 3):
        with pytest.raises(ConfigError, match="even number >= 8"):
            check_runs(bad)
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "audit", "--runs", "8", "--method",
                          "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--model", "mlp",
                          "--canary-kind", "exclusive_support", "--score", "loss,margin", "--no-track"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "a multi-run audit is one test of one score" in out.stderr
    out = subprocess.run([sys.executable, "-m", "inputdp.benchmarks.cli", "audit", "--runs", "8", "--canaries", "5",
                          "--method", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--model", "mlp",
                          "--no-track"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "--canaries 5 is not allowed with --runs" in out.stderr


def test_a_stopped_multi_run_audit_resumes_with_only_the_missing_runs(tmp_path, monkeypatch):
    """The driver on a stand-in for training (the score says whether the canary was in): stopped after 5 runs by
    Ctrl-C, started again, it runs the other 11 only; the journal is gone once the audit is done."""
    from inputdp.benchmarks.audits import multi_run as audit_runs

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls: list[int] = []

    def fake(run, *, spec, included, perf):  # the unit the executor ships: one run's resolution
        seed = run.config.seed
        if len(calls) == 5 and not resumed:
            raise KeyboardInterrupt
        calls.append(seed)
        return audit_runs.RunScore(seed, included[seed], float(included[seed]), 0.5, 0.01)

    monkeypatch.setattr(audit_runs, "score_one_run", fake)
    config = smoke_config("dirichlet_softmax", epsilon=4.0, model="mlp")
    resumed = False
    with pytest.raises(KeyboardInterrupt):
        multi_run_audit(resolve(config), runs=16, canary_kind="exclusive_support", score="exclusive_weight_change", perf=QUIET)
    journal = audit_runs.journal_path(resolve(config), audit_runs.CanarySpec("exclusive_support", "exclusive_weight_change",
                                                                    config.seed), 16)
    assert len(journal.read_text().splitlines()) == 5
    resumed, first = True, list(calls)
    result = multi_run_audit(resolve(config), runs=16, canary_kind="exclusive_support", score="exclusive_weight_change",
                             perf=QUIET)
    assert len(calls) == 16 and set(calls[5:]).isdisjoint(first)
    assert [r.seed for r in result.scores] == list(range(config.seed, config.seed + 16))
    assert result.counts.tp == result.counts.tn == 4 and not journal.exists()


def test_a_multi_run_audit_says_its_verdict_in_four_words():
    """refuted when the bound exceeds the claim, no power when the rule chosen guesses every run on one side, else
    not refuted with the ceiling; the relation and design named in each."""
    from inputdp.benchmarks.audits.multi_run import MultiRunResult, Rule

    def result(lb: float, tau: float) -> MultiRunResult:
        return MultiRunResult(method="dpsgd", epsilon_claimed=1.0, canary_kind="exclusive_support",
                              score="exclusive_weight_change", runs=16, rule=Rule(tau, "above", "with"),
                              counts=Counts(4, 4, 0, 0), epsilon_lb=lb, ceiling=1.3, selection_bound=0.0, failed=0,
                              wall_s=1.0, median_test_accuracy=0.9, relation="replace_input", design="replaced")

    assert result(1.43, 0.5).verdict() == "refuted under replace_input (replaced design): 1.43 > 1"
    assert result(0.0, -math.inf).verdict().startswith("no power under replace_input (replaced design)")
    assert result(0.2, 0.5).verdict() == "not refuted (ceiling 1.30) under replace_input (replaced design)"
