"""A run resolved once: ``resolve(config) -> ResolvedRun``.

Everything about a run that follows from its configuration before any data is read: the calibrated noise (the one
calibration of the configuration), the claim, the preset's view, how many configurations were tried, the recipe
(variant) and the accounting's identity. The sweep resolves each configuration once and hands the result to the
executor, the harness, the audits and the tracker; the run's tags and the run's key are functions of it.

The key (:meth:`ResolvedRun.key`) is the configuration's, the noise and the accounting version: after a change of
accountant, of its library or of the suite's accounting, a store's runs at the old noise are not reused.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from inputdp.core import names
from inputdp.core.claims import Calibration, PrivacyClaim, adjacency_of
from inputdp.core.config import PerfFlags, RunConfig, precision
from inputdp.core.errors import ConfigError
from inputdp.datasets import check_holdout
from inputdp.datasets.facts import data_facts
from inputdp.methods import METHODS, create_method
from inputdp.methods.accounting import accounting_version
from inputdp.methods.base import Method

from .presets import preset_options, view_of

#: the refusal of a bare configuration where a resolution is taken (the harness, the sweep's unit, the audits): a run
#: is resolved, its data checked and fingerprinted, once, above them (``check_feasible``)
NOT_RESOLVED = ("{where} takes a ResolvedRun, not {got}: resolve it once above it (check_feasible([config]), or "
                "resolve(config) for data handed in)")


@dataclass(frozen=True, kw_only=True)
class ResolvedRun:
    """A configuration with what follows from it: computed once (:func:`resolve`), never again."""

    config: RunConfig
    calibration: Calibration
    claim: PrivacyClaim
    view: str
    configs_tried: int
    variant: str
    #: the normalisation the run's model uses (the method's default unless the configuration names one)
    norm: str
    #: the accountant that computed the claim and the versions of the accounting code ("" for a reference run)
    accounting: str

    def method(self) -> Method:
        """A fresh instance of the run's method, given this calibration (no second search)."""
        cls = METHODS.get(self.config.method).load()
        return cls.calibrated(self.config.privacy, self.calibration, self.config.method_options)

    def with_config(self, config: RunConfig) -> ResolvedRun:
        """The same resolution for the configuration once its data are known (its fingerprint filled in); the
        budget and method must be the same."""
        if (config.method, dict(config.method_options), config.privacy) != (
                self.config.method, dict(self.config.method_options), self.config.privacy):
            raise ValueError("with_config: another method, options or budget is another resolution")
        return replace(self, config=config)

    def identity(self) -> dict[str, Any]:
        """What the store knows the run by: the configuration, its noise and its accounting."""
        return {"config": self.config.identity(), "noise": {k: repr(float(v)) for k, v in self.calibration.noise.items()},
                "accounting": self.accounting}

    def key(self, perf: PerfFlags | None = None) -> str:
        """A stable hash of :meth:`identity`, with the precision when not float32 (bf16 rounds differently, so a
        bf16 run does not stand in for a float32 one, nor the other way round)."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        key = hashlib.sha256(blob.encode()).hexdigest()[:16]
        amp = (perf or PerfFlags()).amp
        return key if amp == "none" else f"{key}-{amp}"

    def params(self) -> dict[str, Any]:
        """The run's parameters that follow from its configuration (the harness adds what it measures)."""
        out: dict[str, Any] = dict(self.config.flat())
        out.update({f"{names.PARAM_NOISE}{k}": v for k, v in self.calibration.noise.items()})
        out[names.PARAM_CALIBRATION_ORDER] = self.calibration.order
        out[names.PARAM_ACCOUNTING_VERSION] = self.accounting
        return out

    def tags(self, perf: PerfFlags | None = None) -> dict[str, str]:
        """The run's tags: what it is (method, data, recipe, view), its key, its claim."""
        c = self.config
        return {
            names.TAG_METHOD: c.method, names.TAG_DATASET: c.dataset, names.TAG_PRESET: c.preset,
            names.TAG_MODEL: c.model, names.TAG_MATCH_KEY: c.match_key(), names.TAG_CONFIG_KEY: self.key(perf),
            names.TAG_PRECISION: precision(perf or PerfFlags()), names.TAG_VARIANT: self.variant,
            names.TAG_VIEW: self.view, names.TAG_CONFIGS_TRIED: str(self.configs_tried), names.TAG_SEED: str(c.seed),
            names.TAG_NORM: self.norm, **self.claim.as_tags(),
        }


def check_method_holds_out(method: str, holdout: int) -> None:
    """Refuse a held-out run (``RunConfig.holdout``) where the test split is the method's public data."""
    if holdout and METHODS.get(method).facts().public_inputs_from_test:
        raise ConfigError(f"holdout={holdout} is not allowed with {method}: it takes public inputs from the test "
                          "split, which a held-out run replaces by private training examples")


def _calibrated(config: RunConfig) -> tuple[Method, Calibration]:
    check_method_holds_out(config.method, config.holdout)
    method = create_method(config.method, dict(config.method_options))
    return method, method.calibrate(config.privacy)  # the one calibration path (bench calibrate's, the audits')


def resolve(config: RunConfig, *, _calibration: tuple[Method, Calibration] | None = None) -> ResolvedRun:
    """Calibrate ``config`` once and gather what follows from it (a target the method cannot meet, or a held-out
    run it cannot take, is refused here, in one line, before any data are read or any store is opened)."""
    method, calibration = _calibration or _calibrated(config)
    norm = method.capabilities.default_norm if config.norm == "auto" else config.norm
    _check_frozen_norm(config.method, norm, method)
    view, tried = view_of(config.preset, config.dataset, config.method, config.privacy.epsilon,
                          adjacency_of(method.options))
    claim = method.claim()
    accounting = f"{claim.accountant}; {accounting_version()}" if math.isfinite(config.privacy.epsilon) else ""
    return ResolvedRun(config=config, calibration=calibration, claim=claim, view=view, configs_tried=tried,
                       variant=method.variant(preset_options(config.preset, config.dataset, config.method)),
                       norm=norm, accounting=accounting)


def _check_frozen_norm(name: str, norm: str, method: Method) -> None:
    """A frozen normalisation's statistics are read from the private data: only a method that releases them with
    noise, and charges them (DP-SGD with norm_noise_multiplier > 0), may train one; such a release needs the model."""
    supports = "norm_noise_multiplier" in method.option_defaults
    charged = bool(supports and method.options["norm_noise_multiplier"])
    if norm == "frozen" and not charged:
        raise ConfigError(f"norm=frozen is not allowed for {name}" + (
            " with norm_noise_multiplier=0: its statistics would be read from the private data without noise; give "
            f"--option {name}.norm_noise_multiplier=8 (Tramer & Boneh)" if supports else
            ": no option of it releases a frozen normalisation's statistics with noise (norm_noise_multiplier)"))
    if charged and norm != "frozen":
        raise ConfigError(f"norm_noise_multiplier is not allowed with norm={norm}: it would charge a release of "
                          "statistics no model uses; give --norm frozen")


def resolve_all(configs: Iterable[RunConfig]) -> list[ResolvedRun]:
    """Each configuration resolved; one calibration per distinct (method, options, budget): the seeds of a sweep
    share it (the calibration is a pure function of those)."""
    seen: dict[str, tuple[Method, Calibration]] = {}
    out = []
    for c in configs:
        key = repr((c.method, sorted(c.method_options.items()), c.privacy))
        if key not in seen:
            seen[key] = _calibrated(c)
        out.append(resolve(c, _calibration=seen[key]))
    return out


def with_checked_data(config: RunConfig) -> RunConfig:
    """The configuration with its data's content fingerprint, after every check that needs the data: labels in
    range, ``--holdout`` below the training split, delta below 1/n for the n the run trains on. Cached by the files'
    sizes and times (a few ``stat`` calls on a rerun), so bad input is refused before any store opens and the store
    knows the run by its data, not by the data set's name."""
    facts = data_facts(config.dataset, config.data_dir)
    n = min(config.train_examples, facts.train_size) if config.train_examples > 0 else facts.train_size
    if config.holdout:
        check_holdout(config.holdout, n)
    config.privacy.check_delta_for(n - config.holdout)
    return config if config.data_fingerprint else config.replace(data_fingerprint=facts.fingerprint)


def check_feasible(configs: Sequence[RunConfig], *, check_data: bool = True) -> list[ResolvedRun]:
    """Resolve every configuration once (one calibration per distinct method, options and budget), before any run
    starts or store opens: a target a method cannot meet, a held-out run it cannot take, and (``check_data``) data
    that do not fit the configuration (``with_checked_data``) are refused in one line up front. The resolutions carry
    their data's fingerprint, and are what the sweep, the harness and the audits take. ``check_data=False`` leaves
    the data to the workers that read them (a remote executor's)."""
    runs = resolve_all(configs)  # the method's refusals first, then the data's
    return [r.with_config(with_checked_data(r.config)) for r in runs] if check_data else runs
