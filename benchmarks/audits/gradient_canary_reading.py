"""How the gradient-canary audit reads its canaries (the run that hosts them: gradient_canaries.py): the claimed-curve
test on the likelihood-ratio score (the verdict), the one-run readings of both scores beside it, the result as a
value and as the store's fields and tables. ``read`` takes only what the store keeps (each canary's coin and scores,
the claim's release), so a change of analysis re-reads a stored audit without training again."""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from inputdp.core import names
from inputdp.core.config import RunConfig
from inputdp.core.verdicts import CLAIMED_CURVE, NOT_REFUTED, REFUTED, TIGHT, Verdict

from ..resolve import resolve
from .bounds import ANALYSES, BETA, ScoreOutcome, bound_for_scores, epsilon_lower_bound
from .canary_gradients import rates_for
from .claimed_curve import BETA as CURVE_BETA
from .claimed_curve import CurveTest, claimed_family, curve_test

CANARY_KIND = names.AUDIT_MODE_GRADIENT_CANARIES
SCORES = ("likelihood_ratio", "last_iterate")
#: the score the verdict reads (every iterate: what DP-SGD's guarantee covers); the last iterate alone (the model a
#: user releases) is a second reading, in a family of its own, shown beside it
PRIMARY = "likelihood_ratio"
#: the one-run readings' guesses per side as fractions of m, fixed before any mnist run from an idealised simulation
#: (reports/gradient-canaries/simulation); each score's family is this grid read by Steinke's and the f-DP analysis
GRID_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
#: the largest m :meth:`GradientCanaryResult.canaries_needed` projects to
MAX_PROJECTED = 10**6
#: thresholds of the empirical trade-off table (quantiles of the pooled scores)
CURVE_POINTS = 200
THREAT = "white_box"


def guess_grid(m: int) -> list[int]:
    """k (guesses per side) for m canaries: ``GRID_FRACTIONS`` of m."""
    return sorted({max(1, int(f * m)) for f in GRID_FRACTIONS})


def count_tests(m: int) -> int:
    """One score's one-run family: every k of the grid, each read by Steinke's and the f-DP analysis."""
    return ANALYSES * len(guess_grid(m))


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
    curve: CurveTest
    included: np.ndarray = field(repr=False)
    scores: dict[str, np.ndarray] = field(repr=False)
    sampled: np.ndarray = field(repr=False)
    steps: int = 0
    sampling_rate: float = 0.0
    run_id: str | None = None
    trace: Any = field(default=None, repr=False)
    seed: int | None = None

    def outcome(self, score: str = PRIMARY) -> ScoreOutcome:
        return next(o for o in self.outcomes if o.score == score)

    @property
    def best(self) -> ScoreOutcome:
        """The every-iterate score's one-run reading."""
        return self.outcome(PRIMARY)

    @property
    def epsilon_lb(self) -> float:
        """The assumption-free one-run bound: the larger of Steinke's and the f-DP bound of the every-iterate score
        (every k of its family)."""
        return max(self.best.epsilon_lb, self.best.fdp_epsilon_lb)

    def score_lb(self, score: str) -> float:
        """One score's one-run bound at 95% in its own family."""
        o = self.outcome(score)
        return max(o.epsilon_lb, o.fdp_epsilon_lb)

    @property
    def broken(self) -> bool:
        """The implementation was given other noise than the claim's: a deliberately broken run."""
        return not math.isclose(self.noise_multiplier_used, self.noise_multiplier_claimed, rel_tol=1e-9)

    def verdict_value(self) -> Verdict:
        """The verdict: the claimed-curve test's (refuted; tight to what the data certify; not refuted where they
        certify nothing)."""
        c = self.curve
        word = REFUTED if c.refuted else TIGHT if c.certified_epsilon > 0 else NOT_REFUTED
        return Verdict(word=word, bound=c.certified_epsilon, bound_kind=CLAIMED_CURVE,
                       claimed_epsilon=c.claimed_epsilon, delta=self.delta, relation=self.relation,
                       design=self.design, canaries=self.canaries, family=curve_family_text(c), tests=c.tests,
                       level=c.beta, curve_source=c.curve_source)

    def verdict(self) -> str:
        return self.verdict_value().words()

    def trade_off(self, score: str = PRIMARY, points: int = CURVE_POINTS) -> list[dict[str, float]]:
        """The empirical trade-off curve of a score: for thresholds at quantiles of the pooled scores, guessing "in"
        at or above the threshold, the false-positive rate (out guessed in) and false-negative rate (in guessed out)."""
        s, inc = self.scores[score], self.included
        thresholds = np.unique(np.quantile(s, np.linspace(0.0, 1.0, points)))
        return [{"threshold": float(t), "fpr": float((s[~inc] >= t).mean()), "fnr": float((s[inc] < t).mean())}
                for t in thresholds]

    def canaries_needed(self, beta: float = BETA) -> int | None:
        """The one-run reading's projection: the smallest m (steps of 1.25x from this audit's m) at which its best
        test, its k as a fraction of m and its rate of right guesses, would put Steinke et al.'s bound above the claim;
        None: none up to ``MAX_PROJECTED``, or a rate at most e^eps / (1 + e^eps). Not monotone in m (its 2 m delta
        term grows with m), hence a scan. A projection from the measured trade-off, not a bound."""
        o = self.best
        if not o.guesses or o.correct / o.guesses <= 1.0 / (1.0 + math.exp(-self.epsilon_claimed)):
            return None
        m = self.canaries
        while m <= MAX_PROJECTED:
            r = 2 * max(1, int(o.k / self.canaries * m))
            if epsilon_lower_bound(r=r, v=int(o.correct / o.guesses * r), m=m, delta=self.delta,
                                   beta=beta / self.tests) > self.epsilon_claimed:
                return m
            m = math.ceil(1.25 * m)
        return None

    def as_json(self) -> dict[str, Any]:
        c = self.curve
        return {
            "method": self.method, "seed": self.seed, "epsilon_claimed": self.epsilon_claimed, "delta": self.delta,
            names.TAG_CANARY_KIND: CANARY_KIND, "canaries": self.canaries, "relation": self.relation,
            "design": self.design, "noise_multiplier_claimed": self.noise_multiplier_claimed,
            "noise_multiplier_used": self.noise_multiplier_used, "deliberately_broken": self.broken,
            names.METRIC_TEST_ACCURACY: self.test_accuracy, "steps": self.steps,
            "verdict": self.verdict(),
            "claimed_curve": {"refuted": c.refuted, "tight_to": c.ratio, "noise_ratio": c.noise_ratio,
                              "certified_epsilon": c.certified_epsilon, "claimed_epsilon": c.claimed_epsilon,
                              "excluded_scale": c.excluded_scale, "rates": c.rates, "ranks": c.ranks,
                              "thresholds": c.thresholds, "in": c.in_trials, "out": c.out_trials,
                              "false_negatives": c.false_negatives, "fpr": c.fpr, "fnr": c.fnr,
                              "claimed_fnr": c.claimed_fnr, "p_values": c.p_values,
                              "family": curve_family_text(c), "curve_source": c.curve_source},
            "one_run": {"epsilon_lb": self.epsilon_lb, "tests": self.tests,
                        "family": f"each score its own: {len(GRID_FRACTIONS)} k x Steinke and f-DP = {self.tests} "
                                  f"tests at level {BETA:g}/{self.tests}"},
            "mean_times_sampled": float(self.sampled.mean()), "run_id": self.run_id,
            "per_score": {o.score: {"steinke_epsilon_lb": o.epsilon_lb, "steinke_ceiling": o.ceiling, "k": o.k,
                                    "guesses": o.guesses, "correct": o.correct, "fdp_epsilon_lb": o.fdp_epsilon_lb,
                                    "fdp_ceiling": o.fdp_ceiling, "gdp_mu_lb": o.gdp_mu_lb}
                          for o in self.outcomes},
        }


def curve_family_text(c: CurveTest) -> str:
    """The claimed-curve test's family in words (the verdict's ``family`` field)."""
    return (f"claimed curve on independent trials: {c.tests} threshold(s) on {PRIMARY}, each the excluded canaries' "
            f"quantile at a rate fixed from the claimed mechanism; the exact p-value at level {c.beta:g}/{c.tests}")


@dataclass(frozen=True, kw_only=True)
class ClaimRead:
    """What reading a stored game needs of its claim: its release family and accountant (the claimed curve and its
    noise family: claimed_curve.claimed_family), the claim's epsilon as the run asked it, delta, the relation and the
    design the pairs were built under, the calibrated sigma and the one the run used, and the game's q and T."""

    family: Any
    accountant: Any
    epsilon: float
    delta: float
    relation: str
    design: str
    sigma: float
    sigma_used: float
    sampling_rate: float
    steps: int


def read(claim: ClaimRead, included: np.ndarray, scores: dict[str, np.ndarray], sampled: np.ndarray, *,
         method: str = "dpsgd", test_accuracy: float = math.nan, seed: int | None = None,
         beta: float = BETA, curve_beta: float = CURVE_BETA,
         rates: tuple[float, ...] | None = None) -> GradientCanaryResult:
    """The verdict and the one-run readings of one game: ``included`` each canary's coin, ``scores`` each score's
    value per canary (the likelihood ratio at the claim's sigma); ``beta`` the one-run readings' level, ``curve_beta``
    the claimed-curve test's. ``rates`` (the claimed-curve test's false-positive
    rates, each fixing a threshold's rank) None: chosen now from the claimed mechanism (they depend on the claim and the
    numbers of trials alone, never on the scores)."""
    included = np.asarray(included, dtype=bool)
    m = len(included)
    family = claimed_family(claim.family, claim.accountant, claim.sigma, claim.delta)
    if rates is None:
        rates = rates_for(family, sampling_rate=claim.sampling_rate, steps=claim.steps, sigma=claim.sigma,
                          in_trials=int(included.sum()), out_trials=int((~included).sum()),
                          replaced=claim.design == "replaced")
    lr = np.asarray(scores[PRIMARY], dtype=float)
    curve = curve_test(lr[included], lr[~included], rates, family, beta=curve_beta)
    n_tests = count_tests(m)
    outcomes = [bound_for_scores(np.asarray(scores[s], dtype=float), included, delta=claim.delta, beta=beta,
                                 n_tests=n_tests, score=s, grid=guess_grid(m)) for s in SCORES]
    return GradientCanaryResult(method, claim.epsilon, claim.delta, m, claim.relation, claim.design, claim.sigma,
                                claim.sigma_used, test_accuracy, outcomes, n_tests, curve, included, scores,
                                np.asarray(sampled), claim.steps, claim.sampling_rate, seed=seed)


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


def stored(values: np.ndarray) -> np.ndarray:
    """Scores as the store keeps them (9 significant digits): the verdict is read from these, so that a re-read of
    the stored table gives it again exactly."""
    return np.array([float(f"{v:.9g}") for v in np.asarray(values, dtype=float)])


def parse_canaries_csv(text: str) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """(coins, scores, times sampled) from :func:`canaries_csv`'s table."""
    rows = list(csv.DictReader(io.StringIO(text)))
    included = np.array([int(r["included"]) for r in rows], dtype=bool)
    sampled = np.array([int(r["times_sampled"]) for r in rows])
    return included, {s: np.array([float(r[s]) for r in rows]) for s in SCORES}, sampled


def summary(out: GradientCanaryResult) -> tuple[dict[str, float], dict[str, str]]:
    """(metrics, tags) of a read game: the verdict's fields (core/verdicts.py), the claimed-curve test's figures, and
    the one-run readings under the one-run audits' metric names (the white-box threat's)."""
    best, c = out.best, out.curve
    metrics = {names.METRIC_EPSILON_LB: best.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: best.ceiling,
               names.METRIC_AUDIT_GUESSES: best.guesses, names.METRIC_AUDIT_CORRECT: best.correct,
               names.METRIC_AUDIT_TESTS: out.tests, names.METRIC_AUDIT_CANARIES: out.canaries,
               names.METRIC_THREAT_BOUND.format(THREAT): best.epsilon_lb,
               names.METRIC_THREAT_CEILING.format(THREAT): best.ceiling,
               names.METRIC_THREAT_FDP_BOUND.format(THREAT): best.fdp_epsilon_lb,
               names.METRIC_THREAT_FDP_CEILING.format(THREAT): best.fdp_ceiling,
               names.METRIC_THREAT_GDP_MU.format(THREAT): best.gdp_mu_lb,
               names.METRIC_CURVE.format("excluded_scale"): c.excluded_scale if math.isfinite(c.excluded_scale) else -1.0}
    for i, t in enumerate(c.thresholds):
        for k, v in (("rate", c.rates[i]), ("threshold", t), ("rank", c.ranks[i]), ("fpr", c.fpr[i]),
                     ("fnr", c.fnr[i]), ("claimed_fnr", c.claimed_fnr[i]), ("false_negatives", c.false_negatives[i]),
                     ("p_value", c.p_values[i])):
            metrics[names.METRIC_CURVE.format(f"{k}.{i}")] = float(v)
    metrics[names.METRIC_CURVE.format("noise_ratio")] = c.noise_ratio
    for o in out.outcomes:
        metrics[names.METRIC_AUDIT_SCORE_BOUND.format(o.score)] = out.score_lb(o.score)
        metrics[names.METRIC_AUDIT_SCORE_CEILING.format(o.score)] = o.ceiling
    verdict_metrics, verdict_tags = out.verdict_value().fields(THREAT)
    metrics.update(verdict_metrics)
    tags = {names.TAG_AUDIT_BEST_SCORE: best.score, names.TAG_CANARY_KIND: CANARY_KIND,
            names.TAG_AUDIT_MODE: CANARY_KIND, names.TAG_AUDIT_RELATION: out.relation,
            names.TAG_AUDIT_DESIGN: out.design, names.TAG_AUDIT_SCORES: ",".join(SCORES), **verdict_tags}
    return metrics, tags


#: the artifacts a stored audit is read again from
SCORES_ARTIFACT, TRADE_OFF_ARTIFACT = "gradient_canaries_scores.csv", "gradient_canaries_trade_off.csv"


def reread(client, run) -> tuple[dict[str, float], dict[str, str]]:
    """A stored gradient-canary audit read again by today's analysis: (metrics, tags) of :func:`summary`. Its claim
    from its stored configuration (resolved again: the same calibration), each canary's coin and scores from its
    stored table. An audit run with other noise than its claim's (``mechanism.noise_scale`` != 1) is left alone (()):
    its stored likelihood ratio was taken at the noise it used, not at the claim's."""
    params, tags = run.data.params, run.data.tags
    if float(params.get(names.PARAM_NOISE_SCALE, 1.0)) != 1.0:
        return {}, {}
    with tempfile.TemporaryDirectory() as folder:
        config = json.loads(Path(client.download_artifacts(run.info.run_id, names.RESOLVED_CONFIG_ARTIFACT,
                                                           folder)).read_text())["configuration"]
        table = Path(client.download_artifacts(run.info.run_id, SCORES_ARTIFACT, folder)).read_text()
    config = RunConfig.from_dict(config)
    method = resolve(config).method()
    privacy = config.privacy
    included, scores, sampled = parse_canaries_csv(table)
    claim = ClaimRead(family=method.release_family(privacy), accountant=method.accountant, epsilon=privacy.epsilon,
                      delta=privacy.delta, relation=tags.get(names.TAG_AUDIT_RELATION, ""),
                      design=tags.get(names.TAG_AUDIT_DESIGN, ""), sigma=method.noise(), sigma_used=method.noise(),
                      sampling_rate=privacy.sampling_rate, steps=privacy.steps)
    out = read(claim, included, scores, sampled, method=config.method, seed=config.seed,
               test_accuracy=run.data.metrics.get(names.METRIC_FINAL_TEST_ACCURACY, math.nan))
    return summary(out)


def log(tracker, out: GradientCanaryResult) -> None:
    """The summary's metrics and tags, and the trade-off table and every canary's scores as artifacts."""
    tracker.log_summary(*summary(out))
    log_text = getattr(tracker, "log_text", None)  # the MLflow tracker's; a test's callback may have none
    if log_text is not None:
        log_text(trade_off_csv(out), TRADE_OFF_ARTIFACT)
        log_text(canaries_csv(out), SCORES_ARTIFACT)


def text_report(out: GradientCanaryResult, where: str) -> list[str]:
    """``bench audit --canary-kind gradient_canaries``'s lines: the run, the verdict with the test's figures, then
    the one-run readings beside it."""
    c = out.curve
    broken = f", noise {out.noise_multiplier_used / out.noise_multiplier_claimed:g} x calibrated (deliberately " \
             "broken)" if out.broken else ""
    lines = [f"{out.method} on {where}, claimed epsilon {out.epsilon_claimed:g} under {out.relation} (sigma "
             f"{out.noise_multiplier_claimed:.4f}; used {out.noise_multiplier_used:.4f}{broken}), {out.canaries} "
             f"gradient canaries ({out.design} design), {out.steps} steps, test accuracy {out.test_accuracy:.4f}",
             f"verdict: {out.verdict()} under {out.relation}: the claimed curve ({c.curve_source}) tested on "
             f"{c.in_trials} + {c.out_trials} canaries as independent trials, {curve_family_text(c)}"]
    for i, rate in enumerate(c.rates):
        lines.append(f"  threshold {i + 1}: rate {rate:.4f} (rank {c.ranks[i]}), observed FPR {c.fpr[i]:.4f} FNR "
                     f"{c.fnr[i]:.4f} against the claimed {c.claimed_fnr[i]:.4f}, p = {c.p_values[i]:.3g}")
    lines += [f"  the data exclude the claimed release at noise {c.excluded_scale:.4f} x the claim's and above: "
              f"epsilon {c.certified_epsilon:.3f} at delta {out.delta:g} against the claim's {c.claimed_epsilon:.3f} "
              f"(X = {c.ratio:.3f}; in noise {c.noise_ratio:.3f})",
              f"the one-run readings beside it (no independence assumed; each score its own family of {out.tests} "
              f"tests at level {BETA:g}/{out.tests}: the k grid x Steinke and f-DP):",
              f"{'score':<18}{'steinke':>9}{'f-DP':>8}{'ceiling':>9}{'k':>7}{'correct':>14}"]
    lines += [f"{o.score:<18}{o.epsilon_lb:>9.3f}{o.fdp_epsilon_lb:>8.3f}{o.ceiling:>9.3f}{o.k:>7}{o.correct:>7}/"
              f"{o.guesses}" for o in out.outcomes]
    return lines
