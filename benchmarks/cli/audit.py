"""``bench audit`` (one-run and multi-run audits) and ``bench hidden-state``."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys

from inputdp.core.errors import ConfigError

from .common import (
    DATASET_HELP,
    DEFAULT_PRESET,
    PRESET_HELP,
    add_executor_flags,
    announce_preset,
    chosen_preset,
    executor_options,
    parse_options,
)


def cmd_audit(args: argparse.Namespace) -> int:
    """``bench audit``: one run with m canaries (or, with --runs, N runs), the data checked before the store."""
    from inputdp.benchmarks.models import MODELS
    from inputdp.benchmarks.resolve import check_feasible
    from inputdp.benchmarks.sweep import Overrides, build_config, resolve_methods
    from inputdp.benchmarks.tracking import MLflowTracker
    from inputdp.core import names
    from inputdp.core.config import PerfFlags

    from ..audits.one_run import PATTERN_SCALE, audit, design_suffix

    if args.mechanism:
        args.preset = args.preset or DEFAULT_PRESET  # its (q, T) alone: no model is trained, nothing to announce
        return _mechanism_audit(args)
    chosen = resolve_methods(args.method)
    if len(chosen) != 1:
        raise ConfigError(f"--method {args.method!r} is not allowed: an audit is of one method; choose one of "
                          f"{', '.join(chosen) if args.method == 'all' else 'the registered methods'}")
    (method,) = chosen
    if args.model is not None:
        MODELS.get(args.model)  # the one-line error for an unknown model, before anything else
    chosen_preset(args)
    config = build_config(method=method, dataset=args.dataset, preset=args.preset, epsilon=args.epsilon,
                          seed=args.seed, overrides=Overrides(
                              epochs=args.epochs, steps=args.steps, sampling_rate=args.sampling_rate,
                              model=args.model, model_width=args.model_width, train_examples=args.train_examples,
                              data_dir=args.data_dir, method_options=parse_options(args.option, [method])))
    if args.canary_kind == "gradient_canaries":
        return _gradient_canary_audit(args, config)
    if args.noise_scale is not None:
        raise ConfigError("--noise-scale is not allowed here: it is for --canary-kind gradient_canaries")
    scale = PATTERN_SCALE if args.pattern_scale is None else args.pattern_scale
    if args.runs is not None:  # every argument checked before the calibration, the data and the store
        score = _check_multi_run(args, config, scale)
    else:
        scores = _check_one_run(args, config, scale)
    # the one calibration of the audited configuration; its data read, checked and named by content, like the run
    # it concerns, before any store is opened
    (resolution,) = check_feasible([config])
    config = resolution.config
    if args.runs is not None:
        return _multi_run_audit(args, resolution, scale, score)
    _check_canary_count(args, config)
    tracker = None if args.no_track else MLflowTracker(args.tracking_uri, args.experiment)
    if tracker is not None:
        tracker.extra_tags.update({
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: config.match_key(),
            names.TAG_CONFIG_KEY: f"audit:{resolution.key()}:{args.canary_kind}:{args.canaries}:{scale:g}"
                                  f"{design_suffix(resolution.claim)}",
            names.TAG_PATTERN_SCALE: f"{scale:g}"})
    perf = PerfFlags(device=args.device, progress=not args.json)
    announce_preset(args)
    result = audit(resolution, canaries=args.canaries, canary_kind=args.canary_kind, scores=scores, perf=perf,
                   tracker=tracker, pattern_scale=scale)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    _print_one_run(args, result)
    return 0


def _print_one_run(args: argparse.Namespace, result) -> None:
    """A one-run audit's table: each score's bound and ceiling (or "no power"), then the verdict, relation named."""
    from ..audits.one_run import BLACK_BOX

    print(f"{result.method} on {args.dataset} ({args.preset}), claimed epsilon {result.epsilon_claimed:g}, "
          f"{args.canaries} {args.canary_kind} canaries, test accuracy {result.test_accuracy:.4f}")
    print(f"family: {result.family()}")
    print(f"{'score':<24}{'threat':<11}{'eps_lb':>8}{'ceiling':>9}{'k':>6}{'correct':>10}")
    for o in result.outcomes:
        threat = "black-box" if o.score in BLACK_BOX else "white-box"
        ceiling = f"{o.ceiling:>9.3f}" if o.power else f"{'no power':>9}"
        print(f"{o.score:<24}{threat:<11}{o.epsilon_lb:>8.3f}{ceiling}{o.k:>6}{o.correct:>6}/{o.guesses}")
    print(f"verdict: {result.verdict()}")


def _gradient_canary_audit(args: argparse.Namespace, config) -> int:
    """``bench audit --canary-kind gradient_canaries``: DP-SGD white-box, m gradient canaries through its whole
    training (benchmarks/audits/gradient_canaries.py); every argument checked before the calibration and the store."""
    from inputdp.benchmarks.audits.gradient_canaries import check_canary_rows, check_gradient_canaries, gradient_canary_audit
    from inputdp.benchmarks.audits.gradient_canary_reading import text_report
    from inputdp.benchmarks.resolve import check_feasible
    from inputdp.benchmarks.tracking import MLflowTracker
    from inputdp.core import names
    from inputdp.core.config import PerfFlags

    given = [flag for flag, v in (("--runs", args.runs), ("--pattern-scale", args.pattern_scale)) if v is not None]
    if given or args.score != "auto":
        raise ConfigError(f"{given[0] if given else '--score'} is not allowed with --canary-kind gradient_canaries: "
                          "one run, its two scores (likelihood_ratio, last_iterate) fixed")
    m = 10_000 if args.canaries is None else args.canaries
    noise_scale = 1.0 if args.noise_scale is None else args.noise_scale
    check_gradient_canaries(config, m, noise_scale)
    check_canary_rows(config, m)
    (resolution,) = check_feasible([config])
    tracker = None if args.no_track else MLflowTracker(args.tracking_uri, args.experiment)
    if tracker is not None:
        tracker.extra_tags.update({
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: resolution.config.match_key(),
            names.TAG_CONFIG_KEY: f"audit:{resolution.key()}:gradient_canaries:{m}:noise{noise_scale:g}"})
    announce_preset(args)
    out = gradient_canary_audit(resolution, canaries=m, perf=PerfFlags(device=args.device, progress=not args.json),
                                tracker=tracker, noise_scale=noise_scale)
    if args.json:
        print(json.dumps(out.as_json()))
        return 0
    print("\n".join(text_report(out, f"{args.dataset} ({args.preset})")))
    return 0


def _mechanism_audit(args: argparse.Namespace) -> int:
    """``bench audit --mechanism``: each method's own release on a worst-case pair, many trials, at the preset's
    (epsilon, delta, q, T) for the data set; every argument checked before anything runs or any store opens."""
    from inputdp.benchmarks.audits import mechanism as ma
    from inputdp.benchmarks.sweep import Overrides, build_config, parse_list
    from inputdp.methods import create_method

    given = [flag for flag, v in (("--canaries", args.canaries), ("--runs", args.runs), ("--model", args.model),
                                  ("--pattern-scale", args.pattern_scale), ("--train-examples", args.train_examples))
             if v is not None]
    if given:
        raise ConfigError(f"{given[0]} is not allowed with --mechanism: the mechanism audit trains no model; it runs "
                          "the method's release on a constructed worst-case pair")
    methods = ma.audited_methods() if args.method == "all" else [m.strip() for m in args.method.split(",")]
    epsilons = parse_list(args.epsilons, float, "--epsilons") if args.epsilons else [args.epsilon]
    scales = parse_list(args.noise_scales, float, "--noise-scales") if args.noise_scales else [1.0]
    trials = ma.DEFAULT_TRIALS if args.trials is None else args.trials
    for m in methods:
        for s in scales:
            ma.check_mechanism_arguments(m, trials=trials, noise_scale=s)
    jobs = []
    for m in methods:  # every configuration built (and refused, in one line) before the first audit runs
        for eps in epsilons:
            config = build_config(method=m, dataset=args.dataset, preset=args.preset, epsilon=eps, seed=args.seed,
                                  overrides=Overrides(steps=args.steps, sampling_rate=args.sampling_rate,
                                                      epochs=args.epochs, data_dir=args.data_dir,
                                                      method_options=parse_options(args.option, [m])))
            create_method(m, dict(config.method_options)).calibrate(config.privacy)  # refused here, in one line
            jobs.append((m, config))
    seeds = parse_list(args.seeds, int, "--seeds") if args.seeds else [args.seed]
    store = None if args.no_track else ma.MechanismStore(args.tracking_uri, args.experiment)
    rows = []
    for (m, config), s, seed in itertools.product(jobs, scales, seeds):
        say = None if args.json else (lambda text: print(f"  {text}", file=sys.stderr, flush=True))
        for r in ma.audit_mechanism(m, config.privacy, dict(config.method_options), trials=trials, noise_scale=s,
                                    seed=seed, progress=say):
            row = {"dataset": config.dataset, "preset": args.preset, "spec_epsilon": config.privacy.epsilon,
                   "sampling_rate": config.privacy.sampling_rate, "steps": config.privacy.steps, "seed": seed,
                   "options": ",".join(f"{k}={v}" for k, v in sorted(config.method_options.items())), **r.row()}
            rows.append(row)
            if store is not None:
                store.log(row, config)
            if not args.json:
                print(ma.line(row), flush=True)
    if args.json:
        print(json.dumps(rows))
    if args.out:
        ma.write_table(rows, args.out, append=args.append)
    return 1 if any(r["refuted"] and r["noise_scale"] == 1.0 for r in rows) else 0


def _check_one_run(args: argparse.Namespace, config, scale: float) -> tuple[str, ...]:
    """A one-run audit's arguments, refused in one line before anything is calibrated, read or stored; its scores."""
    from inputdp.benchmarks.audits.one_run import check_arguments, check_canary_inputs, resolve_scores
    from inputdp.methods import create_method

    args.canaries = 1000 if args.canaries is None else args.canaries
    scores = resolve_scores(args.score, args.canary_kind, config.model)
    check_arguments(canary_kind=args.canary_kind, canaries=args.canaries, pattern_scale=scale, scores=scores,
                    model=config.model)
    check_canary_inputs(args.canary_kind, config, create_method(config.method, dict(config.method_options)))
    _check_design(config)
    return scores


def _check_canary_count(args: argparse.Namespace, config) -> None:
    """Canaries that replace training examples: fewer than the data hold, checked against the data before the store."""
    if args.canary_kind in ("exclusive_support", "canary_inputs"):
        return
    from inputdp.benchmarks.audits.one_run import check_canary_count
    from inputdp.datasets.facts import data_facts

    n = data_facts(config.dataset, config.data_dir).train_size
    check_canary_count(args.canaries, min(n, config.train_examples or n), minimum=2)


def _check_design(config) -> None:
    """Input canaries under a claim whose relation they cannot build (zero-out's null example): refused now."""
    from inputdp.benchmarks.audits.one_run import check_input_design
    from inputdp.core.claims import RELATION_VALUES, adjacency_of

    relation = RELATION_VALUES.get(adjacency_of(config.method_options))
    if relation is not None:
        check_input_design(relation)


def _check_multi_run(args: argparse.Namespace, config, scale: float) -> str:
    """A multi-run audit's arguments, refused in one line before anything is calibrated, read or stored; its score."""
    from inputdp.benchmarks.audits.multi_run import check_runs
    from inputdp.benchmarks.audits.one_run import check_arguments, resolve_scores
    from inputdp.benchmarks.executors import EXECUTORS

    if args.canaries is not None:
        raise ConfigError(f"--canaries {args.canaries} is not allowed with --runs: each run of a multi-run audit "
                          "holds one canary (or none)")
    check_runs(args.runs)
    _check_design(config)
    if args.canary_kind == "canary_inputs":
        raise ConfigError("--canary-kind canary_inputs is not allowed with --runs: its canaries' coordinates widen "
                          "the model of one run; give --canaries M for a one-run audit (any M)")
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
    return scores[0]


def _multi_run_audit(args: argparse.Namespace, resolution, scale: float, score: str) -> int:
    config = resolution.config
    from inputdp.benchmarks.audits.multi_run import multi_run_audit
    from inputdp.benchmarks.audits.one_run import BLACK_BOX
    from inputdp.benchmarks.tracking import MLflowTracker
    from inputdp.core import names
    from inputdp.core.config import PerfFlags

    tracker = None if args.no_track else MLflowTracker(args.tracking_uri, args.experiment)
    if tracker is not None:
        tracker.extra_tags.update({
            names.TAG_KIND: names.KIND_AUDIT, names.TAG_AUDIT_OF: config.match_key(),
            names.TAG_CONFIG_KEY: f"audit-runs:{resolution.key()}:{args.canary_kind}:{score}:{args.runs}:{scale:g}"})
    perf = PerfFlags(device=args.device, progress=not args.json)
    announce_preset(args)
    result = multi_run_audit(resolution, runs=args.runs, canary_kind=args.canary_kind, score=score, perf=perf,
                             tracker=tracker, executor=args.executor, executor_options=executor_options(args),
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
    print(f"verdict: {result.verdict()}")
    return 0


def cmd_hidden_state(args: argparse.Namespace) -> int:
    """``bench hidden-state``: the multi-run audit of a per-example release on a constructed linear model."""
    from inputdp.benchmarks.audits.hidden_state import HiddenStateSetup, hidden_state_audit

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


class Audit:
    name = "audit"
    help = ("an empirical epsilon lower bound for a method's trained model: one run with m "
            "canaries, or --runs N runs with and without one canary")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", required=True, help="the method audited (bench list)")
        p.add_argument("--dataset", required=True, help=DATASET_HELP)
        p.add_argument("--epsilon", type=float, default=1.0, help="the claimed epsilon the method is calibrated to")
        p.add_argument("--preset", help=PRESET_HELP + " (default: cpu, announced)")
        p.add_argument("--canaries", type=int, help="one-run audit: how many canaries (default 1000)")
        p.add_argument("--canary-kind", default="random_pattern",
                       help="mislabeled | random_pattern | blank_patch | exclusive_support | canary_inputs (an input "
                       "coordinate of its own for each canary, appended to every image: the decisive white-box test "
                       "on any data set and model) | gradient_canaries (DP-SGD only: m gradients on parameters of "
                       "their own, through its clipping, noise and every step; default m 10000)")
        p.add_argument("--noise-scale", type=float, default=None,
                       help="gradient_canaries: give DP-SGD's optimizer this multiple of the calibrated sigma, the "
                       "claim kept (default 1; a deliberately broken run, tagged so: 0.5 must be refuted)")
        p.add_argument("--pattern-scale", type=float, default=None,
                       help="random_pattern canaries: pixel spread as a multiple of the data's (default 2)")
        p.add_argument("--score", default="auto",
                       help="auto (exclusive_support on a dense model: exclusive_weight_change alone; else every "
                       "general score; canary_inputs: canary_input_change alone), all, or a comma-separated list of "
                       "loss, margin, reference_rank, gradient_alignment, relearn, first_layer_projection, "
                       "exclusive_weight_change, canary_input_change")
        p.add_argument("--model", help="override the preset's model (exclusive_weight_change needs a dense one: mlp)")
        p.add_argument("--model-width", type=int, help="override the model's width")
        p.add_argument("--train-examples", type=int, help="train on a fixed subset of this many examples")
        p.add_argument("--sampling-rate", type=float, help="override the preset's Poisson rate q")
        p.add_argument("--steps", type=int, help="override the preset's number of steps T")
        p.add_argument("--seed", type=int, default=0, help="the run's seed (--runs N: seeds SEED .. SEED+N-1)")
        p.add_argument("--epochs", type=int, help="override the preset's number of epochs (T = epochs / q)")
        p.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE", help="a method option")
        p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
        p.add_argument("--experiment", default="inputdp", help="the MLflow experiment the audit goes to")
        p.add_argument("--no-track", action="store_true", help="do not log the audit run to MLflow")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--mechanism", action="store_true",
                       help="audit the method's release itself (DP-SGD's step, the one-release methods' release, "
                       "PATE's answers) on a worst-case pair, many trials: tight, or refuted; --method may be all "
                       "or a list")
        p.add_argument("--epsilons", help="--mechanism: a comma-separated list of epsilons (default: --epsilon)")
        p.add_argument("--noise-scales", help="--mechanism: the noise given to the implementation as multiples of "
                       "its calibrated noise, the claim kept (default 1; 0.5 must be refuted)")
        p.add_argument("--seeds", help="--mechanism: a comma-separated list of seeds (default: --seed)")
        p.add_argument("--trials", type=int, help="--mechanism: trials per world (default 400000)")
        p.add_argument("--out", help="--mechanism: write the table (mechanism_audits.csv and .md) to this folder")
        p.add_argument("--append", action="store_true", help="--mechanism --out: keep the rows already in the "
                       "folder's table that this run does not measure again")
        p.add_argument("--runs", type=int, help="a multi-run audit: N training runs (even), half with one canary, "
                       "half without; --score names its one score (auto: "
                       "exclusive_weight_change for exclusive_support on mlp, else loss)")
        add_executor_flags(p)

    run = staticmethod(cmd_audit)


class HiddenState:
    name = "hidden-state"
    help = ("does training's released vectors say more of one input than its own "
            "vectors can? a multi-run audit on a constructed linear model")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", required=True, help="a method that releases per-example vectors")
        p.add_argument("--epsilon", type=float, default=1.0, help="the target the method calibrates to (default 1)")
        p.add_argument("--runs", type=int, default=400, help="training runs, half in each world (default 400)")
        p.add_argument("--probes", type=int, default=2000, help="probe examples per coordinate (default 2000)")
        p.add_argument("--seed", type=int, default=0, help="the run's seed")
        p.add_argument("--option", action="append", metavar="NAME=VALUE", help="a method option")
        p.add_argument("--json", action="store_true", help="print the result as JSON")

    run = staticmethod(cmd_hidden_state)
