"""``bench tune``: a recipe search on the private data whose claim includes the search (benchmarks/tuning)."""

from __future__ import annotations

import argparse
import json
import math

from inputdp.core.errors import ConfigError

from .common import DATASET_HELP, PROGRESS_HELP, THREADS_HELP, parse_options

#: the trial-count distributions by name (dp_accounting's shapes; a number is a truncated negative binomial's shape)
SHAPES = {"poisson": math.inf, "logarithmic": 0.0, "geometric": 1.0}
#: the run kind of a search's run in the store
KIND_TUNE = "tune"


def trial_count(mean: float, shape: str):
    from inputdp.methods.accounting.repeat_select import TrialCount

    if shape in SHAPES:
        value = SHAPES[shape]
    else:
        try:
            value = float(shape)
        except ValueError:
            raise ConfigError(f"--trials-shape {shape!r} is not allowed: {', '.join(SHAPES)} or a truncated negative "
                              "binomial's shape >= 0") from None
    if not mean > 0:
        raise ConfigError(f"--trials-mean {mean!r} is not allowed: the mean number of trials must be >= 1")
    return TrialCount(float(mean), value)


def cmd_tune(args: argparse.Namespace) -> int:
    from inputdp.benchmarks.tuning.search import TuneRequest, plan_search, run_search
    from inputdp.benchmarks.tuning.spaces import load_space
    from inputdp.methods import METHODS

    METHODS.get(args.method)
    options = parse_options(args.option, [args.method]).get(args.method, {})
    request = TuneRequest(method=args.method, dataset=args.dataset, epsilon=args.epsilon, preset=args.preset,
                          space=load_space(args.method, args.space, options),
                          count=trial_count(args.trials_mean, args.trials_shape), delta=args.delta,
                          validation=args.validation, score_noise=args.score_noise, seed=args.seed,
                          data_dir=args.data_dir, search_seed=args.search_seed)
    plan = plan_search(request)  # every refusal and the calibration, before any data or store
    print_plan(plan)
    from .common import perf_flags

    result = run_search(plan, perf=perf_flags(args, progress=not args.no_progress),
                        progress=None if not args.no_progress else (lambda line: None))
    summary = summarise(result)
    if not args.no_track:
        log_search(result, summary, args.tracking_uri, args.experiment)
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary))
    return 0


def print_plan(plan) -> None:
    req = plan.request
    print(f"search of {req.method} on {req.dataset}: {len(plan.configs)} recipes ({req.space.source}), "
          f"{req.count.name} trials, budget epsilon {req.epsilon:g} at delta {plan.delta:g} ({plan.relation})")
    for i, (config, noise) in enumerate(zip(plan.configs, plan.noises)):
        print(f"  recipe {i}: {req.space.label(i)}  noise {noise:.4g}  (alone: epsilon {config.privacy.epsilon:.3f} "
              f"by {plan.accountant})")


def summarise(result) -> dict:
    plan, req = result.plan, result.plan.request
    chosen = result.chosen
    return {
        "method": req.method, "dataset": req.dataset, "relation": plan.relation,
        "trials": [{"trial": t.index, "recipe": t.candidate, "noise": t.noise, "seconds": round(t.seconds, 1),
                    "chosen": chosen is not None and t.index == chosen.index} for t in result.trials],
        "chosen_recipe": None if chosen is None else req.space.candidates[chosen.candidate],
        "noisy_validation_accuracy": None if chosen is None else _clipped(chosen.noisy_score / result.validation_size),
        "test_accuracy": None if chosen is None else result.test_accuracy,
        "claim": {"epsilon": result.epsilon, "epsilon_target": req.epsilon, "delta": plan.delta,
                  "relation": plan.relation, "guarantee": True,
                  "covers": "the released model, its recipe and its noisy validation score, and that the search "
                            "ran: every trial's training and score, whatever K was drawn",
                  "accountant": (f"RDP of Papernot & Steinke's repeat-and-select ({req.count.name} trials, "
                                 "dp_accounting's conversion) of one trial: the recipe drawn at random from the "
                                 "public space, its training's release (read in RDP; alone it is calibrated by "
                                 f"{plan.accountant}) and a Gaussian validation count (sigma {plan.score_sigma:.3g} "
                                 "counts)"),
                  "each_trial_alone": [round(c.privacy.epsilon, 4) for c in plan.configs]},
        "search_randomness": "secret" if result.secret else f"seeded ({req.search_seed}), not secret",
        "validation_examples": result.validation_size, "space": req.space.source,
    }


def _clipped(accuracy: float) -> float:
    """The noisy accuracy shown within [0, 1] (post-processing of the released noisy count)."""
    return min(1.0, max(0.0, accuracy))


def format_summary(s: dict) -> str:
    lines = [f"{len(s['trials'])} trial(s):"]
    for t in s["trials"]:
        lines.append(f"  trial {t['trial']}: recipe {t['recipe']}  noise {t['noise']:.4g}  {t['seconds']:.0f} s"
                     + ("  <- chosen" if t["chosen"] else ""))
    c = s["claim"]
    if s["chosen_recipe"] is None:
        lines.append("no trial was drawn (K = 0): the search releases nothing")
    else:
        lines.append(f"chosen: {json.dumps(s['chosen_recipe'], sort_keys=True)}")
        lines.append(f"noisy validation accuracy {100 * s['noisy_validation_accuracy']:.2f}%; "
                     f"test accuracy {100 * s['test_accuracy']:.2f}%")
    lines.append(f"claim: epsilon {c['epsilon']:.4f} (target {c['epsilon_target']:g}) at delta {c['delta']:g}, "
                 f"{c['relation']}, for the whole search; {c['accountant']}; each trial alone: "
                 + ", ".join(f"{e:g}" for e in c["each_trial_alone"]))
    lines.append(f"the search's randomness (K, the recipes drawn, the score noise): {s['search_randomness']}")
    return "\n".join(lines)


def log_search(result, summary: dict, tracking_uri: str | None, experiment: str) -> None:
    """One finished run of kind ``tune``: the claim and the released figures, the trials as an MLflow table."""
    import pandas as pd

    from inputdp.benchmarks.tracking import log_finished_run, log_table
    from inputdp.core import names

    req, c = result.plan.request, summary["claim"]
    metrics = {"epsilon_search": c["epsilon"], "trials": len(result.trials)}
    if result.chosen is not None:
        metrics.update({names.METRIC_FINAL_TEST_ACCURACY: result.test_accuracy,
                        "noisy_validation_accuracy": summary["noisy_validation_accuracy"]})
    run_id = log_finished_run(
        tracking_uri, experiment, name=f"tune {req.method} {req.dataset} eps {req.epsilon:g}",
        tags={names.TAG_KIND: KIND_TUNE, names.TAG_METHOD: req.method, names.TAG_DATASET: req.dataset,
              names.TAG_PRIVACY_GUARANTEE: "true", names.TAG_NOTE: c["accountant"]},
        params={"epsilon_target": req.epsilon, "delta": c["delta"], "relation": c["relation"],
                "trials_distribution": req.count.name, "space": summary["space"],
                "chosen_recipe": json.dumps(summary["chosen_recipe"], sort_keys=True),
                "search_randomness": summary["search_randomness"],
                "validation_examples": summary["validation_examples"],
                "score_noise_points": req.score_noise, "seed": req.seed},
        metrics=metrics)
    if summary["trials"]:
        log_table(tracking_uri, run_id, pd.DataFrame(summary["trials"]), "trials.json")


class Tune:
    name = "tune"
    help = ("choose a method's recipe on the private data, the search charged: a random number of trials, each a "
            "recipe from a public space scored by a noisy validation count; the claim covers the whole search")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", required=True, help="dpsgd | dp_least_squares | feature_perturbation (a method "
                       "whose release is a guarantee with an RDP curve)")
        p.add_argument("--dataset", required=True, help=DATASET_HELP)
        p.add_argument("--epsilon", type=float, required=True, help="the whole search's epsilon")
        p.add_argument("--delta", type=float, help="the whole search's delta (default: the preset's, 1e-5)")
        p.add_argument("--space", help="a JSON file: a list of candidates, each run settings (sampling_rate, steps, "
                       "epochs, lr, momentum, optimizer, model, norm, lr_warmup_steps, model_width) and \"options\" "
                       "(default: the method's built-in space, the recipes the studies tried)")
        p.add_argument("--option", action="append", metavar="[METHOD.]NAME=VALUE",
                       help="a method option every candidate has (e.g. dpsgd.adjacency=replace_input)")
        p.add_argument("--trials-mean", type=float, default=4.0, help="the mean number of trials (>= 1)")
        p.add_argument("--trials-shape", default="poisson", help="the number of trials' distribution: poisson (K = 0 "
                       "possible), logarithmic, geometric, or a truncated negative binomial's shape (a number >= 0)")
        p.add_argument("--validation", type=float, default=0.1, help="the share of the training split held out to "
                       "score the trials")
        p.add_argument("--score-noise", type=float, default=0.5, help="the noisy validation accuracy's standard "
                       "deviation, in points")
        p.add_argument("--preset", default="cpu", help="the preset the candidates' unset settings come from")
        p.add_argument("--seed", type=int, default=0, help="trial i trains with seed SEED + i")
        p.add_argument("--search-seed", type=int, help="seed the search's own randomness (K, the recipes drawn, the "
                       "score noise): reproducible, and said to be not secret (default: secret)")
        p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
        p.add_argument("--experiment", default="tune", help="the MLflow experiment the search's run goes to")
        p.add_argument("--no-track", action="store_true", help="log nothing to MLflow")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--threads", type=int, default=0, help=THREADS_HELP)
        p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
        p.set_defaults(amp="none", channels_last=False, compile=False)

    run = staticmethod(cmd_tune)
