"""Integration: a real `mlflow server` on 127.0.0.1, a run logged through it, read back, server stopped by pid."""

from __future__ import annotations

import os

import pytest

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.resolve import resolve
from inputdp.benchmarks.server import start_mlflow_server
from inputdp.benchmarks.sweep import with_data_fingerprint
from inputdp.benchmarks.tracking import MLflowTracker, client, experiment_id
from inputdp.core.config import PerfFlags

from .helpers import smoke_config

pytestmark = pytest.mark.integration


def test_run_through_real_server(tmp_path):
    server = start_mlflow_server(f"sqlite:///{tmp_path / 'server.db'}", artifacts_dir=str(tmp_path / "art"),
                                 log_path=str(tmp_path / "server.log"))
    try:
        config = smoke_config("nonprivate")
        result = run(config, PerfFlags(device="cpu", progress=False), MLflowTracker(server.uri, "server-test"))
        c = client(server.uri)
        (r,) = c.search_runs([experiment_id(c, "server-test")])
        assert r.info.status == "FINISHED" and r.data.tags["config_key"] == resolve(with_data_fingerprint(config)).key()
        assert r.data.metrics["final_test_accuracy"] == pytest.approx(result.metrics["final_test_accuracy"])
        assert len(c.get_metric_history(r.info.run_id, "epoch_time_s")) == 1
    finally:
        pid = server.pid
        server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
