"""``bench gpu-check``: the paper's shapes on synthetic data, timed the way a run is timed.

For each (data set, model) shape, method (once per option set it declares in ``speed_variants``: DP-SGD per
Opacus per-example-gradient mode) and speed variant (fp32, bf16, compile, bf16+compile; channels-last on a GPU),
it prepares the method as a run would, takes ``warmup`` steps, then times ``steps`` Poisson-sampled steps with one
device sync at each end (what the harness does within an epoch), and reports ms/step, the epoch's seconds,
examples/s and peak memory, with ratios to the non-private reference of the same shape and variant, and of one
method over another (``presets.GPU_CHECK_COMPARE``). The paper's epoch is 200 steps of ResNet-18 on CIFAR-10 at
an expected batch of 250. On a CPU it runs at a smoke size (``--steps 3``) so it cannot rot.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path
from typing import Any, TextIO

import torch
from tqdm.auto import tqdm

from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError, one_line
from inputdp.datasets import dataset_info
from inputdp.methods import METHODS, reference_method

from ..harness import prepare
from ..models import MODELS
from ..presets import GPU_CHECK_COMPARE, GPU_CHECK_SHAPES
from ..resolve import resolve
from ..sampling import batch_generator, poisson_batches
from ..steps import timed_steps
from ..sweep import Overrides, build_config
from .memory import PeakMemory
from .speed import synthetic_data

VARIANTS = {"fp32": ("none", False), "bf16": ("bf16", False), "compile": ("none", True),
            "bf16+compile": ("bf16", True)}


def _parse_shapes(text: str) -> list[tuple[str, str]]:
    shapes = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        dataset, sep, model = item.partition(":")
        if not sep:
            raise ConfigError(f"--shapes item {item!r} is not allowed: write DATASET:MODEL, e.g. cifar10:resnet18")
        dataset_info(dataset)
        MODELS.get(model)
        shapes.append((dataset, model))
    if not shapes:
        raise ConfigError("--shapes is empty: give DATASET:MODEL pairs")
    return shapes


def _parse_variants(text: str) -> list[str]:
    variants = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        raise ConfigError(f"--variants {text!r} is not allowed: choose from {', '.join(VARIANTS)}")
    return variants


def _time_one(config, perf: PerfFlags, data, steps: int, warmup: int) -> dict[str, float]:
    """One configuration's steps through the harness's timing loop: ``warmup`` untimed, then ``steps`` timed."""
    p = prepare(resolve(config), perf, data)
    q, n = config.privacy.sampling_rate, data.train_size
    gen = batch_generator(p.device, 0)
    timed_steps(p, poisson_batches(n, q, warmup, gen, p.device))
    with PeakMemory(p.device) as memory:
        block = timed_steps(p, poisson_batches(n, q, steps, gen, p.device))
    elapsed, examples = block.seconds, sum(block.sizes)
    return {"ms_per_step": 1000 * elapsed / steps, "epoch_s": elapsed, "examples_per_s": examples / elapsed,
            "peak_memory_mb": memory.peak_mb, **{f"mode_{k}": v for k, v in p.method.describe().items()}}


def _save(out: Path | None, result: dict[str, Any]) -> None:
    """Write the result so far (replacing the file whole): a check that dies keeps what it measured."""
    if out is None:
        return
    tmp = out.with_name(out.name + ".tmp")
    try:
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, out)
    except OSError as err:
        raise ConfigError(f"--out {str(out)!r} cannot be written: {err.strerror or err}") from None


def _jobs(shapes: str | None, variants: str, methods: str, reference: str) -> list[tuple]:
    """(data set, model, method, options, variant) for every configuration to time, the reference first."""
    shape_list, variant_list = _parse_shapes(shapes or GPU_CHECK_SHAPES), _parse_variants(variants)
    if methods == "all":
        method_list = [m for m in METHODS.names() if not METHODS.get(m).facts().own_loop]
    else:
        method_list = [m.strip() for m in methods.split(",") if m.strip()]
    for m in method_list:
        if METHODS.get(m).facts().own_loop:
            raise ConfigError(f"--methods: {m} trains in its own loop and has no step to time; leave it out")
    method_list = list(dict.fromkeys([reference, *method_list]))
    return [(dataset, model, m, dict(options), v) for dataset, model in shape_list for m in method_list
            for options in METHODS.get(m).facts().speed_variants for v in variant_list]


def check(*, shapes: str | None, variants: str, methods: str, steps: int, warmup: int, batch_size: int, device: str,
          progress: bool = True, out: Path | None = None) -> dict[str, Any]:
    """Time every configuration; with ``out``, the JSON is rewritten after each one ("complete": false until the
    last), so a check killed part-way (out of memory, say) keeps its rows."""
    for name, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("batch-size", batch_size, 1)):
        if not (isinstance(value, int) and value >= low):
            raise ConfigError(f"--{name} {value!r} is not allowed: it must be an integer >= {low}")
    reference = reference_method()
    jobs = _jobs(shapes, variants, methods, reference)
    dev = PerfFlags(device=device).resolve_device()
    on_gpu = dev.startswith("cuda")
    bar = None
    if progress:
        bar = tqdm(total=len(jobs), desc="gpu-check", unit="config", leave=False)
    rows: list[dict[str, Any]] = []
    result = {
        "device": torch.cuda.get_device_name(dev) if on_gpu else (platform.processor() or platform.machine()),
        "torch": torch.__version__, "steps": steps, "warmup": warmup, "expected_batch_size": batch_size,
        "reference": reference, "complete": False, "rows": rows,
    }
    _save(out, result)  # an unwritable --out is refused before any work
    data_cache: dict[str, Any] = {}
    for dataset, model, m, options, v in jobs:
        info = dataset_info(dataset)
        n = min(info.train_size, 200 * batch_size)
        if dataset not in data_cache:
            data_cache.clear()
            data_cache[dataset] = synthetic_data(dataset, n, dev)
        data = data_cache[dataset]
        amp, compiled = VARIANTS[v]
        row: dict[str, Any] = {"dataset": dataset, "model": model, "method": m,
                               "options": ",".join(f"{k}={val}" for k, val in options.items()),
                               "variant": v, "channels_last": on_gpu}
        try:
            config = build_config(method=m, dataset=dataset, preset="paper", epsilon=1.0, seed=0,
                                  overrides=Overrides(model=model, norm="group", sampling_rate=batch_size / n,
                                                      steps=warmup + steps, train_examples=n,
                                                      method_options={m: options}))
            perf = PerfFlags(device=dev, amp=amp, compile=compiled, channels_last=on_gpu, progress=False)
            row.update(_time_one(config, perf, data, steps, warmup))
        except ConfigError as err:
            row["refused"] = one_line(err)
        except Exception as err:  # noqa: BLE001 - an Opacus mode that does not support a layer, say: recorded
            row["failed"] = f"{type(err).__name__}: {one_line(err)}"
        rows.append(row)
        _save(out, result)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    _ratios(rows, reference)
    result["complete"] = True
    _save(out, result)
    return result


def _ratios(rows: list[dict[str, Any]], reference: str) -> None:
    def epoch(dataset, model, method, variant):
        times = [r["epoch_s"] for r in rows if (r["dataset"], r["model"], r["method"], r["variant"]) ==
                 (dataset, model, method, variant) and "epoch_s" in r]
        return min(times) if times else None  # a method with several option sets: its fastest valid one

    numerator, denominator = GPU_CHECK_COMPARE
    for r in rows:
        if "epoch_s" not in r:
            continue
        base = epoch(r["dataset"], r["model"], reference, r["variant"])
        if base:
            r[f"ratio_to_{reference}"] = r["epoch_s"] / base
        if r["method"] == numerator:
            other = epoch(r["dataset"], r["model"], denominator, r["variant"])
            if other:
                r[f"{numerator}_over_{denominator}"] = r["epoch_s"] / other


def write_table(result: dict[str, Any], out: TextIO) -> None:
    """The gpu-check result as a Markdown table, one row per shape, method and speed variant."""
    ref = result["reference"]
    out.write(f"{result['device']} (torch {result['torch']}): {result['steps']} timed steps after {result['warmup']} "
              f"of warm-up, expected batch {result['expected_batch_size']}, synthetic data\n")
    out.write(f"| shape | method | variant | ms/step | epoch s | examples/s | peak MB | / {ref} |\n")
    out.write("|---|---|---|---|---|---|---|---|\n")
    for r in result["rows"]:
        method = r["method"] + (f" ({r['options']})" if r["options"] else "")
        shape = f"{r['dataset']} {r['model']}"
        if "epoch_s" in r:
            ratio = r.get(f"ratio_to_{ref}")
            out.write(f"| {shape} | {method} | {r['variant']} | {r['ms_per_step']:.2f} | {r['epoch_s']:.2f} | "
                      f"{r['examples_per_s']:.0f} | {r['peak_memory_mb']:.0f} | "
                      f"{'' if ratio is None else f'{ratio:.2f}'} |\n")
        else:
            out.write(f"| {shape} | {method} | {r['variant']} | {r.get('refused') or r.get('failed')} |||||\n")
