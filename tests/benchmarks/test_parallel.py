"""The local executor's parallel processes (``--workers N``): the same runs, the same results, the sweep's order.

A run's results are a function of its configuration and of the intra-op thread count its float reductions were split
over (logged as ``perf.threads``): on the same count, serial and parallel runs are bit-identical; on another count
they agree to float32 rounding per step (measured: DP-SGD's loss to 2e-7, Dirichlet's test loss to 3e-7 after one
smoke epoch), which the non-private reference's unclipped steps carry further (its loss to 1e-3 relative).
"""

from __future__ import annotations

import pytest

from inputdp.benchmarks.executors import LocalExecutor
from inputdp.benchmarks.resolve import check_feasible
from inputdp.benchmarks.sweep import run_sweep
from inputdp.benchmarks.tracking import client, experiment_id
from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError

from ..helpers import not_parents, smoke_config

pytestmark = pytest.mark.slow

NOT_RESULTS = ("time", "seconds", "memory")  # what the machine, not the run, decides


def _metrics(uri: str) -> dict[str, tuple[dict, str]]:
    c = client(uri)
    out = {}
    for r in not_parents(c.search_runs([experiment_id(c, "inputdp")])):
        metrics = {k: v for k, v in r.data.metrics.items() if not any(t in k for t in NOT_RESULTS)}
        history = tuple(m.value for m in c.get_metric_history(r.info.run_id, "loss"))
        out[r.data.tags["config_key"]] = (metrics, history, r.data.params["perf.threads"])
    return out


def test_parallel_runs_are_bit_identical_to_serial_ones_on_the_same_threads(tmp_path):
    configs = [smoke_config("dpsgd", epsilon=1.0), smoke_config("dirichlet_softmax", epsilon=4.0),
               smoke_config("nonprivate")]
    one_thread = PerfFlags(device="cpu", progress=False, threads=1)
    serial = run_sweep(check_feasible(configs), tracking_uri=f"sqlite:///{tmp_path / 'serial.db'}", perf=one_thread)
    parallel = run_sweep(check_feasible(configs), tracking_uri=f"sqlite:///{tmp_path / 'parallel.db'}", perf=one_thread,
                         executor_options={"workers": 2})
    assert [r.config.method for r in parallel.ran] == ["dpsgd", "dirichlet_softmax", "nonprivate"]  # sweep order

    def results(outcome):
        return [{k: v for k, v in r.metrics.items() if not any(t in k for t in NOT_RESULTS)} for r in outcome.ran]

    assert results(parallel) == results(serial)
    a, b = _metrics(f"sqlite:///{tmp_path / 'serial.db'}"), _metrics(f"sqlite:///{tmp_path / 'parallel.db'}")
    assert len(a) == 3 and a == b  # every metric, every step's loss, the thread count
    assert {threads for _, _, threads in b.values()} == {"1"}


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_workers_must_be_a_positive_integer(workers):
    with pytest.raises(ConfigError, match=f"--workers {workers!r} is not allowed: give an integer >= 1"):
        LocalExecutor(workers=workers)


def test_threads_per_run_share_the_cores(monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert LocalExecutor(workers=2).threads_per_run(PerfFlags()) == 4
    assert LocalExecutor(workers=16).threads_per_run(PerfFlags()) == 1
    assert LocalExecutor(workers=2).threads_per_run(PerfFlags(threads=3)) == 3


def _spawned_children(pid: int) -> list[int]:
    """The worker processes a sweep spawned (from /proc: no psutil needed)."""
    import os

    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and "spawn_main" in cmd:
            out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not __import__("os").path.isdir("/proc"), reason="reads /proc")
def test_a_terminated_parallel_sweep_stops_its_workers(tmp_path):
    """SIGTERM to `bench run --workers 2` ends the command (exit 143) and its worker processes with it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    args = [sys.executable, "-m", "inputdp.benchmarks.cli", "run", "--methods", "dpsgd,dirichlet_softmax",
            "--dataset", "synthetic", "--preset", "smoke", "--epsilons", "1", "--epochs", "30", "--no-progress",
            "--workers", "2", "--tracking-uri", f"sqlite:///{tmp_path / 'sweep.db'}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "INPUTDP_CACHE": str(tmp_path / "cache")})
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2:
            time.sleep(1)
            workers = _spawned_children(proc.pid)
        assert len(workers) == 2, "the workers did not start"
        # into their runs: the readiness signal is each run's "started" note in the store, not a fixed wait
        from inputdp.benchmarks import tracking

        started = 0
        while time.monotonic() < deadline and started < 2:
            time.sleep(0.5)
            if (tmp_path / "sweep.db").exists():
                c, exp = tracking.open_store(f"sqlite:///{tmp_path / 'sweep.db'}", "inputdp")
                started = sum(r.data.tags.get("status_note") == "started" for r in c.search_runs([exp]))
        assert started == 2, "the workers' runs did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.5)
        assert not [w for w in workers if _alive(w)], "workers left running"
    finally:
        if proc.poll() is None:
            proc.kill()
