"""What the subcommands share: the one-line parser, method options, the run, executor and speed flags, and the
store flags' refusal (before any store is opened)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inputdp.core.errors import ConfigError

EXIT_USAGE = 2


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` shows each flag's default where it has one (not "None" or "False"), and its choices."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.choices and "choose" not in text:
            text += (" " if text else "") + "(choices: " + ", ".join(map(str, action.choices)) + ")"
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text \
                and action.option_strings:
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print the usage too)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


PRESET_HELP = "a preset of q, T, model and recipe (bench list shows each with its time per run)"
THREADS_HELP = "torch threads per run (0: torch's default, every core; with --workers N: cores/N)"
PROGRESS_HELP = "no progress bars (a line per finished run is still printed)"
DATASET_HELP = ("a registered data set (bench list: mnist, fashionmnist, cifar10, svhn, the MedMNIST sets, synthetic, "
                 "plug-ins), or your own: folder:PATH (PATH/train/CLASS/*.png, PATH/test/CLASS/*) or npz:FILE "
                 "(x_train, y_train, x_test, y_test); options after ?: size=N, mean=, std=, test_fraction=")


def _option_value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_options(items: list[str] | None, methods: list[str]) -> dict[str, dict[str, Any]]:
    """``--option NAME=VALUE`` (every listed method that has it) or ``--option METHOD.NAME=VALUE``."""
    from inputdp.methods import METHODS

    out: dict[str, dict[str, Any]] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--option {item!r} is not allowed: write NAME=VALUE or METHOD.NAME=VALUE")
        if "." in key:
            method, name = key.split(".", 1)
            METHODS.get(method)
            if method not in methods:
                raise ConfigError(f"--option {item!r} is not allowed: {method} is not among the methods of this "
                                  f"command ({', '.join(methods)}), so it would be ignored")
            targets = [method]
        else:
            name = key
            targets = [m for m in methods if name in METHODS.get(m).load().option_defaults]
            if not targets:
                raise ConfigError(f"--option {name!r} is not an option of {', '.join(methods)}")
        for m in targets:
            out.setdefault(m, {})[name] = _option_value(value)
    return out


def add_run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a sweep (``bench run``): what to run, the preset's overrides, the store, the executor."""
    p.add_argument("--methods", default="all", help="'all' or a comma-separated list (see `bench list`)")
    p.add_argument("--dataset", required=True, help=DATASET_HELP)
    p.add_argument("--epsilons", default="1", help="comma-separated target epsilons, e.g. 1,4")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    from inputdp.benchmarks.presets import PRESETS

    p.add_argument("--preset", help=" | ".join(PRESETS.names()) + " (default: cpu, announced with its time; bench list)")
    p.add_argument("--epochs", type=int, help="override the preset's number of epochs (T = epochs / q)")
    p.add_argument("--steps", type=int, help="override the preset's number of steps T")
    p.add_argument("--sampling-rate", type=float, help="override the preset's Poisson rate q")
    from inputdp.core.config import OPTIMIZERS

    p.add_argument("--optimizer", help="override the preset's optimizer: " + " | ".join(OPTIMIZERS))
    p.add_argument("--lr", type=float, help="override the preset's learning rate")
    p.add_argument("--momentum", type=float, help="override the preset's momentum (sgd)")
    p.add_argument("--warmup-steps", type=int, help="linear learning-rate warm-up over the first steps")
    p.add_argument("--delta", type=float, help="the target delta (default: the preset's, 1e-5 on the "
                   "built-in data sets; below 1/n)")
    p.add_argument("--model", help="override the preset's model (bench list: small_cnn, mlp, scatter_linear, ...)")
    p.add_argument("--norm", help="auto | group | batch | frozen (DP-SGD with --option dpsgd.norm_noise_multiplier: "
                   "statistics released privately) | none")
    p.add_argument("--holdout", type=int, help="train without this many training examples (a fixed draw) and "
                   "evaluate on them instead of the test split: to choose a recipe without the test set")
    p.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE", help="a method option")
    p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
    p.add_argument("--experiment", default="inputdp", help="the MLflow experiment the runs go to")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--threads", type=int, default=0, help=THREADS_HELP)
    add_speed_flags(p)
    p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
    add_executor_flags(p)


def add_executor_flags(p: argparse.ArgumentParser) -> None:
    """Where the runs go: the local executor (and its workers), a Ray cluster or a SLURM array."""
    p.add_argument("--executor", default="local", help="local | ray | submitit")
    p.add_argument("--ray-address", help="a Ray cluster's address (default: start a local one)")
    p.add_argument("--cpus-per-run", type=float, default=1.0, help="ray: CPUs reserved for each run")
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="fractions allowed, e.g. 0.25")
    p.add_argument("--workers", type=int, help="local: runs at a time, each in its own process with cores/N threads "
                   "(default 1); ray: the local cluster's CPUs; submitit: the SLURM array's parallelism")
    p.add_argument("--submitit-folder", default="submitit-logs", help="submitit: where its logs and pickles go")
    p.add_argument("--submitit-cluster", help="submitit cluster: slurm (default when available) or local")


def executor_options(args: argparse.Namespace) -> dict[str, Any]:
    """The chosen executor's keyword options, from its flags."""
    if args.executor == "ray":
        return {"address": args.ray_address, "cpus_per_run": args.cpus_per_run, "gpus_per_run": args.gpus_per_run,
                "local_cpus": args.workers}
    if args.executor == "submitit":
        return {"folder": args.submitit_folder, "cluster": args.submitit_cluster,
                "cpus_per_run": int(args.cpus_per_run), "gpus_per_run": int(args.gpus_per_run),
                "parallel": args.workers or 2}
    return {"workers": args.workers} if args.workers is not None else {}


def add_speed_flags(p: argparse.ArgumentParser) -> None:
    """The speed flags (autocast, channels-last, compile): they never change what a run computes privately."""
    p.add_argument("--amp", default="none", help="none | bf16: autocast the network (the mechanism stays float32)")
    p.add_argument("--channels-last", action="store_true", help="NHWC images and convolution weights")
    p.add_argument("--compile", action="store_true", help="torch.compile what the method's step calls")


def perf_flags(args: argparse.Namespace, **kw: Any):
    """The command's PerfFlags, refused in one line where a flag has no allowed value."""
    from inputdp.core.config import PerfFlags

    return PerfFlags(device=args.device, threads=getattr(args, "threads", 0), amp=args.amp,
                     channels_last=args.channels_last, compile=args.compile, **kw)


def check_store_flags(args: argparse.Namespace) -> None:
    """An empty experiment or a tracking URI MLflow cannot use would fail deep inside MLflow, or silently mean the
    default: refuse them here, before any work."""
    from inputdp.benchmarks.tracking import check_tracking_uri

    if getattr(args, "experiment", None) is not None and not args.experiment.strip():
        raise ConfigError(f"--experiment {args.experiment!r} is not allowed: give the experiment a name (default: inputdp)")
    if not hasattr(args, "tracking_uri") or getattr(args, "no_track", False):
        return
    if args.tracking_uri is not None and not args.tracking_uri.strip():
        raise ConfigError(f"--tracking-uri {args.tracking_uri!r} is not allowed: leave the flag out for sqlite:///mlflow.db "
                          "here, or give sqlite:///FILE or http://HOST:PORT")
    # bench report checks its --out first, then the store (read-only); bench store schema only reads
    if args.command != "report" and getattr(args, "action", None) != "schema":
        check_tracking_uri(args.tracking_uri, write=True)


def chosen_preset(args: argparse.Namespace) -> str:
    """The preset a command runs: the one given, else the default (cpu), which ``announce_preset`` then names with
    what a run of it takes, once every check has passed (a refusal stays one line)."""
    if not getattr(args, "preset", None):
        args.preset, args.preset_defaulted = DEFAULT_PRESET, True
    return args.preset


def announce_preset(args: argparse.Namespace, runs: int = 1) -> None:
    """Where the preset was not given: one line on stderr before the work starts (``announce_default_preset``)."""
    if getattr(args, "preset_defaulted", False):
        announce_default_preset(runs, getattr(args, "workers", None) or 1)


def announce_default_preset(runs: int, workers: int = 1) -> None:
    """One line on stderr: the default preset, what a run of it took where measured, and ``runs`` runs' estimate."""
    from inputdp.benchmarks.presets import PRESETS

    p = PRESETS.get(DEFAULT_PRESET)
    estimate = ""
    if p.minutes_per_run and runs > 1:
        lo, hi = (runs * m / max(1, workers) for m in p.minutes_per_run)
        estimate = f"; {runs} runs: about {lo:.0f} to {hi:.0f} minutes"
    sys.stderr.write(f"bench: no --preset given: the {p.name} preset ({p.summary}; {p.time_per_run}{estimate}); "
                     f"choose one with --preset (bench list)\n")


#: the preset a command runs when none is given (announced: ``chosen_preset``)
DEFAULT_PRESET = "cpu"
