"""``bench tune``: a recipe search on the private data, charged (Papernot & Steinke 2022). Every check and the whole
calibration come before any data are read; then K trials (K drawn from the declared distribution), each a recipe
drawn uniformly from the public space, trained on the training side of a private validation split and scored by a
noisy count of its correct validation predictions; the best noisy score's model and recipe are released, and the
claim is the whole search's (methods/accounting/repeat_select.py). The number of trials, their recipes and their
scores never leave the search: the theorems assume K is not released.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import secrets
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from inputdp.core.claims import adjacency_of
from inputdp.core.config import PerfFlags, PrivacySpec, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.datasets import load_tensor_data
from inputdp.datasets.facts import data_facts
from inputdp.methods import METHODS
from inputdp.methods.accounting import accountants
from inputdp.methods.accounting.repeat_select import (
    REPEATABLE,
    TrialCount,
    calibrate_search,
    search_epsilon,
    trial_rdp,
)

from ..frontend import model_for, with_frontend_features
from ..harness import run as train_and_evaluate
from ..resolve import resolve
from ..sampling import warn_tiny_batches
from ..steps import evaluate
from ..sweep import Overrides, build_config
from .spaces import Space
from .validation import check_fraction, split, validation_mask


@dataclass(frozen=True, kw_only=True)
class TuneRequest:
    method: str
    dataset: str
    epsilon: float
    space: Space
    count: TrialCount
    preset: str = "cpu"
    delta: float | None = None
    validation: float = 0.1
    #: the score's noise: the standard deviation of the noisy validation accuracy, in points
    score_noise: float = 0.5
    seed: int = 0
    data_dir: str | None = None
    #: the search's own randomness (K, the recipes drawn, the score noise): secret unless a seed is given
    search_seed: int | None = None


@dataclass
class Trial:
    index: int
    candidate: int
    recipe: str
    noise: float
    seconds: float
    noisy_score: float = math.nan  # kept inside the search; only the chosen trial's is released


@dataclass
class Plan:
    """What the search will do, computed before any data are read: each recipe's configuration at its own epsilon
    alone and its release family and noise, such that the whole search meets (epsilon, delta)."""

    request: TuneRequest
    #: each recipe's run configuration at its own epsilon alone (its calibration lands at the planned noise)
    configs_alone: list[RunConfig]
    families: list
    noises: list[float]
    relation: str
    accountant: str
    delta: float
    #: the validation split's planned size (the public n times the share) and the score's noise in counts
    planned_validation_size: int
    score_sigma: float

    def epsilon(self, noises: list[float] | None = None) -> float:
        """The whole search's epsilon at these noises (the plan's by default)."""
        curves = [trial_rdp(f, s, self.score_sigma) for f, s in zip(self.families, noises or self.noises)]
        return search_epsilon(curves, self.request.count, self.delta)


@dataclass
class TuneResult:
    plan: Plan
    trials: list[Trial]
    chosen: Trial | None
    test_accuracy: float
    epsilon: float
    secret: bool
    #: the validation split's size as drawn (under add/remove a hash of each example's content decides its side):
    #: a diagnosis, not released
    drawn_validation_size: int = 0


def check_searchable(method: str, options: dict | None = None) -> None:
    """Refuse, in one line, a method a search cannot repeat: one whose public inputs are the test split (PATE: the
    trials keep the private validation examples there), or whose release is not a guarantee with an RDP curve."""
    if METHODS.get(method).facts().public_inputs_from_test:
        raise ConfigError(f"method {method!r} is not allowed in a search: it takes its public inputs from the test "
                          "split, which a search's trials hold the private validation examples in")
    instance = METHODS.get(method).load()(**dict(options or {}))
    _refuse_unrepeatable(instance, instance.release_family(PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01,
                                                                       steps=1)))


def _refuse_unrepeatable(method, family) -> None:
    if not isinstance(family, REPEATABLE) or not accountants.sound(method.accountant, family) or not family.complete:
        raise ConfigError(f"method {method.name!r} is not allowed in a search: its release ({type(family).__name__}, "
                          f"accountant {method.accountant.name}) is not a guarantee with an RDP curve to repeat")


def plan_search(req: TuneRequest) -> Plan:
    """Every check and the whole calibration, before any data are read; refused in one line where the method's release
    cannot be repeated or no noise meets the budget."""
    check_fraction(req.validation)
    if isinstance(req.score_noise, bool) or not (isinstance(req.score_noise, (int, float))
                                                  and 0 < req.score_noise < 100):
        raise ConfigError(f"--score-noise {req.score_noise!r} is not allowed: the noisy validation accuracy's standard "
                          "deviation in points, in (0, 100)")
    check_searchable(req.method, req.space.candidates[0]["options"])
    cls = METHODS.get(req.method).load()
    configs, families = [], []
    for i, c in enumerate(req.space.candidates):
        o = Overrides(**{k: v for k, v in c.items() if k != "options"}, delta=req.delta, data_dir=req.data_dir,
                      method_options={req.method: dict(c["options"])})
        try:
            config = build_config(method=req.method, dataset=req.dataset, preset=req.preset, epsilon=req.epsilon,
                                  seed=req.seed, overrides=o)
        except ConfigError as err:  # a value the run refuses, named with its candidate
            raise ConfigError(f"search space {req.space.source!r}, candidate {i}: {err}") from None
        method = cls(**config.method_options)
        family = method.release_family(config.privacy)
        _refuse_unrepeatable(method, family)
        configs.append(config)
        families.append(family)
    facts = data_facts(configs[0].dataset, req.data_dir)
    n = min(configs[0].train_examples, facts.train_size) if configs[0].train_examples > 0 else facts.train_size
    n_val = round(req.validation * n)
    for config in configs:
        config.privacy.check_delta_for(n - n_val)
        warn_tiny_batches(config.dataset, config.privacy.sampling_rate, n - n_val)  # here, not per trial
    delta, sigma = configs[0].privacy.delta, req.score_noise / 100.0 * n_val
    what = f"a search of {req.method} ({len(configs)} recipes, {req.count.name} trials)"
    noises = calibrate_search(families, req.count, sigma, req.epsilon, delta, what)
    alone_configs = []  # each recipe at its own epsilon alone, a hair below, so its calibration lands at or above
    for config, family, noise in zip(configs, families, noises):
        alone = cls(**config.method_options).accountant.epsilon(family, noise * (1 + 1e-6), delta)
        alone_configs.append(config.replace(privacy=replace(config.privacy, epsilon=alone)))
    relation = adjacency_of(configs[0].method_options, cls.option_defaults) or families[0].relation
    return Plan(req, alone_configs, families, noises, relation,
                cls(**configs[0].method_options).accountant.label(families[0]), delta, n_val, sigma)


def run_search(plan: Plan, *, perf: PerfFlags | None = None, progress=None, show_trials: bool = False) -> TuneResult:
    """The whole search (module docstring). K and the trials are part of the secret (Papernot & Steinke's theorems
    assume K is not released): nothing is said while the trials run, unless ``show_trials`` (a diagnosis; what is
    shown is then outside the claim)."""
    req = plan.request
    say = progress or (lambda line: sys.stderr.write(line + "\n"))
    perf = perf or PerfFlags()
    first = plan.configs_alone[0]
    data = load_tensor_data(first.dataset, data_dir=req.data_dir, device=perf.resolve_device(),
                            train_examples=first.train_examples, test_examples=first.test_examples)
    mask = validation_mask(data, req.validation, plan.relation)
    secret = req.search_seed is None
    rng = np.random.default_rng(secrets.randbits(128) if secret else req.search_seed)
    k = req.count.draw(rng)
    if show_trials:
        say(f"search: {k} trial(s) drawn; validation split {int(mask.sum())} examples (shown: outside the claim)")
    else:
        say("search running: the number of trials and their recipes are part of what the claim keeps secret, so "
            "nothing is said until it ends (its duration tells them too: do not publish it)")
    inputs = _TrialInputs(data, mask, perf)
    inputs.for_run(resolve(plan.configs_alone[0]), progress=perf.progress)  # the first model's features, whatever K
    trials: list[Trial] = []
    best: tuple[float, Trial, Any] | None = None
    for i in range(k):
        trial, model = _run_trial(plan, i, rng, inputs, perf)
        trials.append(trial)
        if show_trials:
            say(f"trial {i + 1}/{k}: recipe {trial.candidate} ({trial.recipe}), noise {trial.noise:.4g}, "
                f"{trial.seconds:.0f} s")
        if best is None or trial.noisy_score > best[0]:
            best = (trial.noisy_score, trial, (model, inputs.full))
    test_acc = math.nan
    if best is not None:
        model, full = best[2]
        test_acc = evaluate(model, full.x_test, full.y_test, 1024)[0]
    # the claim is the plan's, fixed before any data were read: every trial ran at or above its planned noise
    # (_check_trial), and an epsilon recomputed from the noises that ran would tell which recipes were drawn
    epsilon = plan.epsilon()
    if epsilon > req.epsilon * (1 + 1e-9):
        raise RuntimeError(f"the search's epsilon {epsilon} exceeds its target {req.epsilon}")
    return TuneResult(plan, trials, best[1] if best else None, test_acc, epsilon, secret, int(mask.sum()))


class _TrialInputs:
    """The data a trial trains and is scored on: the model's fixed frontend's features computed once per model (one
    data set's at a time), split by the validation mask; ``full`` keeps the test split, for the released model."""

    def __init__(self, data, mask: np.ndarray, perf: PerfFlags):
        self.data, self.mask, self.perf = data, mask, perf
        self.model, self.full, self.split = None, None, None

    def for_run(self, resolved, progress: bool = False):
        if resolved.config.model != self.model:
            c = resolved.config
            model = model_for(c, self.data.info, resolved.norm)
            key = (c.dataset, c.data_dir, c.train_examples, c.test_examples, str(self.data.x_train.device))
            self.full, _ = with_frontend_features(model, self.data, augmented=False, cache_key=key, progress=progress)
            self.model, self.split = c.model, split(self.full, self.mask)
        return self.split


def _run_trial(plan: Plan, i: int, rng: np.random.Generator, inputs: _TrialInputs, perf: PerfFlags):
    """Trial i: a recipe drawn, trained on the training side, scored by a noisy count on the validation side; its
    seed from the search's own randomness (a released model's seed does not tell its index). (trial, its model)."""
    c = int(rng.integers(len(plan.configs_alone)))
    resolved = resolve(plan.configs_alone[c].replace(seed=plan.request.seed + int(rng.integers(2**31))))
    _check_trial(plan, c, resolved)
    trial_data = inputs.for_run(resolved)
    t0 = time.perf_counter()
    # no progress bars (a trial's per-epoch accuracy is its exact validation accuracy) and nothing the run says: a
    # line per trial would tell K
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        result = train_and_evaluate(resolved, dataclasses.replace(perf, progress=False), data=trial_data,
                                    keep_model=True)
    accuracy = evaluate(result.model, trial_data.x_test, trial_data.y_test, 1024)[0]
    noisy = round(accuracy * trial_data.x_test.shape[0]) + float(rng.normal(0.0, plan.score_sigma))
    trial = Trial(i, c, plan.request.space.label(c), float(resolved.calibration.release_noise),
                  time.perf_counter() - t0, noisy)
    return trial, result.model


def _check_trial(plan: Plan, c: int, resolved) -> None:
    """The trial about to run releases what the plan charged: the same family (q, T, relation, prior releases) at a
    noise at or above the planned one."""
    family = resolved.method().release_family(resolved.config.privacy)
    if family != plan.families[c] or resolved.calibration.release_noise < plan.noises[c] * (1 - 1e-12):
        raise RuntimeError(f"trial of recipe {c} releases {family} at noise {resolved.calibration.release_noise}, "
                           f"not the planned {plan.families[c]} at {plan.noises[c]}: the search would not meet its "
                           "budget")
