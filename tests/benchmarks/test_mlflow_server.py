"""Integration: a real `mlflow server` on 127.0.0.1, a run logged through it, read back, server stopped by pid."""

from __future__ import annotations

import os

import pytest

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import resolve, with_checked_data
from inputdp.benchmarks.server import start_mlflow_server
from inputdp.benchmarks.tracking import MLflowTracker, client, experiment_id
from inputdp.core.config import PerfFlags

from ..helpers import smoke_config

pytestmark = pytest.mark.integration


@pytest.mark.slow
def test_run_through_real_server(tmp_path):
    server = start_mlflow_server(f"sqlite:///{tmp_path / 'server.db'}", artifacts_dir=str(tmp_path / "art"),
                                 log_path=str(tmp_path / "server.log"))
    try:
        config = smoke_config("nonprivate")
        result = run(resolve(config), PerfFlags(device="cpu", progress=False), MLflowTracker(server.uri, "server-test"))
        c = client(server.uri)
        (r,) = c.search_runs([experiment_id(c, "server-test")])
        assert r.info.status == "FINISHED" and r.data.tags["config_key"] == resolve(with_checked_data(config)).key()
        assert r.data.metrics["final_test_accuracy"] == pytest.approx(result.metrics["final_test_accuracy"])
        assert len(c.get_metric_history(r.info.run_id, "epoch_time_s")) == 1
    finally:
        pid = server.pid
        server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
def test_a_study_store_read_through_the_rest_api(tmp_path):
    """A study run into a sqlite store, then a real server on that store: its REST API gives the runs, grouped by
    method and epsilon, nested under the study's parent run, with their data set; the experiment opens on runs."""
    import collections
    import json
    import urllib.request

    from inputdp.benchmarks.cli import main
    from inputdp.core import names

    store = f"sqlite:///{tmp_path / 'study.db'}"
    assert main(["study", "run", "smoke", "--tracking-uri", store, "--no-progress", "--device", "cpu"]) == 0
    server = start_mlflow_server(store, artifacts_dir=str(tmp_path / "art"), log_path=str(tmp_path / "server.log"))

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{server.uri}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    try:
        with urllib.request.urlopen(f"{server.uri}/api/2.0/mlflow/experiments/get-by-name?experiment_name=smoke",
                                    timeout=30) as response:
            experiment = json.loads(response.read())["experiment"]
        tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
        assert tags[names.EXPERIMENT_KIND_TAG] == names.EXPERIMENT_KIND
        runs = post("runs/search", {"experiment_ids": [experiment["experiment_id"]], "max_results": 100})["runs"]
    finally:
        server.stop()

    def tag(run, key):
        return {t["key"]: t["value"] for t in run["data"].get("tags", [])}.get(key)

    def param(run, key):
        return {p["key"]: p["value"] for p in run["data"].get("params", [])}.get(key)

    (parent,) = [r for r in runs if tag(r, names.TAG_KIND) == names.KIND_STUDY]
    children = [r for r in runs if tag(r, names.TAG_PARENT_RUN) == parent["info"]["run_id"]]
    training = [r for r in children if tag(r, names.TAG_KIND) is None]
    groups = collections.Counter((tag(r, names.TAG_METHOD), param(r, names.PARAM_EPSILON)) for r in training)
    assert groups == {("nonprivate", "inf"): 2, ("dirichlet_softmax", "4.0"): 2}  # two seeds each
    assert all(r["info"]["status"] == "FINISHED" for r in training)
    audits = [r for r in children if tag(r, names.TAG_KIND) == names.KIND_AUDIT]
    # the smoke study's three audits of its one private row: random patterns, exclusive support, canary inputs
    assert len(audits) == 3 and all(a["info"]["run_name"].startswith(names.AUDIT_RUN_PREFIX) for a in audits)
    assert all(r["inputs"]["dataset_inputs"][0]["dataset"]["name"] == "synthetic" for r in training)


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="needs a headless Chromium (Debian: apt install chromium)")
def test_the_runs_view_shows_the_key_metrics_as_columns_in_the_mlflow_ui(tmp_path, capsys):
    """The link `bench run` prints opens MLflow's runs table (a real server, headless Chromium) on the training runs,
    not folded under their sweep, with accuracy, epsilon spent and epoch time as columns; the experiment's page
    without the view shows none of those columns (what the view adds)."""
    import subprocess

    from inputdp.benchmarks.cli import main

    store = f"sqlite:///{tmp_path / 'view.db'}"
    assert main(["run", "--methods", "nonprivate,dpsgd", "--dataset", "synthetic", "--preset", "smoke",
                 "--tracking-uri", store, "--no-progress", "--device", "cpu"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("in MLflow: ")]
    assert line.startswith(f"in MLflow: mlflow ui --backend-store-uri {store}, then http://127.0.0.1:5000/#/")
    path = line.split("http://127.0.0.1:5000/", 1)[1]
    server = start_mlflow_server(store, artifacts_dir=str(tmp_path / "art"), log_path=str(tmp_path / "server.log"))

    def dom(url: str) -> str:
        proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000",
                               "--virtual-time-budget=20000", "--dump-dom", url],
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    try:
        viewed = dom(f"{server.uri}/{path}")
        plain = dom(f"{server.uri}/{path.split('?', 1)[0]}")
    finally:
        server.stop()
    # (the grid draws only the columns in sight: the parameters and tags further right are not in the DOM)
    for column in ("final_test_accuracy", "final_epsilon_spent", "median_epoch_time_s"):
        assert column in viewed, column
        assert column not in plain, column
    assert "dpsgd-synthetic-eps1-s0" in viewed and "nonprivate-synthetic-epsinf-s0" in viewed
    assert "dpsgd-synthetic-eps1-s0" not in plain  # folded under the sweep's parent run there
