"""DP-SGD audited through its whole training with white-box gradient canaries (Nasr et al. 2023, "Tight Auditing of
Differentially Private Machine Learning"; Steinke, Nasr & Jagielski 2023; Cebere, Bellet & Papernot 2025;
THEORY.md, "Auditing", "Gradient canaries").

m canaries, each a per-example gradient on a coordinate of its own, go through the run's own path: they are rows of
the training set (so the harness's Poisson sampler draws each with the run's q, every step), the method's clipping
bounds them to C, the method's optimizer adds its own noise (same generator, same sigma C) to their coordinates and
steps them (SGD with momentum, the run's learning-rate schedule). The coordinates are m extra parameters that no
forward output reads: a real example's gradient is 0 there, a canary's is 0 on every real parameter. Canary j's
gradient is ``RAW_NORM`` C e_j (+ for a canary that is in; under replace_input the excluded canary holds its slot
with -``RAW_NORM`` C e_j, the worst-case pair), so the clipping, which scales it to norm C, is in the path.

Scores, both fixed before the run and read from the released iterates of canary j's coordinate theta_j alone:

- ``likelihood_ratio`` (every iterate): SGD with momentum mu, learning rate lr_t and weight decay w steps
  buf_t = mu buf_{t-1} + g_t + w theta_{t-1}, theta_t = theta_{t-1} - lr_t buf_t, so each step's noisy summed
  gradient is recovered exactly from consecutive iterates: g_t = (theta_{t-1} - theta_t)/lr_t - mu buf_{t-1} -
  w theta_{t-1}, and z_t = g_t B / C ~ N(s b_t, sigma^2) with B the expected batch the optimizer divides by, b_t
  ~ Bernoulli(q) the canary's sampling and s = 1 (in), 0 (absent) or -1 (replaced). The score is the sum over steps
  of the per-step log-likelihood ratio of "in" against "out" under those mixtures:
  add/remove: log(1 - q + q exp((2 z - 1) / (2 sigma^2))); replace: that minus log(1 - q + q exp((-2 z - 1) /
  (2 sigma^2))). sigma is the noise multiplier the optimizer uses;
- ``last_iterate``: -(theta_T - theta_0), the coordinate's total displacement (an in-canary pushes it down).

Each score is read as Steinke et al.'s one-run game (k guessed "in", k "out", k on ``GRID_FRACTIONS`` of m) and by
the f-DP bound of the same guesses (fdp_bound.py), every (k, analysis) of a score in one Bonferroni family: the
every-iterate score decides the verdict, the last iterate's is a second 95% reading (the released model alone) in a
family of its own. The likelihood-ratio score's empirical trade-off curve (false-positive and false-negative rates
over thresholds) and every canary's coin and scores are kept as tables. The m canaries' coordinates are disjoint
and the noise on each coordinate independent, so the run's m canaries are m independent trials per side, which is
what the one-run theorem reads (it needs no independence: the bound holds for any guesses made from the output).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from inputdp.core import names
from inputdp.core.claims import NULL, REPLACED
from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData, load_tensor_data
from inputdp.datasets.facts import data_facts

from ..frontend import model_for, with_frontend_features
from ..harness import interrupted, params_and_tags, prepare, train
from ..resolve import NOT_RESOLVED, ResolvedRun
from .canary_gradients import CanaryGradients, CanaryTrace
from .one_run import ANALYSES, BETA, ScoreOutcome, audit_relation, bound_for_scores, check_no_holdout, epsilon_lower_bound

CANARY_KIND = names.AUDIT_MODE_GRADIENT_CANARIES
SCORES = ("likelihood_ratio", "last_iterate")
#: the score the verdict reads (every iterate: what DP-SGD's guarantee covers); the last iterate alone (the model a
#: user releases) is a second reading, in a family of its own, shown beside it
PRIMARY = "likelihood_ratio"
#: guesses per side as fractions of m, fixed before any mnist run from an idealised simulation of this game at the
#: cpu preset (the ideal likelihood-ratio score, other seeds than any run's): at eps 4 the strongest tests guess
#: 1-2% of the canaries (precision 90-93%), which a grid starting at 5% left out; each score's family is this grid
#: read by Steinke's and the f-DP analysis (12 tests)
GRID_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: canary rows in the training data: NaN in every pixel but the first, which holds the canary's index. A run whose
#: method lacks the hook would put NaN through the model and end Diverged, never silently train on them
_MARK = float("nan")
#: the largest m :meth:`GradientCanaryResult.canaries_needed` projects to
MAX_PROJECTED = 10**6
#: thresholds of the empirical trade-off table (quantiles of the pooled scores)
CURVE_POINTS = 200


def check_gradient_canaries(config: RunConfig, canaries: int, noise_scale: float) -> None:
    """What the audit needs of the run, refused in one line before anything is calibrated or read: DP-SGD, SGD (the
    inversion of its update), images not augmented by the harness (a crop would move the row mark)."""
    if config.method != "dpsgd":
        raise ConfigError(f"canary kind {CANARY_KIND!r} is not allowed for {config.method}: it audits DP-SGD's "
                          "clipped, noised and stepped gradients; use another --canary-kind")
    if not (isinstance(canaries, int) and not isinstance(canaries, bool) and canaries >= 2):
        raise ConfigError(f"canaries={canaries!r} is not allowed: it must be an integer >= 2")
    if not (isinstance(noise_scale, (int, float)) and math.isfinite(noise_scale) and noise_scale > 0):
        raise ConfigError(f"noise_scale={noise_scale!r} is not allowed: give a finite number > 0 (1: the calibrated "
                          "noise)")
    if config.optimizer != "sgd":
        raise ConfigError(f"optimizer={config.optimizer} is not allowed with {CANARY_KIND} canaries: the score "
                          "inverts SGD's momentum update to recover each step's noisy gradient; use --optimizer sgd")
    if config.augment:
        raise ConfigError(f"augment=true is not allowed with {CANARY_KIND} canaries: the harness's crop would move "
                          "the mark of a canary's row; audit the run without augmentation")
    check_no_holdout(config)


def check_canary_rows(config: RunConfig, canaries: int) -> None:
    """Every gradient canary is a training row (under add/remove, the ones that are in): n + m must stay below
    1/delta, refused in one line before any calibration or training."""
    n = data_facts(config.dataset, config.data_dir).train_size
    n = min(config.train_examples, n) if config.train_examples > 0 else n
    try:
        config.privacy.check_delta_for(n + canaries)
    except ConfigError as error:
        raise ConfigError(f"{canaries} gradient canaries do not fit {config.dataset}: {error} (n counts the canary "
                          "rows); declare fewer gradient canaries") from None


# --- the audit -----------------------------------------------------------------------------------------------
@dataclass
class GradientCanaryResult:
    method: str
    epsilon_claimed: float
    delta: float
    canaries: int
    relation: str
    design: str
    noise_multiplier_claimed: float
    noise_multiplier_used: float
    test_accuracy: float
    outcomes: list[ScoreOutcome]
    tests: int
    included: np.ndarray = field(repr=False)
    scores: dict[str, np.ndarray] = field(repr=False)
    sampled: np.ndarray = field(repr=False)
    steps: int = 0
    sampling_rate: float = 0.0
    run_id: str | None = None
    trace: CanaryTrace | None = field(default=None, repr=False)
    seed: int | None = None

    def outcome(self, score: str = PRIMARY) -> ScoreOutcome:
        return next(o for o in self.outcomes if o.score == score)

    @property
    def best(self) -> ScoreOutcome:
        """The verdict's score (every iterate)."""
        return self.outcome(PRIMARY)

    @property
    def epsilon_lb(self) -> float:
        """The verdict's bound: the larger of the two analyses' bounds of the every-iterate score (both analyses
        and every k in its Bonferroni family)."""
        return max(self.best.epsilon_lb, self.best.fdp_epsilon_lb)

    def score_lb(self, score: str) -> float:
        """One score's bound at 95% in its own family (the last iterate's is a second reading, not the verdict's)."""
        o = self.outcome(score)
        return max(o.epsilon_lb, o.fdp_epsilon_lb)

    @property
    def broken(self) -> bool:
        """The implementation was given other noise than the claim's: a deliberately broken run."""
        return not math.isclose(self.noise_multiplier_used, self.noise_multiplier_claimed, rel_tol=1e-9)

    def verdict(self) -> str:
        if self.epsilon_lb > self.epsilon_claimed:
            return "refuted"
        return f"not refuted ({self.epsilon_lb / self.epsilon_claimed:.2f} of the claim)"

    def trade_off(self, score: str = "likelihood_ratio", points: int = CURVE_POINTS) -> list[dict[str, float]]:
        """The empirical trade-off curve of a score: for thresholds at quantiles of the pooled scores, guessing "in"
        above the threshold, the false-positive rate (out guessed in) and false-negative rate (in guessed out)."""
        s, inc = self.scores[score], self.included
        thresholds = np.unique(np.quantile(s, np.linspace(0.0, 1.0, points)))
        rows = []
        for t in thresholds:
            guess = s > t
            rows.append({"threshold": float(t), "fpr": float(guess[~inc].mean()), "fnr": float((~guess[inc]).mean())})
        return rows

    def canaries_needed(self, beta: float = BETA) -> int | None:
        """The smallest m (on a grid of steps of 1.25x from this audit's m) at which the best measured test, its k as a
        fraction of m and its rate of right guesses, would at those expected counts put Steinke et al.'s bound above
        the claim; None: none up to ``MAX_PROJECTED``, or a rate at most e^eps / (1 + e^eps), which no m lifts above
        eps. The bound is not monotone in m (its 2 m delta term grows with m), hence a scan, not a bisection. A
        projection from the measured trade-off, not a bound."""
        best = None
        for o in [self.best]:
            if not o.guesses or o.correct / o.guesses <= 1.0 / (1.0 + math.exp(-self.epsilon_claimed)):
                continue
            m = self.canaries
            while m <= MAX_PROJECTED and (best is None or m < best):
                if self._beats(m, o.k / self.canaries, o.correct / o.guesses, beta):
                    best = m
                    break
                m = math.ceil(1.25 * m)
        return best

    def _beats(self, m: int, frac: float, rate: float, beta: float) -> bool:
        r = 2 * max(1, int(frac * m))
        return epsilon_lower_bound(r=r, v=int(rate * r), m=m, delta=self.delta,
                                   beta=beta / self.tests) > self.epsilon_claimed

    def as_json(self) -> dict[str, Any]:
        b = self.best
        return {
            "method": self.method, "seed": self.seed, "epsilon_claimed": self.epsilon_claimed, "delta": self.delta,
            names.TAG_CANARY_KIND: CANARY_KIND, "canaries": self.canaries, "relation": self.relation,
            "design": self.design, "noise_multiplier_claimed": self.noise_multiplier_claimed,
            "noise_multiplier_used": self.noise_multiplier_used, "deliberately_broken": self.broken,
            names.METRIC_TEST_ACCURACY: self.test_accuracy, "steps": self.steps, "tests": self.tests,
            names.METRIC_EPSILON_LB: self.epsilon_lb, "verdict": self.verdict(), "best_score": b.score,
            "family": f"each score its own: {len(GRID_FRACTIONS)} k x Steinke and f-DP = {self.tests} tests at "
                      f"level {BETA:g}/{self.tests}; the verdict reads {PRIMARY}",
            "mean_times_sampled": float(self.sampled.mean()), "run_id": self.run_id,
            "per_score": {o.score: {"steinke_epsilon_lb": o.epsilon_lb, "steinke_ceiling": o.ceiling, "k": o.k,
                                    "guesses": o.guesses, "correct": o.correct, "fdp_epsilon_lb": o.fdp_epsilon_lb,
                                    "fdp_ceiling": o.fdp_ceiling, "gdp_mu_lb": o.gdp_mu_lb}
                          for o in self.outcomes},
        }


def guess_grid(m: int) -> list[int]:
    """k (guesses per side) for m canaries: ``GRID_FRACTIONS`` of m."""
    return sorted({max(1, int(f * m)) for f in GRID_FRACTIONS})


def count_tests(m: int) -> int:
    """One score's Bonferroni family: every k of the grid, each read by Steinke's and the f-DP analysis."""
    return ANALYSES * len(guess_grid(m))


def canary_training_set(data: TensorData, signs: torch.Tensor, every: bool = False) -> tuple[TensorData, torch.Tensor]:
    """The base data with one marked row per canary that is in the run (add/remove: the included canaries;
    replace: every canary, in or replaced; zero-out, ``every``: every canary, an excluded one the null example whose
    gradient is 0); returns the data and, per appended row, its canary's index."""
    rows = torch.arange(signs.numel()) if every else torch.nonzero(signs != 0).flatten()
    x = torch.full((rows.numel(), *data.shape), _MARK, dtype=data.x_train.dtype, device=data.x_train.device)
    x.view(rows.numel(), -1)[:, 0] = rows.to(x.device, x.dtype)
    y = torch.zeros(rows.numel(), dtype=data.y_train.dtype, device=data.y_train.device)
    return TensorData(data.info, torch.cat([data.x_train, x]), torch.cat([data.y_train, y]), data.x_test,
                      data.y_test, notes=data.notes), rows


def gradient_canary_audit(resolved: ResolvedRun, *, canaries: int = 10_000, perf: PerfFlags | None = None,
                          tracker=None, data: TensorData | None = None, beta: float = BETA,
                          noise_scale: float = 1.0, record: int = 0) -> GradientCanaryResult:
    """Train ``resolved`` (DP-SGD) once with m gradient canaries, each in with probability 1/2 (a seeded coin),
    and bound epsilon from their coordinates' iterates. ``noise_scale`` != 1 gives the optimizer that multiple of
    the calibrated sigma while the claim is kept: a deliberately broken run, tagged so in the store."""
    if not isinstance(resolved, ResolvedRun):
        raise TypeError(NOT_RESOLVED.format(where="gradient_canary_audit", got=type(resolved).__name__))
    check_gradient_canaries(resolved.config, canaries, noise_scale)
    config = resolved.config
    perf = perf or PerfFlags(progress=False)
    if data is None:
        data = load_tensor_data(config.dataset, data_dir=config.data_dir, device=perf.resolve_device(),
                                train_examples=config.train_examples, test_examples=config.test_examples)
    relation = audit_relation(resolved.claim)
    replaced = relation.excluded == REPLACED
    included = (torch.rand(canaries, generator=torch.Generator().manual_seed(30_000 + config.seed)) < 0.5)
    signs = torch.where(included, 1.0, -1.0 if replaced else 0.0)
    # a model with a fixed frontend (ScatterNet) sees the frontend's features: the canary rows are appended to the
    # features, so their mark reaches DP-SGD's batches as it is (the frontend would map it away)
    data, _ = with_frontend_features(model_for(config, data.info, resolved.norm), data, augmented=False)
    train_data, row_canary = canary_training_set(data, signs, every=relation.excluded == NULL)
    p = prepare(resolved, perf, train_data)
    hook, claimed_sigma = _install(p, canaries, signs, noise_scale)
    trace = CanaryTrace(hook, p.optimizer, first_row=data.train_size, row_canary=row_canary,
                        sampling_rate=config.privacy.sampling_rate, noise_multiplier=float(p.optimizer.noise_multiplier),
                        replaced=replaced, record=record)
    held = tracker
    if held is not None:
        held.extra_tags.update({names.TAG_AUDIT_MODE: CANARY_KIND, names.TAG_CANARY_KIND: CANARY_KIND})
        if noise_scale != 1.0:
            held.extra_tags[names.TAG_DELIBERATELY_BROKEN] = (
                f"the optimizer's noise is {noise_scale:g} x the calibrated sigma (the claim kept): must be refuted")
    params, tags = params_and_tags(p)
    params[names.PARAM_NOISE_SCALE] = noise_scale
    callback = held
    try:
        if callback is not None:
            callback.on_start(p.config, params, tags)
        result = train(p, perf, callback, trace)
    except BaseException:
        if callback is not None:
            callback.on_end({}, "KILLED" if interrupted() else "FAILED")
        raise
    try:
        out = _score(resolved, trace, included.numpy(), result, claimed_sigma, beta, relation)
        out.run_id = getattr(tracker, "run_id", None)
        if tracker is not None and tracker.run_id is not None:
            _log(tracker, out)
    except BaseException:
        if callback is not None:
            callback.on_end(result.metrics, "FAILED")
        raise
    if callback is not None:
        callback.on_end(result.metrics, "FINISHED")
    return out


def _install(p, canaries: int, signs: torch.Tensor, noise_scale: float) -> tuple[CanaryGradients, float]:
    """The canaries' coordinates into the prepared run: their weight in the optimizer (the same learning rate,
    momentum and noise), the method's hook, the noise scaled (``noise_scale`` != 1: a deliberately broken run).
    Returns the hook and the calibrated sigma."""
    method = p.method
    if getattr(method, "mode", None) not in ("hooks", "functorch", "bk"):
        raise ConfigError(f"grad_sample_mode={getattr(method, 'mode', None)} is not allowed with {CANARY_KIND} "
                          "canaries: Opacus' ghost clipping forms no per-example gradients to put the canaries' "
                          "beside; use --option dpsgd.grad_sample_mode=hooks")
    frontend = getattr(method.unwrap(p.model), "frontend", None)
    if frontend is not None and tuple(p.data.x_train.shape[1:]) != tuple(frontend.out_shape):
        raise ConfigError(f"model {p.config.model} is not allowed with {CANARY_KIND} canaries here: its fixed frontend "
                          "would map the canaries' marked rows before DP-SGD sees them (append them to its features)")
    hook = CanaryGradients(canaries, method.options["max_grad_norm"], signs, p.device, method.mode)
    inner = getattr(p.optimizer, "original_optimizer", p.optimizer)
    inner.add_param_group({"params": [hook.weight]})
    claimed_sigma = float(p.optimizer.noise_multiplier)
    p.optimizer.noise_multiplier = claimed_sigma * noise_scale
    method.gradient_canaries = hook
    return hook, claimed_sigma


def _score(resolved: ResolvedRun, trace: CanaryTrace, included: np.ndarray, result, claimed_sigma: float,
           beta: float, relation) -> GradientCanaryResult:
    config = resolved.config
    m = len(included)
    scores = {"likelihood_ratio": trace.llr.numpy(), "last_iterate": (-trace.theta).numpy()}
    n_tests = count_tests(m)
    delta = config.privacy.delta
    outcomes = [bound_for_scores(scores[s], included, delta=delta, beta=beta, n_tests=n_tests, score=s,
                                 grid=guess_grid(m)) for s in SCORES]
    return GradientCanaryResult(
        config.method, config.privacy.epsilon, delta, m, relation.key, relation.excluded, claimed_sigma,
        trace.sigma, result.metrics[names.METRIC_FINAL_TEST_ACCURACY], outcomes, n_tests, included, scores,
        trace.sampled.numpy(), trace.steps, config.privacy.sampling_rate, trace=trace, seed=config.seed)


def trade_off_csv(out: GradientCanaryResult) -> str:
    """The likelihood-ratio score's empirical trade-off curve as CSV (threshold, fpr, fnr)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["threshold", "fpr", "fnr"])
    writer.writeheader()
    writer.writerows(out.trade_off())
    return buf.getvalue()


def canaries_csv(out: GradientCanaryResult) -> str:
    """Every canary's coin and scores (canary, included, times sampled, each score): the game, to be read again."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["canary", "included", "times_sampled", *SCORES])
    for j in range(out.canaries):
        writer.writerow([j, int(out.included[j]), int(out.sampled[j]), *(f"{out.scores[s][j]:.9g}" for s in SCORES)])
    return buf.getvalue()


def _log(tracker, out: GradientCanaryResult) -> None:
    """The verdict score's bounds under the one-run audits' metric names (the leaderboard reads them), the
    white-box threat's; each score's own; the trade-off table and every canary's scores as artifacts."""
    best = out.best
    metrics = {names.METRIC_EPSILON_LB: best.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: best.ceiling,
               names.METRIC_AUDIT_GUESSES: best.guesses, names.METRIC_AUDIT_CORRECT: best.correct,
               names.METRIC_AUDIT_TESTS: out.tests,
               names.METRIC_THREAT_BOUND.format("white_box"): best.epsilon_lb,
               names.METRIC_THREAT_CEILING.format("white_box"): best.ceiling,
               names.METRIC_THREAT_FDP_BOUND.format("white_box"): best.fdp_epsilon_lb,
               names.METRIC_THREAT_FDP_CEILING.format("white_box"): best.fdp_ceiling,
               names.METRIC_THREAT_GDP_MU.format("white_box"): best.gdp_mu_lb}
    for o in out.outcomes:
        metrics[names.METRIC_AUDIT_SCORE_BOUND.format(o.score)] = out.score_lb(o.score)
        metrics[names.METRIC_AUDIT_SCORE_CEILING.format(o.score)] = o.ceiling
    tracker.log_summary(metrics, {names.TAG_AUDIT_BEST_SCORE: best.score, names.TAG_CANARY_KIND: CANARY_KIND,
                                  names.TAG_AUDIT_MODE: CANARY_KIND, names.TAG_AUDIT_RELATION: out.relation,
                                  names.TAG_AUDIT_DESIGN: out.design, names.TAG_AUDIT_SCORES: ",".join(SCORES)})
    log_text = getattr(tracker, "log_text", None)  # the MLflow tracker's; a test's callback may have none
    if log_text is not None:
        log_text(trade_off_csv(out), "gradient_canaries_trade_off.csv")
        log_text(canaries_csv(out), "gradient_canaries_scores.csv")
