"""``bench run``: methods x epsilons x seeds on one data set, into the store."""

from __future__ import annotations

import argparse
import math
import sys

from inputdp.core import names

from .common import add_run_flags, announce_preset, chosen_preset, executor_options, parse_options, perf_flags


def cmd_run(args: argparse.Namespace) -> int:
    """``bench run``: expand, resolve (one calibration each), check the data, then run the sweep into the store."""
    from inputdp.benchmarks.resolve import check_feasible
    from inputdp.benchmarks.sweep import Overrides, expand, parse_list, resolve_methods, run_sweep

    methods = resolve_methods(args.methods)
    overrides = Overrides(
        epochs=args.epochs, steps=args.steps, sampling_rate=args.sampling_rate, optimizer=args.optimizer, lr=args.lr,
        momentum=args.momentum,
        lr_warmup_steps=args.warmup_steps, holdout=args.holdout,
        delta=args.delta, model=args.model, norm=args.norm, data_dir=args.data_dir,
        method_options=parse_options(args.option, methods),
    )
    if args.model is not None:
        from inputdp.benchmarks.models import MODELS

        MODELS.get(args.model)
    configs = expand(methods=methods, dataset=args.dataset, preset=chosen_preset(args),
                     epsilons=parse_list(args.epsilons, float, "--epsilons"),
                     seeds=parse_list(args.seeds, int, "--seeds"), overrides=overrides)
    perf = perf_flags(args, progress=not args.no_progress)
    if args.executor == "local":
        perf.resolve_device()
    # each configuration resolved (calibrated) once and, run here, its data checked and fingerprinted, before any
    # store is opened (remote workers read their own data)
    runs = check_feasible(configs, check_data=args.executor == "local")
    announce_preset(args, len(runs))  # a preset not given is named, with the sweep's estimate, before anything runs
    # the sweep is a parent run; its runs nest under it (the UI's runs table groups them)
    outcome = run_sweep(runs, tracking_uri=args.tracking_uri, experiment=args.experiment, perf=perf,
                        executor=args.executor, executor_options=executor_options(args), nest=True)
    _print_ran(outcome, args.holdout)
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
        if any(not f.error.startswith("diverged") for f in outcome.failed):  # a lost worker's run can be re-run
            sys.stderr.write(f"bench: {len(outcome.failed)} configuration(s) failed; re-run the same command to "
                             "finish them (FINISHED ones are skipped)\n")
        return 1
    return 0


def _print_ran(outcome, holdout: int | None) -> None:
    """The table of the runs made now: accuracy, median epoch time and epsilon spent."""
    if holdout:
        print(f"accuracy on {holdout} held-out training examples (--holdout), not on the test split")
    acc_label = "holdout_acc" if holdout else "test_acc"
    if outcome.ran:
        print(f"{'method':<22}{'epsilon':>8}{'seed':>6}{acc_label:>12}{'median_epoch_s':>16}{'eps_spent':>11}")
    for r in outcome.ran:
        m, c = r.metrics, r.config
        eps = "inf" if not math.isfinite(c.privacy.epsilon) else f"{c.privacy.epsilon:g}"
        spent = m[names.METRIC_FINAL_EPSILON_SPENT]
        spent = "inf" if not math.isfinite(spent) else f"{spent:.4f}"
        print(f"{c.method:<22}{eps:>8}{c.seed:>6}{m[names.METRIC_FINAL_TEST_ACCURACY]:>12.4f}"
              f"{m[names.METRIC_MEDIAN_EPOCH_TIME]:>16.2f}{spent:>11}")


class Run:
    name = "run"
    help = ("run methods x epsilons x seeds on one data set, logged to MLflow")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_run_flags(p)

    run = staticmethod(cmd_run)
