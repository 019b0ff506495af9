"""``bench run``: methods x epsilons x seeds on one data set, into the store."""

from __future__ import annotations

import argparse
import math
import sys

from inputdp.core import names
from inputdp.core.errors import ConfigError

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
                        executor=args.executor, executor_options=executor_options(args), nest=True,
                        log_model=args.log_model)
    from inputdp.benchmarks.tracking import default_tracking_uri, open_store, runs_view_url

    client, exp = open_store(args.tracking_uri, args.experiment, create=False)
    _print_ran(outcome, args.holdout, _stored_refutations(client, exp, args))
    if exp is not None and any(r.metrics for r in (*outcome.ran, *outcome.skipped)):
        # the experiment's runs with the key metrics as columns (the view the store holds)
        print(f"in MLflow: {runs_view_url(args.tracking_uri or default_tracking_uri(), exp)}")
    if outcome.elsewhere:
        print(f"left {len(outcome.elsewhere)} configuration(s) to the other process running them "
              f"({outcome.elsewhere[0].error}); re-run this command once it is done to see them here")
    if outcome.marked_failed:
        print(f"marked {outcome.marked_failed} unfinished run(s) FAILED: their process had died")
    if outcome.failed:
        for f in outcome.failed:
            sys.stderr.write(f"bench: {f.config.label(f.variant)} failed: {f.error}\n")
        if any(not f.error.startswith("diverged") for f in outcome.failed):  # a lost worker's run can be re-run
            sys.stderr.write(f"bench: {len(outcome.failed)} configuration(s) failed; re-run the same command to "
                             "finish them (FINISHED ones are skipped)\n")
        return 1
    return 0


def _stored_refutations(client, exp: str | None, args) -> dict:
    """The stored audits' refutations of the sweep's claims; {} with a note where the experiment is in an older store
    schema (its audits would be read otherwise than the leaderboard reads them)."""
    from inputdp.benchmarks.tracking import check_schema, default_tracking_uri, refuted_claims

    if exp is None:
        return {}
    try:
        check_schema(client, exp, args.tracking_uri or default_tracking_uri(), args.experiment)
    except ConfigError as err:
        print(f"note: stored audits not read: {err}")
        return {}
    return refuted_claims(client, exp)


#: an evaluation on fewer examples than this says nothing of a method's accuracy (one example reads 0 or 1)
FEW_EVAL_EXAMPLES = 100


def _print_ran(outcome, holdout: int | None, refuted: dict) -> None:
    """The whole sweep's table (the runs made now and those the store already held): accuracy, median epoch time,
    epsilon spent and whether that epsilon is a guarantee of the model (yes, no, refuted by a stored audit), then a
    note for each row whose figures cannot be read as they stand: an evaluation on a handful of examples, or times
    taken while other work shared the cores."""
    if holdout:
        print(f"accuracy on {holdout} held-out training examples (--holdout), not on the test split")
    acc_label = "holdout_acc" if holdout else "test_acc"
    rows = [r for r in (*outcome.ran, *outcome.skipped) if r.metrics]
    if rows:
        print(f"{'method':<32}{'epsilon':>8}{'seed':>6}{acc_label:>12}{'median_epoch_s':>16}{'eps_spent':>11}  guarantee")
    notes = []
    for r in sorted(rows, key=lambda r: (r.config.method, r.variant, r.config.privacy.epsilon, r.config.seed)):
        m, c = r.metrics, r.config
        label, eps = c.method + (f" [{r.variant}]" if r.variant else ""), f"{c.privacy.epsilon:g}"  # inf: "inf"
        spent = m.get(names.METRIC_FINAL_EPSILON_SPENT, math.inf)
        spent = "inf" if not math.isfinite(spent) else f"{spent:.4f}"
        bound = refuted.get((c.match_key(), c.method, r.variant))
        guarantee = (f"refuted ({bound:.2f} > {c.privacy.epsilon:g}, a stored audit)" if bound is not None
                     else r.guarantee or "none (reference)")
        print(f"{label:<32}{eps:>8}{c.seed:>6}{m.get(names.METRIC_FINAL_TEST_ACCURACY, math.nan):>12.4f}"
              f"{m.get(names.METRIC_MEDIAN_EPOCH_TIME, math.nan):>16.2f}{spent:>11}  {guarantee}")
        where = c.label(r.variant)
        n_eval = m.get(names.METRIC_EVAL_EXAMPLES)
        if n_eval is not None and n_eval < FEW_EVAL_EXAMPLES:
            notes.append(f"{where}: evaluated on {int(n_eval)} example(s), so its accuracy says nothing; use a larger "
                         "data set or test split (PATE's public pool takes test examples)")
        chance = m.get(names.METRIC_CHANCE_ACCURACY)
        if chance is not None and m.get(names.METRIC_FINAL_TEST_ACCURACY, 1.0) <= names.AT_CHANCE_FACTOR * chance:
            notes.append(f"{where}: its accuracy is at chance (1/{round(1 / chance)} = {chance:.3f}): the model learnt "
                         "next to nothing; a larger epsilon or another lr (tagged at_chance in the store)")
        if m.get(names.METRIC_CONTENDED, 0) == 1:
            notes.append(f"{where}: timed while other work shared the cores, so its times are no speed figure; "
                         "run it alone to time it (bench speed compares methods side by side)")
    for note in notes:
        print(f"note: {note}")
    if outcome.skipped:
        print(f"skipped {len(outcome.skipped)} configuration(s) already FINISHED in the store: their rows above are "
              "the store's")


class Run:
    name = "run"
    help = ("run methods x epsilons x seeds on one data set, logged to MLflow")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        add_run_flags(p)
        p.add_argument("--log-model", action="store_true",
                       help="log each finished run's released model (its state_dict, model/state_dict.pt) as an MLflow "
                            "artifact beside resolved_config.json (default: off; MNIST's small_cnn is about 0.5 MB)")

    run = staticmethod(cmd_run)
