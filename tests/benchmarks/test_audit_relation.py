"""An audit's neighbouring pairs follow its claim's relation (THEORY.md, "Auditing"): the relation is a value the
claim carries; under add/remove an excluded canary is absent, under replace_input its slot keeps its index and label
and holds the blank replacement; the audit stores the relation and design it used, and its store key tells the two
designs apart. Each test here fails when an audit's design and its claim's relation part."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inputdp.benchmarks.audits import one_run
from inputdp.benchmarks.audits.one_run import audit_relation, design_suffix, make_canaries, replacements, with_canaries
from inputdp.benchmarks.resolve import resolve
from inputdp.core import names
from inputdp.core.claims import (
    ABSENT,
    ADD_REMOVE,
    RELATION_TEXT,
    RELATION_VALUES,
    REPLACE_INPUT,
    REPLACED,
    PrivacyClaim,
    Relation,
    relation_named,
)
from inputdp.datasets import blank_value, load_tensor_data
from inputdp.methods import METHODS

from ..helpers import QUIET, smoke_config


@pytest.fixture(scope="module")
def small():
    return load_tensor_data("synthetic", train_examples=400, test_examples=100)


def test_relations_are_values_named_by_key_or_text():
    for key, text in RELATION_TEXT.items():
        assert relation_named(key) is relation_named(text) is RELATION_VALUES[key]
    assert RELATION_VALUES[ADD_REMOVE].excluded == ABSENT and RELATION_VALUES[REPLACE_INPUT].excluded == REPLACED
    with pytest.raises(ValueError, match="relation 'swap' is not known: choose one of add_remove, replace_input"):
        relation_named("swap")


def test_a_claim_carries_its_relation_and_logs_its_key():
    base = dict(mechanism="m", parameters={}, sampling="none", steps=1, epsilon=1.0, delta=1e-5, protects="inputs",
                scope="s")
    from_text = PrivacyClaim(**base, adjacency=RELATION_TEXT[REPLACE_INPUT])
    assert from_text.relation is RELATION_VALUES[REPLACE_INPUT]
    assert from_text.as_tags()[names.TAG_PRIVACY_RELATION] == REPLACE_INPUT
    from_key = PrivacyClaim(**base, relation=ADD_REMOVE)
    assert from_key.relation is RELATION_VALUES[ADD_REMOVE] and from_key.adjacency == RELATION_TEXT[ADD_REMOVE]
    assert PrivacyClaim(**base).relation is None


#: (method, options) whose claim names a relation, each relation a method offers
CASES = [("dpsgd", {}), ("dpsgd", {"adjacency": "replace_input"}), ("dirichlet_softmax", {}),
         ("dirichlet_softmax", {"accountant": "paper"}), ("gaussian_penultimate", {}), ("dp_least_squares", {}),
         ("dp_least_squares", {"adjacency": "add_remove"}), ("feature_perturbation", {}), ("pate", {})]


@pytest.mark.parametrize("method,options", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_every_private_method_claims_a_relation_the_audit_reads(method, options):
    r = resolve(smoke_config(method, method_options={method: options}))
    rel = r.claim.relation
    assert isinstance(rel, Relation), f"{method} {options}: its claim names no relation ({r.claim.adjacency!r})"
    assert audit_relation(r.claim) is rel
    assert design_suffix(r.claim) == (":replaced" if rel.excluded == REPLACED else "")
    if "adjacency" in options:
        assert rel.key == options["adjacency"]


def test_every_registered_private_method_names_a_relation():
    """A new private method that forgets its relation would be audited as add/remove without a word: refused here."""
    for name in METHODS.names():
        r = resolve(smoke_config(name))
        if r.claim.guarantee or r.claim.mechanism != "none":
            assert isinstance(r.claim.relation, Relation), f"{name}: its claim names no relation"


@pytest.mark.parametrize("kind", ["canary_inputs", "exclusive_support", "random_pattern", "mislabeled"])
def test_replace_design_keeps_every_slot_index_and_label(small, kind):
    m = 40 if kind != "exclusive_support" else 4
    data = small if kind != "exclusive_support" else load_tensor_data("synthetic", train_examples=50, test_examples=20)
    made = make_canaries(kind, data, m, seed=5, reference=10)
    n = made.base.train_size
    inc = torch.from_numpy(made.included)
    assert 0 < int(inc.sum()) < m
    replaced = with_canaries(made, relation=RELATION_VALUES[REPLACE_INPUT])
    assert replaced.train_size == n + m  # n unchanged between the two worlds of every canary
    assert torch.equal(replaced.y_train[n:], made.y)  # every label kept, in its slot
    assert torch.equal(replaced.x_train[n:][inc], made.x[inc])
    rep = replaced.x_train[n:][~inc]
    assert torch.equal(rep, replacements(made)[~inc])
    blank = torch.tensor(blank_value(made.base.info)).view(1, -1, 1, 1)
    c = blank.shape[1]
    assert torch.equal(rep[:, :c], blank.expand(rep.shape[0], c, *rep.shape[2:]))
    assert rep[:, c:].abs().sum() == 0  # canary_inputs: the own coordinate zeroed
    assert not any(torch.equal(rep[i], made.x[~inc][i]) for i in range(rep.shape[0]))
    absent = with_canaries(made, relation=RELATION_VALUES[ADD_REMOVE])
    assert absent.train_size == n + int(inc.sum())
    assert torch.equal(absent.x_train[n:], made.x[inc]) and torch.equal(absent.y_train[n:], made.y[inc])


class _Recorder:
    """The tracker surface an audit uses, recording what it logs."""

    run_id = "r"

    def __init__(self):
        self.tags: dict[str, str] = {}

    def on_start(self, config, params, tags):
        pass

    def on_epoch(self, *args, **kwargs):
        pass

    def on_end(self, metrics, status):
        self.status = status

    def log_summary(self, metrics, tags):
        self.tags.update(tags)


@pytest.mark.parametrize("method,options,relation,design", [
    ("dirichlet_softmax", {}, REPLACE_INPUT, REPLACED),
    ("dpsgd", {}, ADD_REMOVE, ABSENT),
])
def test_the_audit_trains_on_its_claims_design_and_stores_it(monkeypatch, small, method, options, relation, design):
    trained = {}
    real_run = one_run.run

    def spy(r, perf, callback=None, *, data, **kwargs):
        trained["n"] = data.train_size
        return real_run(r, perf, callback, data=data, **kwargs)

    monkeypatch.setattr(one_run, "run", spy)
    r = resolve(smoke_config(method, method_options={method: options}, steps=4))
    tracker = _Recorder()
    out = one_run.audit(r, canaries=20, canary_kind="canary_inputs", perf=QUIET, data=small, tracker=tracker)
    made = make_canaries("canary_inputs", small, 20, r.config.seed)
    expect = small.train_size + (20 if design == REPLACED else int(np.sum(made.included)))
    assert trained["n"] == expect
    assert (out.relation, out.design) == (relation, design)
    assert tracker.tags[names.TAG_AUDIT_RELATION] == relation and tracker.tags[names.TAG_AUDIT_DESIGN] == design
    assert out.as_json()["relation"] == relation


# --- power ---------------------------------------------------------------------------------------------------
def test_a_fixed_guess_on_one_side_has_no_power_and_says_so():
    rng = np.random.default_rng(0)
    included = rng.random(1000) < 0.5
    everyone_in = one_run.bound_fixed_guesses(rng.random(1000) + 0.1, included, delta=1e-5, beta=0.05, n_tests=2,
                                              score="canary_input_change")
    assert not everyone_in.power and everyone_in.correct == int(included.sum())  # the coins, counted
    exact = one_run.bound_fixed_guesses(np.where(included, 1.0, 0.0), included, delta=1e-5, beta=0.05, n_tests=2,
                                        score="canary_input_change")
    assert exact.power and exact.correct == 1000
    tied = one_run.bound_for_scores(np.ones(1000), included, delta=1e-5, beta=0.05, n_tests=14, score="loss")
    assert not tied.power
    assert one_run.bound_for_scores(rng.random(1000), included, delta=1e-5, beta=0.05, n_tests=14, score="loss").power

    def result(outcome):
        return one_run.AuditResult("m", 4.0, "canary_inputs", 1000, 0.9, [outcome], "s", relation=REPLACE_INPUT,
                                   design=REPLACED)

    assert result(everyone_in).verdict().startswith("no power under replace_input (replaced design)")
    assert result(everyone_in).ceiling_of("white_box") == 0.0
    assert result(exact).verdict().startswith("refuted under replace_input (replaced design): 5.")
    weak = one_run.bound_fixed_guesses(np.where(rng.random(1000) < 0.5, 1.0, -1.0), included, delta=1e-5, beta=0.05,
                                       n_tests=2, score="canary_input_change")
    assert weak.power and result(weak).verdict() == (f"not refuted (ceiling {weak.ceiling:.2f}) under replace_input "
                                                     "(replaced design)")


def test_dpsgds_canary_input_audit_has_no_power(small):
    """Noise moves every column of the widened map, so every canary is guessed "in": the test cannot refute."""
    r = resolve(smoke_config("dpsgd", steps=4))
    out = one_run.audit(r, canaries=50, canary_kind="canary_inputs", perf=QUIET, data=small)
    (o,) = out.outcomes
    assert not o.power and o.k == 50
    assert out.verdict().startswith("no power under add_remove")
