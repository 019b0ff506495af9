"""``bench speed``: the training step of each method on the same model and batches, timed interleaved.

After a warm-up, the methods take turns (A B C A B C ...), so drift of the machine hits all of them alike;
each method's median step time, examples per second, peak memory and ratio to the non-private reference method
are reported. Every method trains the same
architecture with the same normalisation (GroupNorm by default), so only the method differs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData, canonical_name, dataset_info, load_tensor_data
from inputdp.methods import METHODS, reference_method

from .harness import Prepared, prepare, timed_steps
from .memory import current_rss_bytes
from .sweep import Overrides, build_config


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
        declared = METHODS.get(n).load().capabilities.speed_variants if variants and n != reference else ({},)
        for v in declared:
            label = n + ("[" + ",".join(f"{k}={val}" for k, val in v.items()) + "]" if v else "")
            entries.append((label, n, {**own, **v}))
    return entries


def measure(
    methods: Sequence[str], *, dataset: str, preset: str = "cpu", model: str | None = None, batch_size: int = 256,
    steps: int = 50, warmup: int = 5, epsilon: float = 1.0, norm: str = "group", data_dir: str | None = None,
    perf: PerfFlags | None = None, synthetic: bool = False, method_options: dict | None = None,
    variants: bool = False,
) -> SpeedResult:
    """Each method's step (with ``variants``: once per option set it declares in ``speed_variants``, labelled
    ``METHOD[OPTION=VALUE]``), timed interleaved against the reference."""
    perf = perf or PerfFlags(progress=False)
    dataset = canonical_name(dataset)  # "MNIST" is mnist; an unknown name is refused here, before anything is built
    device = perf.resolve_device()
    reference = reference_method()
    names = list(dict.fromkeys([reference, *methods]))
    for n in names:
        if METHODS.get(n).load().capabilities.own_loop:
            raise ConfigError(f"method {n!r} trains in its own loop and has no per-step time: leave it out of speed")
    for what, value, low in (("batch-size", batch_size, 1), ("steps", steps, 1), ("warmup", warmup, 0)):
        if not (isinstance(value, int) and value >= low):
            raise ConfigError(f"{what}={value!r} is not allowed: it must be an integer >= {low}")
    data, source = _data(dataset, data_dir, device, synthetic, max(4 * batch_size, 2048))
    entries = _entries(names, reference, method_options or {}, variants)
    prepared: dict[str, Prepared] = {}
    for label, n, options in entries:
        config: RunConfig = build_config(method=n, dataset=dataset, preset=preset, epsilon=epsilon, seed=0,
                                         overrides=Overrides(model=model, norm=norm,
                                                             method_options={**(method_options or {}), n: options}))
        prepared[label] = prepare(config, perf, data)
    names = [label for label, _, _ in entries]
    g = torch.Generator().manual_seed(0)
    batches = [torch.randperm(data.train_size, generator=g)[:batch_size].to(device) for _ in range(8)]
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
             "peak_memory_kind": "cuda_max_allocated during the method's steps" if cuda
             else "process RSS after the method's steps (not attributable to one method on a CPU)",
             **perf.as_params()}
    return SpeedResult(out, setup)
