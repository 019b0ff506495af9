"""``bench calibrate``: a method's noise for (epsilon, delta, q, T), or a table over a preset."""

from __future__ import annotations

import argparse
import itertools
import json
from typing import Any

from inputdp.core.claims import ADD_REMOVE, ADJACENCY, REPLACE_INPUT, ZERO_OUT, adjacency_of
from inputdp.core.errors import ConfigError

from .common import parse_options


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``bench calibrate``: one calibration at (epsilon, delta, q, T), or a table over a preset's data sets."""
    from inputdp.core.config import PrivacySpec
    from inputdp.methods import METHODS, create_method

    METHODS.get(args.method)  # an unknown method is refused first, whatever else is given
    options = {k: v for m, d in parse_options(args.option, [args.method]).items() for k, v in d.items()}
    if args.preset:
        return _calibration_table(args, options)
    if args.epsilons is not None:
        raise ConfigError(f"--epsilons {args.epsilons!r} is not allowed without --preset: give --epsilon for one "
                          "calibration, or --preset NAME for a table")
    missing = [f"--{n.replace('_', '-')}" for n in ("epsilon", "delta", "sampling_rate", "steps")
               if getattr(args, n) is None]
    if missing:
        raise ConfigError(f"bench calibrate needs {', '.join(missing)} (or --preset NAME for a table)")
    spec = PrivacySpec(epsilon=args.epsilon, delta=args.delta, sampling_rate=args.sampling_rate, steps=args.steps)
    method = create_method(args.method, options)
    cal = method.calibrate(spec)
    out: dict[str, Any] = {"method": args.method, "epsilon": cal.epsilon, "epsilon_target": args.epsilon,
                           "delta": args.delta, "sampling_rate": args.sampling_rate, "steps": args.steps,
                           **method.claim_text().parameters, **cal.noise,
                           **{k: v for k, v in cal.details.items() if k not in cal.noise},
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
    from inputdp.benchmarks.presets import PRESETS
    from inputdp.core.config import PrivacySpec
    from inputdp.methods import METHODS, create_method

    preset = PRESETS.get(args.preset)
    epsilons = _table_epsilons(args)
    settings = dict(preset.per_dataset) or ({"(any data set)": preset.fallback} if preset.fallback else {})
    if not settings:
        raise ConfigError(f"--preset {args.preset!r} names no data set settings to calibrate at")
    cls = METHODS.get(args.method).load()
    accountants = ([None] if "accountant" in options or "accountant" not in cls.option_defaults
                   else list(getattr(cls, "accountants", (cls.option_defaults["accountant"],))))
    relations: list[str | None] = [None]
    asked = options.get(ADJACENCY)
    if asked in (REPLACE_INPUT, ZERO_OUT) and cls.option_defaults.get(ADJACENCY) == ADD_REMOVE:
        # the relation asked for beside the default one, row by row; only PLD has replace_input (unless one is named)
        relations = [ADD_REMOVE, asked]
        if "accountant" in options or asked == REPLACE_INPUT:
            accountants = [None] if "accountant" in options else ["pld"]
    rows, lines = [], []
    for dataset, s in settings.items():
        def q_and_steps(eps: float, relation: str, s=s) -> tuple[float, int]:  # the method's own (q, T) where the
            own = s.own(args.method, eps, relation)  # preset gives one, at the relation (a recipe may depend on it)
            return own.get("sampling_rate", s.sampling_rate), own.get("steps", s.steps)

        for accountant, relation in itertools.product(accountants, relations):
            chosen = {} if accountant is None else {"accountant": accountant}
            if relation is not None:
                chosen[ADJACENCY] = relation
            method = create_method(args.method, {**s.method_options.get(args.method, {}), **options, **chosen})
            budgets = {eps: q_and_steps(eps, adjacency_of(method.options)) for eps in epsilons}
            cells = []
            for eps in epsilons:
                q, steps = budgets[eps]
                cal = method.calibrate(PrivacySpec(epsilon=eps, delta=args.delta or s.delta, sampling_rate=q,
                                                   steps=steps))
                key = next(iter(cal.noise))
                cells.append(cal.noise[key])
                rows.append({"dataset": dataset, "q": q, "steps": steps, "epsilon": eps,
                             **({ADJACENCY: relation} if relation else {}), key: cal.noise[key],
                             "achieved_epsilon": cal.epsilon, "order": cal.order,
                             **{k: v for k, v in cal.details.items() if k not in cal.noise},
                             "calibration_seconds": cal.seconds})
            label = cal.details.get("accountant", "") + (f", {relation}" if relation else "")
            lines.append(_table_line(dataset, label, cells, budgets, epsilons))
    if args.json:
        print(json.dumps(rows))
    else:
        _print_table(rows, lines, epsilons, key)
    return 0


def _table_epsilons(args: argparse.Namespace) -> list[float]:
    """The table's epsilons, the flags that do not go with a preset refused in one line."""
    from inputdp.benchmarks.sweep import parse_list

    given = [f"--{n.replace('_', '-')}" for n in ("sampling_rate", "steps") if getattr(args, n) is not None]
    if given:
        raise ConfigError(f"{' and '.join(given)} is not allowed with --preset {args.preset}: the preset gives q and T "
                          "per data set; leave out --preset for one calibration at your (q, T)")
    if args.epsilon is not None and args.epsilons is not None:
        raise ConfigError(f"--epsilon {args.epsilon:g} and --epsilons {args.epsilons!r} are not allowed together: "
                          "give one")
    return [args.epsilon] if args.epsilon is not None else parse_list(args.epsilons or "1,2,4,8", float, "--epsilons")


def _table_line(dataset: str, label: str, cells: list[float], budgets: dict, epsilons: list[float]) -> str:
    """One data set's row: its (q, T) and a noise per epsilon; where a recipe of its own starts at some epsilon, each
    cell names its (q, T)."""
    if len(set(budgets.values())) == 1:
        q, steps = budgets[epsilons[0]]
        return f"| {dataset} | {q:.6g} | {steps} | {label} | " + " | ".join(f"{c:.4f}" for c in cells) + " |"
    return f"| {dataset} | by epsilon | by epsilon | {label} | " + " | ".join(
        f"{c:.4f} (q {budgets[e][0]:.6g}, T {budgets[e][1]})" for c, e in zip(cells, epsilons)) + " |"


def _print_table(rows: list[dict[str, Any]], lines: list[str], epsilons: list[float], key: str) -> None:
    """The calibration table as Markdown, with the per-example curve's lower bounds where a method has them."""
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


class Calibrate:
    name = "calibrate"
    help = ("calibrate a method's noise to (epsilon, delta, q, T)")

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("--method", required=True, help="the method calibrated (bench list)")
        p.add_argument("--epsilon", type=float, help="the target epsilon")
        p.add_argument("--delta", type=float, help="the target delta")
        p.add_argument("--sampling-rate", type=float, help="the Poisson rate q")
        p.add_argument("--steps", type=int, help="the number of steps T")
        p.add_argument("--preset", help="instead of (delta, q, T): a table over the preset's data sets")
        p.add_argument("--epsilons", help="with --preset: the epsilons of the table (default 1,2,4,8; --epsilon E: "
                       "one column)")
        p.add_argument("--option", action="append", metavar="NAME=VALUE", help="a method option")
        p.add_argument("--json", action="store_true", help="print the result as JSON")

    run = staticmethod(cmd_calibrate)
