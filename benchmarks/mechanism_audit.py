"""Audits at the mechanism: each private method's own release code run on a worst-case pair, many trials, an
empirical epsilon set beside the claim of that release (THEORY.md, "Auditing at the mechanism").

A one-run audit of a trained model can only refute; it cannot show that an implementation adds no more noise than
its accountant assumes (a DP-SGD with twice the noise reads 0.00 like the right one). Here the release is isolated:

- **dpsgd**: the method's own ``prepare`` and ``train_step`` (Opacus' per-example gradients and DPOptimizer, or the
  suite's book-keeping optimizer) on a linear model whose inputs are scaled basis vectors, so that each canary's
  clipped gradient is a Dirac of norm exactly C in a column of the weight that no other example touches (Nasr et
  al. 2023, "Tight auditing"): each column is one independent trial of one step's Gaussian mechanism, with the
  canary present and absent (add/remove) or replaced by its negation (one input replaced, label kept).
- **dp_least_squares**: ``noisy_statistics`` on rows each in its own pair of coordinates, x against x' at the angle
  that maximises the shift of (X^T X, X^T Y) in units of its noise.
- **feature_perturbation**: ``noisy_features`` on x = C e_1 against x' = -C e_1.
- **pate**: the threshold check and the GNMax answer of ``aggregators`` on vote histograms that one teacher's vote
  moves across the decision boundary.

Every release is a Gaussian mechanism whose claim is mu-GDP (Dong, Roth & Su 2022) with mu = sensitivity / noise
std. From the two worlds' scores, at each threshold of a grid fixed before the trials, the Clopper-Pearson upper
bounds of the false-positive and false-negative rates give mu_lb = Phi^-1(1 - FPR+) - Phi^-1(FNR+) (corrected for the
grid); a mu-GDP mechanism has mu >= mu_lb with confidence 1 - beta, so mu_lb > mu_claim refutes the claim. The
empirical epsilon is the epsilon of mu_lb-GDP at the run's delta (the Gaussian family's conversion, as Nasr et al.),
set beside the claimed release's epsilon: "tight to X" is their ratio. The family-free bound log((1 - delta - FNR+) /
FPR+), valid for any mechanism, is shown too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import nn

from inputdp.core.claims import ADD_REMOVE, REPLACE_INPUT
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import create_method
from inputdp.methods.accounting.one_release import gaussian_release_epsilon
from inputdp.methods.base import TrainingSetup

from .audit import BETA

#: the fraction of the claimed release's epsilon the empirical epsilon must reach for "tight"
TIGHT_FRACTION = 0.7
#: the methods with a mechanism audit
METHODS = ("dpsgd", "dp_least_squares", "feature_perturbation", "pate")
#: thresholds, in units of the claimed shift mu: fixed before any trial (one test each, Bonferroni)
THRESHOLDS = tuple(np.linspace(-0.5, 1.5, 9))
DEFAULT_TRIALS = 400_000


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """The one-sided (1 - alpha) upper bound of a binomial rate from k successes in n."""
    return 1.0 if k >= n else float(stats.beta.ppf(1.0 - alpha, k + 1, n - k))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of mu-GDP at delta (mu-GDP is the Gaussian mechanism of sensitivity 1 and noise 1/mu)."""
    return 0.0 if mu <= 0 else gaussian_release_epsilon(1.0 / mu, delta)


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


def _result(method: str, release: str, relation: str, s_in: np.ndarray, s_out: np.ndarray, *, mu_claim: float,
            delta: float, run_epsilon: float, noise_scale: float, beta: float, thresholds=None,
            adjacency: str = "") -> MechanismAudit:
    grid = np.asarray(THRESHOLDS) * mu_claim if thresholds is None else np.asarray(thresholds)
    b = bounds(s_in, s_out, grid, delta=delta, beta=beta)
    return MechanismAudit(method=method, release=release, relation=relation, trials_per_world=min(len(s_in), len(s_out)),
                          delta=delta, mu_claim=mu_claim, mu_lb=b.mu_lb, epsilon_claim=gdp_epsilon(mu_claim, delta),
                          epsilon_empirical=gdp_epsilon(b.mu_lb, delta), epsilon_free=b.epsilon_free,
                          run_epsilon=run_epsilon, noise_scale=noise_scale, adjacency=adjacency)


def _calibrated(method: str, spec: PrivacySpec, options: dict[str, Any], noise_scale: float):
    """The method calibrated for ``spec``; its noise then multiplied by ``noise_scale`` (the claim kept)."""
    m = create_method(method, options)
    cal = m.calibrate(spec)
    if noise_scale != 1.0:
        from dataclasses import replace

        noise = {k: v * noise_scale for k, v in cal.noise.items()}
        details = {k: (v * noise_scale if k.startswith("noise_multiplier") else v) for k, v in cal.details.items()}
        m.calibration = replace(cal, noise=noise, details=details)
    return m, cal


# --- DP-SGD: a Dirac gradient per canary, one column of the weight each ----------------------------------------
def audit_dpsgd(spec: PrivacySpec, options: dict[str, Any], *, trials: int, noise_scale: float = 1.0,
                beta: float = BETA, seed: int = 0, columns: int = 2000,
                progress: Callable[[str], None] | None = None) -> MechanismAudit:
    """One step of the method's own DP-SGD per trial: ``columns`` canaries a step (half of the columns hold the
    canary in its world, half the other world), the step's parameter change read back as the release."""
    method, cal = _calibrated("dpsgd", spec, options, noise_scale)
    relation = method.options["adjacency"]
    clip = float(method.options["max_grad_norm"])
    torch.manual_seed(seed)
    half = columns // 2
    model = nn.Sequential(nn.Linear(columns, 2, bias=False))
    nn.init.zeros_(model[0].weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    expected = half  # the expected batch size the optimizer divides by: q x train_size
    setup = TrainingSetup(spec=spec, train_size=max(1, round(expected / spec.sampling_rate)), num_classes=2,
                          device="cpu", grad_sample_mode="hooks")
    model, optimizer = method.begin(model, optimizer, setup)
    expected = optimizer.expected_batch_size
    weight = method.unwrap(model)[0].weight
    scale = 100.0 * clip  # the input's norm: its gradient (norm scale x 0.71 at uniform logits) is clipped to C
    # label 0 at uniform logits: d loss / d W[:, j] = x_j (p - e_0) = x_j (-1/2, 1/2); the unit direction of -grad
    direction = torch.tensor([1.0, -1.0]) / math.sqrt(2.0)
    s_in, s_out = [], []
    steps = max(1, math.ceil(trials / half))
    for step in range(steps):
        world = torch.zeros(columns, dtype=torch.bool)
        world[torch.randperm(columns)[:half]] = True  # the columns whose canary is in (or not replaced)
        cols = torch.arange(columns)
        if relation == REPLACE_INPUT:  # every column holds one example: x_j, or its replacement -x_j
            rows, signs = cols, torch.where(world, 1.0, -1.0)
        else:  # the canary present, or absent
            rows, signs = cols[world], torch.ones(int(world.sum()))
        x = torch.zeros(len(rows), columns)
        x[torch.arange(len(rows)), rows] = signs * scale
        y = torch.zeros(len(rows), dtype=torch.long)
        with torch.no_grad():
            weight.zero_()
        method.train_step(model, optimizer, x, y)
        with torch.no_grad():
            release = weight.detach().T @ direction * expected / clip  # W = -grad: in units of C, N(shift, sigma^2)
            weight.zero_()
        s_in.append(release[world].numpy())
        s_out.append(release[~world].numpy())
        if progress and (step + 1) % max(1, steps // 10) == 0:
            progress(f"dpsgd: step {step + 1}/{steps}")
    sigma = cal.noise["noise_multiplier"]
    shift = 2.0 if relation == REPLACE_INPUT else 1.0
    s_in_a, s_out_a = np.concatenate(s_in), np.concatenate(s_out)
    if relation == REPLACE_INPUT:  # centre the pair at 0: x_j gives +1, -x_j gives -1
        s_in_a, s_out_a = s_in_a + 1.0, s_out_a + 1.0
    return _result("dpsgd", f"one step (grad_sample_mode={method.mode})", relation, s_in_a, s_out_a,
                   mu_claim=shift / sigma, delta=spec.delta, run_epsilon=cal.epsilon, noise_scale=noise_scale,
                   beta=beta, thresholds=np.asarray(THRESHOLDS) * shift,
                   adjacency=method.claim().adjacency)


# --- the one-release methods ---------------------------------------------------------------------------------
def _worst_angle(s_a: float, s_b: float, d_a: float, d_b: float, clip: float) -> tuple[float, float]:
    """(cos theta, mu) of the pair x, x' of norm C at angle theta that moves (triu(X^T X), X^T Y) the most in units
    of its noise (one input replaced, label kept): |triu(xx^T - x'x'^T)|^2 = C^4 (1 - c^2)(2 - c^2) and
    |x - x'|^2 = 2 C^2 (1 - c)."""
    c = np.linspace(-1.0, 1.0, 20001)
    mu2 = clip**4 * (1 - c**2) * (2 - c**2) / (s_a * d_a) ** 2 + 2 * clip**2 * (1 - c) / (s_b * d_b) ** 2
    i = int(np.argmax(mu2))
    return float(c[i]), float(math.sqrt(mu2[i]))


def audit_dp_least_squares(spec: PrivacySpec, options: dict[str, Any], *, trials: int, noise_scale: float = 1.0,
                           beta: float = BETA, seed: int = 0, rows: int = 400,
                           progress: Callable[[str], None] | None = None) -> MechanismAudit:
    """The method's ``noisy_statistics`` on ``rows`` rows, row j in coordinates (2j, 2j + 1), label 0: x_j = C e_2j
    in one world, its replacement x'_j (or no row, add/remove) in the other; the score is the likelihood-ratio
    projection of the release on the pair's difference."""
    from inputdp.methods.dp_least_squares import sensitivities

    method, cal = _calibrated("dp_least_squares", spec, options, noise_scale)
    relation, clip = method.options["adjacency"], float(method.options["clip"])
    d_a, d_b = sensitivities(clip, relation)
    s_a, s_b = (cal.details["noise_multiplier_xtx"], cal.details["noise_multiplier_xty"])  # the claimed noise
    if relation == REPLACE_INPUT:
        cos, mu_claim_pair = _worst_angle(s_a, s_b, d_a, d_b, clip)
    else:
        cos, mu_claim_pair = 1.0, math.sqrt((clip**2 / (s_a * d_a)) ** 2 + (clip / (s_b * d_b)) ** 2)
    sin = math.sqrt(max(0.0, 1 - cos**2))
    g = torch.Generator().manual_seed(seed)
    d = 2 * rows
    j = torch.arange(rows)
    s_in, s_out = [], []
    calls = max(1, math.ceil(trials / (rows // 2)))
    for call in range(calls):
        world = torch.zeros(rows, dtype=torch.bool)
        world[torch.randperm(rows, generator=g)[: rows // 2]] = True
        x = torch.zeros(rows, d, dtype=torch.float64)
        x[j, 2 * j] = clip
        if relation == REPLACE_INPUT:
            other = ~world
            x[other, 2 * j[other]] = clip * cos
            x[other, 2 * j[other] + 1] = clip * sin
            keep = torch.ones(rows, dtype=torch.bool)
        else:
            keep = world
        a, b = method.noisy_statistics(x[keep], torch.zeros(int(keep.sum()), dtype=torch.long), 1, g)
        # the score: sum over the pair's entries of (release - mean of the "out" world) x (mean difference) / var
        std_a, std_b = s_a * d_a, s_b * d_b
        e, f = 2 * j, 2 * j + 1
        if relation == REPLACE_INPUT:
            mean_out = (clip**2 * cos**2, clip**2 * cos * sin, clip**2 * sin**2, clip * cos, clip * sin)
        else:
            mean_out = (0.0, 0.0, 0.0, 0.0, 0.0)
        mean_in = (clip**2, 0.0, 0.0, clip, 0.0)
        entries = (a[e, e], a[e, f], a[f, f], b[e, 0], b[f, 0])
        stds = (std_a, std_a, std_a, std_b, std_b)
        score = sum((r - mo) * (mi - mo) / s**2 for r, mo, mi, s in zip(entries, mean_out, mean_in, stds))
        score = score.numpy() / mu_claim_pair  # out: N(0, (mu_true / mu_claim)^2 ...) -> in units of mu_claim
        s_in.append(score[world.numpy()])
        s_out.append(score[~world.numpy()])
        if progress and (call + 1) % max(1, calls // 10) == 0:
            progress(f"dp_least_squares: release {call + 1}/{calls}")
    sigma = cal.noise["noise_multiplier"]
    return _result("dp_least_squares", "one release of (X^T X, X^T Y)", relation, np.concatenate(s_in),
                   np.concatenate(s_out), mu_claim=1.0 / sigma, delta=spec.delta, run_epsilon=cal.epsilon,
                   noise_scale=noise_scale, beta=beta, thresholds=np.asarray(THRESHOLDS) * mu_claim_pair,
                   adjacency=method.claim().adjacency)


def audit_feature_perturbation(spec: PrivacySpec, options: dict[str, Any], *, trials: int, noise_scale: float = 1.0,
                               beta: float = BETA, seed: int = 0,
                               progress: Callable[[str], None] | None = None) -> MechanismAudit:
    """The method's ``noisy_features`` on x = C e_1 (one world) and x' = -C e_1 (the other), one trial a row."""
    method, cal = _calibrated("feature_perturbation", spec, options, noise_scale)
    clip = float(method.options["clip"])
    g = torch.Generator().manual_seed(seed)
    x_in = torch.full((trials, 1), clip)
    r_in = method.noisy_features(x_in, g)[:, 0].numpy()
    r_out = method.noisy_features(-x_in, g)[:, 0].numpy()
    sigma = cal.noise["noise_multiplier"]
    # (r + C) / 2C: out N(0, sigma^2), in N(1, sigma^2) under the claim
    return _result("feature_perturbation", "one example's noisy features", REPLACE_INPUT, (r_in + clip) / (2 * clip),
                   (r_out + clip) / (2 * clip), mu_claim=1.0 / sigma, delta=spec.delta, run_epsilon=cal.epsilon,
                   noise_scale=noise_scale, beta=beta, thresholds=np.asarray(THRESHOLDS),
                   adjacency=method.claim().adjacency)


def audit_pate(spec: PrivacySpec, options: dict[str, Any], *, trials: int, noise_scale: float = 1.0,
               beta: float = BETA, seed: int = 0,
               progress: Callable[[str], None] | None = None) -> list[MechanismAudit]:
    """The GNMax answer and the threshold check of ``aggregators``, each on the vote histograms that k teachers'
    votes move across its decision boundary: (n + k, n) against (n, n + k) for the answer (each vote moved shifts
    the difference by 2, a shift of 2k against noise sigma2 sqrt 2: the claim of a group of k is k sqrt 2 / sigma2),
    a top count T + k/2 against T - k/2 for the check (k / sigma1). One vote moved (k = 1) is the claim's own pair,
    but at PATE's noise one vote shifts the answer's odds by about 1 / sigma2 (a few thousandths): no number of
    trials this audit can afford resolves it, so k is the group that makes the claimed mu about 1 (said in the
    release's name). The Gaussian's claim for a group of k is exactly k times one's, so the noise itself is
    audited; one vote's sensitivity is the histogram's structure (each teacher casts one vote)."""
    from inputdp.methods.pate import aggregators

    method, cal = _calibrated("pate", spec, options, noise_scale)
    adjacency = method.claim().adjacency
    rng = np.random.default_rng(seed)
    sigma2, claimed2 = method.calibration.noise["sigma2"], cal.noise["sigma2"]
    k = max(1, round(claimed2 / math.sqrt(2.0)))
    n = 10.0 * claimed2 + k  # far from 0: the answer is between the two classes only
    a_in = aggregators.gnmax(np.tile([n + k, n], (trials, 1)), sigma2, rng)
    a_out = aggregators.gnmax(np.tile([n, n + k], (trials, 1)), sigma2, rng)
    out = [_result("pate", f"one GNMax answer, {k} teachers' votes moved", "group of k votes",
                   (a_in == 0).astype(float), (a_out == 0).astype(float), mu_claim=k * math.sqrt(2.0) / claimed2,
                   delta=spec.delta, run_epsilon=cal.epsilon, noise_scale=noise_scale, beta=beta, thresholds=[0.5],
                   adjacency=adjacency)]
    if "sigma1" in cal.noise:
        threshold = float(method.options["threshold"])
        sigma1, claimed1 = method.calibration.noise["sigma1"], cal.noise["sigma1"]
        k1 = max(1, round(claimed1))
        _, p_in = aggregators.confident_gnmax(np.tile([threshold + k1 / 2, 0.0], (trials, 1)), threshold, sigma1,
                                              sigma2, rng)
        _, p_out = aggregators.confident_gnmax(np.tile([threshold - k1 / 2, 0.0], (trials, 1)), threshold, sigma1,
                                               sigma2, rng)
        out.append(_result("pate", f"one threshold check, {k1} teachers' votes moved", "group of k votes",
                           p_in.astype(float), p_out.astype(float), mu_claim=k1 / claimed1, delta=spec.delta,
                           run_epsilon=cal.epsilon, noise_scale=noise_scale, beta=beta, thresholds=[0.5],
                           adjacency=adjacency))
    return out


def audit_mechanism(method: str, spec: PrivacySpec, options: dict[str, Any] | None = None, *,
                    trials: int = DEFAULT_TRIALS, noise_scale: float = 1.0, beta: float = BETA, seed: int = 0,
                    progress: Callable[[str], None] | None = None) -> list[MechanismAudit]:
    """The mechanism audits of ``method`` calibrated at ``spec`` (its noise times ``noise_scale``)."""
    check_mechanism_arguments(method, trials=trials, noise_scale=noise_scale)
    options = dict(options or {})
    kw = {"trials": trials, "noise_scale": noise_scale, "beta": beta, "seed": seed, "progress": progress}
    if method == "dpsgd":
        return [audit_dpsgd(spec, options, **kw)]
    if method == "dp_least_squares":
        return [audit_dp_least_squares(spec, options, **kw)]
    if method == "feature_perturbation":
        return [audit_feature_perturbation(spec, options, **kw)]
    return audit_pate(spec, options, **kw)


def check_mechanism_arguments(method: str, *, trials: int, noise_scale: float) -> None:
    if method not in METHODS:
        raise ConfigError(f"--method {method!r} has no mechanism audit: choose one of {', '.join(METHODS)} (the "
                          "per-example releases of dirichlet_softmax and gaussian_penultimate claim nothing of the "
                          "model; their one-run audits refute them)")
    if not (isinstance(trials, int) and 1000 <= trials <= 10**8):
        raise ConfigError(f"--trials {trials!r} is not allowed: give an integer in [1000, 1e8] (trials per world)")
    if not (isinstance(noise_scale, (int, float)) and 0 < noise_scale <= 10):
        raise ConfigError(f"--noise-scale {noise_scale!r} is not allowed: give a number in (0, 10] (1: the "
                          "calibrated noise; 0.5 halves it, which the audit must refute)")


# --- the table and the store -----------------------------------------------------------------------------------
COLUMNS = ["dataset", "preset", "method", "release", "relation", "epsilon_target", "run_epsilon", "delta",
           "noise_scale", "trials_per_world", "mu_claim", "mu_lb", "epsilon_claim", "epsilon_empirical",
           "epsilon_free", "tightness", "verdict"]


def line(row: dict[str, Any]) -> str:
    """One audit in one line, as the CLI prints it."""
    return (f"{row['method']:<21} eps {row['epsilon_target']:g} x{row['noise_scale']:g} noise  {row['release']}: "
            f"mu_lb {row['mu_lb']:.4f} of claimed {row['mu_claim']:.4f}, epsilon {row['epsilon_empirical']:.3f} "
            f"of {row['epsilon_claim']:.3f} (family-free {row['epsilon_free']:.3f}) -> {row['verdict']}")


def write_table(rows: list[dict[str, Any]], folder: str) -> None:
    """mechanism_audits.csv (every field) and mechanism_audits.md (the columns a reader needs) in ``folder``."""
    from pathlib import Path

    import pandas as pd

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "mechanism_audits.csv", index=False)
    shown = df[COLUMNS].copy()
    for col in ("mu_claim", "mu_lb"):
        shown[col] = [f"{v:.4f}" for v in shown[col]]
    for col in ("run_epsilon", "epsilon_claim", "epsilon_empirical", "epsilon_free", "tightness"):
        shown[col] = [f"{v:.3f}" for v in shown[col]]
    header = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(str(v) for v in r) + " |\n" for r in shown.itertuples(index=False))
    (out / "mechanism_audits.md").write_text(header + body)


class MechanismStore:
    """Each mechanism audit as one FINISHED MLflow run (kind ``mechanism_audit``) beside the runs it concerns: the
    leaderboard joins it to the rows of the same method, (epsilon, delta, q, T) and neighbouring relation."""

    def __init__(self, tracking_uri: str | None, experiment: str):
        from .tracking import open_store

        self.client, self.experiment_id = open_store(tracking_uri, experiment)

    def log(self, row: dict[str, Any], config) -> str:
        from inputdp.core import names

        tags = {names.TAG_KIND: names.KIND_MECHANISM_AUDIT, names.TAG_METHOD: row["method"],
                names.TAG_DATASET: row["dataset"], names.TAG_PRESET: row["preset"],
                names.TAG_PRIVACY_ADJACENCY: row["adjacency"], names.TAG_MECHANISM_RELEASE: row["release"],
                names.TAG_MECHANISM_VERDICT: row["verdict"]}
        run = self.client.create_run(self.experiment_id, run_name=f"mechanism-audit {row['method']} "
                                     f"eps={row['epsilon_target']:g} x{row['noise_scale']:g}", tags=tags)
        rid = run.info.run_id
        for k, v in {names.PARAM_EPSILON: row["epsilon_target"], names.PARAM_DELTA: row["delta"],
                     names.PARAM_SAMPLING_RATE: row["sampling_rate"], names.PARAM_STEPS: row["steps"],
                     "noise_scale": row["noise_scale"], "trials_per_world": row["trials_per_world"]}.items():
            self.client.log_param(rid, k, str(v))
        for k in ("mu_claim", "mu_lb", "epsilon_claim", "epsilon_empirical", "epsilon_free", "tightness"):
            if math.isfinite(row[k]):
                self.client.log_metric(rid, f"mechanism.{k}", float(row[k]))
        self.client.set_terminated(rid, "FINISHED")
        return rid


__all__ = ["ADD_REMOVE", "REPLACE_INPUT", "MechanismAudit", "audit_mechanism", "bounds", "gdp_epsilon"]
