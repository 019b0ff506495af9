"""Sweeps: methods x epsilons x seeds, expanded into RunConfigs and run one after another.

A configuration that already has a FINISHED run in the store is skipped, so re-running a killed sweep
continues where it stopped; an unfinished run of the same configuration whose process is gone is marked FAILED
and rerun; one whose process lives (another sweep on the same store) is left to it (see ``MLflowTracker.claim``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from inputdp.core import names
from inputdp.core.claims import adjacency_of
from inputdp.core.config import PerfFlags, PrivacySpec, RunConfig
from inputdp.core.errors import ConfigError, Diverged, one_line
from inputdp.datasets import canonical_name, dataset_info
from inputdp.methods import METHODS

from .executors import get_executor
from .harness import run as train_and_evaluate
from .models import check_size
from .presets import PRESETS
from .resolve import NOT_RESOLVED, ResolvedRun, with_checked_data
from .sampling import steps_per_epoch
from .tracking import MLflowTracker, parent_run, reap, run_name, runs_with_key, span_parent


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
    holdout: int | None = None
    data_dir: str | None = None
    method_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def parse_list(text: str, kind: type, what: str) -> list:
    """A comma-separated flag as a list of ``kind``, refused in one line when a value does not parse."""
    if any(not v.strip() for v in text.split(",")) and text.strip():
        raise ConfigError(f"{what}={text!r} is not allowed: it has an empty item; give a comma-separated list of "
                          f"{kind.__name__}s, e.g. 0,1,2")
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{what}={text!r} is not allowed: give a comma-separated list of {kind.__name__}s") from None
    if not values:
        raise ConfigError(f"{what}={text!r} is not allowed: give at least one value")
    return values


def resolve_methods(text: str) -> list[str]:
    """The methods a flag names (``all``: every registered one, plug-ins that load included)."""
    if text == "all":
        METHODS.check_all_load()  # "all" with a plug-in that does not load would quietly be fewer
        return METHODS.names()
    names = [m.strip() for m in text.split(",") if m.strip()]
    for m in names:
        METHODS.get(m)  # raises the one-line error for an unknown method
    if not names:
        raise ConfigError("--methods is empty: give 'all' or a comma-separated list of methods")
    return names


def build_config(*, method: str, dataset: str, preset: str, epsilon: float, seed: int,
                 overrides: Overrides | None = None) -> RunConfig:
    """One configuration: the preset's settings for the data set and method, each explicit flag winning."""
    o = overrides or Overrides()
    METHODS.get(method)
    dataset = canonical_name(dataset)
    s = PRESETS.get(preset).settings(dataset)
    options = {**s.method_options.get(method, {}), **o.method_options.get(method, {})}
    defaults = METHODS.get(method).load().option_defaults
    own = s.own(method, epsilon, adjacency_of(options, defaults))

    def pick(flag, name: str):  # an explicit flag, else the method's own setting in the preset, else the data set's
        return flag if flag is not None else own.get(name, getattr(s, name))

    q = pick(o.sampling_rate, "sampling_rate")
    if o.steps is not None:
        steps = o.steps
    elif o.epochs is not None:
        if not (isinstance(o.epochs, int) and o.epochs >= 1):
            raise ConfigError(f"epochs={o.epochs!r} is not allowed: epochs must be an integer >= 1")
        steps = o.epochs * steps_per_epoch(q) if 0 < q <= 1 else 0
    else:
        steps = own.get("steps", s.steps)
    if not METHODS.get(method).facts().private:
        epsilon = math.inf  # a reference that spends no budget runs once per seed at the same (q, T)
    privacy = PrivacySpec(epsilon=epsilon, delta=o.delta if o.delta is not None else s.delta,
                          sampling_rate=q, steps=steps)
    # the accountant decides the noise and the claim: it is written into the configuration (and so its key) even
    # when it is the method's default, so a changed default never reuses a stored run of the other accountant
    if "accountant" in defaults:
        options.setdefault("accountant", defaults["accountant"])
    model = o.model or own.get("model", s.model)
    check_size(model, dataset_info(dataset).size)  # before any store is opened or data read (cached: no second read)
    return RunConfig(
        method=method, dataset=dataset, model=model, privacy=privacy,
        method_options=options, optimizer=o.optimizer or own.get("optimizer", "sgd"), lr=pick(o.lr, "lr"),
        momentum=pick(o.momentum, "momentum"), seed=seed, preset=preset, augment=own.get("augment", s.augment),
        norm=o.norm or own.get("norm", s.norm), model_width=pick(o.model_width, "model_width"),
        train_examples=pick(o.train_examples, "train_examples"), test_examples=s.test_examples, data_dir=o.data_dir,
        lr_warmup_steps=pick(o.lr_warmup_steps, "lr_warmup_steps"), holdout=o.holdout or 0,
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
class RunSummary:
    """What one configuration of a sweep came to, wherever it ran."""

    config: RunConfig
    status: str  # "ran", "skipped" (already FINISHED in the store), "elsewhere" (running in another process), "failed"
    metrics: dict[str, float] = field(default_factory=dict)
    marked_failed: int = 0
    error: str = ""
    #: the recipe's variant and whether its epsilon is a guarantee ("yes", "no", "" for the reference), for the
    #: terminal's table
    variant: str = ""
    guarantee: str = ""


@dataclass
class SweepOutcome:
    ran: list[RunSummary] = field(default_factory=list)
    skipped: list[RunSummary] = field(default_factory=list)
    failed: list[RunSummary] = field(default_factory=list)
    elsewhere: list[RunSummary] = field(default_factory=list)
    marked_failed: int = 0

    def add(self, summary: RunSummary) -> None:
        {"ran": self.ran, "skipped": self.skipped, "failed": self.failed,
         "elsewhere": self.elsewhere}[summary.status].append(summary)
        self.marked_failed += summary.marked_failed


def run_configuration(run: ResolvedRun, tracking_uri: str | None, experiment: str, perf: PerfFlags,
                      skip_finished: bool = True, parent_run_id: str | None = None,
                      log_model: bool = False) -> RunSummary:
    """Run one configuration unless the store has it FINISHED or another live process runs it.

    The unit every executor ships: the claim happens where the run happens, so local, Ray and SLURM workers
    all honour it.
    """

    # a store it cannot use is refused before the data are read; a study's runs are nested under its parent run
    tracker = MLflowTracker(tracking_uri, experiment,
                            extra_tags={names.TAG_PARENT_RUN: parent_run_id} if parent_run_id else None,
                            log_model=log_model)
    r = run  # a resolution: run_sweep, the only caller, refused anything else before shipping it
    if not r.config.data_fingerprint:  # a remote worker: the data are read where the run happens
        r = r.with_config(with_checked_data(r.config))
    marked = 0
    if skip_finished:
        claim = tracker.claim(r.key(perf), run_name(r.config))
        marked = claim.marked_failed
        if claim.status == "finished":
            return RunSummary(r.config, "skipped", dict(claim.metrics), marked, **_shown(r))
        if claim.status == "elsewhere":
            return RunSummary(r.config, "elsewhere", marked_failed=marked, error=claim.holder)
    try:
        result = train_and_evaluate(r, perf, tracker)
    except Diverged as err:  # the run is FAILED in the store; the sweep goes on and reports it in one line
        return RunSummary(r.config, "failed", marked_failed=marked, error=one_line(err))
    finally:
        tracker.release()
    return RunSummary(r.config, "ran", dict(result.metrics), marked, **_shown(r))


def finished_line(summary: RunSummary, k: int, n: int) -> str:
    """The line a sweep prints as each configuration comes back (with or without progress bars):
    "[3/12] ran METHOD [VARIANT] DATASET eps=1 seed=0: accuracy 0.9803 in 2.3 min"."""
    c, m = summary.config, summary.metrics
    status = {"skipped": "already finished", "elsewhere": "running elsewhere"}.get(summary.status, summary.status)
    line = f"[{k}/{n}] {status} {c.label(summary.variant, dataset=True)}"
    if summary.error:
        return f"{line}: {summary.error}"
    acc, seconds = m.get(names.METRIC_FINAL_TEST_ACCURACY), m.get(names.METRIC_TOTAL_TRAIN_TIME)
    if acc is not None:
        line += f": accuracy {acc:.4f}" + (f" in {seconds / 60:.1f} min" if seconds and summary.status == "ran" else "")
    return line


def _shown(r: ResolvedRun) -> dict[str, str]:
    """What the terminal's table shows of a run beside its metrics: its variant and whether its claim is a
    guarantee ("" for the reference, which claims nothing)."""
    guarantee = "" if not r.config.privacy.is_private else "yes" if r.claim.guarantee else "no"
    return {"variant": r.variant, "guarantee": guarantee}


def mark_lost_run(run: ResolvedRun, error: str, *, tracking_uri: str | None, experiment: str,
                  perf: PerfFlags) -> RunSummary:
    """A worker died: its run is still RUNNING in the store; mark it FAILED now (a re-run would, too)."""
    r = run
    try:
        tracker = MLflowTracker(tracking_uri, experiment)
        if not r.config.data_fingerprint:
            r = r.with_config(with_checked_data(r.config))
        runs = runs_with_key(tracker.client, tracker.experiment_id, r.key(perf))
        marked = reap(tracker.client, tracker.experiment_id, runs)[1]
    except Exception:  # noqa: BLE001 - the store may be unreachable; the re-run marks it then
        marked = 0
    return RunSummary(r.config, "failed", marked_failed=marked, error=error)


def sweep_run(runs: Sequence[ResolvedRun], *, tracking_uri: str | None, experiment: str) -> str:
    """A ``bench run`` sweep's parent run (kind ``sweep``), keyed by its set of configurations: the same sweep run
    again nests under the same parent; its name says what it holds."""

    keys = sorted(r.config.replace(data_fingerprint="").key() for r in runs)
    digest = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]
    first = runs[0].config
    methods = sorted({r.config.method for r in runs})
    label = "-".join(dict.fromkeys(r.config.dataset for r in runs))
    name = f"sweep-{label}-{first.preset}-{len(runs)}runs-{digest[:6]}"
    note = f"{len(runs)} configurations: {', '.join(methods)}"
    return parent_run(tracking_uri, experiment, key=f"sweep:{digest}", name=name, kind=names.KIND_SWEEP, note=note)


def run_sweep(runs: Sequence[ResolvedRun], *, tracking_uri: str | None = None, experiment: str = "inputdp",
              perf: PerfFlags | None = None, skip_finished: bool = True, executor: str = "local",
              executor_options: dict[str, Any] | None = None, parent_run_id: str | None = None,
              nest: bool = False, log_model: bool = False) -> SweepOutcome:
    """Run every resolution (``check_feasible``) through an executor (``local``, ``ray``, ``submitit``); see
    executors.py. The runs nest under ``parent_run_id``, or with ``nest`` under the sweep's own parent run
    (``sweep_run``)."""
    perf = perf or PerfFlags()
    for r in runs:
        if not isinstance(r, ResolvedRun):
            raise TypeError(NOT_RESOLVED.format(where="run_sweep", got=type(r).__name__))
    runner = get_executor(executor, **(executor_options or {}))
    runner.check_tracking_uri(tracking_uri)
    if nest and parent_run_id is None and runs:
        parent_run_id = sweep_run(runs, tracking_uri=tracking_uri, experiment=experiment)
    remote = executor != "local" or getattr(runner, "workers", 1) > 1
    worker_perf = dataclasses.replace(perf, progress=False) if remote else perf
    if executor == "local" and remote:
        MLflowTracker(tracking_uri, experiment)  # the store and experiment made once, before the workers open them
    run_one = functools.partial(run_configuration, tracking_uri=tracking_uri, experiment=experiment, perf=worker_perf,
                                skip_finished=skip_finished, parent_run_id=parent_run_id, log_model=log_model)
    lost = functools.partial(mark_lost_run, tracking_uri=tracking_uri, experiment=experiment, perf=worker_perf)
    outcome = SweepOutcome()
    try:
        for k, summary in enumerate(runner.map(runs, run_one=run_one, lost=lost, perf=perf), 1):
            outcome.add(summary)
            if summary.status != "failed":  # a failure is said once, in one line, by the command
                print(finished_line(summary, k, len(runs)), file=sys.stderr, flush=True)
    finally:
        if nest and parent_run_id is not None:  # the sweep's own parent spans its runs in the UI
            span_parent(tracking_uri, experiment, parent_run_id)

    def plain(c: RunConfig) -> str:  # a summary's config carries its data's fingerprint, the sweep's may not
        return c.replace(data_fingerprint="").key()

    order = {plain(r.config): i for i, r in enumerate(runs)}  # parallel runs finish in any order: report in the sweep's
    for part in (outcome.ran, outcome.skipped, outcome.failed, outcome.elsewhere):
        part.sort(key=lambda r: order.get(plain(r.config), len(order)))
    return outcome
