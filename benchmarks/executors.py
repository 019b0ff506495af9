"""Executors: where the pure run function executes. Nothing here changes what a run is.

- ``local`` (default): one configuration after another, in this process; with ``workers=N`` (``--workers N``) N
  configurations at a time in N spawned processes of cores/N threads each (runs x threads = cores), the sweep's
  progress bar here. A run's metrics do not depend on where it ran (tests/benchmarks/test_parallel.py compares them).
- ``ray``: each configuration a Ray task with declared resources, on a cluster (``--ray-address``) or a local
  one started for the sweep.
- ``submitit``: a SLURM job array (``cluster="local"`` runs the same code as local processes, for tests).

Distributed executors need a tracking server: many processes writing one sqlite file fail ("database is
locked"), so they refuse a bare sqlite or file URI.

An executor knows nothing of what a run is: the sweep hands it ``run_one(config) -> summary`` (a picklable
function, shipped to the workers) and ``lost(config, error) -> summary`` (called here when a worker died).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm

from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError, one_line

from .tracking import default_tracking_uri

#: what the sweep hands an executor: a resolved run (``inputdp.benchmarks.resolve.ResolvedRun``), which the executor
#: only passes on, to ``run_one`` and, where its worker was lost, to ``lost``
Run = Any
RunOne = Callable[[Run], Any]
Lost = Callable[[Run, str], Any]

EXECUTORS = ("local", "ray", "submitit")


def _progress(total: int, enabled: bool, desc: str):
    if not enabled or total <= 1:
        return None

    return tqdm(total=total, desc=desc, unit="run")


@dataclass
class LocalExecutor:
    workers: int = 1
    name: str = "local"

    def __post_init__(self):
        if not (isinstance(self.workers, int) and not isinstance(self.workers, bool) and self.workers >= 1):
            raise ConfigError(f"--workers {self.workers!r} is not allowed: give an integer >= 1 (1: one run at a time)")

    def check_tracking_uri(self, uri: str | None) -> None:
        return None

    def map(self, configs: Sequence[Run], *, run_one: RunOne, lost: Lost, perf: PerfFlags) -> Iterator[Any]:
        if self.workers > 1 and len(configs) > 1:
            yield from self._parallel(configs, run_one, lost, perf)
            return
        bar = _progress(len(configs), perf.progress, "sweep")
        for config in configs:
            yield run_one(config)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()

    def threads_per_run(self, perf: PerfFlags) -> int:
        """runs x threads = cores, unless --threads says otherwise."""
        return perf.threads or max(1, (os.cpu_count() or 1) // self.workers)

    def _parallel(self, configs, run_one, lost, perf):
        """Each configuration in a spawned worker process (a fresh interpreter: no forked threads or CUDA state);
        summaries in the order the runs finish; a worker that dies makes its configuration's summary ``lost``."""

        workers = min(self.workers, len(configs))
        threads = self.threads_per_run(perf)
        bar = _progress(len(configs), perf.progress, f"sweep ({workers} processes x {threads} threads)")
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = {pool.submit(_worker_entry, run_one, c, threads): c for c in configs}
            for future in as_completed(futures):
                yield _result_or_failure(future.result, futures[future], lost)
                if bar is not None:
                    bar.update(1)
        except BaseException:
            # interrupted: the workers stop too, not after their runs; their RUNNING runs are reaped by the next
            # sweep, as a killed serial sweep's are
            _stop_pool(pool)
            raise
        pool.shutdown()
        if bar is not None:
            bar.close()


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Interrupted (Ctrl-C, SIGTERM, the consumer gone): the workers stop now, not after their work."""
    for process in list(getattr(pool, "_processes", {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def spawned_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a fresh spawned process (nothing of this one in it), its result returned; a signal to this
    process alone (SIGINT, SIGTERM) ends the child too within seconds, never leaves this one joining it."""
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
    try:
        result = pool.submit(fn, *args).result()
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown()
    return result


def _result_or_failure(get, config: Run, lost: Lost):
    """A remote run's summary, or, if its worker died, what ``lost`` makes of it (the sweep goes on)."""
    try:
        return get()
    except Exception as err:  # noqa: BLE001 - a dead worker or job: the store keeps what finished
        return lost(config, one_line(err, 300))


class _Distributed:
    name = "distributed"

    def check_tracking_uri(self, uri: str | None) -> None:
        uri = uri or default_tracking_uri()
        if not uri.startswith(("http://", "https://")):
            raise ConfigError(
                f"--executor {self.name} needs a tracking server, not {uri!r} (processes writing one sqlite or file "
                f"store collide): start one with `bench server` and pass --tracking-uri http://127.0.0.1:PORT"
            )


def _worker_entry(run_one: RunOne, config: Run, threads: int):
    if threads:
        torch.set_num_threads(threads)
    return run_one(config)


@dataclass
class RayExecutor(_Distributed):
    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    local_cpus: int | None = None  # size of the local cluster started when no address is given
    retries: int = 0
    name: str = "ray"

    def map(self, configs, *, run_one, lost, perf):
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'inputdp[ray]'") from None
        started_here = not ray.is_initialized()
        if started_here:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                ray.init(num_cpus=self.local_cpus or os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         _node_ip_address="127.0.0.1", object_store_memory=256 * 2**20)
        try:
            task = ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run,
                              max_retries=self.retries)(_worker_entry)
            threads = perf.threads or max(1, int(self.cpus_per_run))
            pending = {task.remote(run_one, c, threads): c for c in configs}
            bar = _progress(len(configs), perf.progress, "sweep (ray)")
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                config = pending.pop(ref)
                yield _result_or_failure(functools.partial(ray.get, ref), config, lost)
                if bar is not None:
                    bar.update(1)
            if bar is not None:
                bar.close()
        finally:
            if started_here:
                ray.shutdown()


@dataclass
class SubmititExecutor(_Distributed):
    folder: str = "submitit-logs"
    cluster: str | None = None  # None: SLURM if available; "local": local processes (tests)
    cpus_per_run: int = 1
    gpus_per_run: int = 0
    timeout_min: int = 240
    partition: str | None = None
    parallel: int = 2
    name: str = "submitit"

    def map(self, configs, *, run_one, lost, perf):
        try:
            import submitit
        except ImportError:
            raise ConfigError("--executor submitit needs submitit: pip install 'inputdp[slurm]'") from None
        ex = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        params: dict[str, Any] = {"timeout_min": self.timeout_min, "cpus_per_task": self.cpus_per_run,
                                  "slurm_array_parallelism": self.parallel}
        if self.gpus_per_run:
            params["gpus_per_node"] = self.gpus_per_run
        if self.partition:
            params["slurm_partition"] = self.partition
        ex.update_parameters(**{k: v for k, v in params.items() if ex.cluster == "slurm" or not k.startswith("slurm")})
        n = len(configs)
        jobs = ex.map_array(_worker_entry, [run_one] * n, list(configs), [perf.threads or self.cpus_per_run] * n)
        bar = _progress(n, perf.progress, "sweep (submitit)")
        for job, config in zip(jobs, configs):
            yield _result_or_failure(job.result, config, lost)
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()


def get_executor(name: str, **options: Any):
    """The executor by name (local, ray, submitit) with its options; an unknown name is refused in one line."""
    if name == "local":
        return LocalExecutor(**options)
    if name == "ray":
        return RayExecutor(**options)
    if name == "submitit":
        return SubmititExecutor(**options)
    raise ConfigError(f"--executor {name!r} is not allowed: choose one of {', '.join(EXECUTORS)}")
