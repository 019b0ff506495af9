"""``bench speed``: the training step of each method on the same model and batches, timed interleaved.

After a warm-up, the methods take turns (A B C A B C ...), so drift of the machine hits all of them alike;
each method's median step time, examples per second, peak memory and ratio to the non-private reference method
are reported. Every method trains the same
architecture with the same normalisation (GroupNorm by default), so only the method differs.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inputdp.core import names
from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.core.names import PARAM_MEMORY_KIND
from inputdp.datasets import TensorData, canonical_name, dataset_info, load_tensor_data
from inputdp.methods import METHODS, reference_method

from ..executors import spawned_call
from ..harness import prepare
from ..resolve import resolve
from ..steps import Prepared, timed_steps
from ..sweep import Overrides, build_config
from ..tracking import finished_with_key, log_finished_run, open_store
from .load import contention, load_average
from .memory import PeakMemory, current_rss_bytes


@dataclass
class SpeedResult:
    methods: dict[str, dict[str, float]]
    setup: dict[str, object]

    def as_json(self) -> dict:
        return {"methods": self.methods, **self.setup}


def synthetic_data(name: str, n: int, device: str) -> TensorData:
    """Random inputs of the data set's real shape: step time does not depend on pixel values."""
    info = dataset_info(name)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, info.channels, info.size, info.size, generator=g).to(device)
    y = torch.randint(0, info.num_classes, (n,), generator=g).to(device)
    return TensorData(info, x, y, x[:256], y[:256])


def _data(dataset: str, data_dir: str | None, device: str, synthetic: bool, n: int) -> tuple[TensorData, str]:
    """The data set's real arrays, or (``synthetic``) random ones of its shape; data that are missing or do not
    read are refused in one line (``--synthetic`` says so when it is meant), never replaced silently."""
    if synthetic:
        return synthetic_data(dataset, n, device), "synthetic"
    try:
        return load_tensor_data(dataset, data_dir=data_dir, device=device, download=False), "real"
    except ConfigError as err:
        raise ConfigError(f"{err} (bench speed: give --synthetic to time on random data of the same shape)") from None


def _entries(names: Sequence[str], reference: str, method_options: dict, variants: bool) -> list[tuple[str, str, dict]]:
    """(label, method, its options) to time: each method once, or (``variants``) once per option set it declares,
    labelled ``METHOD[OPTION=VALUE]``."""
    entries = []
    for n in names:
        own = dict(method_options.get(n, {}))
        declared = METHODS.get(n).facts().speed_variants if variants and n != reference else ({},)
        for v in declared:
            label = n + ("[" + ",".join(f"{k}={val}" for k, val in v.items()) + "]" if v else "")
            entries.append((label, n, {**own, **v}))
    return entries


def measure(
    methods: Sequence[str], *, dataset: str, preset: str = "cpu", model: str | None = None, batch_size: int = 256,
    steps: int = 50, warmup: int = 5, epsilon: float = 1.0, norm: str = "group", data_dir: str | None = None,
    perf: PerfFlags | None = None, synthetic: bool = False, method_options: dict | None = None,
    variants: bool = False, memory_alone: bool = False,
) -> SpeedResult:
    """Each method's step (with ``variants``: once per option set it declares in ``speed_variants``, labelled
    ``METHOD[OPTION=VALUE]``), timed interleaved against the reference. On a CPU a process's resident set holds
    every method it has built, so with ``memory_alone`` each method's memory is measured again by itself in a
    fresh process (``alone_memory``); otherwise the CPU figure is the shared process's and says so."""
    perf = perf or PerfFlags(progress=False)
    dataset = canonical_name(dataset)  # "MNIST" is mnist; an unknown name is refused here, before anything is built
    device = perf.resolve_device()
    reference = reference_method()
    names = list(dict.fromkeys([reference, *methods]))
    _check(names, batch_size=batch_size, steps=steps, warmup=warmup)
    data, source = _data(dataset, data_dir, device, synthetic, max(4 * batch_size, 2048))
    entries = _entries(names, reference, method_options or {}, variants)
    prepared: dict[str, Prepared] = {}
    for label, n, options in entries:
        config: RunConfig = build_config(method=n, dataset=dataset, preset=preset, epsilon=epsilon, seed=0,
                                         overrides=Overrides(model=model, norm=norm,
                                                             method_options={**(method_options or {}), n: options}))
        prepared[label] = prepare(resolve(config), perf, data)
    names = [label for label, _, _ in entries]
    cuda = device.startswith("cuda")
    times, peaks = _interleaved(prepared, names, data.train_size, device=device, batch_size=batch_size,
                                steps=steps, warmup=warmup)
    base = statistics.median(times[names[0]])
    out = {}
    for n in names:
        med = statistics.median(times[n])
        # the spread: each step's time over the reference's step just before it (the same batch, interleaved)
        paired = [t / r for t, r in zip(times[n], times[names[0]])]
        p25, _, p75 = statistics.quantiles(paired, n=4, method="inclusive") if len(paired) > 1 else paired * 3
        out[n] = {"median_step_s": med, "examples_per_s": batch_size / med, "peak_memory_mb": peaks[n] / 2**20,
                  "ratio_to_reference": med / base, "ratio_p25": p25, "ratio_p75": p75,
                  **prepared[n].method.describe()}
    first = prepared[names[0]]
    setup = {"reference": reference, "dataset": dataset,
             "model": first.config.model, "norm": norm, "batch_size": batch_size, "steps": steps,
             "warmup": warmup, "device": device, "data": source, "threads": torch.get_num_threads(),
             PARAM_MEMORY_KIND: "cuda_max_allocated during the method's steps" if cuda
             else "process RSS after the method's steps (not attributable to one method on a CPU)",
             **perf.as_params()}
    if memory_alone and not cuda:
        for label, n, options in entries:
            alone = alone_memory(n, options, dataset=dataset, preset=preset, model=model, norm=norm,
                                 batch_size=batch_size, epsilon=epsilon, data_dir=data_dir, synthetic=synthetic,
                                 threads=torch.get_num_threads(), steps=min(steps, ALONE_STEPS))
            out[label].update(alone)
            out[label]["peak_memory_mb"] = alone["alone_peak_mb"]
        setup[PARAM_MEMORY_KIND] = ALONE_KIND
    return SpeedResult(out, setup)


def _check(names: Sequence[str], *, batch_size: int, steps: int, warmup: int) -> None:
    """Refuse, before anything is built, a method with no per-step time and a count that is not allowed."""
    for n in names:
        if METHODS.get(n).facts().own_loop:
            raise ConfigError(f"method {n!r} trains in its own loop and has no per-step time: leave it out of speed")
    for what, value, low in (("batch-size", batch_size, 1), ("steps", steps, 1), ("warmup", warmup, 0)):
        if not (isinstance(value, int) and value >= low):
            raise ConfigError(f"{what}={value!r} is not allowed: it must be an integer >= {low}")


def _interleaved(prepared: dict[str, Prepared], names: Sequence[str], train_size: int, *, device: str,
                 batch_size: int, steps: int, warmup: int) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Every method's step on the same batch, one method after another, ``warmup + steps`` times: each method's
    step times after the warm-up, and its peak memory (CUDA: torch's peak during its steps; CPU: the RSS after)."""
    g = torch.Generator().manual_seed(0)
    batches = [torch.randperm(train_size, generator=g)[:batch_size].to(device) for _ in range(8)]
    times: dict[str, list[float]] = {n: [] for n in names}
    peaks: dict[str, int] = dict.fromkeys(names, 0)
    cuda = device.startswith("cuda")
    for i in range(warmup + steps):
        idx = batches[i % len(batches)]
        for n in names:
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            took = timed_steps(prepared[n], [idx]).seconds  # the harness's timing loop, one step at a time
            if i >= warmup:
                times[n].append(took)
            peaks[n] = max(peaks[n], torch.cuda.max_memory_allocated(device) if cuda else current_rss_bytes())
    return times, peaks


#: the steps a method takes in its own process when its memory is measured alone
ALONE_STEPS = 10
#: what the CPU memory figures are, where each method was measured by itself
ALONE_KIND = ("CPU: each method alone in a fresh process (data loaded, model and method built, then its steps): "
              "the peak resident set, and its growth over the process before the first step")


def alone_memory(method: str, options: dict, *, dataset: str, preset: str, model: str | None, norm: str,
                 batch_size: int, epsilon: float, data_dir: str | None, synthetic: bool, threads: int,
                 steps: int = ALONE_STEPS) -> dict[str, float]:
    """One method's CPU memory, measured by itself: a spawned process (nothing of another method in it) loads the
    data, builds the model and method, then takes ``steps`` steps while a thread samples its resident set.
    Returns ``alone_peak_mb`` (the process's peak) and ``alone_step_mb`` (the peak over the resident set just
    before the first step: what the method's steps add, the same data and model being in every process)."""

    args = (method, options, dataset, preset, model, norm, batch_size, epsilon, data_dir, synthetic, threads, steps)
    return spawned_call(_alone_child, *args)


def _alone_child(method: str, options: dict, dataset: str, preset: str, model: str | None, norm: str,
                 batch_size: int, epsilon: float, data_dir: str | None, synthetic: bool, threads: int,
                 steps: int) -> dict[str, float]:
    torch.set_num_threads(threads)
    perf = PerfFlags(device="cpu", threads=threads, progress=False)
    data, _ = _data(dataset, data_dir, "cpu", synthetic, max(4 * batch_size, 2048))
    config = build_config(method=method, dataset=dataset, preset=preset, epsilon=epsilon, seed=0,
                          overrides=Overrides(model=model, norm=norm, method_options={method: options}))
    p = prepare(resolve(config), perf, data)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randperm(data.train_size, generator=g)[:batch_size] for _ in range(steps)]
    before = current_rss_bytes()
    with PeakMemory("cpu", interval=0.005) as peak:
        timed_steps(p, batches)
    return {"alone_peak_mb": peak.peak_bytes / 2**20, "alone_step_mb": (peak.peak_bytes - before) / 2**20}


def speed_key(dataset: str, preset: str, methods: str, steps: int, perf: PerfFlags) -> str:
    """The store key of a study's speed measurement: its data, preset, methods, steps, threads and device."""
    return f"speed:{dataset}:{preset}:{methods}:{steps}:{perf.threads or torch.get_num_threads()}:{perf.resolve_device()}"


def logged_speed_run(tracking_uri: str | None, experiment: str, *, key: str, methods: Sequence[str], dataset: str,
                     preset: str, steps: int, perf: PerfFlags, parent: str, data_dir: str | None = None) -> bool:
    """``methods`` timed interleaved against the reference (:func:`measure`), logged as their own run under ``key``
    with each method's median ratio and the quartiles of its paired per-step ratios; False when the store has it
    already. Its contention is recorded as a training run's is (performance/load.py), and a contended one is not
    used for a ratio."""
    mlflow_client, exp = open_store(tracking_uri, experiment)
    if finished_with_key(mlflow_client, exp, key):
        return False
    t0 = time.time()
    result = measure(methods, dataset=dataset, preset=preset, steps=steps, warmup=max(1, steps // 10),
                     data_dir=data_dir, perf=dataclasses.replace(perf, progress=False), memory_alone=True)
    now = load_average()
    metrics: dict[str, float] = {names.METRIC_LOAD: now,
                                 **contention([{names.METRIC_LOAD: now}], perf.threads or torch.get_num_threads())}
    for label, m in result.methods.items():
        for name, value in ((names.METRIC_SPEED_RATIO, m["ratio_to_reference"]), (names.METRIC_SPEED_P25, m["ratio_p25"]),
                            (names.METRIC_SPEED_P75, m["ratio_p75"]), (names.METRIC_SPEED_STEP, m["median_step_s"]),
                            (names.METRIC_SPEED_MEMORY, m["peak_memory_mb"])):
            metrics[name.format(label)] = float(value)
        if "alone_step_mb" in m:
            metrics[names.METRIC_SPEED_STEP_MEMORY.format(label)] = float(m["alone_step_mb"])
    log_finished_run(tracking_uri, experiment, name=f"speed-{dataset}-{preset}", tags={
        names.TAG_KIND: names.KIND_SPEED, names.TAG_CONFIG_KEY: key, names.TAG_PARENT_RUN: parent,
        names.TAG_DATASET: dataset, names.TAG_PRESET: preset},
        params={**result.setup, "seconds": f"{time.time() - t0:.1f}"}, metrics=metrics)
    return True
