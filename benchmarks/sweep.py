"""Sweeps: methods x epsilons x seeds, expanded into RunConfigs and run one after another.

A configuration that already has a FINISHED run in the store is skipped, so re-running a killed sweep
continues where it stopped; an unfinished run of the same configuration is marked FAILED and rerun.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inputdp.datasets import DATASETS
from inputdp.methods import METHODS

from .config import PerfFlags, PrivacySpec, RunConfig
from .errors import ConfigError
from .presets import PRESETS
from .sampling import steps_per_epoch
from .tracking import UNFINISHED, MLflowTracker, runs_with_key


@dataclass(frozen=True, kw_only=True)
class Overrides:
    """Explicit flags: each one that is set wins over the preset's value."""

    epochs: int | None = None
    steps: int | None = None
    sampling_rate: float | None = None
    lr: float | None = None
    momentum: float | None = None
    model: str | None = None
    model_width: int | None = None
    delta: float | None = None
    norm: str | None = None
    optimizer: str | None = None
    train_examples: int | None = None
    lr_warmup_steps: int | None = None
    data_dir: str | None = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_list(text: str, kind: type, what: str) -> list:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{what}={text!r} is not allowed: give a comma-separated list of {kind.__name__}s") from None
    if not values:
        raise ConfigError(f"{what}={text!r} is not allowed: give at least one value")
    return values


def resolve_methods(text: str) -> list[str]:
    if text == "all":
        return METHODS.names()
    names = [m.strip() for m in text.split(",") if m.strip()]
    for m in names:
        METHODS.get(m)  # raises the one-line error for an unknown method
    if not names:
        raise ConfigError("--methods is empty: give 'all' or a comma-separated list of methods")
    return names


def build_config(*, method: str, dataset: str, preset: str, epsilon: float, seed: int,
                 overrides: Overrides | None = None) -> RunConfig:
    o = overrides or Overrides()
    METHODS.get(method)
    DATASETS.get(dataset)
    s = PRESETS.get(preset).settings(dataset)
    q = o.sampling_rate if o.sampling_rate is not None else s.sampling_rate
    if o.steps is not None:
        steps = o.steps
    elif o.epochs is not None:
        if not (isinstance(o.epochs, int) and o.epochs >= 1):
            raise ConfigError(f"epochs={o.epochs!r} is not allowed: epochs must be an integer >= 1")
        steps = o.epochs * steps_per_epoch(q) if 0 < q <= 1 else 0
    else:
        steps = s.steps
    if method == "nonprivate":
        epsilon = math.inf  # the reference runs once per seed at the same (q, T)
    privacy = PrivacySpec(epsilon=epsilon, delta=o.delta if o.delta is not None else s.delta,
                          sampling_rate=q, steps=steps)
    options = {**s.method_options.get(method, {}), **o.method_options.get(method, {})}
    return RunConfig(
        method=method, dataset=dataset, model=o.model or s.model, privacy=privacy, method_options=options,
        optimizer=o.optimizer or "sgd", lr=o.lr if o.lr is not None else s.lr,
        momentum=o.momentum if o.momentum is not None else s.momentum, seed=seed, preset=preset,
        augment=s.augment, norm=o.norm or "auto",
        model_width=o.model_width if o.model_width is not None else s.model_width,
        train_examples=o.train_examples if o.train_examples is not None else s.train_examples,
        test_examples=s.test_examples, data_dir=o.data_dir,
        lr_warmup_steps=o.lr_warmup_steps if o.lr_warmup_steps is not None else s.lr_warmup_steps,
    )


def expand(*, methods: Sequence[str], dataset: str, preset: str, epsilons: Sequence[float], seeds: Sequence[int],
           overrides: Overrides | None = None) -> list[RunConfig]:
    """All (method, epsilon, seed) configurations, the non-private reference once per seed."""
    configs: list[RunConfig] = []
    seen: set[str] = set()
    for method in methods:
        for eps in epsilons:
            for seed in seeds:
                c = build_config(method=method, dataset=dataset, preset=preset, epsilon=eps, seed=seed,
                                 overrides=overrides)
                if c.key() not in seen:
                    seen.add(c.key())
                    configs.append(c)
    return configs


@dataclass
class SweepOutcome:
    ran: list[Any] = field(default_factory=list)
    skipped: list[RunConfig] = field(default_factory=list)
    marked_failed: int = 0


def claim_configuration(tracker: MLflowTracker, config: RunConfig) -> tuple[bool, int]:
    """(already finished?, number of stale unfinished runs marked FAILED) for one configuration."""
    runs = runs_with_key(tracker.client, tracker.experiment_id, config.key())
    if any(r.info.status == "FINISHED" for r in runs):
        return True, 0
    stale = [r for r in runs if r.info.status in UNFINISHED]
    for r in stale:
        tracker.client.set_terminated(r.info.run_id, status="FAILED")
    return False, len(stale)


def run_sweep(configs: Sequence[RunConfig], *, tracking_uri: str | None = None, experiment: str = "inputdp",
              perf: PerfFlags | None = None, skip_finished: bool = True) -> SweepOutcome:
    from .harness import run

    perf = perf or PerfFlags()
    outcome = SweepOutcome()
    bar = None
    if perf.progress and len(configs) > 1:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(configs), desc="sweep", unit="run")
    for config in configs:
        tracker = MLflowTracker(tracking_uri, experiment)
        if skip_finished:
            done, stale = claim_configuration(tracker, config)
            outcome.marked_failed += stale
            if done:
                outcome.skipped.append(config)
                if bar is not None:
                    bar.update(1)
                continue
        outcome.ran.append(run(config, perf, tracker))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return outcome
