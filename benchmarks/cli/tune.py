"""``bench tune``: a recipe search on the private data whose claim includes the search (benchmarks/tuning)."""

from __future__ import annotations

import argparse
import json
import math
import sys

from inputdp.core.errors import ConfigError

from .common import DATASET_HELP, PROGRESS_HELP, THREADS_HELP, parse_options, perf_flags

#: the trial-count distributions by name (dp_accounting's shapes; a number is a truncated negative binomial's shape)
SHAPES = {"poisson": math.inf, "logarithmic": 0.0, "geometric": 1.0}  # repeat_select.POISSON is inf
#: the run kind of a search's run in the store
KIND_TUNE = "tune"


def trial_count(mean: float, shape: str):
    """The number of trials' distribution from the flags, refused in one line where they name none."""
    from inputdp.methods.accounting.repeat_select import TrialCount

    try:
        value = SHAPES[shape] if shape in SHAPES else float(shape)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ConfigError(f"--trials-shape {shape!r} is not allowed: {', '.join(SHAPES)} or a truncated negative "
                          "binomial's shape >= 0")
    if not (math.isfinite(mean) and mean >= 1):
        raise ConfigError(f"--trials-mean {mean:g} is not allowed: the mean number of trials must be a number >= 1")
    return TrialCount(float(mean), value)


def cmd_tune(args: argparse.Namespace) -> int:
    """Every check and the calibration (nothing read yet), the plan printed, the search, its result and its run."""
    from inputdp.benchmarks.tuning.search import TuneRequest, check_searchable, plan_search, run_search
    from inputdp.benchmarks.tuning.spaces import load_space
    from inputdp.methods import METHODS

    METHODS.get(args.method)
    options = parse_options(args.option, [args.method]).get(args.method, {})
    check_searchable(args.method, options)
    request = TuneRequest(method=args.method, dataset=args.dataset, epsilon=args.epsilon, preset=args.preset,
                          space=load_space(args.method, args.space, options),
                          count=trial_count(args.trials_mean, args.trials_shape), delta=args.delta,
                          validation=args.validation, score_noise=args.score_noise, seed=args.seed,
                          data_dir=args.data_dir, search_seed=args.search_seed)
    plan = plan_search(request)  # every refusal and the calibration, before any data or store
    if not args.no_track:  # a store it cannot use is refused now, not after the search
        from inputdp.benchmarks.tracking import open_store

        open_store(args.tracking_uri, args.experiment)
    print_plan(plan, sys.stderr if args.json else sys.stdout)
    result = run_search(plan, perf=perf_flags(args, progress=not args.no_progress), show_trials=args.show_trials)
    summary = summarise(result, show_trials=args.show_trials)
    print(json.dumps(summary, indent=1) if args.json else format_summary(summary), flush=True)  # before the store
    if not args.no_track:
        log_search(result, summary, args.tracking_uri, args.experiment)
    return 0


def print_plan(plan, out) -> None:
    """Each recipe with its noise and its epsilon alone (all public: computed before any data are read), to ``out``
    (stderr under --json, so that stdout is the JSON alone)."""
    req = plan.request
    print(f"search of {req.method} on {req.dataset}: {len(plan.configs_alone)} recipes ({req.space.source}), "
          f"{req.count.name} trials, budget epsilon {req.epsilon:g} at delta {plan.delta:g} ({plan.relation})",
          file=out)
    for i, (config, noise) in enumerate(zip(plan.configs_alone, plan.noises)):
        print(f"  recipe {i}: {req.space.label(i)}  noise {noise:.4g}  (alone: epsilon {config.privacy.epsilon:.3f} "
              f"by {plan.accountant})", file=out)


def summarise(result, show_trials: bool = False) -> dict:
    """What the search releases (the chosen recipe, its noisy validation count, the released model's test accuracy)
    and its claim; with ``show_trials``, a diagnosis beside it that the claim does not cover (K and every trial)."""
    plan, req = result.plan, result.plan.request
    chosen = result.chosen
    out = {
        "method": req.method, "dataset": req.dataset, "relation": plan.relation,
        "chosen_recipe": None if chosen is None else req.space.candidates[chosen.candidate],
        "noisy_validation_correct": None if chosen is None else round(chosen.noisy_score, 1),
        "validation_planned": plan.planned_validation_size,
        "test_accuracy": None if chosen is None else result.test_accuracy,
        "claim": {"epsilon": result.epsilon, "epsilon_target": req.epsilon, "delta": plan.delta,
                  "relation": plan.relation, "guarantee": True,
                  "covers": "the released model, its recipe and its noisy validation count (and a release of "
                            "nothing when no trial is drawn); not the number of trials, the trials' recipes or "
                            "scores, the search's duration, n or the validation split's drawn size",
                  "accountant": (f"RDP of Papernot & Steinke's repeat-and-select ({req.count.name} trials, "
                                 "dp_accounting's conversion) of one trial: the recipe drawn at random from the "
                                 "public space, its training's release (read in RDP; alone it is calibrated by "
                                 f"{plan.accountant}) and a Gaussian validation count (sigma {plan.score_sigma:.3g} "
                                 "counts)"),
                  "each_recipe_alone": [round(c.privacy.epsilon, 4) for c in plan.configs_alone]},
        "search_randomness": "secret" if result.secret else f"seeded ({req.search_seed}), not secret",
        "training_noise": "seeded from each trial's seed, unless the method's secure_mode option is set",
        "space": req.space.source,
    }
    if show_trials:
        out["diagnosis_outside_the_claim"] = {
            "validation_drawn": result.drawn_validation_size,
            "trials": [{"trial": t.index, "recipe": t.candidate, "noise": t.noise, "seconds": round(t.seconds, 1),
                        "chosen": chosen is not None and t.index == chosen.index} for t in result.trials]}
    return out


def format_summary(s: dict) -> str:
    """The summary as the lines the command prints."""
    c = s["claim"]
    lines = []
    if s["chosen_recipe"] is None:
        lines.append("no trial was drawn (K = 0): the search releases nothing")
    else:
        lines.append(f"chosen: {json.dumps(s['chosen_recipe'], sort_keys=True)}")
        lines.append(f"noisy validation count {s['noisy_validation_correct']:.1f} correct (of about "
                     f"{s['validation_planned']} held out); test accuracy {100 * s['test_accuracy']:.2f}%")
    lines.append(f"claim: epsilon {c['epsilon']:.4f} (target {c['epsilon_target']:g}) at delta {c['delta']:g}, "
                 f"{c['relation']}, for the whole search; {c['accountant']}; each recipe alone: "
                 + ", ".join(f"{e:g}" for e in c["each_recipe_alone"]))
    lines.append(f"it covers {c['covers']}")
    lines.append(f"the search's randomness (K, the recipes drawn, the score noise, the trials' seeds): "
                 f"{s['search_randomness']}; the training noise: {s['training_noise']}")
    diagnosis = s.get("diagnosis_outside_the_claim")
    if diagnosis:
        lines.append(f"diagnosis, outside the claim: {len(diagnosis['trials'])} trial(s), validation split "
                     f"{diagnosis['validation_drawn']} examples as drawn")
        for t in diagnosis["trials"]:
            lines.append(f"  trial {t['trial']}: recipe {t['recipe']}  noise {t['noise']:.4g}  {t['seconds']:.0f} s"
                         + ("  <- chosen" if t["chosen"] else ""))
    return "\n".join(lines)


def log_search(result, summary: dict, tracking_uri: str | None, experiment: str) -> None:
    """One finished run of kind ``tune``: the claim and the released figures; with ``--show-trials`` the trials as an
    MLflow table too, the run tagged ``trials_shown`` (outside the claim)."""
    import pandas as pd

    from inputdp.benchmarks.tracking import log_finished_run, log_table
    from inputdp.core import names

    req, c = result.plan.request, summary["claim"]
    diagnosis = summary.get("diagnosis_outside_the_claim")
    metrics = {"epsilon_search": c["epsilon"]}
    if result.chosen is not None:
        metrics.update({names.METRIC_FINAL_TEST_ACCURACY: result.test_accuracy,
                        "noisy_validation_correct": summary["noisy_validation_correct"]})
    run_id = log_finished_run(
        tracking_uri, experiment, name=f"tune {req.method} {req.dataset} eps {req.epsilon:g}",
        tags={names.TAG_KIND: KIND_TUNE, names.TAG_METHOD: req.method, names.TAG_DATASET: req.dataset,
              names.TAG_PRIVACY_GUARANTEE: "true", names.TAG_NOTE: c["accountant"],
              "trials_shown": "true" if diagnosis else "false"},
        params={"epsilon_target": req.epsilon, "delta": c["delta"], "relation": c["relation"],
                "trials_distribution": req.count.name, "space": summary["space"],
                "chosen_recipe": json.dumps(summary["chosen_recipe"], sort_keys=True),
                "search_randomness": summary["search_randomness"], "covers": c["covers"],
                "validation_planned": summary["validation_planned"], "score_noise_points": req.score_noise,
                "seed": req.seed},
        metrics=metrics)
    if diagnosis and diagnosis["trials"]:
        log_table(tracking_uri, run_id, pd.DataFrame(diagnosis["trials"]), "trials.json")


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
        p.add_argument("--seed", type=int, default=0, help="each trial trains with seed SEED plus a draw of the "
                       "search's randomness (so a released model's seed does not tell which trial it was)")
        p.add_argument("--search-seed", type=int, help="seed the search's own randomness (K, the recipes drawn, the "
                       "score noise): reproducible, and said to be not secret (default: secret)")
        p.add_argument("--data-dir", help="data directory (default: $INPUTDP_DATA, else the user cache)")
        p.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///mlflow.db here)")
        p.add_argument("--experiment", default="tune", help="the MLflow experiment the search's run goes to")
        p.add_argument("--no-track", action="store_true", help="log nothing to MLflow")
        p.add_argument("--json", action="store_true", help="print the result as JSON")
        p.add_argument("--show-trials", action="store_true", help="a diagnosis: say each trial as it runs and list "
                       "them at the end (K and the recipes tried are outside the claim: Papernot & Steinke's theorems "
                       "assume they are not released)")
        p.add_argument("--device", default="auto", help="auto | cpu | cuda")
        p.add_argument("--threads", type=int, default=0, help=THREADS_HELP)
        p.add_argument("--no-progress", action="store_true", help=PROGRESS_HELP)
        p.set_defaults(amp="none", channels_last=False, compile=False)

    run = staticmethod(cmd_tune)
