"""Each run says how contended its timing was (CPU seconds per wall second and the load average, per epoch), and a
contended run's times are left out of the leaderboard's speed figures."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from inputdp.benchmarks.harness import run
from inputdp.benchmarks.performance.load import contention
from inputdp.benchmarks.resolve import resolve
from inputdp.core import names
from inputdp.core.config import PerfFlags
from inputdp.reports.leaderboard.board import _uncontended_median

from ..helpers import smoke_config


def _history(*loads: float) -> list[dict[str, float]]:
    return [{names.METRIC_LOAD: x} for x in loads]


def test_contention_reads_the_median_load_of_the_timed_epochs():
    assert contention(_history(9.0, 2.1, 1.9, 2.0), threads=2) == {names.METRIC_CONTENDED: 0.0,
                                                                   names.METRIC_MAX_LOAD: 2.1}  # warm-up left out
    assert contention(_history(0.5, 4.2, 4.0, 3.9), threads=2)[names.METRIC_CONTENDED] == 1.0
    assert contention(_history(0.5, 4.2, 1.0, 1.1), threads=2)[names.METRIC_CONTENDED] == 0.0  # a lagging first one
    assert contention(_history(5.0), threads=2)[names.METRIC_CONTENDED] == 1.0  # one epoch: it is the timed one
    assert contention(_history(math.nan, math.nan), threads=2) == {}


def test_every_epoch_records_its_cpu_per_wall_and_load():
    result = run(resolve(smoke_config("nonprivate", epochs=2)), PerfFlags(device="cpu", progress=False, threads=1))
    for epoch in result.epochs:
        assert 0.0 < epoch[names.METRIC_CPU_PER_WALL] < 64 and epoch[names.METRIC_LOAD] >= 0
    assert result.metrics[names.METRIC_CONTENDED] in (0.0, 1.0)


def test_a_contended_run_is_left_out_of_the_median_time():
    g = pd.DataFrame({"median_epoch_time_s": [1.0, 1.2, 9.0], "contended": [0, 0, 1]})
    assert _uncontended_median(g) == 1.1
    assert math.isnan(_uncontended_median(g.assign(contended=1)))


@pytest.mark.slow
def test_an_own_loop_run_records_its_contention_too(monkeypatch):
    """PATE trains in its own loop (minutes a phase): the load is sampled through the fit, and a run timed while the
    load stood above its threads + 1 is flagged as a per-step run's is."""
    from inputdp.benchmarks.performance import load

    monkeypatch.setattr(load.LoadSampler, "__init__", _fast_sampler_init(load.LoadSampler.__init__))
    perf = PerfFlags(device="cpu", progress=False, threads=1)
    calm = run(resolve(smoke_config("pate", epsilon=8.0)), perf).metrics
    assert calm[names.METRIC_CONTENDED] in (0.0, 1.0) and 0.0 < calm[names.METRIC_CPU_PER_WALL] < 64
    monkeypatch.setattr(load, "load_average", lambda: 9.0)  # another job on every core
    busy = run(resolve(smoke_config("pate", epsilon=8.0)), perf).metrics
    assert busy[names.METRIC_CONTENDED] == 1.0 and busy[names.METRIC_MAX_LOAD] == 9.0


def _fast_sampler_init(init):
    def fast(self, interval: float = 10.0):
        init(self, interval=0.05)  # a reading every 50 ms: several within the smoke run's seconds
    return fast
