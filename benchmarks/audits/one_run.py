"""One-run privacy auditing (Steinke, Nasr & Jagielski 2023; THEORY.md, "Auditing").

m canaries are made; each is included in the training set independently with probability 1/2 (the truth is
recorded); the method trains once through the normal harness with its normal calibration; every canary gets a
score; the k highest are guessed "in" and the k lowest "out"; from the number of correct guesses a lower bound on
epsilon follows at confidence 1 - beta. The bound is corrected (Bonferroni) for every (score, k) it tries, so the
strongest of them may be reported.

A lower bound only: above the claim means the claim does not hold for what was scored (here: the trained
parameters); below it proves nothing. The ceiling is the largest bound the same m and k could ever show.

``exclusive_support`` canaries with the ``exclusive_weight_change`` score are the test that decides for a model
whose first layer is dense on the input: each canary is bright only where every training image is blank, so only
it moves the first-layer weights of those coordinates, and the score's guesses are fixed before the run (one
test). When one run cannot hold enough canaries, ``audit_runs`` trains many runs with and without one canary.

This module is the game: its arguments checked, the run, the scores read, the bounds logged. The statistics are
bounds.py's, the canaries canaries.py's, the scores scores.py's (re-exported here, where callers import them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inputdp.core import names
from inputdp.core.claims import ADD_REMOVE, Relation
from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.core.verdicts import one_run_fields
from inputdp.datasets import TensorData, load_tensor_data

from ..frontend import model_for
from ..harness import run
from ..resolve import NOT_RESOLVED, ResolvedRun
from . import fdp_bound
from .bounds import (
    ANALYSES,
    BETA,
    ScoreOutcome,
    binomial_tail,
    bound_fixed_guesses,
    bound_for_scores,
    count_tests,
    epsilon_lower_bound,
    fdp_bounds,
    k_grid,
    p_value,
)
from .canaries import (
    CANARY_INPUT_VALUE,
    CANARY_KINDS,
    PATTERN_SCALE,
    REFERENCE_SIZE,
    Canaries,
    audit_relation,
    check_arguments,
    check_canary_count,
    check_input_design,
    design_suffix,
    free_coordinates,
    make_canaries,
    replacements,
    with_canaries,
)
from .scores import (
    BLACK_BOX,
    GENERAL_SCORES,
    ONE_TEST,
    ONE_TEST_KIND,
    RELEARN_LR,
    RELEARN_STEPS,
    SCORES,
    WHITE_BOX,
    black_box_scores,
    canary_input_change,
    exclusive_weight_change,
    relearn_scores,
    resolve_scores,
    white_box_scores,
)


def check_no_holdout(config: RunConfig) -> None:
    """An audit trains on every example it is given, canaries included: a held-out draw could take canaries out."""
    if config.holdout:
        raise ConfigError(f"holdout={config.holdout} is not allowed in an audit: it would hold out canaries too")


def check_canary_inputs(canary_kind: str, config: RunConfig, method) -> None:
    """What ``canary_inputs`` canaries need of the run: a method that trains the model's features (not a fixed map
    at initialisation) and images that are not augmented (a crop or flip would move the canaries' coordinates)."""
    if canary_kind != "canary_inputs":
        return
    if method.capabilities.fixed_features:
        raise ConfigError(f"canary kind 'canary_inputs' is not allowed for {config.method}: its model reads the data "
                          "through features fixed at initialisation, which would read the canaries' coordinates "
                          "through a zero map; audit its release with bench audit --mechanism")
    if config.augment or method.augments_inputs:
        raise ConfigError(f"canary kind 'canary_inputs' is not allowed with augmented images ({config.method}, "
                          f"augment={config.augment}): a crop or flip moves each canary's own coordinate onto another's")


@dataclass
class AuditResult:
    method: str
    epsilon_claimed: float
    canary_kind: str
    canaries: int
    test_accuracy: float
    outcomes: list[ScoreOutcome]
    scope: str
    run_id: str | None = None
    tests: int = 0  # the size of the Bonferroni family
    delta: float = 1e-5  # the claim's delta, at which every bound is stated
    relation: str = ADD_REMOVE  # the claim's relation, under which the neighbouring pairs were built
    design: str = "absent"  # how an excluded canary was represented (the relation's design)

    @property
    def best(self) -> ScoreOutcome:
        return max(self.outcomes, key=lambda o: o.epsilon_lb)

    def best_of(self, threat: str) -> ScoreOutcome | None:
        """The strongest outcome among the black-box or the white-box scores (None if none was tried); among equal
        bounds one with power, and among those the largest ceiling."""
        pool = [o for o in self.outcomes if (o.score in BLACK_BOX) == (threat == "black_box")]
        return max(pool, key=lambda o: (o.epsilon_lb, o.power, o.ceiling)) if pool else None

    def ceiling_of(self, threat: str) -> float:
        """The largest ceiling among the threat model's tests that had power (0 where none had)."""
        pool = [o for o in self.outcomes if (o.score in BLACK_BOX) == (threat == "black_box") and o.power]
        return max((o.ceiling for o in pool), default=0.0)

    def verdict(self) -> str:
        """In four words, the relation named: refuted, not refuted (ceiling X), or no power (every test's guesses
        were fixed on one side or its scores all equal). "Tight" is the mechanism audit's word."""
        best = self.best
        fdp = max(o.fdp_epsilon_lb for o in self.outcomes)
        bound = max(best.epsilon_lb, fdp)
        under = f"under {self.relation} ({self.design} design)"
        if bound > self.epsilon_claimed:
            return f"refuted {under}: {bound:.2f} > {self.epsilon_claimed:g}"
        if not any(o.power for o in self.outcomes):
            return f"no power {under}: every test's guesses were fixed on one side or its scores all equal"
        ceiling = max(self.ceiling_of(t) for t in names.THREATS)
        return f"not refuted (ceiling {ceiling:.2f}) {under}"

    def family(self) -> str:
        fixed = [o.score for o in self.outcomes if o.score in ONE_TEST]
        text = (f"{self.tests} tests at level {BETA:g}/{self.tests} each (Bonferroni: {self.tests // ANALYSES} guess "
                f"set{'s' if self.tests > ANALYSES else ''}, each read by Steinke et al.'s and the f-DP bound)")
        if fixed:
            text += (f"; {', '.join(fixed)}: one test, its score and guesses fixed before the run (every canary "
                     "guessed, 'in' iff its score is above 0)")
        return text

    def as_json(self) -> dict[str, Any]:
        b = self.best
        return {
            "method": self.method, "epsilon_claimed": self.epsilon_claimed, names.METRIC_EPSILON_LB: b.epsilon_lb,
            names.METRIC_EPSILON_LB_CEILING: b.ceiling, "canaries": self.canaries, "guesses": b.guesses, "correct": b.correct,
            "score": b.score, names.TAG_CANARY_KIND: self.canary_kind, names.METRIC_TEST_ACCURACY: self.test_accuracy, "k": b.k,
            "scope": self.scope, "run_id": self.run_id, "tests": self.tests, "family": self.family(),
            "relation": self.relation, "design": self.design, "verdict": self.verdict(),
            "fdp_epsilon_lb": max(o.fdp_epsilon_lb for o in self.outcomes),
            "gdp_mu_lb": max(o.gdp_mu_lb for o in self.outcomes),
            "per_score": {o.score: {names.METRIC_EPSILON_LB: o.epsilon_lb, "ceiling": o.ceiling, "k": o.k, "guesses": o.guesses,
                                    "correct": o.correct, "fdp_epsilon_lb": o.fdp_epsilon_lb,
                                    "fdp_ceiling": o.fdp_ceiling, "gdp_mu_lb": o.gdp_mu_lb,
                                    "gdp_epsilon": fdp_bound.gdp_epsilon(o.gdp_mu_lb, self.delta),
                                    "decides": o.decides, "power": o.power} for o in self.outcomes},
        }


def audit(config: ResolvedRun, *, canaries: int = 1000, canary_kind: str = "random_pattern",
          scores: Sequence[str] | str = "auto", perf: PerfFlags | None = None, tracker=None,
          data: TensorData | None = None, beta: float = BETA, pattern_scale: float = PATTERN_SCALE) -> AuditResult:
    """Train ``config`` (resolved once, above: its calibration is the run's) once with m canaries, each in with
    probability 1/2, and bound epsilon from the scores."""
    if not isinstance(config, ResolvedRun):
        raise TypeError(NOT_RESOLVED.format(where="audit", got=type(config).__name__))
    r = config
    config = r.config
    check_no_holdout(config)
    if isinstance(scores, str):
        scores = resolve_scores(scores, canary_kind, config.model)
    check_arguments(canary_kind=canary_kind, canaries=canaries, pattern_scale=pattern_scale, scores=scores,
                    model=config.model)
    check_canary_inputs(canary_kind, config, r.method())
    perf = perf or PerfFlags(progress=False)
    if data is None:
        data = load_tensor_data(config.dataset, data_dir=config.data_dir, device=perf.resolve_device(),
                                train_examples=config.train_examples, test_examples=config.test_examples)
    made = make_canaries(canary_kind, data, canaries, config.seed, pattern_scale=pattern_scale)
    relation = audit_relation(r.claim)
    train = with_canaries(made, relation=relation)
    held = _HeldOpen(tracker) if tracker is not None else None
    result = run(r, perf, held, data=train, keep_model=True, wrap_model=made.widen)
    try:
        out = _score(r, made, result, scores, canary_kind=canary_kind, canaries=canaries, beta=beta,
                     tracker=tracker, relation=relation)
    except BaseException as error:
        if held is not None:
            held.end("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    if held is not None:
        held.end("FINISHED")
    return out


class _HeldOpen:
    """The audit's tracker, with the training's FINISHED held back until the audit's bounds are logged: the run
    stays RUNNING (its heartbeat beating) while the canaries are scored, so a process killed then leaves a run that
    ends KILLED or is reaped, and a resumed study audits it again. Before, the run was FINISHED when training
    ended, and a study stopped during the scoring kept a FINISHED audit without bounds, which it never redid."""

    def __init__(self, tracker):
        self.tracker, self.metrics = tracker, None
        self.on_start, self.on_epoch = tracker.on_start, tracker.on_epoch  # the tracker's own, unchanged

    def on_end(self, metrics, status) -> None:
        if status == "FINISHED":
            self.metrics = metrics
        else:  # training failed: nothing to hold
            self.tracker.on_end(metrics, status)

    def end(self, status: str) -> None:
        """End the held run: FINISHED with the training's final metrics once the bounds are logged, else as it
        failed."""
        if self.metrics is not None:
            self.tracker.on_end(self.metrics, status)
            self.metrics = None


def _score(r: ResolvedRun, made: Canaries, result, scores: Sequence[str], *, canary_kind: str, canaries: int,
           beta: float, tracker, relation: Relation) -> AuditResult:
    """Score the canaries on the trained model, bound epsilon from the scores, and log the bounds."""
    config = r.config
    # score on a plain copy of the trained model: a method's wrapper (Opacus' per-sample hooks) stays out
    model = model_for(config, made.base.info, result.norm)
    model = (made.widen(model) if made.widen is not None else model).to(made.x.device)
    model.load_state_dict(result.model.state_dict())
    values: dict[str, np.ndarray] = {}
    values.update(black_box_scores(model, made.x, made.y, made.x_ref, made.y_ref))
    wanted = [s for s in scores if s not in BLACK_BOX]
    if wanted:
        values.update(white_box_scores(model, result.initial_state, made.x, made.y, wanted, made.support))
    n_tests = count_tests(scores, canaries)
    delta = config.privacy.delta
    outcomes = [(bound_fixed_guesses if s in ONE_TEST else bound_for_scores)(
        values[s], made.included, delta=delta, beta=beta, n_tests=n_tests, score=s) for s in scores]
    out = AuditResult(config.method, config.privacy.epsilon, canary_kind, canaries,
                      result.metrics[names.METRIC_FINAL_TEST_ACCURACY], outcomes, result.claim.scope,
                      getattr(tracker, "run_id", None), tests=n_tests, delta=delta, relation=relation.key,
                      design=relation.excluded)
    if tracker is not None and tracker.run_id is not None:
        _log_audit(tracker, out)
    return out


def _log_audit(tracker, out: AuditResult) -> None:
    best = out.best
    metrics = {names.METRIC_EPSILON_LB: best.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: best.ceiling,
               names.METRIC_AUDIT_GUESSES: best.guesses, names.METRIC_AUDIT_CORRECT: best.correct,
               names.METRIC_AUDIT_TESTS: out.tests}
    for threat in names.THREATS:
        o = out.best_of(threat)
        if o is not None:
            metrics[names.METRIC_THREAT_BOUND.format(threat)] = o.epsilon_lb
            metrics[names.METRIC_THREAT_CEILING.format(threat)] = out.ceiling_of(threat)
            pool = [p for p in out.outcomes if (p.score in BLACK_BOX) == (threat == "black_box")]
            metrics[names.METRIC_THREAT_FDP_BOUND.format(threat)] = max(p.fdp_epsilon_lb for p in pool)
            metrics[names.METRIC_THREAT_FDP_CEILING.format(threat)] = max((p.fdp_ceiling for p in pool if p.power),
                                                                           default=0.0)
            metrics[names.METRIC_THREAT_POWER.format(threat)] = float(any(p.power for p in pool))
            metrics[names.METRIC_THREAT_GDP_MU.format(threat)] = max(p.gdp_mu_lb for p in pool)
    for o in out.outcomes:
        metrics[names.METRIC_AUDIT_SCORE_BOUND.format(o.score)] = o.epsilon_lb
        metrics[names.METRIC_AUDIT_SCORE_CEILING.format(o.score)] = o.ceiling
    metrics[names.METRIC_AUDIT_CANARIES] = out.canaries
    tags = {names.TAG_AUDIT_BEST_SCORE: best.score, names.TAG_CANARY_KIND: out.canary_kind,
            names.TAG_AUDIT_MODE: "one_run", names.TAG_AUDIT_RELATION: out.relation, names.TAG_AUDIT_DESIGN: out.design,
            names.TAG_AUDIT_SCORES: ",".join(o.score for o in out.outcomes)}
    verdict_metrics, verdict_tags = one_run_fields(metrics, tags, claimed_epsilon=out.epsilon_claimed, delta=out.delta,
                                                   canaries=out.canaries)
    tracker.log_summary({**metrics, **verdict_metrics}, {**tags, **verdict_tags})


#: what callers import from here: the game's, and the statistics', canaries' and scores' names it re-exports
__all__ = ["ANALYSES", "AuditResult", "BETA", "BLACK_BOX", "CANARY_INPUT_VALUE", "CANARY_KINDS", "Canaries", "GENERAL_SCORES",
           "ONE_TEST", "ONE_TEST_KIND", "PATTERN_SCALE", "REFERENCE_SIZE", "RELEARN_LR", "RELEARN_STEPS", "SCORES",
           "ScoreOutcome", "WHITE_BOX", "audit", "binomial_tail", "black_box_scores",
           "bound_fixed_guesses", "bound_for_scores", "canary_input_change", "check_arguments",
           "check_canary_count", "check_canary_inputs", "check_input_design", "check_no_holdout", "count_tests",
           "design_suffix", "epsilon_lower_bound", "exclusive_weight_change", "fdp_bounds", "free_coordinates",
           "k_grid", "make_canaries", "p_value", "relearn_scores", "replacements", "resolve_scores",
           "white_box_scores", "with_canaries"]
