"""The one small interface every privacy method fills in (AlgoPerf-style: the harness owns the rest).

A method
- says what its training releases, but the noise (``release_family(spec)``: a value of accounting/releases.py), and
  in a few words what its claim is about (``claim_text()``); the accountant its options name
  (accounting/accountants.py) computes everything else from that one value: the calibration (the least noise meeting
  the matched :class:`~inputdp.core.config.PrivacySpec`), the epsilon and its ledger after k steps, the claimed
  trade-off curve, whether it is a guarantee. A method never computes its own epsilon;
- trains, one Poisson batch at a time (``train_step``), or in its own loop (``fit``, given a :class:`FitContext`)
  when its shape differs,
- declares what the harness must know of it in one record (:class:`Capabilities`: ``private``, ``own_loop``,
  ``releases_vectors``, ...) and a few hooks (``unwrap``, ``released``, ``describe``), so that the harness never
  asks for a method by name.
It never imports the tracker, never samples batches, never times itself. The mathematics each method implements
is written down in ``methods/THEORY.md``.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.core.capabilities import Capabilities
from inputdp.core.claims import RELATION_TEXT, RELATION_VALUES, Calibration, PrivacyClaim
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError

from .accounting import accountants
from .accounting.per_example import NoFiniteEpsilon
from .accounting.releases import PerExampleVectors
from .input_private_claims import vectors_and_paper, vectors_details

if TYPE_CHECKING:
    from inputdp.datasets import TensorData


#: thresholds of a mechanism audit's tests, in units of the claimed shift between the two worlds' scores: fixed
#: before any trial (one test each, corrected together); the last ones read the tail, where the family-free bound lies
AUDIT_THRESHOLDS = (-0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)


@dataclass(frozen=True, kw_only=True)
class ReleaseTrials:
    """One audited release of a method (what :meth:`Method.release_trials` returns): a score per trial in each
    world of a worst-case pair of neighbours, the thresholds to test at, fixed before the trials ("in" guessed where
    the score is >= the threshold), and what the claim composes, so that the audit can find the least noise the
    claimed (epsilon, delta) allows without reading the code's own noise:

    - ``event``: the run's whole privacy event as the claim's accountant composes it (a dp_accounting ``DpEvent``:
      the run's q, T, queries), with *this* release's noise multiplier set to 1 and every other Gaussian of the run
      in its fixed ratio to it;
    - ``shift``: the pair's mu at noise multiplier 1 (the pair's distance in units of the release's sensitivity): at
      noise multiplier s the claimed release of the pair is (shift / s)-GDP;
    - ``event_relation``: the neighbouring relation the event is composed under (``replace_input``: dp_accounting's
      REPLACE_ONE; ``add_remove`` where the sensitivity is already folded into the noise multiplier)."""

    release: str
    relation: str
    scores_in: Any
    scores_out: Any
    event: Any
    shift: float
    thresholds: tuple[float, ...]
    event_relation: str = "add_remove"


@dataclass(frozen=True, kw_only=True)
class ClaimText:
    """What a claim is about, in the method's words: the mechanism's name, the scope (which released values the
    guarantee covers, and what it does not), the claim's parameters beside its noise, where the noise comes from
    (methods/noise.py), and, where the relation's own words do not say it, what it protects and the relation's text
    (PATE's: either relation moves one teacher's vote)."""

    mechanism: str
    scope: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    noise: str = ""
    protects: str = ""
    adjacency: str = ""
    relation: str = ""
    needs_public_data: bool = False
    #: the relations the claim covers at its epsilon, where it covers more than its own relation's rule gives
    #: (``core.claims.relations_covered``): PATE's, which replaces one example, input and label
    covers: tuple[str, ...] = ()


#: the accountant a release family is read by when the method names none (option ``accountant``)
DEFAULT_ACCOUNTANTS = {"GaussianSteps": "pld", "GaussianReleases": "analytic_gaussian",
                       "PateQueries": "gnmax_data_independent_rdp", "PerExampleVectors": "per_example",
                       "NonPrivate": "none"}
#: a spec for asking a method which family it releases (its type does not depend on the budget)
_ANY_SPEC = PrivacySpec(epsilon=1.0, delta=1e-5, sampling_rate=0.01, steps=1)
@dataclass
class FitOutput:
    """What an own-loop method hands back: the model, the held-out data it must be evaluated on, and how many of
    its privacy-spending steps it took (``epsilon_spent(steps)`` is the run's ledger entry)."""

    model: nn.Module
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    steps: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FitContext:
    """What the harness hands an own-loop method: the data, where it runs, fresh models and optimizers built as
    the run's configuration says, and where to report progress: ``report(metrics, phase=NAME)`` once per phase,
    numbered by the harness, which times each phase from the previous report (a method never times itself)."""

    data: TensorData
    device: str
    seed: int
    new_model: Callable[[], nn.Module]
    new_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    report: Callable[..., None]


@dataclass(frozen=True, kw_only=True)
class TrainingSetup:
    """What a method may know about the run when it prepares the model and optimizer."""

    spec: PrivacySpec
    train_size: int
    num_classes: int
    device: str
    #: the fastest valid per-example-gradient mode for this model (the model registry's measured hint)
    grad_sample_mode: str = "hooks"
    #: the run's autocast mode (``--amp``): the network's forward and backward only
    amp: str = "none"
    #: called with each step's released per-example vectors, for a method that releases them (the hidden-state
    #: audit); None, the default, costs nothing
    release_observer: Callable[[torch.Tensor], None] | None = None
    #: the training inputs as the model reads them (a fixed frontend's features where it has one): what a method
    #: that releases statistics of the data before its steps reads (DP-SGD's frozen normalisation); private data
    x_train: torch.Tensor | None = None


class Method(ABC):
    """A privacy mechanism and how it trains; what the harness must know of it besides is its :class:`Capabilities`.
    Nothing outside sets its state: it is calibrated at birth (:meth:`calibrated`) or by itself (:meth:`calibrate`),
    and takes the run's setup once (:meth:`begin`)."""

    name: ClassVar[str]
    #: option name -> default; options not listed here are refused.
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            allowed = ", ".join(sorted(self.option_defaults)) or "none"
            raise ConfigError(f"method {self.name!r} has no option {unknown[0]!r}: its options are {allowed}")
        self.options: dict[str, Any] = {**self.option_defaults, **options}
        self.calibration: Calibration | None = None
        self.spec: PrivacySpec | None = None
        #: the run's autocast mode (``--amp``) and the observer of its released vectors, from :meth:`begin`
        self.amp = "none"
        self.release_observer: Callable[[torch.Tensor], None] | None = None

    @classmethod
    def calibrated(cls, spec: PrivacySpec, calibration: Calibration, options: Mapping[str, Any] | None = None):
        """A method with these options, born with ``calibration`` (computed by :meth:`noise_for` for ``spec``):
        how the harness gets a run's method, its one calibration found once (``inputdp.benchmarks.resolve``)."""
        method = cls(**dict(options or {}))
        method.spec, method.calibration = spec, calibration
        return method

    # --- privacy: one release, everything else computed from it ---------------------------------------------------
    @abstractmethod
    def release_family(self, spec: PrivacySpec):
        """What the training releases at ``spec``'s (q, T), but its noise (accounting/releases.py): a pure function
        of the options."""

    @abstractmethod
    def claim_text(self) -> ClaimText:
        """What the claim is about, in words and parameters (after :meth:`calibrate`)."""

    @property
    def accountant(self) -> accountants.Accountant:
        """The accountant the options name (``accountant``), else the release's own."""
        name = self.options.get("accountant") or DEFAULT_ACCOUNTANTS[type(self.release_family(_ANY_SPEC)).__name__]
        return accountants.accountant(name)

    def calibrate(self, spec: PrivacySpec) -> Calibration:
        """Choose the noise for ``spec`` and remember it (with the spec); returns the calibration.

        The one path every calibration takes (a run's resolution, ``bench calibrate``, the audits): the accountant's
        least noise of the method's release family; calibrating twice, or for another spec, gives what one call on a
        fresh instance gives. A method given a calibration found elsewhere is made by :meth:`calibrated`."""
        t0 = time.perf_counter()
        family = self.release_family(spec)
        try:
            found = accountants.calibrate(family, self.accountant, spec, self.name)
            if isinstance(family, PerExampleVectors):  # the two numbers beside a per-example claim, in its details
                paper = "" if accountants.sound(self.accountant, family) else self.accountant.name
                found = replace(found, details={**found.details, **vectors_details(family, found.release_noise,
                                                                                    spec.delta, paper)})
        except NoFiniteEpsilon as err:
            raise ConfigError(f"{self.name}: {err}") from None
        calibration = replace(found, seconds=time.perf_counter() - t0)
        self.spec, self.calibration = spec, calibration
        return calibration

    def noise(self) -> float:
        """The calibrated noise of the release family (its ``noise_name``'s value; PATE's common scale)."""
        _, cal = self._need_calibration()
        return float(cal.release_noise)

    def release(self):
        """What the calibrated training releases as a dp_accounting event (``accounting.events.Release``), or None
        where no event of the library describes it (the per-example vectors)."""
        spec, _ = self._need_calibration()
        return self.release_family(spec).at(self.noise())

    def epsilon_spent(self, steps_done: int) -> float:
        """Epsilon spent after ``steps_done`` steps: the accountant's, of what those steps release."""
        spec, _ = self._need_calibration()
        family = self.release_family(spec).with_steps(steps_done)
        return self.accountant.epsilon(family, self.noise(), spec.delta)

    def claim(self) -> PrivacyClaim:
        """The guarantee of the calibrated method: its release read by its accountant, in its own words."""
        spec, cal = self._need_calibration()
        family, acc, text = self.release_family(spec), self.accountant, self.claim_text()
        relation = acc.relation(family)
        sound = accountants.sound(acc, family) and family.complete
        extras = {}
        if isinstance(family, PerExampleVectors):  # its two numbers: what the vectors spend at least, the paper's
            extras = vectors_and_paper(family, self.noise(), spec.delta,
                                       "" if accountants.sound(acc, family) else acc.name)
        return PrivacyClaim(
            mechanism=text.mechanism, parameters={**cal.noise, **text.parameters}, sampling=family.sampling,
            steps=family.claim_steps, epsilon=cal.epsilon, delta=spec.delta,
            protects=text.protects or (RELATION_VALUES[relation].protects if relation else "nothing"),
            scope=text.scope, needs_public_data=text.needs_public_data, accountant=acc.label(family),
            adjacency=text.adjacency or RELATION_TEXT.get(relation, ""), guarantee=sound, noise=text.noise,
            relation=text.relation or relation or None, covers=tuple(text.covers), **extras)

    # --- training ------------------------------------------------------------------------------------------
    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's model inside whatever ``prepare`` wrapped it in (the default wraps nothing)."""
        return model

    def released(self, model: nn.Module) -> nn.Module:
        """The model the run evaluates and releases: the trained one itself by default (DP-SGD with ``ema``: the
        average of its iterates, a post-processing of them)."""
        return model

    @property
    def augments_inputs(self) -> bool:
        """True when the method itself transforms the images it trains on (DP-SGD's augmult, PATE's shifted
        teachers or semi-supervised student): a model's fixed frontend must then see each transformed image, so the
        harness does not replace the images by the frontend's output in advance."""
        return False

    def learning_rate(self, base_lr: float) -> tuple[float, dict[str, Any]]:
        """The rate the optimizer uses, and what to record about how it was chosen."""
        return base_lr, {"lr_rule": "fixed", "lr_effective": base_lr}

    def begin(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, setup: TrainingSetup
    ) -> tuple[nn.Module, torch.optim.Optimizer]:
        """What the harness calls once per run: the method takes the run's setup (its autocast mode, the observer
        of its released vectors) and prepares the model and optimizer (:meth:`prepare`, the hook a method overrides;
        it refuses there, in one line, an autocast mode under which its private computation would leave float32)."""
        self.amp, self.release_observer = setup.amp, setup.release_observer
        return self.prepare(model, optimizer, setup)

    def prepare(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, setup: TrainingSetup
    ) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Wrap the model and optimizer as the mechanism needs (DP-SGD: per-example clipping and noise)."""
        return model, optimizer

    def variant(self, baseline: Mapping[str, Any] | None = None) -> str:
        """The recipe, as "name=value" pairs of ``variant_options`` that differ from the baseline: the defaults,
        updated by ``baseline`` (the run's preset's options for this method), "" if none."""
        base = {**self.option_defaults, **(baseline or {})}
        return ",".join(f"{k}={self.options[k]}" for k in self.capabilities.variant_options
                        if self.options[k] != base[k])

    def describe(self) -> dict[str, Any]:
        """Extra facts about the prepared method, logged as run parameters (after ``prepare``)."""
        return {}

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y)

    def train_step(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor | None:
        """One step on one Poisson batch; returns the batch loss as a detached 0-d tensor (the harness sums them on
        the device and reads them once per epoch: no host sync per step), or None for an empty batch."""
        if x.shape[0] == 0:
            return None
        optimizer.zero_grad(set_to_none=True)
        with self.autocast(x):
            logits = model(x)
        loss = self.loss(logits.float(), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    def autocast(self, x: torch.Tensor):
        """The context a step's network forward runs in: autocast under ``--amp bf16``, else nothing. Only the
        network goes in it; losses, noise and the optimizer step stay outside, in float32."""
        if self.amp == "none":
            return contextlib.nullcontext()
        return torch.autocast(device_type=x.device.type, dtype=torch.bfloat16)

    def compile(self, model: nn.Module) -> nn.Module:
        """What the harness calls ``train_step`` with under ``--compile``: by default the compiled model (it shares
        the parameters; evaluation and the released model stay the uncompiled one)."""
        return torch.compile(model, dynamic=True)  # Poisson batches vary in size: one graph for all

    def fit(self, context: FitContext) -> FitOutput:
        """The method's own loop (``own_loop = True``): train, return what to evaluate where."""
        raise NotImplementedError(f"method {self.name!r} trains per step; it has no own loop")

    def release_trials(self, claimed: Calibration, *, trials: int, seed: int,
                       progress: Callable[[str], None] | None = None) -> list[ReleaseTrials]:
        """The method's own release code run on a worst-case pair of neighbours, ``trials`` per world, at the noise
        of ``self.calibration`` (which an audit may have scaled) and scored against the claim of ``claimed`` (what
        ``bench audit --mechanism`` calls; THEORY.md, "Auditing"). A method without one has no mechanism audit."""
        raise NotImplementedError(f"method {self.name!r} has no mechanism audit")

    # --- helpers -------------------------------------------------------------------------------------------
    def _need_calibration(self) -> tuple[PrivacySpec, Calibration]:
        if self.calibration is None or self.spec is None:
            raise RuntimeError(f"method {self.name!r} used before calibrate()")
        return self.spec, self.calibration

