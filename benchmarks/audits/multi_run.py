"""The multi-run distinguishing audit (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021; THEORY.md, "Auditing").

For when one run cannot hold enough canaries to decide: N training runs, half of them (chosen at random) with one
canary added to the training set and half without, each with its own seed (initialisation, batches, noise).
Every run's canary gets a score. The runs are split in two halves at random (each half with half of the runs
with and half of those without the canary): on the first the suite picks the rule "guess *with* iff the score is
above tau" (or the reverse) that would give the largest bound there; on the second it counts the rule's true and
false positives and bounds epsilon with Clopper-Pearson intervals at 95% overall (each rate at 97.5%):

    epsilon >= log((TPR_lower - delta) / FPR_upper)      (or with TNR and FNR for the reverse rule),

since (epsilon, delta)-DP makes P[guess with | with] <= e^epsilon P[guess with | without] + delta for any test
of the released output. The threshold is chosen on runs the bound does not use, so the bound is one test.

Each run is independent of the others, so the runs go through the sweep's executors (local, ray, submitit) and
only the audit itself is one MLflow run, holding the counts and the bound. Each finished run's score is appended to
a journal (``$XDG_CACHE_HOME/inputdp/audit-runs/KEY.jsonl``) as it comes in, so an audit stopped part-way and
started again with the same arguments runs only what is missing; the journal is removed once the audit is logged.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from inputdp.core import names
from inputdp.core.config import PerfFlags
from inputdp.core.errors import ConfigError
from inputdp.core.verdicts import one_run_fields
from inputdp.datasets import TensorData, load_tensor_data
from inputdp.datasets.registry import user_cache_dir

from ..executors import get_executor
from ..frontend import model_for
from ..harness import run
from ..resolve import NOT_RESOLVED, ResolvedRun
from .one_run import (
    BETA,
    BLACK_BOX,
    PATTERN_SCALE,
    audit_relation,
    black_box_scores,
    check_no_holdout,
    make_canaries,
    white_box_scores,
    with_canaries,
)


# --- the statistics ------------------------------------------------------------------------------------------
def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds at level alpha each: P[p < lower] <= alpha and P[p > upper] <= alpha."""
    if n <= 0:
        return 0.0, 1.0
    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def rate_bound(hits: int, n_hit: int, false: int, n_false: int, *, delta: float, beta: float) -> float:
    """log((hit-rate lower - delta) / false-rate upper), each rate at beta/2; 0 when that is not positive."""
    hit_lo = clopper_pearson(hits, n_hit, beta / 2)[0]
    false_hi = clopper_pearson(false, n_false, beta / 2)[1]
    if hit_lo - delta <= 0 or false_hi <= 0:
        return 0.0
    return max(0.0, math.log((hit_lo - delta) / false_hi))


@dataclass
class Counts:
    tp: int  # runs with the canary, guessed with
    fn: int
    fp: int  # runs without, guessed with
    tn: int

    def bound(self, side: str, *, delta: float, beta: float) -> float:
        """(epsilon, delta)-DP bounds both ways round, for any guess: ``with``: P[guessed with | with] <=
        e^eps P[guessed with | without] + delta (TPR against FPR); ``without``: the same for the runs without the
        canary (TNR against FNR)."""
        if side == "with":
            return rate_bound(self.tp, self.tp + self.fn, self.fp, self.fp + self.tn, delta=delta, beta=beta)
        return rate_bound(self.tn, self.fp + self.tn, self.fn, self.tp + self.fn, delta=delta, beta=beta)

    def perfect(self) -> Counts:
        return Counts(self.tp + self.fn, 0, 0, self.fp + self.tn)


def counts(scores: np.ndarray, included: np.ndarray, tau: float, direction: str) -> Counts:
    """The confusion counts (tp, fn, fp, tn) of the rule "in iff score above (or at most) tau"."""
    guess = scores > tau if direction == "above" else scores <= tau
    return Counts(int((guess & included).sum()), int((~guess & included).sum()), int((guess & ~included).sum()),
                  int((~guess & ~included).sum()))


@dataclass(frozen=True)
class Rule:
    """Guess "with the canary" iff score > tau (``above``) or score <= tau (``below``); bound on ``side``."""

    tau: float
    direction: str
    side: str

    def describe(self, positive: str = "with the canary") -> str:
        """The rule in words; ``positive`` names the world it guesses (the hidden-state audit's is "world A")."""
        op = ">" if self.direction == "above" else "<="
        rates = "true against false positives" if self.side == "with" else "true against false negatives"
        return f"'{positive}' iff score {op} {self.tau:.6g}; bounded by its {rates}"


def choose_rule(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float) -> tuple[Rule, float]:
    """The rule with the largest bound on these runs, and that bound. Candidates: a threshold at every score (and
    below all of them), either direction, either side. Among rules with the same bound (all 0 when the runs are
    few) the one with the most right guesses wins; then the first found, scanning tau upwards."""
    best, key = Rule(-math.inf, "above", "with"), (-1.0, -1)
    bound_there = 0.0
    for tau in np.concatenate([[-np.inf], np.unique(scores)]):
        for direction in ("above", "below"):
            c = counts(scores, included, float(tau), direction)
            for side in ("with", "without"):
                b = c.bound(side, delta=delta, beta=beta)
                if (b, c.tp + c.tn) > key:
                    best, key, bound_there = Rule(float(tau), direction, side), (b, c.tp + c.tn), b
    return best, bound_there


def split_halves(included: np.ndarray, seed: int) -> np.ndarray:
    """A boolean mask of the runs that choose the rule: half of the runs with the canary and half of those
    without (rounded down), drawn at random; the others bound epsilon."""
    rng = np.random.default_rng(30_000 + seed)
    choose = np.zeros(len(included), dtype=bool)
    for value in (True, False):
        idx = np.flatnonzero(included == value)
        choose[rng.permutation(idx)[: len(idx) // 2]] = True
    return choose


def assign_inclusion(runs: int, seed: int) -> np.ndarray:
    """Exactly half of the runs get the canary, which half drawn at random."""
    rng = np.random.default_rng(40_000 + seed)
    included = np.zeros(runs, dtype=bool)
    included[rng.permutation(runs)[: runs // 2]] = True
    return included


# --- one run -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CanarySpec:
    """What each run needs to rebuild the same canary from the same data (picklable, shipped to workers)."""

    kind: str
    score: str
    seed: int  # the canary's own seed (the audit's), not the run's
    pattern_scale: float = PATTERN_SCALE


@dataclass
class RunScore:
    seed: int
    included: bool
    score: float
    test_accuracy: float
    seconds: float
    error: str = ""


@functools.lru_cache(maxsize=2)
def _cached_data(dataset: str, data_dir: str | None, train_examples: int, test_examples: int,
                 device: str) -> TensorData:
    return load_tensor_data(dataset, data_dir=data_dir, device=device, train_examples=train_examples,
                            test_examples=test_examples)


@functools.lru_cache(maxsize=2)
def _cached_canary(spec: CanarySpec, dataset: str, data_dir: str | None, train_examples: int, test_examples: int,
                   device: str):
    """The data and the audit's one canary, made once per process (every run of the audit uses the same)."""
    data = _cached_data(dataset, data_dir, train_examples, test_examples, device)
    return data, make_canaries(spec.kind, data, 1, spec.seed, pattern_scale=spec.pattern_scale, reference=0)


def score_one_run(run_: ResolvedRun, *, spec: CanarySpec, included: dict[int, bool],
                  perf: PerfFlags) -> RunScore:
    """Train the run (its seed names it) with or without the canary and score the canary (the unit an executor
    ships; no MLflow run of its own)."""
    t0 = time.perf_counter()
    config = run_.config
    data, made = _cached_canary(spec, config.dataset, config.data_dir, config.train_examples, config.test_examples,
                                perf.resolve_device())
    inc = bool(included[config.seed])
    made = dataclasses.replace(made, included=np.array([inc]))
    # without the canary: absent (add/remove) or its replacement in its slot (replace_input), as the claim's relation
    result = run(run_, perf, data=with_canaries(made, relation=audit_relation(run_.claim)), keep_model=True,
                 wrap_model=made.widen)
    model = model_for(config, data.info, result.norm)
    model = (made.widen(model) if made.widen is not None else model).to(made.x.device)
    model.load_state_dict(result.model.state_dict())
    if spec.score in BLACK_BOX:
        value = black_box_scores(model, made.x, made.y)[spec.score]
    else:
        value = white_box_scores(model, result.initial_state, made.x, made.y, [spec.score], made.support)[spec.score]
    return RunScore(config.seed, inc, float(value[0]), float(result.metrics[names.METRIC_FINAL_TEST_ACCURACY]),
                    time.perf_counter() - t0)


def _lost(run_: ResolvedRun, error: str, *, included: dict[int, bool]) -> RunScore:
    config = run_.config
    return RunScore(config.seed, bool(included[config.seed]), math.nan, math.nan, 0.0, error)


# --- the journal ---------------------------------------------------------------------------------------------
def journal_path(run_: ResolvedRun, spec: CanarySpec, runs: int) -> Path:
    """Where a multi-run audit journals each finished run's score, so that a stopped audit resumes (keyed by the
    resolution: a changed noise or accountant starts a new journal)."""
    key = hashlib.sha256(json.dumps([run_.key(), dataclasses.asdict(spec), runs]).encode()).hexdigest()[:16]
    return user_cache_dir() / "audit-runs" / f"{key}.jsonl"


def read_journal(path: Path) -> dict[int, RunScore]:
    """The runs a stopped audit finished (a line cut short by the stop is skipped)."""
    done: dict[int, RunScore] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = RunScore(**json.loads(line))
            except (ValueError, TypeError):
                continue
            if not r.error:
                done[r.seed] = r
    return done


# --- the audit -----------------------------------------------------------------------------------------------
@dataclass
class MultiRunResult:
    method: str
    epsilon_claimed: float
    canary_kind: str
    score: str
    runs: int
    rule: Rule
    counts: Counts
    epsilon_lb: float
    ceiling: float
    selection_bound: float
    failed: int
    wall_s: float
    median_test_accuracy: float
    scores: list[RunScore] = field(repr=False, default_factory=list)
    run_id: str | None = None
    relation: str = "add_remove"  # the claim's relation, under which "with" and "without" were built
    design: str = "absent"

    @property
    def threat(self) -> str:
        return "black_box" if self.score in BLACK_BOX else "white_box"

    def verdict(self) -> str:
        """In four words, the relation named: refuted, not refuted (ceiling X), or no power (the rule chosen on the
        first half guesses every run on one side: tau at -inf, so the test half's count is the coins')."""
        under = f"under {self.relation} ({self.design} design)"
        if self.epsilon_lb > self.epsilon_claimed:
            return f"refuted {under}: {self.epsilon_lb:.2f} > {self.epsilon_claimed:g}"
        if not math.isfinite(self.rule.tau):
            return f"no power {under}: the rule chosen guesses every run on one side"
        return f"not refuted (ceiling {self.ceiling:.2f}) {under}"

    def as_json(self) -> dict[str, Any]:
        c = self.counts
        return {"method": self.method, "epsilon_claimed": self.epsilon_claimed, names.TAG_CANARY_KIND: self.canary_kind,
                "score": self.score, "threat": self.threat, "runs": self.runs, "failed": self.failed,
                "threshold": self.rule.tau, "direction": self.rule.direction, "side": self.rule.side,
                "rule": self.rule.describe(),
                "test_half": {"tp": c.tp, "fn": c.fn, "fp": c.fp, "tn": c.tn},
                names.METRIC_EPSILON_LB: self.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: self.ceiling,
                "selection_half_bound": self.selection_bound, "wall_s": self.wall_s,
                "median_test_accuracy": self.median_test_accuracy, "run_id": self.run_id,
                "relation": self.relation, "design": self.design,
                "per_run": [[r.seed, r.included, r.score] for r in self.scores]}


def check_runs(runs: int) -> None:
    """Refuse a run count a multi-run audit cannot split in two halves of both worlds (even, >= 8)."""
    if not (isinstance(runs, int) and runs >= 8 and runs % 2 == 0):
        raise ConfigError(f"--runs {runs!r} is not allowed: give an even number >= 8 (half with the canary, half "
                          "without; a bound near 3 needs about 400)")


def multi_run_audit(config: ResolvedRun, *, runs: int, canary_kind: str, score: str, perf: PerfFlags | None = None,
                    tracker=None, executor: str = "local", executor_options: dict[str, Any] | None = None,
                    beta: float = BETA, pattern_scale: float = PATTERN_SCALE) -> MultiRunResult:
    """N runs of ``config`` (seeds config.seed, config.seed + 1, ...), half with one canary; the bound as above.
    The configuration was resolved once, above; its N runs share the resolution (only the seed differs)."""
    check_runs(runs)
    if not isinstance(config, ResolvedRun):
        raise TypeError(NOT_RESOLVED.format(where="multi_run_audit", got=type(config).__name__))
    resolution = config
    config = resolution.config
    check_no_holdout(config)
    perf = perf or PerfFlags(progress=False)
    base_seed = config.seed
    included = assign_inclusion(runs, base_seed)
    which = {base_seed + i: bool(included[i]) for i in range(runs)}
    spec = CanarySpec(canary_kind, score, base_seed, pattern_scale)
    # check the canary fits the data here, once, before any run starts (a worker would fail each run alike)
    _cached_canary(spec, config.dataset, config.data_dir, config.train_examples, config.test_examples,
                   perf.resolve_device())
    journal = journal_path(resolution, spec, runs)
    got = read_journal(journal)
    earlier_s = sum(r.seconds for r in got.values())  # the run time a resumed audit spent before its stop
    configs = [dataclasses.replace(config, seed=base_seed + i) for i in range(runs)]
    todo = [resolution.with_config(c) for c in configs if c.seed not in got]
    worker_perf = dataclasses.replace(perf, progress=False)
    runner = get_executor(executor, **(executor_options or {}))
    run_one = functools.partial(score_one_run, spec=spec, included=which, perf=worker_perf)
    lost = functools.partial(_lost, included=which)
    t0 = time.perf_counter()
    if got and perf.progress:
        print(f"resuming: {len(got)} of {runs} runs already done ({journal})", flush=True)
    journal.parent.mkdir(parents=True, exist_ok=True)
    with journal.open("a") as f:
        for r in runner.map(todo, run_one=run_one, lost=lost, perf=perf):
            got[r.seed] = r
            f.write(json.dumps(dataclasses.asdict(r)) + "\n")
            f.flush()
    wall = time.perf_counter() - t0 + earlier_s
    ordered = [got[c.seed] for c in configs]
    ok = [r for r in ordered if not r.error and math.isfinite(r.score)]
    if len(ok) < 8:
        raise ConfigError(f"only {len(ok)} of {runs} audit runs finished ({ordered[0].error or 'no error text'}); "
                          "nothing to bound")
    scores = np.array([r.score for r in ok])
    inc = np.array([r.included for r in ok])
    choose = split_halves(inc, base_seed)
    delta = config.privacy.delta
    rule, selection = choose_rule(scores[choose], inc[choose], delta=delta, beta=beta)
    test = counts(scores[~choose], inc[~choose], rule.tau, rule.direction)
    out = MultiRunResult(config.method, config.privacy.epsilon, canary_kind, score, runs, rule, test,
                         test.bound(rule.side, delta=delta, beta=beta),
                         test.perfect().bound(rule.side, delta=delta, beta=beta), selection, runs - len(ok), wall,
                         float(np.median([r.test_accuracy for r in ok])), ordered,
                         relation=audit_relation(resolution.claim).key, design=audit_relation(resolution.claim).excluded)
    if tracker is not None:
        _log(tracker, resolution, out)
        out.run_id = tracker.run_id
    journal.unlink(missing_ok=True)
    return out


def _log(tracker, r: ResolvedRun, out: MultiRunResult) -> None:
    """The audit as one MLflow run: the configuration's params and tags (its resolution's), the rule and counts."""
    config = r.config
    params = {**r.params(), names.PARAM_AUDIT.format("runs"): out.runs, names.PARAM_AUDIT.format("score"): out.score,
              names.PARAM_AUDIT.format("threshold"): out.rule.tau,
              names.PARAM_AUDIT.format("direction"): out.rule.direction, names.PARAM_AUDIT.format("side"): out.rule.side}
    tags = {k: v for k, v in r.tags().items() if k != names.TAG_CONFIG_KEY}  # the audit's own key is set by the caller
    tracker.on_start(config, params, tags)
    c = out.counts
    metrics = {names.METRIC_EPSILON_LB: out.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: out.ceiling,
               names.METRIC_THREAT_BOUND.format(out.threat): out.epsilon_lb,
               names.METRIC_THREAT_CEILING.format(out.threat): out.ceiling,
               names.METRIC_AUDIT_SCORE_BOUND.format(out.score): out.epsilon_lb,
               names.METRIC_AUDIT_RUNS: out.runs, names.METRIC_AUDIT_TESTS: 1,
               names.METRIC_AUDIT_GUESSES: c.tp + c.fn + c.fp + c.tn, names.METRIC_AUDIT_CORRECT: c.tp + c.tn,
               names.METRIC_AUDIT_TP: c.tp, names.METRIC_AUDIT_FN: c.fn, names.METRIC_AUDIT_FP: c.fp,
               names.METRIC_AUDIT_TN: c.tn, names.METRIC_AUDIT_FAILED: out.failed,
               names.METRIC_AUDIT_SELECTION_BOUND: out.selection_bound, names.METRIC_AUDIT_WALL: out.wall_s,
               names.METRIC_FINAL_TEST_ACCURACY: out.median_test_accuracy}
    tags = {names.TAG_AUDIT_BEST_SCORE: out.score, names.TAG_CANARY_KIND: out.canary_kind,
            names.TAG_AUDIT_MODE: "multi_run", names.TAG_AUDIT_SCORES: out.score, names.TAG_AUDIT_RELATION: out.relation,
            names.TAG_AUDIT_DESIGN: out.design}
    verdict_metrics, verdict_tags = one_run_fields(metrics, tags, claimed_epsilon=config.privacy.epsilon,
                                                   delta=config.privacy.delta, canaries=1)
    tracker.log_summary({**metrics, **verdict_metrics}, {**tags, **verdict_tags})
    tracker.on_end({}, "FINISHED")
