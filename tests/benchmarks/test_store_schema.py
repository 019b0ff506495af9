"""The store schema: a new experiment is tagged with it, the leaderboard refuses an older one in one line naming the
migration, and ``bench store migrate`` brings runs logged in the old format (written here with MLflow's own client,
as the older code wrote them) up to what the leaderboard reads, without changing any value a run has."""

from __future__ import annotations

import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from inputdp.benchmarks.audits.scores import WHITE_BOX
from inputdp.benchmarks.cli import main
from inputdp.benchmarks.tracking import STORE_SCHEMA, open_store, schema_of
from inputdp.core import names
from inputdp.core.claims import ADD_REMOVE, RELATION_VALUES, REPLACE_INPUT
from inputdp.core.errors import ConfigError
from inputdp.reports.leaderboard import load_runs, tidy

EXP = "old"


def _run(c: MlflowClient, exp: str, name: str, *, tags: dict, params: dict | None = None,
         metrics: list[tuple[str, float, int]] = (), status: str = "FINISHED") -> str:
    run = c.create_run(exp, run_name=name, tags=tags)
    c.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in (params or {}).items()],
                metrics=[Metric(k, v, 1000 + step, step) for k, v, step in metrics])
    c.set_terminated(run.info.run_id, status)
    return run.info.run_id


def _common(method: str, **tags) -> dict:
    return {names.TAG_METHOD: method, names.TAG_DATASET: "synthetic", names.TAG_PRESET: "smoke",
            names.TAG_SEED: "0", **tags}


@pytest.fixture
def old_store(tmp_path):
    """An experiment as the code before the schema tag wrote it: no schema tag, a training run whose relation is
    only in its adjacency text and whose epsilon is only per epoch, runs whose lr_rule is only a method option, two
    audits with one bound each and no design, a mechanism audit without its relation key; and runs that already
    carry what the steps add (left as they are), a killed audit (not read)."""
    uri = f"sqlite:///{tmp_path / 'old.db'}"
    c = MlflowClient(uri)
    exp = c.create_experiment(EXP)
    replace, add_remove = RELATION_VALUES[REPLACE_INPUT], RELATION_VALUES[ADD_REMOVE]
    params = {names.PARAM_EPSILON: 1.0, names.PARAM_DELTA: 1e-5, names.PARAM_SAMPLING_RATE: 0.05, names.PARAM_STEPS: 20,
              names.PARAM_MODEL: "tiny_cnn"}
    ids = {
        "train": _run(c, exp, "train", tags=_common("dpsgd", **{names.TAG_PRIVACY_ADJACENCY: replace.text}),
                      params=params, metrics=[(names.METRIC_EPSILON_SPENT, e, s) for s, e in enumerate((0.3, 0.6, 0.99))]
                      + [(names.METRIC_FINAL_TEST_ACCURACY, 0.5, 0)]),
        # the smoke preset's own lr_rule is kappa: this run's fixed is another recipe, its variant silent on it
        "fixed": _run(c, exp, "fixed", tags=_common("dirichlet_softmax", **{names.TAG_VARIANT: "accountant=rdp"}),
                      params={**params, names.PARAM_METHOD_OPTIONS + "lr_rule": "fixed"},
                      metrics=[(names.METRIC_FINAL_TEST_ACCURACY, 0.4, 0)]),
        "own": _run(c, exp, "own", tags=_common("dirichlet_softmax"),  # the preset's own rule: the plain name
                    params={**params, names.PARAM_METHOD_OPTIONS + "lr_rule": "kappa"},
                    metrics=[(names.METRIC_FINAL_TEST_ACCURACY, 0.45, 0)]),
        "black": _run(c, exp, "audit-black", tags=_common("dpsgd", **{
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_BEST_SCORE: "loss",
            names.TAG_PRIVACY_ADJACENCY: add_remove.text}), params=params,
            metrics=[(names.METRIC_EPSILON_LB, 0.25, 0), (names.METRIC_EPSILON_LB_CEILING, 5.6, 0)]),
        "white": _run(c, exp, "audit-white", tags=_common("dpsgd", **{
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_BEST_SCORE: WHITE_BOX[0]}), params=params,
            metrics=[(names.METRIC_EPSILON_LB, 0.5, 0), (names.METRIC_EPSILON_LB_CEILING, 4.0, 0)]),
        # current in every respect, its relation tag saying otherwise than its text: a value a run has stays
        "current": _run(c, exp, "current", tags=_common("dpsgd", **{
            names.TAG_PRIVACY_ADJACENCY: replace.text, names.TAG_PRIVACY_RELATION: ADD_REMOVE}), params=params,
            metrics=[(names.METRIC_EPSILON_SPENT, 0.5, 0), (names.METRIC_FINAL_EPSILON_SPENT, 0.98, 0),
                     (names.METRIC_FINAL_TEST_ACCURACY, 0.6, 0)]),
        "split": _run(c, exp, "audit-split", tags=_common("dpsgd", **{
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_BEST_SCORE: "loss", names.TAG_AUDIT_DESIGN: "replaced",
            names.TAG_PRIVACY_RELATION: REPLACE_INPUT}), params=params,
            metrics=[(names.METRIC_EPSILON_LB, 0.3, 0), (names.METRIC_THREAT_BOUND.format("black_box"), 0.3, 0),
                     (names.METRIC_THREAT_CEILING.format("black_box"), 5.0, 0)]),
        "mechanism": _run(c, exp, "mechanism", tags=_common("dpsgd", **{
            names.TAG_KIND: names.KIND_MECHANISM_AUDIT, names.TAG_PRIVACY_ADJACENCY: replace.text}), params=params),
        "named": _run(c, exp, "named", tags=_common("dirichlet_softmax", **{names.TAG_VARIANT: "lr_rule=fixed"}),
                      params={**params, names.PARAM_METHOD_OPTIONS + "lr_rule": "fixed"},
                      metrics=[(names.METRIC_FINAL_TEST_ACCURACY, 0.41, 0)]),
        # a preset this checkout does not know: the baseline is the defaults, as Method.variant takes it today
        "unknown": _run(c, exp, "unknown", tags={**_common("dirichlet_softmax"), names.TAG_PRESET: "nosuch"},
                        params={**params, names.PARAM_METHOD_OPTIONS + "lr_rule": "kappa"},
                        metrics=[(names.METRIC_FINAL_TEST_ACCURACY, 0.42, 0)]),
        "killed": _run(c, exp, "killed", tags=_common("dpsgd", **{names.TAG_KIND: names.KIND_AUDIT,
                                                                  names.TAG_AUDIT_BEST_SCORE: "loss"}),
                       params=params, metrics=[(names.METRIC_EPSILON_LB, 9.0, 0)], status="KILLED"),
    }
    return uri, c, exp, ids


def test_a_new_experiment_is_made_in_the_current_schema_and_an_old_one_keeps_its_own(tmp_path):
    uri = f"sqlite:///{tmp_path / 'new.db'}"
    c, exp = open_store(uri, "fresh")
    assert schema_of(c, exp) == STORE_SCHEMA == 3
    old = MlflowClient(uri).create_experiment("made-before")
    c, exp = open_store(uri, "made-before")  # opened for writing by this code: still not migrated
    assert exp == old and schema_of(c, exp) == 1


def test_the_leaderboard_refuses_an_old_experiment_in_one_line_naming_the_migration(old_store):
    uri, *_ = old_store
    with pytest.raises(ConfigError) as err:
        load_runs(uri, EXP)
    assert "\n" not in str(err.value) and "schema 1" in str(err.value)
    assert f"bench store migrate --tracking-uri {uri} --experiment {EXP}" in str(err.value)


def test_bench_report_on_an_old_experiment_is_one_line(old_store, tmp_path, capsys):
    uri, *_ = old_store
    assert main(["report", "--tracking-uri", uri, "--experiment", EXP, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bench store migrate" in err and not (tmp_path / "r").exists()


def test_migrate_adds_what_the_leaderboard_reads_and_changes_no_value(old_store, capsys):
    uri, c, exp, ids = old_store
    before = {k: c.get_run(i).data for k, i in ids.items()}
    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP, "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "dry run" in dry and "10 finished runs read" in dry
    assert schema_of(c, exp) == 1 and c.get_run(ids["train"]).data.tags == before["train"].tags  # nothing written

    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP]) == 0
    out = capsys.readouterr().out
    for line in ("relation: added to 3 run(s)", "threat_split: added to 2 run(s)", "lr_rule_variant: added to 2 run(s)",
                 "audit_design: added to 2 run(s)", "final_epsilon: added to 1 run(s)",
                 "audit_verdicts: added to 3 run(s)"):
        assert line in out, out
    assert schema_of(c, exp) == STORE_SCHEMA
    after = {k: c.get_run(i).data for k, i in ids.items()}
    for k in ids:  # what a run had, it still has, value for value (the variant grows by what it lacked)
        assert {t: v for t, v in before[k].tags.items() if t != names.TAG_VARIANT}.items() <= after[k].tags.items()
        assert before[k].metrics.items() <= after[k].metrics.items()
    for k in ("killed", "current", "named", "own"):  # not read, or carrying all already: untouched
        assert (after[k].tags, after[k].metrics) == (before[k].tags, before[k].metrics), k
    assert after["mechanism"].tags[names.TAG_PRIVACY_RELATION] == REPLACE_INPUT
    assert names.TAG_AUDIT_DESIGN not in after["mechanism"].tags  # its pairs are the release's, not canaries

    train, audits = tidy(load_runs(uri, EXP))
    row = train.set_index("run_id")
    assert row.loc[ids["train"], "relation"] == REPLACE_INPUT and row.loc[ids["train"], "epsilon_spent"] == 0.99
    assert row.loc[ids["current"], "relation"] == ADD_REMOVE and row.loc[ids["current"], "epsilon_spent"] == 0.98
    assert row.loc[ids["fixed"], "method"] == "dirichlet_softmax [accountant=rdp,lr_rule=fixed]"
    assert row.loc[ids["own"], "method"] == "dirichlet_softmax"
    assert row.loc[ids["named"], "method"] == "dirichlet_softmax [lr_rule=fixed]"
    assert row.loc[ids["unknown"], "method"] == "dirichlet_softmax [lr_rule=kappa]"
    a = audits.set_index("run_id")
    assert set(a.index) == {ids["black"], ids["white"], ids["split"], ids["mechanism"]}
    assert set(a.loc[[ids["black"], ids["white"]], "audit_design"]) == {"absent"}
    assert (a.loc[ids["black"], "lb_black_box"], a.loc[ids["black"], "ceiling_black_box"]) == (0.25, 5.6)
    assert (a.loc[ids["white"], "lb_white_box"], a.loc[ids["white"], "ceiling_white_box"]) == (0.5, 4.0)
    assert a.loc[ids["black"], ["lb_white_box", "ceiling_white_box"]].isna().all()
    assert a.loc[ids["white"], ["lb_black_box", "ceiling_black_box"]].isna().all()
    # each audit's verdict as fields, from the bounds it logged (the split ones' included): not refuted, its ceiling
    split = after["split"]
    assert split.tags["verdict.black_box.word"] == "not refuted" and split.metrics["verdict.black_box.ceiling"] == 5.0
    assert after["white"].tags["verdict.white_box.bound_kind"] == "steinke"
    assert after["white"].metrics["verdict.white_box.bound"] == 0.5

    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP]) == 0  # twice: nothing left to add
    assert "every run already carries what schema 3 reads" in capsys.readouterr().out
    assert {k: c.get_run(i).data.tags for k, i in ids.items()} == {k: d.tags for k, d in after.items()}


def test_a_newer_schema_is_refused_and_a_missing_experiment_named(old_store, capsys):
    uri, c, exp, _ = old_store
    c.set_experiment_tag(exp, names.EXPERIMENT_SCHEMA_TAG, str(STORE_SCHEMA + 1))
    with pytest.raises(ConfigError, match="newer inputdp"):
        load_runs(uri, EXP)
    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP]) == 2
    assert "newer inputdp" in capsys.readouterr().err
    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", "olld"]) == 2
    assert "'olld' is not in the store: it holds old" in capsys.readouterr().err
    assert main(["store", "schema", "--tracking-uri", uri]) == 0
    assert "old: schema 4 (this inputdp reads 3" in capsys.readouterr().out


def test_an_old_run_logged_after_the_migration_is_refused_and_bench_run_skips_the_audits(old_store, capsys):
    """A worker with an older inputdp writing into a migrated experiment: the leaderboard refuses the experiment
    until it is migrated again; ``bench run`` reads no stored audit of an experiment not in the current schema."""
    import argparse

    from inputdp.benchmarks.cli.run import _stored_refutations

    uri, c, exp, _ = old_store
    args = argparse.Namespace(tracking_uri=uri, experiment=EXP)
    assert _stored_refutations(c, exp, args) == {} and "stored audits not read" in capsys.readouterr().out
    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP]) == 0
    load_runs(uri, EXP)
    _run(c, exp, "late", tags=_common("dpsgd", **{names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_BEST_SCORE: "loss"}),
         metrics=[(names.METRIC_EPSILON_LB, 7.0, 0)])
    with pytest.raises(ConfigError, match="holds 1 finished run.s. logged in an older schema since it was migrated"):
        load_runs(uri, EXP)
    capsys.readouterr()
    assert main(["store", "migrate", "--tracking-uri", uri, "--experiment", EXP]) == 0
    assert "audit_design: added to 1 run(s)" in capsys.readouterr().out
    assert not tidy(load_runs(uri, EXP))[1].empty
