"""The harness with the real MLflow (sqlite store): params, per-epoch metrics, sweeps that resume."""

from __future__ import annotations

import pytest

from inputdp.benchmarks.harness import PrivacyLedgerError, run
from inputdp.benchmarks.resolve import check_feasible, resolve, with_checked_data
from inputdp.benchmarks.sweep import Overrides, expand, run_sweep
from inputdp.benchmarks.tracking import MLflowTracker, client, experiment_id

from ..helpers import QUIET, smoke_config


@pytest.mark.slow
def test_run_logs_params_tags_and_epoch_metrics(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    config = smoke_config("dirichlet_softmax", epochs=2)
    result = run(resolve(config), QUIET, MLflowTracker(uri, "t"))
    c = client(uri)
    (r,) = c.search_runs([experiment_id(c, "t")])
    assert r.info.status == "FINISHED"
    assert r.data.params["method"] == "dirichlet_softmax" and float(r.data.params["noise.r"]) > 0
    assert r.data.params["lr.lr_rule"] == "kappa" and "lr.lr_effective" in r.data.params
    assert r.data.params["norm_used"] == "group"
    # the match key names the data by content: the name and the fingerprint of the arrays the run read
    assert r.data.tags["match_key"] == with_checked_data(config).match_key() != config.match_key()
    assert r.data.tags["match_key"].startswith("synthetic@") and r.data.tags["privacy.protects"] == "inputs"
    history = c.get_metric_history(r.info.run_id, "epoch_time_s")
    assert [m.step for m in history] == [1, 2] and all(m.value > 0 for m in history)
    for key in ("loss", "train_accuracy", "test_accuracy", "epsilon_spent"):
        assert len(c.get_metric_history(r.info.run_id, key)) == 2
    assert r.data.metrics["final_test_accuracy"] == pytest.approx(result.metrics["final_test_accuracy"])
    assert r.data.metrics["peak_memory_mb"] > 0
    assert r.data.metrics["final_epsilon_spent"] == pytest.approx(result.calibration.epsilon, rel=1e-12)
    # what the claim is, and what its released vectors spend at least, beside the paper's number at that noise
    tags, metrics = r.data.tags, r.data.metrics
    assert tags["privacy.accountant"] == result.claim.accountant and tags["privacy.guarantee"] == "false"
    assert tags["privacy.adjacency"].startswith("one input replaced")
    assert metrics["epsilon_vectors_lb"] == pytest.approx(result.calibration.details["epsilon_vectors_lower"])
    assert metrics["epsilon_vectors_lb"] <= result.calibration.epsilon
    assert metrics["epsilon_paper_accountant"] == pytest.approx(result.claim.paper_epsilon)


@pytest.mark.slow
def test_sweep_skips_finished_and_reruns_unfinished(tmp_path):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    configs = expand(methods=["nonprivate", "dirichlet_softmax"], dataset="synthetic", preset="smoke", epsilons=[1, 4],
                     seeds=[0], overrides=Overrides(epochs=1))
    assert len(configs) == 3  # the non-private reference once per seed
    first = run_sweep(check_feasible(configs), tracking_uri=uri, perf=QUIET)
    assert len(first.ran) == 3 and not first.skipped
    # a run whose process died without ending it (as after SIGKILL) stays RUNNING in the store
    import socket
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale_cfg = configs[0].replace(seed=7)
    c = client(uri)
    c.create_run(experiment_id(c), tags={"config_key": resolve(with_checked_data(stale_cfg)).key(),
                                         "pid": dead.stdout.strip(), "host": socket.gethostname()})
    second = run_sweep(check_feasible([*configs, stale_cfg]), tracking_uri=uri, perf=QUIET)
    assert len(second.skipped) == 3 and len(second.ran) == 1 and second.marked_failed == 1
    c = client(uri)
    runs = c.search_runs([experiment_id(c)])
    statuses = sorted(r.info.status for r in runs)
    assert statuses == ["FAILED"] + ["FINISHED"] * 4


@pytest.mark.slow
def test_failed_run_is_marked_failed(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    from inputdp.methods.dirichlet_softmax import DirichletSoftmax

    monkeypatch.setattr(DirichletSoftmax, "epsilon_spent", lambda self, steps: 99.0)  # a lying ledger
    with pytest.raises(PrivacyLedgerError):
        run(resolve(smoke_config("dirichlet_softmax")), QUIET, MLflowTracker(uri))
    c = client(uri)
    (r,) = c.search_runs([experiment_id(c)])
    assert r.info.status == "FAILED"


@pytest.mark.slow
def test_a_finished_run_keeps_no_bookkeeping_tags_and_an_audit_is_named_so(tmp_path):
    from inputdp.benchmarks.audits.one_run import audit
    from inputdp.core import names

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    out = run_sweep(check_feasible(expand(methods=["nonprivate"], dataset="synthetic", preset="smoke", epsilons=[1], seeds=[0],
                           overrides=Overrides(steps=4))), tracking_uri=uri, perf=QUIET)
    assert len(out.ran) == 1
    (finished,) = client(uri).search_runs([experiment_id(client(uri))])
    assert finished.info.status == "FINISHED"
    assert set(names.BOOKKEEPING_TAGS).isdisjoint(finished.data.tags)  # pid, host, owner, heartbeat, claim, note
    assert finished.data.tags[names.TAG_METHOD] == "nonprivate"  # what the run is stays
    tracker = MLflowTracker(uri, extra_tags={names.TAG_KIND: names.KIND_AUDIT})
    audit(resolve(smoke_config("nonprivate", steps=4)), canaries=20, perf=QUIET, tracker=tracker)
    names_seen = {r.info.run_name for r in client(uri).search_runs([experiment_id(client(uri))])}
    assert any(n.startswith(names.AUDIT_RUN_PREFIX) for n in names_seen)
    assert sum(not n.startswith(names.AUDIT_RUN_PREFIX) for n in names_seen) == 1


@pytest.mark.slow  # over 3 s on a slow 2-core machine (2026-12-06)
def test_mlflow_shows_what_a_run_is_and_a_parent_spans_its_runs(tmp_path):
    """Each finished run has a description (method, budget, relation, guarantee, accuracy) and its resolved
    configuration as an artifact; a run marked FAILED never shares its name with the finished one of its
    configuration; a sweep's parent run ends with its last run, not milliseconds after it was made."""
    import json
    import socket
    import subprocess
    import sys

    from inputdp.core import names

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    configs = expand(methods=["nonprivate", "dpsgd"], dataset="synthetic", preset="smoke", epsilons=[4], seeds=[0],
                     overrides=Overrides(steps=6))
    runs = check_feasible(configs)
    # a run of dpsgd's configuration left RUNNING by a dead process: marked FAILED when the sweep claims it
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    c = client(uri)
    dpsgd = next(r for r in runs if r.config.method == "dpsgd")
    c.create_run(experiment_id(c), run_name="dpsgd-synthetic-eps4-s0", tags={
        names.TAG_CONFIG_KEY: dpsgd.key(), names.TAG_PID: dead.stdout.strip(), names.TAG_HOST: socket.gethostname()})
    run_sweep(runs, tracking_uri=uri, perf=QUIET, nest=True)
    stored = c.search_runs([experiment_id(c)])
    (parent,) = [r for r in stored if r.data.tags.get(names.TAG_KIND) == names.KIND_SWEEP]
    children = [r for r in stored if r.data.tags.get(names.TAG_PARENT_RUN) == parent.info.run_id]
    assert len(children) == 2 and parent.info.end_time == max(r.info.end_time for r in children)
    finished = {r.data.tags[names.TAG_METHOD]: r for r in children}
    note = finished["dpsgd"].data.tags[names.TAG_NOTE]
    assert note.startswith("dpsgd on synthetic (smoke preset) at epsilon 4 under add/remove one example: a guarantee")
    assert "test accuracy" in note and "no privacy" in finished["nonprivate"].data.tags[names.TAG_NOTE]
    got = json.loads((tmp_path / c.download_artifacts(finished["dpsgd"].info.run_id, names.RESOLVED_CONFIG_ARTIFACT,
                                                      str(tmp_path))).read_text())
    assert got["configuration"]["method"] == "dpsgd" and got["configuration"]["privacy"]["epsilon"] == 4
    failed = [r for r in stored if r.info.status == "FAILED"]
    assert [r.info.run_name for r in failed] == ["dpsgd-synthetic-eps4-s0 [failed]"]
    assert finished["dpsgd"].info.run_name == "dpsgd-synthetic-eps4-s0"


@pytest.mark.slow
def test_log_model_keeps_the_released_model_as_an_artifact_that_loads_back(tmp_path, capsys):
    """`bench run --log-model`: each finished run holds model/state_dict.pt, which loads into the model its
    resolved_config.json names and predicts as the run's model did (its test accuracy, recomputed); without the flag
    no model is logged."""
    import json

    import torch

    from inputdp.benchmarks.cli import main
    from inputdp.benchmarks.models import build_model
    from inputdp.benchmarks.tracking import client
    from inputdp.datasets import load_tensor_data

    store = f"sqlite:///{tmp_path / 'm.db'}"
    flags = ["run", "--methods", "nonprivate", "--dataset", "synthetic", "--preset", "smoke", "--no-progress",
             "--device", "cpu", "--tracking-uri", store]
    assert main([*flags, "--log-model"]) == 0
    assert main([*flags, "--seeds", "1"]) == 0
    c = client(store)
    exp = c.get_experiment_by_name("inputdp").experiment_id
    runs = {r.data.tags.get("seed"): r for r in c.search_runs([exp], "attributes.status = 'FINISHED'")
            if r.data.tags.get("seed") is not None}
    logged = [a.path for a in c.list_artifacts(runs["0"].info.run_id, "model")]
    assert logged == ["model/state_dict.pt"] and not c.list_artifacts(runs["1"].info.run_id, "model")
    state = torch.load(c.download_artifacts(runs["0"].info.run_id, "model/state_dict.pt", str(tmp_path)))
    config = json.loads(open(c.download_artifacts(runs["0"].info.run_id, "resolved_config.json",
                                                  str(tmp_path))).read())["configuration"]
    data = load_tensor_data("synthetic", train_examples=config["train_examples"], test_examples=config["test_examples"])
    model = build_model(config["model"], num_classes=data.info.num_classes, channels=data.info.channels,
                        size=data.info.size, norm=runs["0"].data.params["norm_used"], width=config["model_width"])
    model.load_state_dict(state)
    with torch.no_grad():
        accuracy = (model.eval()(data.x_test).argmax(1) == data.y_test).float().mean().item()
    assert accuracy == pytest.approx(runs["0"].data.metrics["final_test_accuracy"], abs=1e-6)
