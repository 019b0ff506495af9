"""``bench``: the command line. Bad input gives one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from .errors import ConfigError, Terminated, raise_on_signal

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print the usage too)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


_DATASET_HELP = ("a registered data set (bench list: mnist, fashionmnist, cifar10, svhn, the MedMNIST sets, synthetic, "
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


def _add_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default="all", help="'all' or a comma-separated list (see `bench list`)")
    p.add_argument("--dataset", required=True, help=_DATASET_HELP)
    p.add_argument("--epsilons", default="1", help="comma-separated target epsilons, e.g. 1,4")
    p.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    from .presets import PRESETS

    p.add_argument("--preset", default="cpu", help=" | ".join(PRESETS.names()))
    p.add_argument("--epochs", type=int, help="override the preset's number of epochs (T = epochs / q)")
    p.add_argument("--steps", type=int, help="override the preset's number of steps T")
    p.add_argument("--sampling-rate", type=float, help="override the preset's Poisson rate q")
    from .config import OPTIMIZERS

    p.add_argument("--optimizer", help="override the preset's optimizer: " + " | ".join(OPTIMIZERS))
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float)
    p.add_argument("--warmup-steps", type=int, help="linear learning-rate warm-up over the first steps")
    p.add_argument("--delta", type=float)
    p.add_argument("--model")
    p.add_argument("--norm", help="auto | group | batch | none")
    p.add_argument("--holdout", type=int, help="train without this many training examples (a fixed draw) and "
                   "evaluate on them instead of the test split: to choose a recipe without the test set")
    p.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE", help="a method option")
    p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
    p.add_argument("--experiment", default="inputdp")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--threads", type=int, default=0)
    _add_speed_flags(p)
    p.add_argument("--no-progress", action="store_true")
    _add_executor_flags(p)


def _add_executor_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", default="local", help="local | ray | submitit")
    p.add_argument("--ray-address", help="a Ray cluster's address (default: start a local one)")
    p.add_argument("--cpus-per-run", type=float, default=1.0)
    p.add_argument("--gpus-per-run", type=float, default=0.0, help="fractions allowed, e.g. 0.25")
    p.add_argument("--workers", type=int, help="local: runs at a time, each in its own process with cores/N threads "
                   "(default 1); ray: the local cluster's CPUs; submitit: the SLURM array's parallelism")
    p.add_argument("--submitit-folder", default="submitit-logs")
    p.add_argument("--submitit-cluster", help="submitit cluster: slurm (default when available) or local")


def _executor_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.executor == "ray":
        return {"address": args.ray_address, "cpus_per_run": args.cpus_per_run, "gpus_per_run": args.gpus_per_run,
                "local_cpus": args.workers}
    if args.executor == "submitit":
        return {"folder": args.submitit_folder, "cluster": args.submitit_cluster,
                "cpus_per_run": int(args.cpus_per_run), "gpus_per_run": int(args.gpus_per_run),
                "parallel": args.workers or 2}
    return {"workers": args.workers} if args.workers is not None else {}


def _add_speed_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--amp", default="none", help="none | bf16: autocast the network (the mechanism stays float32)")
    p.add_argument("--channels-last", action="store_true", help="NHWC images and convolution weights")
    p.add_argument("--compile", action="store_true", help="torch.compile what the method's step calls")


def _perf(args: argparse.Namespace, **kw: Any):
    from .config import PerfFlags

    return PerfFlags(device=args.device, threads=getattr(args, "threads", 0), amp=args.amp,
                     channels_last=args.channels_last, compile=args.compile, **kw)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bench", description="inputdp: DP training with private inputs and public labels")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p_run = sub.add_parser("run", help="run methods x epsilons x seeds on one data set, logged to MLflow")
    _add_run_flags(p_run)

    sub.add_parser("list", help="list methods, data sets, models and presets")

    p_cal = sub.add_parser("calibrate", help="calibrate a method's noise to (epsilon, delta, q, T)")
    p_cal.add_argument("--method", required=True)
    p_cal.add_argument("--epsilon", type=float)
    p_cal.add_argument("--delta", type=float)
    p_cal.add_argument("--sampling-rate", type=float)
    p_cal.add_argument("--steps", type=int)
    p_cal.add_argument("--preset", help="instead of (delta, q, T): a table over the preset's data sets")
    p_cal.add_argument("--epsilons", default="1,2,4,8", help="with --preset: the epsilons of the table")
    p_cal.add_argument("--option", action="append", metavar="NAME=VALUE")
    p_cal.add_argument("--json", action="store_true")
    p_speed = sub.add_parser("speed", help="median training-step time per method, interleaved, vs the non-private reference")
    p_speed.add_argument("--methods", default="all")
    p_speed.add_argument("--dataset", required=True, help=_DATASET_HELP)
    p_speed.add_argument("--preset", default="cpu")
    p_speed.add_argument("--model")
    p_speed.add_argument("--batch-size", type=int, default=256)
    p_speed.add_argument("--steps", type=int, default=50)
    p_speed.add_argument("--warmup", type=int, default=5)
    p_speed.add_argument("--norm", default="group")
    p_speed.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE")
    p_speed.add_argument("--data-dir")
    p_speed.add_argument("--synthetic", action="store_true", help="random inputs of the data set's shape")
    p_speed.add_argument("--device", default="auto")
    p_speed.add_argument("--threads", type=int, default=0)
    _add_speed_flags(p_speed)
    p_speed.add_argument("--variants", action="store_true",
                         help="time every option set a method declares (DP-SGD: each clipping mode) side by side")
    p_speed.add_argument("--json", action="store_true")
    p_gpu = sub.add_parser("gpu-check", help="the paper's shapes on synthetic data: step time, examples/s and peak "
                                             "memory per method and speed variant (a table and a JSON file)")
    p_gpu.add_argument("--device", default="auto")
    p_gpu.add_argument("--steps", type=int, default=200, help="timed steps per configuration (the paper's epoch: 200)")
    p_gpu.add_argument("--warmup", type=int, default=10)
    p_gpu.add_argument("--batch-size", type=int, default=250, help="the paper's CIFAR-10 batch: 250")
    p_gpu.add_argument("--shapes", help="comma-separated DATASET:MODEL pairs (default: the paper's, see presets.py)")
    p_gpu.add_argument("--variants", default="fp32,bf16,compile,bf16+compile",
                       help="comma-separated from fp32, bf16, compile, bf16+compile (each with --channels-last on a GPU)")
    p_gpu.add_argument("--methods", default="all", help="'all' (every method with a per-step loop) or a list")
    p_gpu.add_argument("--out", default="gpu-check.json", help="where the JSON goes")
    p_gpu.add_argument("--json", action="store_true", help="print the JSON instead of the table")
    p_rep = sub.add_parser("report", help="leaderboard (md, csv, html) and plots from the finished MLflow runs")
    p_rep.add_argument("--tracking-uri")
    p_rep.add_argument("--experiment", default="inputdp")
    p_rep.add_argument("--out", default="reports/out", help="output directory (default: reports/out)")
    p_rep.add_argument("--stamp", default="", help="a line saying when and where the runs were measured")
    p_aud = sub.add_parser("audit", help="an empirical epsilon lower bound for a method's trained model: one run with m "
                                         "canaries, or --runs N runs with and without one canary")
    p_aud.add_argument("--method", required=True)
    p_aud.add_argument("--dataset", required=True, help=_DATASET_HELP)
    p_aud.add_argument("--epsilon", type=float, default=1.0)
    p_aud.add_argument("--preset", default="cpu")
    p_aud.add_argument("--canaries", type=int, help="one-run audit: how many canaries (default 1000)")
    p_aud.add_argument("--canary-kind", default="random_pattern",
                       help="mislabeled | random_pattern | blank_patch | exclusive_support")
    p_aud.add_argument("--pattern-scale", type=float, default=None,
                       help="random_pattern canaries: pixel spread as a multiple of the data's (default 2)")
    p_aud.add_argument("--score", default="auto",
                       help="auto (exclusive_support on a dense model: exclusive_weight_change alone; else every "
                            "general score), all, or a comma-separated list of loss, margin, reference_rank, "
                            "gradient_alignment, relearn, first_layer_projection, exclusive_weight_change")
    p_aud.add_argument("--model", help="override the preset's model (exclusive_weight_change needs a dense one: mlp)")
    p_aud.add_argument("--model-width", type=int)
    p_aud.add_argument("--train-examples", type=int, help="train on a fixed subset of this many examples")
    p_aud.add_argument("--sampling-rate", type=float, help="override the preset's Poisson rate q")
    p_aud.add_argument("--steps", type=int, help="override the preset's number of steps T")
    p_aud.add_argument("--seed", type=int, default=0, help="the run's seed (--runs N: seeds SEED .. SEED+N-1)")
    p_aud.add_argument("--epochs", type=int)
    p_aud.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE")
    p_aud.add_argument("--data-dir")
    p_aud.add_argument("--tracking-uri")
    p_aud.add_argument("--experiment", default="inputdp")
    p_aud.add_argument("--no-track", action="store_true", help="do not log the audit run to MLflow")
    p_aud.add_argument("--device", default="auto")
    p_aud.add_argument("--json", action="store_true")
    p_aud.add_argument("--runs", type=int, help="a multi-run audit: N training runs (even), half with one canary, "
                                                "half without; --score names its one score (auto: "
                                                "exclusive_weight_change for exclusive_support on mlp, else loss)")
    _add_executor_flags(p_aud)
    p_hid = sub.add_parser("hidden-state", help="does training's released vectors say more of one input than its own "
                                                "vectors can? a multi-run audit on a constructed linear model")
    p_hid.add_argument("--method", required=True, help="a method that releases per-example vectors")
    p_hid.add_argument("--epsilon", type=float, default=1.0, help="the target the method calibrates to (default 1)")
    p_hid.add_argument("--runs", type=int, default=400, help="training runs, half in each world (default 400)")
    p_hid.add_argument("--probes", type=int, default=2000, help="probe examples per coordinate (default 2000)")
    p_hid.add_argument("--seed", type=int, default=0)
    p_hid.add_argument("--option", action="append", metavar="NAME=VALUE")
    p_hid.add_argument("--json", action="store_true")
    p_srv = sub.add_parser("server", help="start an MLflow tracking server on loopback and print its URI")
    p_srv.add_argument("--backend-store-uri", default="sqlite:///mlflow-server.db",
                       help="sqlite:///FILE or postgresql://USER@HOST/DB")
    p_srv.add_argument("--port", type=int, default=0, help="0: a free port")
    p_srv.add_argument("--artifacts", default="mlartifacts")
    p_srv.add_argument("--detach", action="store_true", help="leave it running and return (prints its pid)")
    return parser


def cmd_server(args: argparse.Namespace) -> int:
    import time

    from .server import ServerError, port_in_use, start_mlflow_server
    from .tracking import check_sqlite_file

    uri = args.backend_store_uri
    if not uri.startswith(("sqlite:///", "postgresql://", "postgresql+", "mysql://", "mysql+")):
        raise ConfigError(f"--backend-store-uri {uri!r} is not allowed: use sqlite:///FILE or postgresql://...")
    if uri.startswith("sqlite:///"):
        check_sqlite_file(uri, write=True, what="--backend-store-uri")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not allowed: give 1..65535, or 0 for a free port")
    if args.port and port_in_use(args.port):
        raise ConfigError(f"--port {args.port} is not allowed: another process listens on 127.0.0.1:{args.port}; "
                          "give another port, or 0 for a free one")
    try:
        server = start_mlflow_server(uri, port=args.port or None, artifacts_dir=args.artifacts,
                                     log_path="mlflow-server.log")
    except ServerError as err:
        raise ConfigError(str(err)) from None
    print(server.uri, flush=True)
    print(f"pid {server.pid}; stop it with: kill -- -{server.pid}", file=sys.stderr, flush=True)
    if args.detach:
        return 0
    try:
        while server.process.poll() is None:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _check_store_flags(args: argparse.Namespace) -> None:
    """An empty experiment or a tracking URI MLflow cannot use would fail deep inside MLflow, or silently mean the
    default: refuse them here, before any work."""
    from .tracking import check_tracking_uri

    if getattr(args, "experiment", None) is not None and not args.experiment.strip():
        raise ConfigError(f"--experiment {args.experiment!r} is not allowed: give the experiment a name (default: inputdp)")
    if not hasattr(args, "tracking_uri") or getattr(args, "no_track", False):
        return
    if args.tracking_uri is not None and not args.tracking_uri.strip():
        raise ConfigError(f"--tracking-uri {args.tracking_uri!r} is not allowed: leave the flag out for sqlite:///mlflow.db "
                          "here, or give sqlite:///FILE or http://HOST:PORT")
    if args.command != "report":  # bench report checks its --out first, then the store (read-only)
        check_tracking_uri(args.tracking_uri, write=True)


def cmd_audit(args: argparse.Namespace) -> int:
    from . import names
    from .audit import BLACK_BOX, PATTERN_SCALE, audit, check_arguments, resolve_scores
    from .config import PerfFlags
    from .models import MODELS
    from .sweep import Overrides, build_config, check_feasible, resolve_methods
    from .tracking import MLflowTracker

    chosen = resolve_methods(args.method)
    if len(chosen) != 1:
        raise ConfigError(f"--method {args.method!r} is not allowed: an audit is of one method; choose one of "
                          f"{', '.join(chosen) if args.method == 'all' else 'the registered methods'}")
    (method,) = chosen
    if args.model is not None:
        MODELS.get(args.model)  # the one-line error for an unknown model, before anything else
    config = build_config(method=method, dataset=args.dataset, preset=args.preset, epsilon=args.epsilon,
                          seed=args.seed, overrides=Overrides(
                              epochs=args.epochs, steps=args.steps, sampling_rate=args.sampling_rate,
                              model=args.model, model_width=args.model_width, train_examples=args.train_examples,
                              data_dir=args.data_dir, method_options=parse_options(args.option, [method])))
    check_feasible([config])
    scale = PATTERN_SCALE if args.pattern_scale is None else args.pattern_scale
    if args.runs is not None:
        if args.canaries is not None:
            raise ConfigError(f"--canaries {args.canaries} is not allowed with --runs: each run of a multi-run audit "
                              "holds one canary (or none)")
        return _multi_run_audit(args, config, scale)
    args.canaries = 1000 if args.canaries is None else args.canaries
    scores = resolve_scores(args.score, args.canary_kind, config.model)
    check_arguments(canary_kind=args.canary_kind, canaries=args.canaries, pattern_scale=scale, scores=scores,
                    model=config.model)
    tracker = None if args.no_track else MLflowTracker(args.tracking_uri, args.experiment)  # the store first
    from .sweep import with_data_fingerprint

    config = with_data_fingerprint(config)  # the audit, like the run it concerns, names its data by content
    if tracker is not None:
        tracker.extra_tags.update({
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: config.match_key(),
            names.TAG_CONFIG_KEY: f"audit:{config.key()}:{args.canary_kind}:{args.canaries}:{scale:g}",
            names.TAG_PATTERN_SCALE: f"{scale:g}"})
    perf = PerfFlags(device=args.device, progress=not args.json)
    result = audit(config, canaries=args.canaries, canary_kind=args.canary_kind, scores=scores, perf=perf,
                   tracker=tracker, pattern_scale=scale)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    print(f"{method} on {args.dataset} ({args.preset}), claimed epsilon {config.privacy.epsilon:g}, "
          f"{args.canaries} {args.canary_kind} canaries, test accuracy {result.test_accuracy:.4f}")
    print(f"family: {result.family()}")
    print(f"{'score':<24}{'threat':<11}{'eps_lb':>8}{'ceiling':>9}{'k':>6}{'correct':>10}")
    for o in result.outcomes:
        threat = "black-box" if o.score in BLACK_BOX else "white-box"
        print(f"{o.score:<24}{threat:<11}{o.epsilon_lb:>8.3f}{o.ceiling:>9.3f}{o.k:>6}{o.correct:>6}/{o.guesses}")
    return 0


def _multi_run_audit(args: argparse.Namespace, config, scale: float) -> int:
    from . import names
    from .audit import BLACK_BOX, check_arguments, resolve_scores
    from .audit_runs import check_runs, multi_run_audit
    from .config import PerfFlags
    from .executors import EXECUTORS
    from .tracking import MLflowTracker

    check_runs(args.runs)
    if args.executor not in EXECUTORS:
        raise ConfigError(f"--executor {args.executor!r} is not allowed: choose one of {', '.join(EXECUTORS)}")
    if args.score == "auto":
        scores = resolve_scores("auto", args.canary_kind, config.model)
        scores = scores if scores == ("exclusive_weight_change",) else ("loss",)
    else:
        scores = resolve_scores(args.score, args.canary_kind, config.model)
    if len(scores) != 1:
        raise ConfigError(f"--score {args.score!r} is not allowed with --runs: a multi-run audit is one test of one "
                          "score; name one")
    check_arguments(canary_kind=args.canary_kind, canaries=1, pattern_scale=scale, scores=scores, model=config.model,
                    minimum=1)
    (score,) = scores
    from .sweep import with_data_fingerprint

    tracker = None if args.no_track else MLflowTracker(args.tracking_uri, args.experiment)
    config = with_data_fingerprint(config)
    if tracker is not None:
        tracker.extra_tags.update({
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: config.match_key(),
            names.TAG_CONFIG_KEY: f"audit-runs:{config.key()}:{args.canary_kind}:{score}:{args.runs}:{scale:g}"})
    perf = PerfFlags(device=args.device, progress=not args.json)
    result = multi_run_audit(config, runs=args.runs, canary_kind=args.canary_kind, score=score, perf=perf,
                             tracker=tracker, executor=args.executor, executor_options=_executor_options(args),
                             pattern_scale=scale)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    c = result.counts
    print(f"{config.method} on {args.dataset} ({args.preset}, {config.model}, {result.runs} runs of "
          f"{config.train_examples or 'all'} examples), claimed epsilon {config.privacy.epsilon:g}: one "
          f"{args.canary_kind} canary, score {score} ({'black-box' if score in BLACK_BOX else 'white-box'})")
    print(f"rule chosen on half of the runs: {result.rule.describe()} (bound there {result.selection_bound:.3f})")
    print(f"other half: with the canary {c.tp}/{c.tp + c.fn} guessed with; without it {c.fp}/{c.fp + c.tn} guessed "
          f"with; one test at 95% (Clopper-Pearson, each rate at 97.5%)")
    print(f"epsilon_lb {result.epsilon_lb:.3f} (ceiling {result.ceiling:.3f}); {result.failed} runs failed; "
          f"median test accuracy {result.median_test_accuracy:.4f}; wall {result.wall_s:.0f} s")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from inputdp.reports.leaderboard import leaderboard, load_runs, tidy, write_report

    from .tracking import check_tracking_uri

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {args.out!r} is not allowed: it is a file; give a folder (made if missing)")
    check_tracking_uri(args.tracking_uri, write=False)
    runs = load_runs(args.tracking_uri, args.experiment)
    train, audits = tidy(runs)
    if train.empty:
        raise ConfigError(f"no finished runs in experiment {args.experiment!r} of the store: run `bench run` first")
    board = leaderboard(train, audits)
    try:
        files = write_report(board, out, stamp=args.stamp, audits=audits)
    except OSError as err:
        raise ConfigError(f"--out {args.out!r} cannot be written: {err.strerror or err}") from None
    print(f"{len(train)} runs, {len(board)} leaderboard rows")
    for f in (files.markdown, files.csv, files.html, *files.plots):
        print(f"wrote {f}")
    return 0


def cmd_speed(args: argparse.Namespace) -> int:
    from inputdp.methods import METHODS

    from .speed import measure
    from .sweep import resolve_methods

    methods = resolve_methods(args.methods)
    if args.methods == "all":
        methods = [m for m in methods if not METHODS.get(m).load().own_loop]
    result = measure(methods, dataset=args.dataset, preset=args.preset, model=args.model, batch_size=args.batch_size,
                     steps=args.steps, warmup=args.warmup, norm=args.norm, data_dir=args.data_dir,
                     synthetic=args.synthetic, method_options=parse_options(args.option, methods),
                     perf=_perf(args, progress=False), variants=args.variants)
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


def cmd_list(_: argparse.Namespace) -> int:
    """Every registry's entries, plug-ins with their distribution; a broken plug-in is listed on stderr in one line
    (exit 2) and stops nothing else."""
    from inputdp.datasets import DATASETS
    from inputdp.methods import METHODS

    from .models import MODELS
    from .presets import PRESETS
    from .registry import BUILT_IN

    broken = 0
    for title, registry in (("methods", METHODS), ("data sets", DATASETS), ("models", MODELS), ("presets", PRESETS)):
        print(f"{title}:")
        for e in registry:
            origin = registry.origin(e.name)
            print(f"  {e.name:<22} {e.summary}" + ("" if origin == BUILT_IN else f"  [{origin}]"))
        if registry is DATASETS:
            print(f"  {'folder:PATH, npz:FILE':<22} your own data (README, \"Your own data\")")
        for message in registry.broken().values():
            print(f"bench list: {message}", file=sys.stderr)
            broken += 1
    return 2 if broken else 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from inputdp.methods import create_method

    from .config import PrivacySpec

    options = {k: v for m, d in parse_options(args.option, [args.method]).items() for k, v in d.items()}
    if args.preset:
        return _calibration_table(args, options)
    missing = [f"--{n.replace('_', '-')}" for n in ("epsilon", "delta", "sampling_rate", "steps")
               if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"bench calibrate needs {', '.join(missing)} (or --preset NAME for a table)")
    spec = PrivacySpec(epsilon=args.epsilon, delta=args.delta, sampling_rate=args.sampling_rate, steps=args.steps)
    method = create_method(args.method, options)
    cal = method.calibrate(spec)
    out: dict[str, Any] = {"method": args.method, "epsilon": cal.epsilon, "epsilon_target": args.epsilon,
                           "delta": args.delta, "sampling_rate": args.sampling_rate, "steps": args.steps,
                           **cal.noise, **{k: v for k, v in cal.details.items() if k not in cal.noise},
                           "order": cal.order, "calibration_seconds": cal.seconds}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>20}: {v}")
    return 0


def _calibration_table(args: argparse.Namespace, options: dict[str, Any]) -> int:
    """The noise (r* or sigma) for every data set of a preset at each epsilon, as a Markdown table; one row per
    accountant the method offers (side by side), unless ``--option accountant=NAME`` picks one."""
    from inputdp.methods import METHODS, create_method

    from .config import PrivacySpec
    from .presets import PRESETS
    from .sweep import parse_list

    preset = PRESETS.get(args.preset)
    epsilons = parse_list(args.epsilons, float, "--epsilons")
    cls = METHODS.get(args.method).load()
    accountants = ([None] if "accountant" in options or "accountant" not in cls.option_defaults
                   else list(getattr(cls, "accountants", (cls.option_defaults["accountant"],))))
    rows, lines = [], []
    for dataset, s in preset.per_dataset.items():
        for accountant in accountants:
            chosen = {} if accountant is None else {"accountant": accountant}
            method = create_method(args.method, {**s.method_options.get(args.method, {}), **options, **chosen})
            cells = []
            for eps in epsilons:
                cal = method.calibrate(PrivacySpec(epsilon=eps, delta=args.delta or s.delta,
                                                   sampling_rate=s.sampling_rate, steps=s.steps))
                key = next(iter(cal.noise))
                cells.append(cal.noise[key])
                rows.append({"dataset": dataset, "q": s.sampling_rate, "steps": s.steps, "epsilon": eps,
                             key: cal.noise[key], "achieved_epsilon": cal.epsilon, "order": cal.order,
                             **{k: v for k, v in cal.details.items() if k not in cal.noise},
                             "calibration_seconds": cal.seconds})
            label = cal.details.get("accountant", "")
            lines.append(f"| {dataset} | {s.sampling_rate:.6g} | {s.steps} | {label} | "
                         + " | ".join(f"{c:.4f}" for c in cells) + " |")
    if args.json:
        print(json.dumps(rows))
    else:
        print("| data set | q | T | accountant | " + " | ".join(f"{key} at eps={e:g}" for e in epsilons) + " |")
        print("|---|---|---|---|" + "---|" * len(epsilons))
        print("\n".join(lines))
        if any("epsilon_vectors_lower" in r for r in rows):
            print("\nThe released vectors spend at least (per-example curve, lower bound at delta):")
            for r in rows:
                head = f"  {r['dataset']} {r.get('accountant', '')} eps={r['epsilon']:g}: "
                if r.get("epsilon_vectors_lower") is None:
                    print(head + f"not evaluated ({r.get('epsilon_vectors_not_evaluated', 'no bound')})")
                else:
                    print(head + f"{r['epsilon_vectors_lower']:.4g} (bracket up to {r['epsilon_vectors_upper']:.4g})")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .sweep import Overrides, check_feasible, expand, parse_list, resolve_methods, run_sweep

    methods = resolve_methods(args.methods)
    overrides = Overrides(
        epochs=args.epochs, steps=args.steps, sampling_rate=args.sampling_rate, optimizer=args.optimizer, lr=args.lr,
        momentum=args.momentum,
        lr_warmup_steps=args.warmup_steps, holdout=args.holdout,
        delta=args.delta, model=args.model, norm=args.norm, data_dir=args.data_dir,
        method_options=parse_options(args.option, methods),
    )
    if args.model is not None:
        from .models import MODELS

        MODELS.get(args.model)
    configs = expand(methods=methods, dataset=args.dataset, preset=args.preset,
                     epsilons=parse_list(args.epsilons, float, "--epsilons"),
                     seeds=parse_list(args.seeds, int, "--seeds"), overrides=overrides)
    check_feasible(configs)
    perf = _perf(args, progress=not args.no_progress)
    if args.executor == "local":
        perf.resolve_device()
    outcome = run_sweep(configs, tracking_uri=args.tracking_uri, experiment=args.experiment, perf=perf,
                        executor=args.executor, executor_options=_executor_options(args))
    if args.holdout:
        print(f"accuracy on {args.holdout} held-out training examples (--holdout), not on the test split")
    acc_label = "holdout_acc" if args.holdout else "test_acc"
    print(f"{'method':<22}{'epsilon':>8}{'seed':>6}{acc_label:>12}{'median_epoch_s':>16}{'eps_spent':>11}")
    for r in outcome.ran:
        m, c = r.metrics, r.config
        eps = "inf" if not math.isfinite(c.privacy.epsilon) else f"{c.privacy.epsilon:g}"
        spent = "inf" if not math.isfinite(m["final_epsilon_spent"]) else f"{m['final_epsilon_spent']:.4f}"
        print(f"{c.method:<22}{eps:>8}{c.seed:>6}{m['final_test_accuracy']:>12.4f}"
              f"{m['median_epoch_time_s']:>16.2f}{spent:>11}")
    if outcome.skipped:
        print(f"skipped {len(outcome.skipped)} configuration(s) already FINISHED in the store")
    if outcome.elsewhere:
        print(f"left {len(outcome.elsewhere)} configuration(s) to the other process running them "
              f"({outcome.elsewhere[0].error}); re-run this command once it is done to see them here")
    if outcome.marked_failed:
        print(f"marked {outcome.marked_failed} unfinished run(s) FAILED: their process had died")
    if outcome.failed:
        for f in outcome.failed:
            sys.stderr.write(f"bench: {f.config.method} eps={f.config.privacy.epsilon:g} seed={f.config.seed} "
                             f"failed: {f.error}\n")
        sys.stderr.write(f"bench: {len(outcome.failed)} configuration(s) failed; re-run the same command to finish "
                         "them (FINISHED ones are skipped)\n")
        return 1
    return 0


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .gpucheck import check, write_table

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


def cmd_hidden_state(args: argparse.Namespace) -> int:
    from .hidden_state import HiddenStateSetup, hidden_state_audit

    options = {k: v for m, d in parse_options(args.option, [args.method]).items() for k, v in d.items()}
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise ConfigError(f"--epsilon {args.epsilon!r} is not allowed: give a finite number > 0")
    setup = HiddenStateSetup(probes=args.probes)

    def progress(done: int, total: int) -> None:
        if not args.json:
            print(f"\r{done}/{total} runs", end="" if done < total else "\n", file=sys.stderr, flush=True)

    out = hidden_state_audit(args.method, epsilon=args.epsilon, runs=args.runs, options=options, setup=setup,
                             seed=args.seed, progress=progress)
    if args.json:
        print(json.dumps(out.as_json()))
    else:
        print(f"{out.method} at epsilon {out.epsilon:g}: the target's own vectors spend at most "
              f"{out.own_vectors_epsilon:.3f} (per-example curve); the probes' vectors alone give epsilon >= "
              f"{out.epsilon_lb:.3f} at 95% (ceiling {out.ceiling:.3f}; {out.correct}/{out.guesses} right on the "
              f"test half; rule: {out.rule}); {out.runs} runs in {out.seconds:.0f} s")
    return 0


COMMANDS = {
    "run": cmd_run, "list": cmd_list, "calibrate": cmd_calibrate, "speed": cmd_speed, "report": cmd_report,
    "audit": cmd_audit, "server": cmd_server, "gpu-check": cmd_gpu_check, "hidden-state": cmd_hidden_state,
}


EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM


def main(argv: list[str] | None = None) -> int:
    """SIGTERM (what ``timeout``, ``kill`` and schedulers send) ends a command like Ctrl-C: the run in progress is
    marked KILLED in the store, and the exit code is 143."""
    import signal

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:  # both raise at once, or, during a store write, as soon as it ends (errors.shielded)
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, raise_on_signal(Terminated)),
                    signal.SIGINT: signal.signal(signal.SIGINT, raise_on_signal(KeyboardInterrupt))}
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        _check_store_flags(args)
        return COMMANDS[args.command](args)
    except ConfigError as err:
        sys.stderr.write(f"bench: error: {' '.join(str(err).split())}\n")
        return EXIT_USAGE
    except Terminated:
        sys.stderr.write("bench: terminated\n")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        sys.stderr.write("bench: interrupted\n")
        return EXIT_INTERRUPTED
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    raise SystemExit(main())
