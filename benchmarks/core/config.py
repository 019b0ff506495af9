"""Frozen, keyword-only configuration records, validated on construction.

Three kinds, kept apart on purpose (as jax_privacy does):
- :class:`PrivacySpec` is the matched privacy budget every method calibrates to;
- :class:`RunConfig` is everything that defines a run: a run is a pure function of it;
- :class:`PerfFlags` are how fast it runs (device, threads, dtype): they must never change privacy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import ConfigError

OPTIMIZERS = ("sgd", "adam")
#: the most steps a run may take (about a year of 1 ms steps): beyond it T is a typo, not a plan
MAX_STEPS = 10**10
#: seeds must fit every generator that is seeded from them (torch takes 64 bits)
MAX_SEED = 2**63 - 1
NORMS = ("auto", "group", "batch", "frozen", "none")
AMP_MODES = ("none", "bf16")


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise ConfigError(message)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True, kw_only=True)
class PrivacySpec:
    """The matched budget: (epsilon, delta) at Poisson sampling rate q over T steps.

    ``epsilon = inf`` is the non-private reference at the same (q, T).
    """

    epsilon: float
    delta: float
    sampling_rate: float
    steps: int

    def __post_init__(self) -> None:
        _check(_is_number(self.epsilon) and not math.isnan(self.epsilon) and self.epsilon > 0,
               f"epsilon={self.epsilon!r} is not allowed: epsilon must be a number > 0")
        _check(_is_number(self.delta) and 0.0 < self.delta < 1.0,
               f"delta={self.delta!r} is not allowed: delta must be in (0, 1)")
        _check(_is_number(self.sampling_rate) and 0.0 < self.sampling_rate <= 1.0,
               f"sampling rate q={self.sampling_rate!r} is not allowed: q must be in (0, 1]")
        _check(isinstance(self.steps, int) and not isinstance(self.steps, bool) and 1 <= self.steps <= MAX_STEPS,
               f"steps T={self.steps!r} is not allowed: T must be an integer in [1, {MAX_STEPS:.0e}]")

    def check_delta_for(self, n: int) -> None:
        """delta must be below 1/n, or a mechanism that publishes one record in the clear would pass."""
        _check(self.delta < 1.0 / n,
               f"delta={self.delta:g} is not allowed for n={n} training examples: delta must be < 1/n={1.0 / n:.3g}")

    @property
    def is_private(self) -> bool:
        return math.isfinite(self.epsilon)


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything that defines one training run. Same config, same metrics (on CPU)."""

    method: str
    dataset: str
    model: str
    privacy: PrivacySpec
    method_options: Mapping[str, Any] = field(default_factory=dict)
    optimizer: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    seed: int = 0
    preset: str = "custom"
    augment: bool = False
    norm: str = "auto"
    model_width: int = 0
    train_examples: int = 0  # 0: the whole training split
    test_examples: int = 0  # 0: the whole test split
    # > 0: this many training examples (a fixed draw, the same for every run) are taken out of training and the run is
    # evaluated on them instead of the test split: for choosing a recipe without looking at the test set
    holdout: int = 0
    eval_batch_size: int = 1000
    lr_warmup_steps: int = 0  # linear learning-rate warm-up over the first steps (0: none)
    data_dir: str | None = None
    #: the content fingerprint of the data set's arrays (``inputdp.datasets.facts``): part of the key, so two
    #: different data under one name are two configurations; "" until the data are known (the harness fills it in)
    data_fingerprint: str = ""

    def __post_init__(self) -> None:
        _check(isinstance(self.privacy, PrivacySpec), "privacy must be a PrivacySpec")
        _check(isinstance(self.data_fingerprint, str), "data_fingerprint must be a string")
        object.__setattr__(self, "method_options", MappingProxyType(dict(self.method_options)))
        _check(self.optimizer in OPTIMIZERS,
               f"optimizer={self.optimizer!r} is not allowed: choose one of {', '.join(OPTIMIZERS)}")
        _check(_is_number(self.lr) and self.lr > 0 and math.isfinite(self.lr),
               f"lr={self.lr!r} is not allowed: the learning rate must be a finite number > 0")
        _check(_is_number(self.momentum) and 0 <= self.momentum < 1,
               f"momentum={self.momentum!r} is not allowed: momentum must be in [0, 1)")
        _check(_is_number(self.weight_decay) and self.weight_decay >= 0,
               f"weight_decay={self.weight_decay!r} is not allowed: it must be >= 0")
        _check(isinstance(self.seed, int) and 0 <= self.seed <= MAX_SEED,
               f"seed={self.seed!r} is not allowed: seeds are integers in [0, 2**63 - 1]")
        _check(self.norm in NORMS, f"norm={self.norm!r} is not allowed: choose one of {', '.join(NORMS)}")
        for name in ("train_examples", "test_examples", "holdout", "model_width", "lr_warmup_steps"):
            v = getattr(self, name)
            _check(isinstance(v, int) and v >= 0, f"{name}={v!r} is not allowed: it must be an integer >= 0")
        _check(isinstance(self.eval_batch_size, int) and self.eval_batch_size >= 1,
               f"eval_batch_size={self.eval_batch_size!r} is not allowed: it must be an integer >= 1")

    def __reduce__(self):  # MappingProxyType does not pickle: travel as a plain dict (Ray, submitit, spawn)
        return (RunConfig.from_dict, (self.to_dict(),))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        d = dict(d)
        d["privacy"] = PrivacySpec(**d["privacy"])
        return cls(**d)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["privacy"] = dataclasses.asdict(self.privacy)
        d["method_options"] = dict(self.method_options)
        return d

    def flat(self) -> dict[str, Any]:
        """Flattened for logging: ``privacy.epsilon``, ``method_options.alpha``, ..."""
        out: dict[str, Any] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, Mapping):
                for k, v in value.items():
                    walk(f"{prefix}{k}.", v)
            else:
                out[prefix[:-1]] = value

        walk("", self.to_dict())
        return out

    def identity(self) -> dict[str, Any]:
        """What decides the result: everything except where the data lives."""
        d = self.to_dict()
        d.pop("data_dir")
        if not d["holdout"]:  # runs on the test split keep the keys they had before holdout existed
            d.pop("holdout")
        if not d["data_fingerprint"]:  # not known yet (a configuration before its data are read)
            d.pop("data_fingerprint")
        return d

    def key(self) -> str:
        """A stable hash of :meth:`identity`: two configurations with the same key are the same configuration. The
        store knows a run by its resolution's key (``ResolvedRun.key``), which adds the noise and the accounting."""
        blob = json.dumps(self.identity(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def label(self, variant: str = "", *, dataset: bool = False) -> str:
        """How a line names this configuration: "METHOD [VARIANT] [DATASET] eps=1 seed=0" (eps=inf for the
        reference)."""
        return (self.method + (f" [{variant}]" if variant else "") + (f" {self.dataset}" if dataset else "")
                + f" eps={self.privacy.epsilon:g} seed={self.seed}")

    def match_key(self) -> str:
        """Runs at the same (dataset and its content, epsilon, delta, q, T) are compared with each other."""
        p = self.privacy
        data = f"{self.dataset}@{self.data_fingerprint}" if self.data_fingerprint else self.dataset
        return f"{data}|eps={p.epsilon:g}|delta={p.delta:g}|q={p.sampling_rate:.6g}|T={p.steps}"


@dataclass(frozen=True, kw_only=True)
class PerfFlags:
    """How fast a run goes; never what it computes privately.

    ``amp="bf16"`` runs the network's forward and backward under autocast; each method keeps the computation its
    guarantee rests on (its noise, its sampling, its losses, its per-example clipping) and all accounting in
    float32, and refuses a mode it cannot (in ``Method.prepare``). ``channels_last`` stores images and convolution
    weights NHWC; ``compile`` runs ``torch.compile`` on what the method's step calls (refused, in one line, by a
    method whose step cannot be compiled). The rounding of bf16 changes a run's numbers, not its definition; the
    store keeps the two precisions apart (``ResolvedRun.key``, inputdp.benchmarks.resolve).
    """

    device: str = "auto"
    threads: int = 0  # 0: leave torch's default
    amp: str = "none"  # "none" | "bf16"
    channels_last: bool = False
    compile: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        _check(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
               f"device={self.device!r} is not allowed: choose auto, cpu or cuda")
        _check(isinstance(self.threads, int) and self.threads >= 0,
               f"threads={self.threads!r} is not allowed: it must be an integer >= 0")
        _check(self.amp in AMP_MODES, f"--amp {self.amp!r} is not allowed: choose one of {', '.join(AMP_MODES)}")

    def as_params(self) -> dict[str, str]:
        return {"perf.amp": self.amp, "perf.channels_last": str(self.channels_last).lower(),
                "perf.compile": str(self.compile).lower()}

    def resolve_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise ConfigError(f"device={self.device!r} is not available here: no CUDA device; use cpu or auto")
        return self.device


def precision(perf: PerfFlags) -> str:
    """The tag a run's precision is stored under: float32, or the autocast dtype."""
    return "float32" if perf.amp == "none" else perf.amp
