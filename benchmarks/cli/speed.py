"""``bench speed`` (interleaved step times against the reference) and ``bench gpu-check`` (the paper's shapes)."""

from __future__ import annotations

import argparse
import json
import sys

from .common import DATASET_HELP, add_speed_flags, parse_options, perf_flags


def cmd_speed(args: argparse.Namespace) -> int:
    """``bench speed``: each method's step, interleaved with the reference's, on the same batches."""
    from inputdp.benchmarks.performance.speed import measure
    from inputdp.benchmarks.sweep import resolve_methods
    from inputdp.methods import METHODS

    methods = resolve_methods(args.methods)
    if args.methods == "all":
        methods = [m for m in methods if not METHODS.get(m).facts().own_loop]
    result = measure(methods, dataset=args.dataset, preset=args.preset, model=args.model, batch_size=args.batch_size,
                     steps=args.steps, warmup=args.warmup, norm=args.norm, data_dir=args.data_dir,
                     synthetic=args.synthetic, method_options=parse_options(args.option, methods),
                     perf=perf_flags(args, progress=False), variants=args.variants)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    print(f"{result.setup['dataset']} / {result.setup['model']} ({result.setup['norm']} norm), batch "
          f"{result.setup['batch_size']}, {result.setup['steps']} interleaved steps on {result.setup['device']}")
    width = max(22, *(len(n) + 2 for n in result.methods))
    print(f"{'method':<{width}}{'median_step_ms':>16}{'examples_per_s':>16}{'peak_mb':>10}"
          f"{'ratio to ' + result.setup['reference']:>24}")
    for name, m in result.methods.items():
        print(f"{name:<{width}}{1000 * m['median_step_s']:>16.2f}{m['examples_per_s']:>16.0f}{m['peak_memory_mb']:>10.0f}"
              f"{m['ratio_to_reference']:>24.2f}")
    return 0


def cmd_gpu_check(args: argparse.Namespace) -> int:
    """``bench gpu-check``: the paper's shapes on synthetic data, a table and a JSON file."""
    from pathlib import Path

    from inputdp.benchmarks.performance.gpucheck import check, write_table

    out = Path(args.out)
    result = check(shapes=args.shapes, variants=args.variants, methods=args.methods, steps=args.steps,
                   warmup=args.warmup, batch_size=args.batch_size, device=args.device,
                   progress=not args.json, out=out)
    if args.json:
        print(json.dumps(result))
    else:
        write_table(result, sys.stdout)
        print(f"wrote {out}")
    return 0


class Speed:
    name = "speed"
    help = ("median training-step time per method, interleaved, vs the non-private reference")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--methods", default="all", help="'all' or a comma-separated list (see `bench list`)")
        p.add_argument("--dataset", required=True, help=DATASET_HELP)
        p.add_argument("--preset", default="cpu", help="the preset whose model and data are timed")
        p.add_argument("--model", help="override the preset's model")
        p.add_argument("--batch-size", type=int, default=256, help="examples per timed step")
        p.add_argument("--steps", type=int, default=50, help="timed steps per method, interleaved")
        p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
        p.add_argument("--norm", default="group", help="group | batch | none")
        p.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE", help="a method option")
        p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
        p.add_argument("--synthetic", action="store_true", help="random inputs of the data set's shape")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
        add_speed_flags(p)
        p.add_argument("--variants", action="store_true",
                       help="time every option set a method declares (DP-SGD: each clipping mode) side by side")
        p.add_argument("--json", action="store_true", help="print the result as JSON")

    run = staticmethod(cmd_speed)


class GpuCheck:
    name = "gpu-check"
    help = ("the paper's shapes on synthetic data: step time, examples/s and peak "
            "memory per method and speed variant (a table and a JSON file)")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--steps", type=int, default=200, help="timed steps per configuration (the paper's epoch: 200)")
        p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
        p.add_argument("--batch-size", type=int, default=250, help="the paper's CIFAR-10 batch: 250")
        p.add_argument("--shapes", help="comma-separated DATASET:MODEL pairs (default: the paper's, see presets.py)")
        p.add_argument("--variants", default="fp32,bf16,compile,bf16+compile",
                       help="comma-separated from fp32, bf16, compile, bf16+compile (each with --channels-last on a GPU)")
        p.add_argument("--methods", default="all", help="'all' (every method with a per-step loop) or a list")
        p.add_argument("--out", default="gpu-check.json", help="where the JSON goes")
        p.add_argument("--json", action="store_true", help="print the JSON instead of the table")

    run = staticmethod(cmd_gpu_check)
