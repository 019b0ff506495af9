"""The harness: ``run(resolved) -> RunResult``. It owns seeding, data, sampling, timing, evaluation, the privacy
ledger and the calls to the tracker; the method owns only its algorithm. Top to bottom: ``prepare`` (data, model,
method), ``run`` (the callbacks around ``train``), ``train`` (the epochs of a per-step method, or an own-loop fit),
the epoch's and the run's metrics, the ledger. What a step needs lives in ``steps`` (shared with ``bench speed``
and the audits); the model and its fixed frontend's features in ``frontend``; the load average in
``performance.load``.

A run is a pure function of its :class:`RunConfig` (and seed): on the CPU, the same config gives the same
metrics. :class:`PerfFlags` choose where and how fast it runs, never what it computes privately.
"""

from __future__ import annotations

import copy
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from inputdp.core import names
from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import Diverged
from inputdp.datasets import TensorData, check_holdout, load_tensor_data
from inputdp.methods.base import Calibration, FitContext, PrivacyClaim, TrainingSetup

from .frontend import model_for, with_frontend_features, zero_head
from .models import MODELS
from .performance import load
from .performance.load import contention
from .performance.memory import PeakMemory
from .resolve import NOT_RESOLVED, ResolvedRun
from .sampling import batch_generator, epoch_lengths, poisson_batches, warn_tiny_batches
from .steps import (
    Prepared,
    Steps,
    check_speed_flags,
    evaluate,
    make_optimizer,
    progress_bar,
    seed_everything,
    synchronize,
    timed_steps,
)

TRAIN_EVAL_EXAMPLES = 10000


class PrivacyLedgerError(RuntimeError):
    """The method spent more epsilon than the target: never silently accepted."""


class RunCallback(Protocol):
    def on_start(self, config: RunConfig, params: dict[str, Any], tags: dict[str, str]) -> None: ...
    def on_epoch(self, epoch: int, metrics: dict[str, float]) -> None: ...
    def on_end(self, metrics: dict[str, float], status: str) -> None: ...


@dataclass
class RunResult:
    config: RunConfig
    metrics: dict[str, float]
    epochs: list[dict[str, float]]
    claim: PrivacyClaim
    calibration: Calibration
    norm: str
    lr_info: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None  # the trained model (unwrapped), with keep_model=True
    initial_state: dict[str, torch.Tensor] | None = None  # its parameters before training, with keep_model=True


def prepare(resolved: ResolvedRun, perf: PerfFlags | None = None, data: TensorData | None = None, *,
            keep_initial: bool = False, wrap_model: Callable[[nn.Module], nn.Module] | None = None) -> Prepared:
    """Data, model, optimizer and method of a run, ready for its first step. ``resolved`` was resolved once, above
    the harness (its calibration, and the data's fingerprint where a sweep or audit checked them)."""
    perf = perf or PerfFlags()
    device = perf.resolve_device()
    if perf.threads:
        torch.set_num_threads(perf.threads)
    if not isinstance(resolved, ResolvedRun):
        raise TypeError(NOT_RESOLVED.format(where="the harness", got=type(resolved).__name__))
    r = resolved
    config = r.config
    seed_everything(config.seed)
    method = r.method()
    loaded_here = data is None
    if data is None:
        data = load_tensor_data(config.dataset, data_dir=config.data_dir, device=device,
                                train_examples=config.train_examples, test_examples=config.test_examples)
    if loaded_here or not config.data_fingerprint:  # data handed in by an audit (its canaries) are the caller's to name
        found = data.checked_fingerprint(config.dataset, config.data_fingerprint)
        if found != config.data_fingerprint:  # a resolution made without its data (a direct caller's): named here
            r = r.with_config(config.replace(data_fingerprint=found))
    config = r.config
    if config.holdout:
        check_holdout(config.holdout, data.train_size)
    config.privacy.check_delta_for(data.train_size - config.holdout)
    warn_tiny_batches(config.dataset, config.privacy.sampling_rate, data.train_size - config.holdout)
    info = data.info
    model = model_for(config, info, r.norm)
    model = (wrap_model(model) if wrap_model is not None else model).to(device)  # an audit's hook (its canaries')
    key = (config.dataset, config.data_dir, config.train_examples, config.test_examples, device) if loaded_here else None
    data, frontend_seconds = with_frontend_features(model, data, augmented=config.augment or method.augments_inputs,
                                                    cache_key=key, progress=perf.progress)
    if config.holdout:  # after the frontend, so held-out and test runs share one computation of the features
        data = data.hold_out(config.holdout)
    zero_head(model)
    # the untrained parameters, only when asked (the audit's white-box scores): a copy of the whole model
    initial_state = {k: v.detach().clone() for k, v in model.state_dict().items()} if keep_initial else None
    lr, lr_info = method.learning_rate(config.lr)
    optimizer = make_optimizer(config, model.parameters(), lr)
    setup = TrainingSetup(spec=config.privacy, train_size=data.train_size, num_classes=info.num_classes,
                          device=device, grad_sample_mode=MODELS.get(config.model).grad_sample_mode, amp=perf.amp,
                          x_train=data.x_train)
    if perf.channels_last:
        model = model.to(memory_format=torch.channels_last)
    check_speed_flags(config.method, perf)
    model, optimizer = method.begin(model, optimizer, setup)
    step_model = method.compile(model) if perf.compile else None
    return Prepared(r, device, data, method, model, optimizer, lr_info, perf, initial_state, step_model,
                    frontend_seconds)


def params_and_tags(p: Prepared) -> tuple[dict[str, Any], dict[str, str]]:
    """The run's parameters and tags: the resolution's, and what the harness found (device, data, threads)."""
    params = p.resolved.params()
    params.update({f"{names.PARAM_LR}{k}": v for k, v in p.lr_info.items()})
    params[names.PARAM_NORM_USED] = p.norm
    params[names.PARAM_DEVICE] = p.device
    params[names.PARAM_TRAIN_SIZE] = p.data.train_size
    params[names.PARAM_TEST_SIZE] = int(p.data.x_test.shape[0])
    params[names.PARAM_NORMALISATION] = p.data.info.normalisation
    if p.data.notes:
        params[names.PARAM_DATA_NOTES] = " | ".join(p.data.notes)[:5000]
    # inside any wrapper (Opacus)
    params[names.PARAM_FEATURE_DIM] = getattr(p.method.unwrap(p.model), names.PARAM_FEATURE_DIM, "")
    params.update(p.perf.as_params())
    # the intra-op threads the run's float reductions were split over: the same configuration on another count gives
    # the same results to about 1e-7 per step, not bit for bit (tests/benchmarks/test_parallel.py)
    params[names.PARAM_THREADS] = torch.get_num_threads()
    params.update({f"{names.PARAM_METHOD}{k}": v for k, v in p.method.describe().items()})
    return params, p.resolved.tags(p.perf)


class NullCallback:
    """A callback that records nothing (a run outside any store)."""

    def on_start(self, config, params, tags) -> None: ...
    def on_epoch(self, epoch, metrics) -> None: ...
    def on_end(self, metrics, status) -> None: ...


def run(
    resolved: ResolvedRun,
    perf: PerfFlags | None = None,
    callback: RunCallback | None = None,
    *,
    data: TensorData | None = None,
    keep_model: bool = False,
    step_hook: Callable[[int, torch.Tensor], None] | None = None,
    wrap_model: Callable[[nn.Module], nn.Module] | None = None,
) -> RunResult:
    """Train and evaluate one resolved configuration. ``callback`` receives params, per-epoch and final metrics;
    ``step_hook`` is called after each step and ``wrap_model`` with the untrained model (an audit's hooks: its
    canaries' per-step trace, a model widened to read its canaries' own coordinates)."""
    perf = perf or PerfFlags()
    callback = callback or NullCallback()
    p = prepare(resolved, perf, data, keep_initial=keep_model, wrap_model=wrap_model)
    params, tags = params_and_tags(p)
    try:  # a signal deferred by on_start's store write is raised as it ends: inside, so the run is marked KILLED
        callback.on_start(p.config, params, tags)
        result = train(p, perf, callback, step_hook)
    except BaseException:
        callback.on_end({}, "KILLED" if interrupted() else "FAILED")
        raise
    if getattr(callback, "wants_model", False):  # before the run is ended: its artifact belongs to a live run
        callback.log_model(p.method.unwrap(p.method.released(result.model)))
    callback.on_end(result.metrics, "FINISHED")
    if keep_model:
        result.model = p.method.unwrap(p.method.released(result.model))
        result.initial_state = p.initial_state
    else:
        result.model = None
    return result


def interrupted() -> bool:
    """Whether the exception being handled is a KeyboardInterrupt (the run ends KILLED, not FAILED)."""
    return isinstance(sys.exc_info()[1], KeyboardInterrupt)


class _EpochReporter:
    """Numbers an own-loop method's progress reports as epochs 1, 2, ... and forwards them to the callback; the
    harness times each phase, from the previous report (or the fit's start) to this one: ``time_PHASE_s``."""

    def __init__(self, callback: RunCallback, device: str = "cpu"):
        self.callback, self.epochs, self.device = callback, 0, device
        self.phase_times: dict[str, float] = {}
        self.mark = time.perf_counter()

    def start(self) -> None:
        synchronize(self.device)
        self.mark = time.perf_counter()

    def __call__(self, metrics: dict[str, float], phase: str | None = None) -> None:
        synchronize(self.device)
        now = time.perf_counter()
        self.epochs += 1
        metrics = dict(metrics)
        if phase is not None:
            self.phase_times[names.METRIC_PHASE_TIME.format(phase)] = now - self.mark
            metrics.setdefault(names.METRIC_EPOCH_TIME, now - self.mark)
        self.mark = now
        self.callback.on_epoch(self.epochs, metrics)


def _fit_context(p: Prepared, report: _EpochReporter) -> FitContext:
    config, initial = p.config, p.model
    lr = p.optimizer.param_groups[0]["lr"]
    return FitContext(data=p.data, device=p.device, seed=config.seed, report=report,
                      new_model=lambda: copy.deepcopy(initial),
                      new_optimizer=lambda params: make_optimizer(config, params, lr))


def _check_ledger(config: RunConfig, spent: float) -> None:
    target = config.privacy.epsilon
    if math.isfinite(target) and spent > target * (1 + 1e-9):
        raise PrivacyLedgerError(f"{config.method} spent epsilon={spent:.6g} > target {target:g}")


def _final_metrics(p: Prepared, *, test_accuracy: float, times: list[float], peak_mb: float, spent: float,
                   epochs: int, steps: int) -> dict[str, float]:
    """A run's summary: its accuracy, its times (the first epoch apart: warm-up), memory and ledger."""
    steady = times[1:] if len(times) > 1 else times
    return {
        names.METRIC_FINAL_TEST_ACCURACY: test_accuracy,
        names.METRIC_WARMUP_EPOCH_TIME: times[0],
        names.METRIC_MEAN_EPOCH_TIME: float(np.mean(steady)),
        names.METRIC_MEDIAN_EPOCH_TIME: float(statistics.median(steady)),
        names.METRIC_TOTAL_TRAIN_TIME: float(sum(times)),
        names.METRIC_CALIBRATION_SECONDS: p.calibration.seconds,
        names.METRIC_FRONTEND_SECONDS: p.frontend_seconds,
        names.METRIC_PEAK_MEMORY: peak_mb,
        names.METRIC_FINAL_EPSILON_SPENT: spent,
        names.METRIC_EPSILON_TARGET: p.config.privacy.epsilon,
        names.METRIC_EPOCHS: epochs,
        names.METRIC_TOTAL_STEPS: steps,
        # the examples the accuracy is of (an own-loop method that holds some back overrides it), and chance's
        names.METRIC_EVAL_EXAMPLES: int(p.data.x_test.shape[0]),
        names.METRIC_CHANCE_ACCURACY: 1.0 / p.data.info.num_classes,
    }


def _fit_own_loop(p: Prepared, perf: PerfFlags, callback: RunCallback) -> RunResult:
    """A method with its own loop (PATE): timed as one phase, evaluated on the data it names, accounted; its
    contention read as a per-step run's is, from the load average sampled through the fit."""
    config, method = p.config, p.method
    report = _EpochReporter(callback, p.device)
    with PeakMemory(p.device) as memory, load.LoadSampler() as sampler:
        synchronize(p.device)
        t0, cpu0 = time.perf_counter(), time.process_time()
        report.start()
        out = method.fit(_fit_context(p, report))
        synchronize(p.device)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
    test_acc, test_loss = evaluate(out.model, out.x_eval, out.y_eval, config.eval_batch_size)
    spent = method.epsilon_spent(out.steps)
    _check_ledger(config, spent)
    last = {names.METRIC_TEST_ACCURACY: test_acc, names.METRIC_TEST_LOSS: test_loss,
            names.METRIC_EPOCH_TIME: elapsed, names.METRIC_EPSILON_SPENT: spent}
    report(last)
    final = _final_metrics(p, test_accuracy=test_acc, times=[elapsed], peak_mb=memory.peak_mb, spent=spent,
                           epochs=1, steps=out.steps)
    final.update({names.METRIC_EVAL_EXAMPLES: int(out.y_eval.shape[0]), **report.phase_times, **out.metrics,
                  **p.claim.as_metrics(), names.METRIC_CPU_PER_WALL: cpu / elapsed if elapsed > 0 else math.nan})
    final.update(contention([{names.METRIC_LOAD: x} for x in sampler.loads], torch.get_num_threads()))
    return RunResult(p.config, final, [last], p.claim, p.calibration, p.norm, p.lr_info, out.model)


class _WarmUp:
    """The linear learning-rate warm-up over the first ``steps`` steps (called before each step)."""

    def __init__(self, optimizer: torch.optim.Optimizer, steps: int):
        self.optimizer, self.steps, self.done = optimizer, steps, 0
        self.base = [g["lr"] for g in optimizer.param_groups]

    def __call__(self) -> None:
        if self.steps and self.done <= self.steps:
            for group, base in zip(self.optimizer.param_groups, self.base):
                group["lr"] = base * min(1.0, (self.done + 1) / self.steps)
        self.done += 1


def _epoch_metrics(p: Prepared, steps: Steps, steps_done: int, eval_n: int) -> dict[str, float]:
    """One epoch's record: its loss (read from the device once), the released model's accuracies, its time and
    the epsilon spent so far."""
    data, config = p.data, p.config
    shown = p.method.released(p.model)
    test_acc, test_loss = evaluate(shown, data.x_test, data.y_test, config.eval_batch_size)
    train_acc, _ = evaluate(shown, data.x_train[:eval_n], data.y_train[:eval_n], config.eval_batch_size)
    return {
        names.METRIC_LOSS: float(steps.loss_sum) / steps.losses if steps.losses else float("nan"),
        names.METRIC_TRAIN_ACCURACY: train_acc, names.METRIC_TEST_ACCURACY: test_acc,
        names.METRIC_TEST_LOSS: test_loss, names.METRIC_EPOCH_TIME: steps.seconds,
        names.METRIC_EPSILON_SPENT: p.method.epsilon_spent(steps_done), names.METRIC_STEPS: steps_done,
        names.METRIC_MEAN_BATCH_SIZE: float(np.mean(steps.sizes)) if steps.sizes else 0.0,
        names.METRIC_CPU_PER_WALL: steps.cpu_seconds / steps.seconds if steps.seconds > 0 else float("nan"),
        names.METRIC_LOAD: load.load_average(),
    }


def train(p: Prepared, perf: PerfFlags | None = None, callback: RunCallback | None = None,
          step_hook: Callable[[int, torch.Tensor], None] | None = None) -> RunResult:
    """Train a prepared run: the epochs of a per-step method (Poisson batches through :func:`timed_steps`, evaluated
    after each), or an own-loop method's fit; what :func:`run` does between its callbacks."""
    perf = perf or p.perf
    callback = callback or NullCallback()
    if p.method.capabilities.own_loop:
        return _fit_own_loop(p, perf, callback)
    config, spec = p.config, p.config.privacy
    sampler = batch_generator(p.device, config.seed)
    augmenter = torch.Generator().manual_seed(config.seed + 1_000_003) if config.augment else None
    n = p.data.train_size
    eval_n = min(n, TRAIN_EVAL_EXAMPLES)
    history: list[dict[str, float]] = []
    warm_up = _WarmUp(p.optimizer, config.lr_warmup_steps)
    done = [0]

    def after(idx: torch.Tensor) -> None:
        done[0] += 1
        if step_hook is not None:
            step_hook(done[0], idx)

    lengths = epoch_lengths(spec.sampling_rate, spec.steps)
    progress = progress_bar(len(lengths), f"{config.method} {config.dataset} eps={spec.epsilon:g} seed={config.seed}",
                         perf.progress)
    p.model.train()
    with PeakMemory(p.device) as memory:
        for epoch, length in enumerate(lengths, start=1):
            steps = timed_steps(p, poisson_batches(n, spec.sampling_rate, length, sampler, p.device),
                                augmenter=augmenter, before=warm_up, after=after)
            metrics = _epoch_metrics(p, steps, done[0], eval_n)
            # the loss at chance (cross-entropy of a uniform guess), else the first epoch's if larger: the scale a
            # training loss that grows by orders of magnitude is measured against
            scale = max(math.log(max(2, p.data.info.num_classes)), history[0][names.METRIC_LOSS] if history else 0.0)
            _check_diverged(config, epoch, steps.losses, metrics[names.METRIC_LOSS], scale)
            history.append(metrics)
            callback.on_epoch(epoch, metrics)
            if progress is not None:
                progress.set_postfix(test_acc=f"{metrics[names.METRIC_TEST_ACCURACY]:.4f}", epoch_s=f"{steps.seconds:.1f}")
                progress.update(1)
    if progress is not None:
        progress.close()
    spent = p.method.epsilon_spent(done[0])
    _check_ledger(config, spent)
    final = _final_metrics(p, test_accuracy=history[-1][names.METRIC_TEST_ACCURACY],
                           times=[h[names.METRIC_EPOCH_TIME] for h in history], peak_mb=memory.peak_mb, spent=spent,
                           epochs=len(history), steps=done[0])
    final[names.METRIC_FINAL_TRAIN_ACCURACY] = history[-1][names.METRIC_TRAIN_ACCURACY]
    final.update(contention(history, torch.get_num_threads()))
    final.update(p.claim.as_metrics())
    return RunResult(config, final, history, p.claim, p.calibration, p.norm, p.lr_info, p.model)


#: a training loss this many times its scale (chance's cross-entropy, or the first epoch's) has diverged
DIVERGED_GROWTH = 1e3


def _check_diverged(config: RunConfig, epoch: int, batches: int, loss: float, scale: float = math.inf) -> None:
    """A loss that is NaN, infinite, or grown by orders of magnitude (over ``DIVERGED_GROWTH`` x ``scale``) ends the
    run: training on from there would report a broken model FINISHED (lr 1e30 reads a finite 4.6e29 at chance)."""
    if batches and not math.isfinite(loss):
        raise Diverged(f"diverged: the training loss became {loss} in epoch {epoch} (lr={config.lr:g}, "
                       f"optimizer={config.optimizer}): lower --lr")
    if batches and loss > DIVERGED_GROWTH * scale:
        raise Diverged(f"diverged: the training loss reached {loss:.3g} in epoch {epoch}, over {DIVERGED_GROWTH:g} "
                       f"times its scale {scale:.3g} (lr={config.lr:g}, optimizer={config.optimizer}): lower --lr")


__all__ = ["NullCallback", "PrivacyLedgerError", "RunCallback", "RunResult", "interrupted", "params_and_tags", "prepare",
           "run", "train"]
