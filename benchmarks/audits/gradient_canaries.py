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
  of the per-step log-likelihood ratio of "in" against "out" under those mixtures at the *claim's* sigma (what an
  auditor knows; a deliberately broken run's optimizer uses another):
  add/remove: log(1 - q + q exp((2 z - 1) / (2 sigma^2))); replace: that minus log(1 - q + q exp((-2 z - 1) /
  (2 sigma^2)));
- ``last_iterate``: -(theta_T - theta_0), the coordinate's total displacement (an in-canary pushes it down).

The verdict is the claimed-curve test (claimed_curve.py): each canary's coordinate sees only its own clipped
gradient, its own Poisson draws and its own noise, so the m canaries are m independent trials of the claimed
mechanism; a threshold on the likelihood-ratio score, fixed before the run from a simulation of the claimed mechanism
(canary_gradients.rates_for), gives Clopper-Pearson bounds on the false-positive and false-negative rates, tested
against the claim's trade-off curve: refuted, or tight to X (the largest epsilon of the claim's family the data
exclude, over the claim's). Beside it, the assumption-free one-run readings: each score read as Steinke et al.'s game
(k guessed "in", k "out", k on ``GRID_FRACTIONS`` of m) and by the f-DP bound of the same guesses (fdp_bound.py),
every (k, analysis) of a score in one Bonferroni family (the one-run theorem needs no independence). The
likelihood-ratio score's empirical trade-off curve and every canary's coin and scores are kept as tables, so that a
change of analysis re-reads them (``reread``) instead of re-training.
"""

from __future__ import annotations

import math

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
from .canary_gradients import CanaryGradients, CanaryTrace, rates_for
from .claimed_curve import claimed_family
from .gradient_canary_reading import (
    CANARY_KIND,
    GRID_FRACTIONS,
    PRIMARY,
    SCORES,
    ClaimRead,
    GradientCanaryResult,
    canaries_csv,
    count_tests,
    guess_grid,
    log,
    read,
    stored,
    trade_off_csv,
)
from .one_run import BETA, audit_relation, check_no_holdout

__all__ = ["CANARY_KIND", "GRID_FRACTIONS", "PRIMARY", "SCORES", "GradientCanaryResult", "canaries_csv",
           "canary_training_set", "check_canary_rows", "check_gradient_canaries", "count_tests",
           "gradient_canary_audit", "guess_grid", "trade_off_csv"]

#: canary rows in the training data: NaN in every pixel but the first, which holds the canary's index. A run whose
#: method lacks the hook would put NaN through the model and end Diverged, never silently train on them
_MARK = float("nan")


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
                          noise_scale: float = 1.0, record: int = 0,
                          coins: torch.Tensor | None = None,
                          rates: tuple[float, ...] | None = None) -> GradientCanaryResult:
    """Train ``resolved`` (DP-SGD) once with m gradient canaries, each in with probability 1/2 (a seeded coin, or
    ``coins`` where given: a test's), and read their coordinates' iterates. ``noise_scale`` != 1 gives the optimizer
    that multiple of the calibrated sigma while the claim is kept: a deliberately broken run, tagged so in the store.
    ``rates``: the claimed-curve test's false-positive rates (None: chosen now from the claimed mechanism)."""
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
    included = (torch.rand(canaries, generator=torch.Generator().manual_seed(30_000 + config.seed)) < 0.5
                if coins is None else coins.to(torch.bool))
    signs = torch.where(included, 1.0, -1.0 if replaced else 0.0)
    # a model with a fixed frontend (ScatterNet) sees the frontend's features: the canary rows are appended to the
    # features, so their mark reaches DP-SGD's batches as it is (the frontend would map it away)
    data, _ = with_frontend_features(model_for(config, data.info, resolved.norm), data, augmented=False)
    train_data, row_canary = canary_training_set(data, signs, every=relation.excluded == NULL)
    p = prepare(resolved, perf, train_data)
    hook, claimed_sigma = _install(p, canaries, signs, noise_scale)
    claim, rates = _claim_and_rates(p, relation, claimed_sigma, included, rates)
    # the score is the likelihood ratio at the claim's sigma: what the auditor knows, whatever the optimizer uses
    trace = CanaryTrace(hook, p.optimizer, first_row=data.train_size, row_canary=row_canary,
                        sampling_rate=config.privacy.sampling_rate, noise_multiplier=claimed_sigma,
                        replaced=replaced, record=record)
    _tag(tracker, noise_scale)
    params, tags = params_and_tags(p)
    params[names.PARAM_NOISE_SCALE] = noise_scale
    callback = tracker
    try:
        if callback is not None:
            callback.on_start(p.config, params, tags)
        result = train(p, perf, callback, trace)
    except BaseException:
        if callback is not None:
            callback.on_end({}, "KILLED" if interrupted() else "FAILED")
        raise
    try:
        scores = {"likelihood_ratio": stored(trace.llr.numpy()), "last_iterate": stored(-trace.theta.numpy())}
        out = read(claim, included.numpy(), scores, trace.sampled.numpy(), method=config.method, seed=config.seed,
                   test_accuracy=result.metrics[names.METRIC_FINAL_TEST_ACCURACY], beta=beta, rates=rates)
        out.trace, out.run_id = trace, getattr(tracker, "run_id", None)
        if tracker is not None and tracker.run_id is not None:
            log(tracker, out)
    except BaseException:
        if callback is not None:
            callback.on_end(result.metrics, "FAILED")
        raise
    if callback is not None:
        callback.on_end(result.metrics, "FINISHED")
    return out


def _tag(tracker, noise_scale: float) -> None:
    """The audit's tags on its run: its kind, and a deliberately broken run said so."""
    if tracker is None:
        return
    tracker.extra_tags.update({names.TAG_AUDIT_MODE: CANARY_KIND, names.TAG_CANARY_KIND: CANARY_KIND})
    if noise_scale != 1.0:
        tracker.extra_tags[names.TAG_DELIBERATELY_BROKEN] = (
            f"the optimizer's noise is {noise_scale:g} x the calibrated sigma (the claim kept): must be refuted")


def _claim_and_rates(p, relation, claimed_sigma: float, included: torch.Tensor,
                     rates: tuple[float, ...] | None) -> tuple[ClaimRead, tuple[float, ...]]:
    """What the reading needs of the claim, and the claimed-curve test's rates: given, or fixed now from the claimed
    mechanism (before the run; the coins are the audit's design, not data)."""
    privacy = p.config.privacy
    claim = ClaimRead(family=p.method.release_family(privacy), accountant=p.method.accountant,
                      epsilon=privacy.epsilon, delta=privacy.delta, relation=relation.key, design=relation.excluded,
                      sigma=claimed_sigma, sigma_used=float(p.optimizer.noise_multiplier),
                      sampling_rate=privacy.sampling_rate, steps=privacy.steps)
    if rates is None:
        n_in = int(included.sum())
        rates = rates_for(claimed_family(claim.family, claim.accountant, claimed_sigma, claim.delta),
                          sampling_rate=claim.sampling_rate,
                          steps=claim.steps, sigma=claimed_sigma, in_trials=n_in, out_trials=included.numel() - n_in,
                          replaced=relation.excluded == REPLACED)
    return claim, tuple(rates)


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
