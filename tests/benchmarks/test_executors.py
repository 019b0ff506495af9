"""Distributed sweeps: a real local Ray cluster and a real `mlflow server` on loopback; a worker killed by pid.

Every process these tests start is stopped by its id.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from inputdp.benchmarks.server import start_mlflow_server
from inputdp.benchmarks.tracking import client, experiment_id

from ..helpers import not_parents

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SWEEP = ["--methods", "dirichlet_softmax,gaussian_penultimate", "--dataset", "synthetic", "--preset", "smoke",
         "--epsilons", "1,4", "--seeds", "0", "--no-progress"]  # 4 configurations on 2 workers


def _bench(args, env_extra=None, **kw) -> subprocess.Popen:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", **(env_extra or {})}
    return subprocess.Popen([sys.executable, "-m", "inputdp.benchmarks.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env=env, **kw)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def _statuses(uri: str, experiment: str) -> dict[str, list]:
    c = client(uri)
    runs = not_parents(c.search_runs([experiment_id(c, experiment)], max_results=1000))
    out: dict[str, list] = {}
    for r in runs:
        out.setdefault(r.info.status, []).append(r)
    return out


@pytest.fixture
def server(tmp_path):
    s = start_mlflow_server(f"sqlite:///{tmp_path / 'server.db'}", artifacts_dir=str(tmp_path / "art"),
                            log_path=str(tmp_path / "server.log"))
    yield s
    s.stop()


def test_ray_sweep_survives_a_killed_worker(server, tmp_path):
    args = [*SWEEP, "--epochs", "8", "--tracking-uri", server.uri,
            "--experiment", "ray", "--executor", "ray", "--workers", "2", "--cpus-per-run", "1"]
    proc = _bench(["run", *args], cwd=tmp_path)
    killed_pid = None
    try:
        deadline = time.monotonic() + 240
        while killed_pid is None and time.monotonic() < deadline and proc.poll() is None:
            for r in _statuses(server.uri, "ray").get("RUNNING", []):
                history = client(server.uri).get_metric_history(r.info.run_id, "epoch_time_s")
                if history and "pid" in r.data.tags:
                    killed_pid = int(r.data.tags["pid"])
                    os.kill(killed_pid, signal.SIGKILL)  # a worker dies mid-run
                    break
            time.sleep(0.3)
        out, err = proc.communicate(timeout=400)
    finally:
        _stop(proc)
    assert killed_pid is not None, "no running run was found to kill"
    assert proc.returncode == 1 and "1 configuration(s) failed" in err, err[-2000:]
    before = _statuses(server.uri, "ray")
    assert len(before.get("FINISHED", [])) == 3 and len(before.get("FAILED", [])) == 1
    assert "RUNNING" not in before
    assert before["FAILED"][0].data.tags["pid"] == str(killed_pid)

    again = _bench(["run", *args], cwd=tmp_path)
    try:
        out, err = again.communicate(timeout=400)
    finally:
        _stop(again)
    assert again.returncode == 0, err[-2000:]
    assert "skipped 3 configuration(s)" in out
    after = _statuses(server.uri, "ray")
    finished = after.get("FINISHED", [])
    assert len(finished) == 4 and len({r.data.tags["config_key"] for r in finished}) == 4
    assert len(after.get("FAILED", [])) == 1 and "RUNNING" not in after


def test_submitit_local_array(server, tmp_path):
    proc = _bench(["run", "--methods", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke", "--epsilons",
                   "1,4", "--seeds", "0", "--no-progress", "--epochs", "1",
                   "--tracking-uri", server.uri, "--experiment", "slurm", "--executor", "submitit",
                   "--submitit-cluster", "local", "--submitit-folder", str(tmp_path / "logs")], cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        _stop(proc)
    assert proc.returncode == 0, err[-2000:]
    statuses = _statuses(server.uri, "slurm")
    assert len(statuses.get("FINISHED", [])) == 2 and set(statuses) == {"FINISHED"}


def test_distributed_executors_refuse_a_sqlite_store(capsys):
    from inputdp.benchmarks.cli import main

    code = main(["run", *SWEEP, "--executor", "ray", "--tracking-uri", "sqlite:///x.db"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "bench server" in err


def test_multi_run_audit_on_ray(tmp_path):
    """bench audit --runs through the Ray executor: every run comes back, and the scores keep their runs."""
    import json

    proc = _bench(["audit", "--runs", "8", "--method", "dirichlet_softmax", "--dataset", "synthetic", "--preset", "smoke",
                   "--model", "mlp", "--steps", "120", "--canary-kind", "exclusive_support", "--epsilon", "4",
                   "--no-track", "--json", "--executor", "ray", "--workers", "2"],
                  cwd=tmp_path, env_extra={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        _stop(proc)
    assert proc.returncode == 0, err[-2000:]
    result = json.loads(out.strip().splitlines()[-1])
    per_run = result["per_run"]
    assert sorted(seed for seed, _, _ in per_run) == list(range(8)) and result["failed"] == 0
    assert all((score > 0) == included for _, included, score in per_run)
