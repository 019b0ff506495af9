"""The claimed trade-off curve tested with independent trials (THEORY.md, "Auditing", "The claimed curve").

Where an audit's m canaries are m independent trials of the claimed mechanism (the gradient canaries: each on a
coordinate of its own, with its own Poisson draws and its own noise), the classic test applies, with no m * delta
term. The claim says every test of "in" against "out" has FNR >= f(FPR), f its trade-off curve
(methods/accounting/trade_off.py, non-increasing). Fixed before the run, from the claimed mechanism alone: K
false-positive rates a_1..a_K. In the run, for each a_i the threshold t_i is the k_i-th largest score of the n_out
excluded canaries, k_i = ceil(a_i n_out) (ties broken by an independent uniform, so that the order is strict), and
"in" is guessed where a score is >= t_i. Then, whatever the mechanism:

- U_i = FPR(t_i), the chance that an excluded canary's score reaches t_i, is the k_i-th smallest of n_out uniforms:
  a Beta(k_i, n_out - k_i + 1) variable;
- the included canaries are independent of the excluded ones, so given t_i the false negatives FN_i are
  Binomial(n_in, FNR(t_i)).

Under the claim FNR(t_i) >= f(U_i), and a Binomial's distribution function falls as its rate rises, so

    P[FN_i <= x] <= p_i(x) = E_U[ P[Binomial(n_in, f(U)) <= x] ],   U ~ Beta(k_i, n_out - k_i + 1),

computed from above (the integrand rises with U: each of ``QUADRATURE`` equal-probability bins at its upper end).
The claim is **refuted** where some p_i(FN_i) <= beta / K (Bonferroni over the thresholds): an event of probability at
most beta when the claim holds. Integrating over the threshold's own rate, rather than bounding FPR and FNR apart at
beta / 2 each, reads mnist-cpu's DP-SGD at eps 1 (add/remove, 39,000 canaries) about 0.07 of the claim higher on the
same scores (reports/gradient-canaries).

A threshold is a quantile of the excluded world's scores rather than a fixed score: a mechanism other than the claimed
one moves the whole score distribution (the likelihood ratio at the claim's sigma of a run with half the sigma lies
below every fixed threshold the claimed mechanism suggests: all false negatives, no false positives, no power), while
a quantile moves with it.

What the data certify: the claim's own release at noise s (s = 1 the claim; less noise, a lower curve) is excluded
wherever some p_i, computed with its curve f_s, is <= beta / K, which holds for every s at or above some s*. "Tight to
X" reads X = epsilon(s*) / epsilon(1), the largest epsilon of the claim's family (at the claim's delta) the data
exclude over the claim's (X > 1 is the refutation); 1 / s* is the same reading in noise (mu, for a Gaussian claim).

The rates are chosen on a simulation of the claimed mechanism (seeded, no data): at each candidate, draws of the
false negatives at this audit's n_in and n_out give the X the test would certify if the claim were exact; the best K
candidates are the family.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from inputdp.methods.accounting.trade_off import TradeOffCurve

#: the level of the claimed-curve test. Its p-value is exact up to the quadrature (a correct DP-SGD is refuted in
#: about 4.5% of the ideal game's seeds at 0.05), and a study tests dozens of claims, each at three seeds: at 0.05 a
#: correct method would read "refuted" somewhere in most studies. At 0.01 the expected false refutations over
#: mnist-cpu's 18 correct DP-SGD audits are below 0.2, and the median certification at eps 1 falls from about 0.86
#: to 0.83 of the claim (reports/gradient-canaries/simulation). The one-run readings keep 0.05: they are far below
#: their level (Steinke's bound and the f-DP bound never reach a correct claim here)
BETA = 0.01
#: the rates of the family: one, chosen where the claimed mechanism's own test certifies the most. Every rate more
#: costs the certification its Bonferroni share, while one quantile threshold already refutes the broken runs the
#: suite tests (half the sigma; add/remove's sigma under a replace_input claim; reports/gradient-canaries)
RATES = 1
#: noise scales the certification searches (s = 1 the claim): below the lower end a claim is "refuted beyond
#: measure"; above the upper end nothing is excluded
SCALE_RANGE = (0.05, 4.0)
#: equal-probability bins of the threshold's rate the p-value integrates over (each read at its upper end: the
#: p-value is overstated by at most 1 / QUADRATURE)
QUADRATURE = 4000
#: candidate false-positive rates the family is chosen among, the draws of the false negatives at each, and the
#: coarser quadrature the choice reads them with
CANDIDATE_RATES = np.geomspace(5e-3, 0.9, 24)
DRAWS = 128
CHOICE_QUADRATURE = 400


@dataclass(frozen=True)
class CurveFamily:
    """The claim's release at noise scale s: its trade-off curve and its epsilon at the claim's delta. ``curve_at``
    must return a curve that does not decrease in s (more noise, more privacy)."""

    curve_at: Callable[[float], TradeOffCurve]
    epsilon_at: Callable[[float], float]
    source: str


def clopper_pearson_upper(k, n, level: float) -> np.ndarray:
    """One-sided upper Clopper-Pearson bounds on a rate from k successes in n trials: P[rate > bound] <= level."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    if np.any(n <= 0):
        raise ValueError("Clopper-Pearson needs at least one trial")
    upper = stats.beta.ppf(1.0 - level, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, upper)


def rank_of(rate: float, trials: int) -> int:
    """k = ceil(rate n), at least 1 and at most n: the rank, among the excluded canaries' scores, of the threshold a
    rate fixes."""
    return int(min(max(math.ceil(rate * trials - 1e-9), 1), trials))


def threshold_rates(rank: int, out_trials: int, points: int = QUADRATURE) -> np.ndarray:
    """The upper ends of ``points`` equal-probability bins of Beta(k, n - k + 1): the law of the rate at which an
    excluded canary reaches the k-th largest of n excluded scores."""
    return stats.beta.ppf(np.arange(1, points + 1) / points, rank, out_trials - rank + 1)


def p_value(false_negatives, in_trials: int, rank: int, out_trials: int, curve: TradeOffCurve,
            points: int = QUADRATURE) -> np.ndarray:
    """p(x) = E_U[P[Binomial(n_in, f(U)) <= x]], U the threshold's rate (``threshold_rates``), from above; vectorised
    over the false-negative counts x."""
    f = curve(threshold_rates(rank, out_trials, points))
    x = np.atleast_1d(np.asarray(false_negatives))
    return stats.binom.cdf(x[:, None], in_trials, f[None, :]).mean(axis=1)


@dataclass(frozen=True)
class CurveTest:
    """The test's outcome as fields (what the store and the reports read)."""

    rates: tuple[float, ...]
    ranks: tuple[int, ...]
    thresholds: tuple[float, ...]
    beta: float
    in_trials: int
    out_trials: int
    false_negatives: tuple[int, ...]
    #: each threshold's p-value against the claimed curve (refuted where one is <= beta / K)
    p_values: tuple[float, ...]
    refuted: bool
    #: s*: the data exclude the claimed release at every noise scale from s* up (inf: none in range)
    excluded_scale: float
    claimed_epsilon: float
    #: epsilon(s*) at the claim's delta: the largest epsilon of the claim's family the data exclude (0: none)
    certified_epsilon: float
    curve_source: str
    #: the claimed curve at each threshold's observed false-positive rate k / n_out (for the record)
    claimed_fnr: tuple[float, ...] = ()

    @property
    def tests(self) -> int:
        return len(self.rates)

    @property
    def fpr(self) -> tuple[float, ...]:
        return tuple(k / self.out_trials for k in self.ranks)

    @property
    def fnr(self) -> tuple[float, ...]:
        return tuple(x / self.in_trials for x in self.false_negatives)

    @property
    def ratio(self) -> float:
        """X: the certified epsilon over the claim's (above 1: refuted)."""
        if self.claimed_epsilon <= 0 or not math.isfinite(self.claimed_epsilon):
            return math.nan
        return self.certified_epsilon / self.claimed_epsilon

    @property
    def noise_ratio(self) -> float:
        """1 / s*: the same reading in noise (a Gaussian claim's mu ratio); 0 where nothing is excluded."""
        return 0.0 if not math.isfinite(self.excluded_scale) else 1.0 / self.excluded_scale


def curve_test(scores_in: np.ndarray, scores_out: np.ndarray, rates: Sequence[float], family: CurveFamily, *,
               beta: float = BETA, certify: bool = True) -> CurveTest:
    """Test the claim's curve on independent trials: ``scores_in`` of the included canaries, ``scores_out`` of the
    excluded ones; at each rate (fixed before the run) the threshold is the excluded scores' quantile of that rank,
    and "in" is guessed at scores >= it. ``certify`` False: the verdict alone (no search for s*, which is then nan:
    what a simulation of the level needs)."""
    s_in, s_out = np.asarray(scores_in, dtype=float), np.asarray(scores_out, dtype=float)
    rates = tuple(float(a) for a in rates)
    if not rates or not all(0 < a < 1 for a in rates):
        raise ValueError(f"rates={rates!r}: the claimed-curve test needs at least one rate in (0, 1), fixed before "
                         "the run")
    if s_in.size == 0 or s_out.size == 0:
        raise ValueError("the claimed-curve test needs trials in both worlds")
    level = beta / len(rates)
    ranks = [rank_of(a, s_out.size) for a in rates]
    # ties broken by an independent uniform (a fixed seed: no data): the order is then strict, and the k-th largest
    # excluded canary has exactly k excluded canaries at or above it (a randomised test, valid for any score)
    tie = np.random.default_rng(0)
    key_in, key_out = tie.random(s_in.size), tie.random(s_out.size)
    at = np.lexsort((key_out, s_out))[::-1][np.array(ranks) - 1]  # the k-th largest (score, key) of the excluded
    th, th_key = s_out[at], key_out[at]
    below = (s_in[None, :] < th[:, None]) | ((s_in[None, :] == th[:, None]) & (key_in[None, :] < th_key[:, None]))
    fn = below.sum(axis=1)

    def p_values(s: float) -> np.ndarray:
        curve = family.curve_at(s)
        return np.array([p_value(x, s_in.size, k, s_out.size, curve)[0] for x, k in zip(fn, ranks)])

    claimed = p_values(1.0)
    scale = excluded_scale(lambda s: bool(np.any(p_values(s) <= level))) if certify else math.nan
    certified = family.epsilon_at(scale) if math.isfinite(scale) else (0.0 if certify else math.nan)
    curve = family.curve_at(1.0)
    return CurveTest(rates, tuple(ranks), tuple(float(t) for t in th), beta, int(s_in.size), int(s_out.size),
                     tuple(int(x) for x in fn), tuple(float(p) for p in claimed), bool(np.any(claimed <= level)),
                     scale, float(family.epsilon_at(1.0)), float(certified), family.source,
                     tuple(float(v) for v in curve(np.array(ranks) / s_out.size)))


def excluded_scale(excluded: Callable[[float], bool], *, iterations: int = 16) -> float:
    """s*: the least noise scale ``excluded`` holds at (it holds from s* up: the curve rises with s), by bisection in
    log s; inf where none in ``SCALE_RANGE`` is, the range's lower end where every scale in it is."""
    low, high = SCALE_RANGE
    if not excluded(high):
        return math.inf
    if excluded(low):
        return low
    for _ in range(iterations):
        mid = math.sqrt(low * high)
        low, high = (low, mid) if excluded(mid) else (mid, high)
    return high


def choose_rates(sim_in: np.ndarray, sim_out: np.ndarray, *, in_trials: int, out_trials: int, family: CurveFamily,
                 count: int = RATES, beta: float = BETA, scales: np.ndarray | None = None, draws: int = DRAWS,
                 seed: int = 0) -> tuple[float, ...]:
    """The ``count`` false-positive rates at which the claimed mechanism's own test would certify the most on average
    at these numbers of trials. ``sim_in``, ``sim_out`` are scores simulated from the claimed mechanism (no data):
    at each candidate rate the simulated quantile gives the claimed false-negative rate (never below the claimed
    curve's value: under the claim no test does better, and a simulated rate below it is the simulation's noise,
    which at small rates, where the curve is steep, would otherwise win the choice by luck); ``draws`` Binomial false
    negatives are each read on a grid of noise scales (the least excluded scale's epsilon, capped at the claim's:
    beyond it a draw is a false refutation); the candidates with the largest mean are the family."""
    sim_in, sim_out = np.asarray(sim_in, dtype=float), np.asarray(sim_out, dtype=float)
    quantiles = np.quantile(sim_out, 1.0 - CANDIDATE_RATES)
    fnr = np.maximum((sim_in[None, :] < quantiles[:, None]).mean(axis=1), family.curve_at(1.0)(CANDIDATE_RATES))
    fn = np.random.default_rng(seed).binomial(in_trials, fnr[:, None], (fnr.size, draws))
    ranks = [rank_of(a, out_trials) for a in CANDIDATE_RATES]
    grid = np.geomspace(0.4, 1.2, 17) if scales is None else np.asarray(scales, dtype=float)
    claim = family.epsilon_at(1.0)
    certified = np.zeros(fn.shape)  # each draw's epsilon at the least grid scale it excludes (0: none)
    for s in grid[::-1]:
        curve = family.curve_at(float(s))
        hit = np.array([p_value(fn[i], in_trials, k, out_trials, curve, CHOICE_QUADRATURE) <= beta / count
                        for i, k in enumerate(ranks)])
        certified = np.where(hit, min(family.epsilon_at(float(s)), claim), certified)
    order = np.argsort(-certified.mean(axis=1), kind="stable")
    return tuple(float(CANDIDATE_RATES[i]) for i in sorted(order[:count]))


def claimed_family(family, accountant, noise: float, delta: float) -> CurveFamily:
    """The claim's release family (methods/accounting/releases.py) at the claimed noise times every scale s, read by
    the claim's accountant: each member's curve and epsilon at ``delta`` computed once. The claim itself is s = 1:
    its epsilon is the claim's, from the same accountant."""
    curves: dict[float, TradeOffCurve] = {}
    epsilons: dict[float, float] = {}

    def curve_at(s: float) -> TradeOffCurve:
        key = round(float(s), 12)
        if key not in curves:
            curves[key] = accountant.trade_off(family, noise * key)
        return curves[key]

    def epsilon_at(s: float) -> float:
        key = round(float(s), 12)
        if key not in epsilons:
            epsilons[key] = accountant.epsilon(family, noise * key, delta)
        return epsilons[key]

    return CurveFamily(curve_at, epsilon_at, f"{accountant.label(family)}: {curve_at(1.0).source}")
