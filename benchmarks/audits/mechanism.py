"""Audits at the mechanism: a private method's own release code run on a worst-case pair of neighbours, many trials,
set against the least noise the run's claim allows (THEORY.md, "Auditing", "At the mechanism").

A one-run audit of a trained model can only refute; it cannot show that an implementation adds no more noise than
its accountant assumes (a DP-SGD with twice the noise reads 0.00 like the right one). Here the release is isolated:
each method that has a mechanism audit implements ``release_trials`` (``inputdp.methods.base``), which runs its own
code on a pair it constructs and returns a score per trial in each world, with the event its claim composes; this
module names no method.

What is compared. The run claims (epsilon, delta) at its (q, T, relation): its calibration's epsilon. Each audited
release declares the run's whole privacy event with that release's noise multiplier set to 1 (``ReleaseTrials.event``:
T Poisson-subsampled Gaussian steps at rate q, one Gaussian release, Q queries of two Gaussians) and the pair's shift.
From these alone, never from the noise the code uses, an accountant of this module finds

    s_min = min { s : the event, every noise multiplier times s, is (epsilon, delta)-DP },   mu_allowed = shift / s_min

(the exact composition of Gaussians where the event is unsampled Gaussians alone, Dong, Roth & Su 2022; else
dp_accounting's privacy-loss distribution): the largest mu a Gaussian release of the pair may have while the whole run
stays within its claim. From the two worlds' scores, at each threshold t of a grid fixed before the trials, the
Clopper-Pearson upper bounds FPR+ and FNR+ (each at beta / (2 x thresholds), so that every reading below holds at once
with confidence 1 - beta) give

    mu_lb        = max_t Phi^-1(1 - FPR+) - Phi^-1(FNR+)          no mu < mu_lb makes the release mu-GDP
    epsilon_free = max_t log((1 - delta - FNR+) / FPR+)            the release is not (eps, delta)-DP for eps below it
                   (and the same with the worlds exchanged)

"refuted": mu_lb > mu_allowed (the release is not dominated by the Gaussian the claim allows; this holds whatever the
code's noise family) or epsilon_free > epsilon_allowed, the (epsilon, delta) at the run's delta of one mu_allowed-GDP
release (the release is not (epsilon_allowed, delta)-DP, which every release the claim allows is; it assumes nothing
about the noise). "tight to X": X = mu_lb / mu_allowed >= TIGHT_FRACTION (a Gaussian release adds at most 1/X times the
least noise its claim needs). "no power": every trial guessed right would not refute. Else "not refuted (X of the
claim's mu, ceiling Y)", Y the largest X these trials could show. epsilon_gaussian = epsilon(mu_lb-GDP) at delta is
the release's empirical epsilon *if the release is Gaussian* (Nasr et al. 2023's reading): a Laplace release of the
claimed variance reads several times its true pure epsilon there, so no verdict uses it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from inputdp.core import names
from inputdp.core.claims import relation_key
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import METHODS as METHOD_REGISTRY
from inputdp.methods import create_method
from inputdp.methods.accounting.accountants import accountant as accountant_named
from inputdp.methods.accounting.events import gdp_mu
from inputdp.methods.accounting.releases import ScaledEvent
from inputdp.methods.base import AUDIT_THRESHOLDS, Method

from ..tracking import log_finished_run, open_store
from .fdp_bound import gdp_epsilon
from .one_run import BETA

#: the fraction of the largest mu the claim allows that the release's mu_lb must reach for "tight"
TIGHT_FRACTION = 0.9
THRESHOLDS = AUDIT_THRESHOLDS
DEFAULT_TRIALS = 400_000


# --- the bounds from the trials ---------------------------------------------------------------------------------
def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """The one-sided (1 - alpha) upper bound of a binomial rate from k successes in n."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


@dataclass(frozen=True)
class Bound:
    mu_lb: float
    epsilon_free: float
    threshold: float  # where mu_lb is reached
    fpr: float
    fnr: float


def _readings(fpr: float, fnr: float, delta: float) -> tuple[float, float]:
    """(mu, family-free epsilon) that upper bounds FPR+ and FNR+ of one test show."""
    mu = float(stats.norm.isf(fpr) - stats.norm.ppf(fnr)) if 0 < fpr < 1 and 0 < fnr < 1 else 0.0
    free = max(0.0, math.log(max(1.0 - delta - fnr, 1e-300) / fpr), math.log(max(1.0 - delta - fpr, 1e-300) / fnr))
    return max(mu, 0.0), free


def bounds(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray, *, delta: float,
           beta: float = BETA) -> Bound:
    """The largest mu_lb and family-free epsilon over ``thresholds``, each rate bounded at beta / (2 x tests):
    "in" is guessed where the score is >= the threshold."""
    alpha = beta / (2 * len(thresholds))
    n_in, n_out = len(scores_in), len(scores_out)
    best, free_best = Bound(0.0, 0.0, float("nan"), float("nan"), float("nan")), 0.0
    s_in, s_out = np.sort(scores_in), np.sort(scores_out)
    for t in thresholds:
        fp = n_out - int(np.searchsorted(s_out, t, side="left"))  # out scores >= t
        fn = int(np.searchsorted(s_in, t, side="left"))  # in scores < t
        mu, free = _readings(clopper_pearson_upper(fp, n_out, alpha), clopper_pearson_upper(fn, n_in, alpha), delta)
        free_best = max(free_best, free)
        if mu > best.mu_lb:
            best = Bound(mu, 0.0, float(t), fp / n_out, fn / n_in)
    return replace(best, epsilon_free=free_best)


def ceilings(n_in: int, n_out: int, tests: int, *, delta: float, beta: float = BETA) -> tuple[float, float]:
    """(mu_lb, epsilon_free) with every trial guessed right: the most these trials can show."""
    alpha = beta / (2 * tests)
    return _readings(clopper_pearson_upper(0, n_out, alpha), clopper_pearson_upper(0, n_in, alpha), delta)


@dataclass(frozen=True, kw_only=True)
class MechanismAudit:
    method: str
    release: str
    relation: str
    trials_per_world: int
    delta: float
    run_epsilon: float  # the run's claimed epsilon at delta, (q, T, relation): what mu_allowed is derived from
    accountant: str  # how the least noise the claim allows was found
    noise_allowed: float  # s_min: the least noise multiplier of this release that keeps the run within its claim
    mu_allowed: float  # shift / s_min: the largest mu of a Gaussian release of the pair the claim allows
    mu_lb: float  # no mu below it makes the release mu-GDP (confidence 1 - beta, any noise family)
    mu_ceiling: float  # mu_lb with every trial guessed right
    epsilon_allowed: float  # one mu_allowed-GDP release's epsilon at delta
    epsilon_gaussian: float  # mu_lb-GDP's epsilon at delta: the release's epsilon *if it is Gaussian*
    epsilon_free: float  # the family-free lower bound on the release's epsilon at delta
    epsilon_free_ceiling: float
    noise_scale: float  # 1: the calibrated noise; otherwise the implementation was given that multiple of it
    adjacency: str = ""  # the claim's neighbouring relation, as the run's privacy.adjacency tag writes it

    @property
    def tightness(self) -> float:
        """mu_lb / mu_allowed."""
        return self.mu_lb / self.mu_allowed if self.mu_allowed > 0 else float("nan")

    @property
    def refuted_by(self) -> str:
        """Which reading refutes the claim: "mu-GDP" (mu_lb > mu_allowed), "family-free" (epsilon_free >
        epsilon_allowed), both (joined by " and "), or "" for none."""
        out = []
        if self.mu_lb > self.mu_allowed * (1 + 1e-9):
            out.append("mu-GDP")
        if self.epsilon_free > self.epsilon_allowed * (1 + 1e-9):
            out.append("family-free")
        return " and ".join(out)

    @property
    def refuted(self) -> bool:
        return bool(self.refuted_by)

    @property
    def verdict(self) -> str:
        if self.refuted:
            return "refuted"
        if self.tightness >= TIGHT_FRACTION:
            return f"tight to {self.tightness:.2f}"
        if self.mu_ceiling <= self.mu_allowed and self.epsilon_free_ceiling <= self.epsilon_allowed:
            return "no power"
        return f"not refuted ({self.tightness:.2f} of the claim's mu, ceiling {self.mu_ceiling / self.mu_allowed:.2f})"

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "tightness": self.tightness, "verdict": self.verdict, "refuted": self.refuted,
                "refuted_by": self.refuted_by}


def _calibrated(method: str, spec: PrivacySpec, options: dict[str, Any], noise_scale: float):
    """The method calibrated for ``spec``, then given ``noise_scale`` times its noise (the claim kept)."""
    m = create_method(method, options)
    cal = m.calibrate(spec)
    if noise_scale != 1.0:  # a method born with the scaled noise, as the harness gets one (Method.calibrated)
        m = type(m).calibrated(spec, cal.scaled(noise_scale), options)
    return m, cal


def audited_methods() -> list[str]:
    """The registered methods with a mechanism audit (their class overrides ``release_trials``)."""
    out = []
    for name in METHOD_REGISTRY.names():
        try:
            cls = METHOD_REGISTRY.get(name).load()
        except Exception:  # noqa: BLE001 - a plug-in that does not load here has no audit here
            continue
        if cls.release_trials is not Method.release_trials:
            out.append(name)
    return out


def allowed_noise(event, *, epsilon: float, delta: float, relation: str) -> tuple[float, str]:
    """(s, how): the least noise scale of the release ``event`` that the claim (epsilon, delta) allows under
    ``relation``, and the accountant's words: the one calibration (accountants.calibrate's registry) reading the
    release family ``ScaledEvent``."""
    family, pld = ScaledEvent(event, relation), accountant_named("pld")
    return pld.least_noise(family, epsilon, delta), pld.label(family)


def audit_release(trials, *, method: str, run_epsilon: float, delta: float, noise_scale: float = 1.0,
                  adjacency: str = "", beta: float = BETA) -> MechanismAudit:
    """One release's audit: its trials (a ``ReleaseTrials``) against the least noise ``run_epsilon`` at ``delta``
    allows for the event it declares."""
    noise_allowed, accountant = allowed_noise(trials.event, epsilon=run_epsilon, delta=delta,
                                              relation=trials.event_relation)
    mu_allowed = trials.shift / noise_allowed
    s_in, s_out = np.asarray(trials.scores_in), np.asarray(trials.scores_out)
    grid = np.asarray(trials.thresholds)
    b = bounds(s_in, s_out, grid, delta=delta, beta=beta)
    mu_ceiling, free_ceiling = ceilings(len(s_in), len(s_out), len(grid), delta=delta, beta=beta)
    return MechanismAudit(
        method=method, release=trials.release, relation=trials.relation, trials_per_world=min(len(s_in), len(s_out)),
        delta=delta, run_epsilon=run_epsilon, accountant=accountant, noise_allowed=noise_allowed,
        mu_allowed=mu_allowed, mu_lb=b.mu_lb, mu_ceiling=mu_ceiling, epsilon_allowed=gdp_epsilon(mu_allowed, delta),
        epsilon_gaussian=gdp_epsilon(b.mu_lb, delta), epsilon_free=b.epsilon_free, epsilon_free_ceiling=free_ceiling,
        noise_scale=noise_scale, adjacency=adjacency)


def audit_mechanism(method: str, spec: PrivacySpec, options: dict[str, Any] | None = None, *,
                    trials: int = DEFAULT_TRIALS, noise_scale: float = 1.0, beta: float = BETA, seed: int = 0,
                    progress: Callable[[str], None] | None = None) -> list[MechanismAudit]:
    """The mechanism audits of ``method`` calibrated at ``spec``, its noise times ``noise_scale``: one per release
    the method audits (its ``release_trials``), each against the least noise the run's claimed epsilon allows."""
    check_mechanism_arguments(method, trials=trials, noise_scale=noise_scale)
    m, claimed = _calibrated(method, spec, dict(options or {}), noise_scale)
    adjacency = m.claim().adjacency
    return [audit_release(t, method=method, run_epsilon=claimed.epsilon, delta=spec.delta, noise_scale=noise_scale,
                          adjacency=adjacency, beta=beta)
            for t in m.release_trials(claimed, trials=trials, seed=seed, progress=progress)]


def check_mechanism_arguments(method: str, *, trials: int, noise_scale: float) -> None:
    """The method has a mechanism audit, the trials and the noise scale are in range: else one line."""
    audited = audited_methods()
    if method not in audited:
        raise ConfigError(f"--method {method!r} has no mechanism audit: choose one of {', '.join(audited)} (a "
                          "method has one when it implements release_trials)")
    if not (isinstance(trials, int) and 1000 <= trials <= 10**8):
        raise ConfigError(f"--trials {trials!r} is not allowed: give an integer in [1000, 1e8] (trials per world)")
    if not (isinstance(noise_scale, (int, float)) and 0 < noise_scale <= 10):
        raise ConfigError(f"--noise-scale {noise_scale!r} is not allowed: give a number in (0, 10] (1: the "
                          "calibrated noise; 0.5 halves it, which the audit must refute)")


# --- the table and the store -----------------------------------------------------------------------------------
COLUMNS = ["dataset", "preset", "method", "options", "release", "spec_epsilon", "run_epsilon", "delta",
           "noise_scale", "trials_per_world", "seed", "noise_allowed", "mu_allowed", "mu_lb", "tightness",
           "epsilon_allowed", "epsilon_free", "epsilon_gaussian", "verdict"]
#: a summary row per audited release and noise, over the seeds
GROUP = ["dataset", "preset", "method", "options", "release", "spec_epsilon", "noise_scale"]


def line(row: dict[str, Any]) -> str:
    """One audit in one line, as the CLI prints it."""
    return (f"{row['method']:<21} eps {row['spec_epsilon']:g} x{row['noise_scale']:g} noise seed {row['seed']} "
            f"{row['release']}: mu_lb {row['mu_lb']:.4f} / mu_allowed {row['mu_allowed']:.4f} = {row['tightness']:.3f} "
            f"(the claim's epsilon {row['run_epsilon']:.3f} by {row['accountant']}); one release's epsilon: "
            f"family-free >= {row['epsilon_free']:.3f}, if Gaussian >= {row['epsilon_gaussian']:.3f}, allowed "
            f"{row['epsilon_allowed']:.3f} -> {row['verdict']}")


def summary(rows: list[dict[str, Any]]):
    """Per release and noise: the seeds, the median of mu_lb / mu_allowed (min and max), and the verdicts counted."""

    df = pd.DataFrame(rows)
    out = []
    for key, g in df.groupby(GROUP, sort=False):
        t = g["tightness"].astype(float)
        verdicts = g["verdict"].str.replace(r"tight to .*", "tight", regex=True).str.replace(r"not refuted.*",
                                                                                            "not refuted", regex=True)
        out.append({**dict(zip(GROUP, key)), "seeds": len(g), "mu_allowed": f"{g['mu_allowed'].iloc[0]:.4f}",
                    "median mu_lb": f"{g['mu_lb'].median():.4f}",
                    "median mu_lb / mu_allowed (min-max)": f"{t.median():.3f} ({t.min():.3f}-{t.max():.3f})",
                    "verdicts": ", ".join(f"{v} x{n}" for v, n in verdicts.value_counts().items())})
    return pd.DataFrame(out)


def _markdown(df) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def write_table(rows: list[dict[str, Any]], folder: str, *, append: bool = False) -> None:
    """In ``folder``: mechanism_audits.csv (every field of every audit), mechanism_audits.md (the columns a reader
    needs) and mechanism_summary.md (per release and noise over the seeds); ``append`` keeps the rows already there
    that this run did not measure again (refused where those rows are the earlier audit's, which took the claim from
    the code's own noise)."""

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    if append and (out / "mechanism_audits.csv").exists():  # the earlier rows, less those this run measured again
        old = pd.read_csv(out / "mechanism_audits.csv", keep_default_na=False)
        if "mu_allowed" not in old.columns:
            raise ConfigError(f"--append is not allowed into {out}: its mechanism_audits.csv is the earlier audit's "
                              "(the claim's mu from the code's own noise); write to a new folder")
        key = [*GROUP, "seed"]
        again = old[key].astype(str).agg("|".join, axis=1).isin(set(df[key].astype(str).agg("|".join, axis=1)))
        df = pd.concat([old[~again], df], ignore_index=True)
    df.to_csv(out / "mechanism_audits.csv", index=False)
    rows = df.to_dict("records")
    shown = df[COLUMNS].copy()
    for col in ("noise_allowed", "mu_allowed", "mu_lb"):
        shown[col] = [f"{v:.4f}" for v in shown[col]]
    for col in ("run_epsilon", "epsilon_allowed", "epsilon_free", "epsilon_gaussian", "tightness"):
        shown[col] = [f"{v:.3f}" for v in shown[col]]
    (out / "mechanism_audits.md").write_text(_markdown(shown))
    (out / "mechanism_summary.md").write_text(_markdown(summary(rows)))


class MechanismStore:
    """Each mechanism audit as one FINISHED MLflow run (kind ``mechanism_audit``) beside the runs it concerns: the
    leaderboard joins it to the rows of the same method, (epsilon, delta, q, T) and neighbouring relation."""

    def __init__(self, tracking_uri: str | None, experiment: str):
        open_store(tracking_uri, experiment)  # refused in one line, and made, before any audit runs
        self.tracking_uri, self.experiment = tracking_uri, experiment

    def log(self, row: dict[str, Any], config) -> str:
        tags = {names.TAG_KIND: names.KIND_MECHANISM_AUDIT, names.TAG_METHOD: row["method"],
                names.TAG_DATASET: row["dataset"], names.TAG_PRESET: row["preset"],
                names.TAG_PRIVACY_ADJACENCY: row["adjacency"], names.TAG_PRIVACY_RELATION: relation_key(row["adjacency"]),
                names.TAG_MECHANISM_RELEASE: row["release"],
                names.TAG_MECHANISM_VERDICT: row["verdict"]}
        params = {names.PARAM_EPSILON: row["spec_epsilon"], names.PARAM_DELTA: row["delta"],
                  names.PARAM_SAMPLING_RATE: row["sampling_rate"], names.PARAM_STEPS: row["steps"],
                  names.PARAM_NOISE_SCALE: row["noise_scale"], names.PARAM_MECHANISM_TRIALS: row["trials_per_world"]}
        metrics = {names.METRIC_MECHANISM.format(k): float(row[k]) for k in (
            "noise_allowed", "mu_allowed", "mu_lb", "mu_ceiling", "epsilon_allowed", "epsilon_gaussian", "epsilon_free",
            "tightness")}
        return log_finished_run(self.tracking_uri, self.experiment, tags=tags, params=params, metrics=metrics,
                                name=f"mechanism-audit {row['method']} eps={row['spec_epsilon']:g} x{row['noise_scale']:g}")


__all__ = ["MechanismAudit", "allowed_noise", "audit_mechanism", "audit_release", "bounds", "gdp_epsilon", "gdp_mu"]
