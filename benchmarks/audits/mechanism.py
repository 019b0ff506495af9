"""Audits at the mechanism: a private method's own release code run on a worst-case pair of neighbours,
many trials, an empirical epsilon set beside the claim of that release (THEORY.md, "Auditing", "At the mechanism").

A one-run audit of a trained model can only refute; it cannot show that an implementation adds no more noise than
its accountant assumes (a DP-SGD with twice the noise reads 0.00 like the right one). Here the release is isolated:
each method that has a mechanism audit implements ``release_trials`` (``inputdp.methods.base``), which runs its own
code on a pair it constructs and returns a score per trial in each world; this module names no method.

Every audited release is a Gaussian mechanism whose claim is mu-GDP (Dong, Roth & Su 2022) with mu = sensitivity /
noise std. From the two worlds' scores, at each threshold of a grid fixed before the trials, the Clopper-Pearson upper
bounds of the false-positive and false-negative rates give mu_lb = Phi^-1(1 - FPR+) - Phi^-1(FNR+) (corrected for the
grid); a mu-GDP mechanism has mu >= mu_lb with confidence 1 - beta, so mu_lb > mu_claim refutes the claim. The
empirical epsilon is the epsilon of mu_lb-GDP at the run's delta (the Gaussian family's conversion, as Nasr et al.
2023), set beside the claimed release's epsilon: "tight to X" is their ratio. The family-free bound
log((1 - delta - FNR+) / FPR+), valid for any mechanism, is shown too.
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
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import METHODS as METHOD_REGISTRY
from inputdp.methods import create_method
from inputdp.methods.base import AUDIT_THRESHOLDS, Method

from ..tracking import open_store
from .fdp_bound import gdp_epsilon
from .one_run import BETA

#: the fraction of the claimed release's epsilon the empirical epsilon must reach for "tight"
TIGHT_FRACTION = 0.7
THRESHOLDS = AUDIT_THRESHOLDS
DEFAULT_TRIALS = 400_000


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """The one-sided (1 - alpha) upper bound of a binomial rate from k successes in n."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


@dataclass
class Bound:
    mu_lb: float
    epsilon_free: float
    threshold: float
    fpr: float
    fnr: float


def bounds(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray, *, delta: float,
           beta: float = BETA) -> Bound:
    """The largest mu_lb (and family-free epsilon) over ``thresholds``, each rate bounded at beta / (2 x tests):
    "in" is guessed where the score is >= the threshold."""
    alpha = beta / (2 * len(thresholds))
    n_in, n_out = len(scores_in), len(scores_out)
    best = Bound(0.0, 0.0, float("nan"), float("nan"), float("nan"))
    s_in, s_out = np.sort(scores_in), np.sort(scores_out)
    for t in thresholds:
        fp = n_out - int(np.searchsorted(s_out, t, side="left"))  # out scores >= t
        fn = int(np.searchsorted(s_in, t, side="left"))  # in scores < t
        fpr, fnr = clopper_pearson_upper(fp, n_out, alpha), clopper_pearson_upper(fn, n_in, alpha)
        mu = float(stats.norm.isf(fpr) - stats.norm.ppf(fnr)) if 0 < fpr < 1 and 0 < fnr < 1 else 0.0
        free = max(0.0, math.log(max(1.0 - delta - fnr, 1e-300) / fpr),
                   math.log(max(1.0 - delta - fpr, 1e-300) / fnr))
        if mu > best.mu_lb or (best.mu_lb == 0 and free > best.epsilon_free):
            best = Bound(max(mu, 0.0), free, float(t), fp / n_out, fn / n_in)
        best.epsilon_free = max(best.epsilon_free, free)
    return best


@dataclass
class MechanismAudit:
    method: str
    release: str
    relation: str
    trials_per_world: int
    delta: float
    mu_claim: float
    mu_lb: float
    epsilon_claim: float  # the claimed release's epsilon at delta (one step / one release / one query)
    epsilon_empirical: float  # mu_lb-GDP's epsilon at delta
    epsilon_free: float  # the family-free lower bound
    run_epsilon: float  # the run's composed claim, for reference
    noise_scale: float  # 1: the calibrated noise; below 1, the implementation was given less than its claim
    adjacency: str = ""  # the claim's neighbouring relation, as the run's privacy.adjacency tag writes it

    @property
    def tightness(self) -> float:
        return self.epsilon_empirical / self.epsilon_claim if self.epsilon_claim > 0 else float("nan")

    @property
    def refuted(self) -> bool:
        return self.mu_lb > self.mu_claim * (1 + 1e-9) or self.epsilon_free > self.epsilon_claim * (1 + 1e-9)

    @property
    def verdict(self) -> str:
        if self.refuted:
            return "refuted"
        if self.tightness >= TIGHT_FRACTION:
            return f"tight to {self.tightness:.2f}"
        return f"not tight ({self.tightness:.2f} of the claim)"

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "tightness": self.tightness, "verdict": self.verdict, "refuted": self.refuted}


def _calibrated(method: str, spec: PrivacySpec, options: dict[str, Any], noise_scale: float):
    """The method calibrated for ``spec``, then given ``noise_scale`` times its noise (the claim kept)."""
    m = create_method(method, options)
    cal = m.calibrate(spec)
    if noise_scale != 1.0:
        noise = {k: v * noise_scale for k, v in cal.noise.items()}
        details = {k: (v * noise_scale if k.startswith("noise_multiplier") else v) for k, v in cal.details.items()}
        m.calibration = replace(cal, noise=noise, details=details)
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


def audit_mechanism(method: str, spec: PrivacySpec, options: dict[str, Any] | None = None, *,
                    trials: int = DEFAULT_TRIALS, noise_scale: float = 1.0, beta: float = BETA, seed: int = 0,
                    progress: Callable[[str], None] | None = None) -> list[MechanismAudit]:
    """The mechanism audits of ``method`` calibrated at ``spec``, its noise times ``noise_scale``: one per release
    the method audits (its ``release_trials``)."""
    check_mechanism_arguments(method, trials=trials, noise_scale=noise_scale)
    m, claimed = _calibrated(method, spec, dict(options or {}), noise_scale)
    adjacency = m.claim().adjacency
    out = []
    for t in m.release_trials(claimed, trials=trials, seed=seed, progress=progress):
        b = bounds(np.asarray(t.scores_in), np.asarray(t.scores_out), np.asarray(t.thresholds), delta=spec.delta,
                   beta=beta)
        out.append(MechanismAudit(
            method=method, release=t.release, relation=t.relation,
            trials_per_world=min(len(t.scores_in), len(t.scores_out)), delta=spec.delta, mu_claim=t.mu_claim,
            mu_lb=b.mu_lb, epsilon_claim=gdp_epsilon(t.mu_claim, spec.delta),
            epsilon_empirical=gdp_epsilon(b.mu_lb, spec.delta), epsilon_free=b.epsilon_free,
            run_epsilon=claimed.epsilon, noise_scale=noise_scale, adjacency=adjacency))
    return out


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
           "noise_scale", "trials_per_world", "seed", "mu_claim", "mu_lb", "epsilon_claim", "epsilon_empirical",
           "epsilon_free", "tightness", "verdict"]
#: a summary row per audited release and noise, over the seeds
GROUP = ["dataset", "preset", "method", "options", "release", "spec_epsilon", "noise_scale"]


def line(row: dict[str, Any]) -> str:
    """One audit in one line, as the CLI prints it."""
    return (f"{row['method']:<21} eps {row['spec_epsilon']:g} x{row['noise_scale']:g} noise seed {row['seed']} "
            f"{row['release']}: mu_lb {row['mu_lb']:.4f} of claimed {row['mu_claim']:.4f}, epsilon "
            f"{row['epsilon_empirical']:.3f} of {row['epsilon_claim']:.3f} (family-free {row['epsilon_free']:.3f}) "
            f"-> {row['verdict']}")


def summary(rows: list[dict[str, Any]]):
    """Per release and noise: the seeds, the median tightness (min and max), and the verdicts counted."""

    df = pd.DataFrame(rows)
    out = []
    for key, g in df.groupby(GROUP, sort=False):
        t = g["tightness"].astype(float)
        verdicts = g["verdict"].str.replace(r"tight to .*", "tight", regex=True).str.replace(r"not tight.*",
                                                                                            "not tight", regex=True)
        out.append({**dict(zip(GROUP, key)), "seeds": len(g), "epsilon_claim": f"{g['epsilon_claim'].iloc[0]:.3f}",
                    "median epsilon_empirical": f"{g['epsilon_empirical'].median():.3f}",
                    "median tightness (min-max)": f"{t.median():.3f} ({t.min():.3f}-{t.max():.3f})",
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
    that this run did not measure again."""

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    if append and (out / "mechanism_audits.csv").exists():  # the earlier rows, less those this run measured again
        old = pd.read_csv(out / "mechanism_audits.csv", keep_default_na=False)
        key = [*GROUP, "seed"]
        again = old[key].astype(str).agg("|".join, axis=1).isin(set(df[key].astype(str).agg("|".join, axis=1)))
        df = pd.concat([old[~again], df], ignore_index=True)
    df.to_csv(out / "mechanism_audits.csv", index=False)
    rows = df.to_dict("records")
    shown = df[COLUMNS].copy()
    for col in ("mu_claim", "mu_lb"):
        shown[col] = [f"{v:.4f}" for v in shown[col]]
    for col in ("run_epsilon", "epsilon_claim", "epsilon_empirical", "epsilon_free", "tightness"):
        shown[col] = [f"{v:.3f}" for v in shown[col]]
    (out / "mechanism_audits.md").write_text(_markdown(shown))
    (out / "mechanism_summary.md").write_text(_markdown(summary(rows)))


class MechanismStore:
    """Each mechanism audit as one FINISHED MLflow run (kind ``mechanism_audit``) beside the runs it concerns: the
    leaderboard joins it to the rows of the same method, (epsilon, delta, q, T) and neighbouring relation."""

    def __init__(self, tracking_uri: str | None, experiment: str):
        self.client, self.experiment_id = open_store(tracking_uri, experiment)

    def log(self, row: dict[str, Any], config) -> str:
        tags = {names.TAG_KIND: names.KIND_MECHANISM_AUDIT, names.TAG_METHOD: row["method"],
                names.TAG_DATASET: row["dataset"], names.TAG_PRESET: row["preset"],
                names.TAG_PRIVACY_ADJACENCY: row["adjacency"], names.TAG_MECHANISM_RELEASE: row["release"],
                names.TAG_MECHANISM_VERDICT: row["verdict"]}
        run = self.client.create_run(self.experiment_id, run_name=f"mechanism-audit {row['method']} "
                                     f"eps={row['spec_epsilon']:g} x{row['noise_scale']:g}", tags=tags)
        rid = run.info.run_id
        for k, v in {names.PARAM_EPSILON: row["spec_epsilon"], names.PARAM_DELTA: row["delta"],
                     names.PARAM_SAMPLING_RATE: row["sampling_rate"], names.PARAM_STEPS: row["steps"],
                     names.PARAM_NOISE_SCALE: row["noise_scale"],
                     names.PARAM_MECHANISM_TRIALS: row["trials_per_world"]}.items():
            self.client.log_param(rid, k, str(v))
        for k in ("mu_claim", "mu_lb", "epsilon_claim", "epsilon_empirical", "epsilon_free", "tightness"):
            if math.isfinite(row[k]):
                self.client.log_metric(rid, names.METRIC_MECHANISM.format(k), float(row[k]))
        self.client.set_terminated(rid, "FINISHED")
        return rid


__all__ = ["MechanismAudit", "audit_mechanism", "bounds", "gdp_epsilon"]
