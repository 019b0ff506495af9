"""DP-SGD through Opacus: per-example clipping to C, Gaussian noise sigma*C, on the harness's Poisson batches.

Recipe options (De et al. 2022; THEORY.md, "DP-SGD recipes"), none of which changes what is accounted:
- ``augmult=K``: each example of a batch is seen as K randomly augmented copies (``augmult_kind``: a shift of up to
  4 pixels filled with the image's own darkest value for one-channel images, crop-and-flip for colour ones); their
  gradients are averaged into the example's one gradient before it is clipped, so an example still contributes
  one vector of norm <= C (nothing of one example's copies depends on another example);
- ``ema=D``: the model evaluated and released is an exponential moving average of the iterates (decay D, with the
  usual warm-up min(D, (1 + t)/(10 + t))): a post-processing of the private iterates;
- ``weight_standardisation``: every convolution's weight is standardised per output channel (mean 0, variance 1)
  in the forward pass (Qiao et al. 2019; with GroupNorm, as De et al. use it);
- ``max_grad_norm``: the clipping norm C;
- ``micro_batch=M``: the batch's examples pass forward and backward M at a time (with their augmult copies), each
  group's clipped gradients summed into the step's one sum before the noise is added once: the same update as the
  whole batch at once, in the memory of M examples (De et al.'s 4096 x 16 copies need it). 0: the whole batch.

The harness's batches are the ones clipped and noised: no Opacus data loader samples a second time, and
the optimizer averages over the *expected* batch size q*n, as Poisson-sampled DP-SGD requires. sigma is the
smallest noise that the chosen accountant (``pld``, dp_accounting's privacy-loss distribution, the default; ``rdp``;
Opacus' ``prv``) puts within the matched (epsilon, delta, q, T) under the run's relation, found by the suite's one
calibration search (THEORY.md, "The subsampled Gaussian").
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.core.claims import ADD_REMOVE, RELATIONS, ZERO_OUT
from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods.augment import AUGMULT_KINDS, augment_copies, average_copies

from . import DPSGD_INFO, noise
from .accounting.accountants import accountant
from .accounting.releases import GaussianSteps
from .base import Calibration, ClaimText, Method, ReleaseTrials, TrainingSetup
from .dpsgd_mechanism import one_step_trials
from .fast_clipping import BookKeeping, bk_optimizer
from .frozen_norm import frozen_norms, release_statistics
from .weight_standardisation import standardise_weights

# Opacus hooks every trainable layer with a full backward hook; where a layer's input needs no gradient (the first
# layer on the data, or a layer after a fixed frontend), PyTorch warns that the hook fires with respect to the
# module's outputs. That is all Opacus reads, and the per-example gradients are exact all the same (checked one
# example at a time in tests/benchmarks/test_scatternet.py), so the warning is silenced, this one only.
warnings.filterwarnings("ignore", message="Full backward hook is firing when gradients are computed with respect to "
                        "module outputs since no inputs require gradients", category=UserWarning)

GRAD_SAMPLE_MODES = ("auto", "hooks", "functorch", "ghost", "bk")
#: the modes that are Opacus' own (``bk`` is the suite's book-keeping clipping, methods/fast_clipping.py)
OPACUS_MODES = ("hooks", "functorch", "ghost")


#: the accountants a run may choose (option ``accountant``)
ACCOUNTANTS = ("pld", "rdp", "prv")


class DPSGD(Method):
    name = "dpsgd"
    accountants = ACCOUNTANTS
    option_defaults = {"max_grad_norm": 1.0, "accountant": "pld", "grad_sample_mode": "auto",
                       "augmult": 0, "augmult_kind": "auto", "ema": 0.0, "weight_standardisation": False,
                       "micro_batch": 0, "secure_mode": False, "adjacency": ADD_REMOVE,
                       # private statistics of a frozen normalisation (norm=frozen; Tramer & Boneh's MNIST recipe):
                       # the noise multiplier of their two Gaussian releases (0: none), and the clipping norms of each
                       # example's per-channel mean and mean square, chosen on Fashion-MNIST's features (their medians:
                       # public for MNIST; reports/dpsgd-recipes)
                       "norm_noise_multiplier": 0.0, "norm_clip_mean": 0.43, "norm_clip_square": 0.61}
    capabilities = DPSGD_INFO.capabilities  # declared with its registry entry (methods/__init__.py)

    def __init__(self, **options: Any):
        super().__init__(**options)
        o = self.options
        c = o["max_grad_norm"]
        if not (isinstance(c, (int, float)) and c > 0 and c < float("inf")):
            raise ConfigError(f"max_grad_norm={c!r} is not allowed: the clipping norm must be a finite number > 0")
        if o["accountant"] not in ACCOUNTANTS:
            raise ConfigError(f"accountant={o['accountant']!r} is not allowed: choose one of {', '.join(ACCOUNTANTS)}")
        if o["grad_sample_mode"] not in GRAD_SAMPLE_MODES:
            raise ConfigError(f"grad_sample_mode={o['grad_sample_mode']!r} is not allowed: choose one of "
                              f"{', '.join(GRAD_SAMPLE_MODES)}")
        if not (isinstance(o["augmult"], int) and not isinstance(o["augmult"], bool) and 0 <= o["augmult"] <= 64):
            raise ConfigError(f"augmult={o['augmult']!r} is not allowed: give an integer in [0, 64] (0: off)")
        if o["augmult_kind"] not in AUGMULT_KINDS:
            raise ConfigError(f"augmult_kind={o['augmult_kind']!r} is not allowed: choose one of "
                              f"{', '.join(AUGMULT_KINDS)}")
        if not (isinstance(o["ema"], (int, float)) and not isinstance(o["ema"], bool) and 0 <= o["ema"] < 1):
            raise ConfigError(f"ema={o['ema']!r} is not allowed: give a decay in [0, 1) (0: off)")
        if not isinstance(o["weight_standardisation"], bool):
            raise ConfigError(f"weight_standardisation={o['weight_standardisation']!r} is not allowed: true or false")
        if not (isinstance(o["micro_batch"], int) and not isinstance(o["micro_batch"], bool) and o["micro_batch"] >= 0):
            raise ConfigError(f"micro_batch={o['micro_batch']!r} is not allowed: give an integer >= 0 (0: the whole "
                              "batch at once)")
        if o["adjacency"] not in RELATIONS:
            raise ConfigError(f"adjacency={o['adjacency']!r} is not allowed for dpsgd: choose one of "
                              f"{', '.join(RELATIONS)}")
        self.relation = o["adjacency"]
        noise.check_secure_mode(o["secure_mode"])
        for key in ("norm_noise_multiplier", "norm_clip_mean", "norm_clip_square"):
            v = o[key]
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                    and (v > 0 or key == "norm_noise_multiplier")):
                raise ConfigError(f"{key}={v!r} is not allowed: give a finite number "
                                  + (">= 0 (0: no private statistics)" if key == "norm_noise_multiplier" else "> 0"))
        # what the accountant's theorem covers (the relation, the prior releases), refused before any budget is known
        accountant(o["accountant"]).check(GaussianSteps(0.01, 1, self.relation, self.prior_releases()))
        if o["weight_standardisation"] and o["grad_sample_mode"] == "bk":
            raise ConfigError("weight_standardisation is not allowed with grad_sample_mode=bk: a standardised weight's "
                              "per-example gradient is not a product of the layer's input and output gradient; use "
                              "hooks or functorch")
        if o["micro_batch"] and o["grad_sample_mode"] == "ghost":
            raise ConfigError("micro_batch is not allowed with grad_sample_mode=ghost: Opacus' ghost-clipping optimizer "
                              "does not sum clipped gradients over several backward passes; use hooks or functorch")
        if o["augmult"] and o["grad_sample_mode"] == "ghost":
            raise ConfigError("augmult is not allowed with grad_sample_mode=ghost: ghost clipping never forms the "
                              "per-example gradients that augmult averages; use hooks or functorch")
        self.mode: str | None = None
        self._criterion = None
        self._ema: nn.Module | None = None
        self._ema_steps = 0
        self._augmenter = torch.Generator()
        self._bk = None
        self._noise_source = ""
        #: the white-box gradient-canary audit's hook (benchmarks/audits/canary_gradients.py); None outside that
        #: audit. It takes the canary rows out of each batch before the forward pass (``split``) and puts their
        #: per-example gradients, on coordinates of their own, beside the batch's (``append_rows`` for Opacus'
        #: clipping, ``add_clipped_sum`` for book-keeping's), so that this optimizer clips, noises and steps them
        #: with the real examples' in the same step
        self.gradient_canaries: Any = None

    def prior_releases(self) -> tuple[float, int]:
        """The frozen normalisation's private statistics: two Gaussian releases (each example's clipped per-channel
        mean, and mean square) of noise ``norm_noise_multiplier``, before the steps; none when it is 0."""
        sigma = float(self.options["norm_noise_multiplier"])
        return (sigma, 2) if sigma > 0 else (0.0, 0)

    def release_family(self, spec: PrivacySpec) -> GaussianSteps:
        """The statistics' releases (if any), then T Poisson-subsampled Gaussian steps, under the run's relation."""
        return GaussianSteps(spec.sampling_rate, spec.steps, self.relation, self.prior_releases())

    @property
    def sigma(self) -> float:
        return self.noise()

    def claim_text(self) -> ClaimText:
        parameters = {"max_grad_norm": self.options["max_grad_norm"]}
        if self.prior_releases()[1]:
            parameters.update({k: self.options[k] for k in ("norm_noise_multiplier", "norm_clip_mean",
                                                            "norm_clip_square")})
        return ClaimText(mechanism="subsampled_gaussian", scope=self._scope(), parameters=parameters,
                         noise=noise.describe(self.options["secure_mode"]))

    def _scope(self) -> str:
        scope = self._steps_scope()
        if self.prior_releases()[1]:
            scope += ("; and, before the first step, the frozen normalisation's statistics: two Gaussian releases of "
                      "the sums of each example's per-channel feature mean and mean square, each clipped to its norm "
                      "(norm_clip_mean, norm_clip_square), composed with the steps by the same accountant")
        return scope

    def _steps_scope(self) -> str:
        if self.relation == ADD_REMOVE:
            return ("every iterate of the model parameters (each example's input and label, add/remove one example): "
                    "each step releases one noised sum of clipped gradients, so Poisson subsampling amplifies it")
        if self.relation == ZERO_OUT:
            return ("every iterate of the model parameters, one example, input and label, replaced by the null "
                    "example (zero-out: its gradient 0; n public): each step releases one noised sum of clipped "
                    "gradients, which the example moves by at most C when it is sampled, as under add/remove "
                    "(THEORY.md, 'Neighbouring relations')")
        return ("every iterate of the model parameters, one input replaced by any other (its label and membership "
                "public): each step releases one noised sum of clipped gradients, in which the replaced example's "
                "gradient moves the sum by at most 2C when it is sampled (THEORY.md, 'Neighbouring relations')")

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer, setup: TrainingSetup):
        from opacus.grad_sample.utils import prepare_module
        from opacus.optimizers import get_optimizer_class
        from opacus.validators import ModuleValidator

        spec, cal = self._need_calibration()
        o = self.options
        self._set_statistics(model, setup)
        if not ModuleValidator.is_valid(model):  # BatchNorm -> GroupNorm: per-example gradients must exist
            model = ModuleValidator.fix(model)
            optimizer = type(optimizer)(model.parameters(), **optimizer.defaults)
        if o["weight_standardisation"]:
            model = standardise_weights(model)  # the same parameter objects: the optimizer still holds them
        mode = o["grad_sample_mode"]
        if mode == "auto":  # the model registry's measured fastest mode for this model
            mode = setup.grad_sample_mode
            if mode in ("ghost", "bk") and (self.amp != "none" or o["weight_standardisation"]):
                mode = "hooks"  # the norms would be taken in bf16 (see _check_amp); a standardised weight is no product
            if mode == "ghost" and (o["augmult"] or o["micro_batch"]):
                mode = "hooks"  # Opacus' ghost clipping never forms the per-example gradients augmult averages
        self._check_amp(mode)
        # the augmentations' own stream, drawn from the run's seeded generator (same seed, same copies)
        self._augmenter.manual_seed(int(torch.randint(0, 2**62, (1,))))
        if o["ema"]:
            self._ema = copy.deepcopy(model).eval()
            for p in self._ema.parameters():
                p.requires_grad_(False)
            self._ema_steps = 0
        self.mode = mode
        generator = self._noise_generator(setup.device)
        expected = max(1, round(spec.sampling_rate * setup.train_size))
        if mode == "bk":
            self._bk = BookKeeping(model, self.options["max_grad_norm"])
            return model, bk_optimizer(optimizer, noise_multiplier=cal.noise["noise_multiplier"],
                                        max_grad_norm=self.options["max_grad_norm"], expected_batch_size=expected,
                                        secure_mode=o["secure_mode"], generator=generator)
        kwargs: dict[str, Any] = {"batch_first": True, "loss_reduction": "mean"}
        if mode == "ghost":
            kwargs["max_grad_norm"] = self.options["max_grad_norm"]
        module = prepare_module(model, grad_sample_mode=mode, **kwargs)
        opt_cls = get_optimizer_class(clipping="flat", distributed=False, grad_sample_mode=mode)
        dp_optimizer = opt_cls(optimizer, noise_multiplier=cal.noise["noise_multiplier"],
                               max_grad_norm=self.options["max_grad_norm"], expected_batch_size=expected,
                               loss_reduction="mean", generator=generator, secure_mode=o["secure_mode"])
        if mode == "ghost":
            from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

            self._criterion = DPLossFastGradientClipping(module, dp_optimizer, nn.CrossEntropyLoss(), "mean")
        return module, dp_optimizer

    def _set_statistics(self, model: nn.Module, setup: TrainingSetup) -> None:
        """The frozen normalisation's statistics, released privately (methods/frozen_norm.py). A frozen model without
        the noise, or the noise without one, is refused by the resolver before any work; here only what it cannot see
        (the model itself) is checked."""
        frozen = frozen_norms(model)
        sigma_r = float(self.options["norm_noise_multiplier"])
        if bool(frozen) != (sigma_r > 0) or len(frozen) > 1:
            raise ConfigError(f"norm_noise_multiplier={sigma_r:g} is not allowed with {len(frozen)} frozen "
                              "normalisation(s): give norm=frozen and a noise multiplier > 0 together")
        if frozen:
            release_statistics(frozen[0], setup.x_train, sigma_r=sigma_r, secure=self.options["secure_mode"],
                               clip_mean=float(self.options["norm_clip_mean"]),
                               clip_square=float(self.options["norm_clip_square"]),
                               generator=self._noise_generator(setup.x_train.device))

    def _noise_generator(self, device: str | torch.device = "cpu") -> torch.Generator | None:
        """None (the run's seeded global stream) unless ``secure_mode``: then Opacus' floating-point-safe sampling
        (four draws per coordinate, Holohan & Braghin 2021) from torchcsprng's /dev/urandom generator where it is
        installed, else from a generator seeded by /dev/urandom (unpredictable, but not a CSPRNG: said in the run's
        description). Either way the run is no longer reproducible from its seed. The generator lives on the
        parameters' ``device``: Opacus draws the noise there with it (torch refuses a CPU generator for a CUDA draw)."""
        if not self.options["secure_mode"]:
            self._noise_source = ""
            return None
        self._noise_source = noise.secret_source()
        return noise.torch_generator(0, secure=True, device=device)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """Opacus' GradSampleModule keeps the user's model as ``_module``."""
        while hasattr(model, "_module"):
            model = model._module
        return model

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"grad_sample_mode": self.mode} if self.mode else {}
        if self._noise_source:
            out["secure_noise"] = self._noise_source
        return out

    @property
    def augments_inputs(self) -> bool:
        return int(self.options["augmult"]) > 0

    def released(self, model: nn.Module) -> nn.Module:
        return self._ema if self._ema is not None else model

    @torch.no_grad()
    def _update_ema(self, model: nn.Module) -> None:
        self._ema_steps += 1
        decay = min(float(self.options["ema"]), (1 + self._ema_steps) / (10 + self._ema_steps))
        live = self.unwrap(model)
        for e, p in zip(self._ema.parameters(), live.parameters()):
            e.lerp_(p, 1.0 - decay)
        for e, b in zip(self._ema.buffers(), live.buffers()):
            e.copy_(b)

    def train_step(self, model, optimizer, x, y):
        """An empty batch is still a step: the optimizer adds noise to a zero gradient, as the accountant assumes.

        Opacus' hooks and ghost modes take an empty batch through the normal path; functorch's vmap cannot,
        so there the per-example gradients are set to empty tensors by hand.
        """
        canaries = self.gradient_canaries
        if canaries is not None:
            x, y = canaries.split(x, y)
        if self.mode == "bk":
            return self._bk_step(model, optimizer, x, y)
        optimizer.zero_grad(set_to_none=True)
        if x.shape[0] == 0 and self.mode == "functorch":
            _noise_only_step(model, optimizer, canaries)
            self._after_step(model)
            return None
        k = int(self.options["augmult"])
        n = x.shape[0]
        if k and n:
            x = augment_copies(x, k, self.options["augmult_kind"], self._augmenter)
            y = y.repeat_interleave(k)
        m = int(self.options["micro_batch"]) or n
        rows = max(1, m * max(k, 1))  # an example's copies stay in one group
        starts = list(range(0, x.shape[0], rows)) or [0]
        total = None
        for i, start in enumerate(starts):
            if i:
                optimizer.zero_grad(set_to_none=True)  # the clipped sum so far is kept (the last step was skipped)
            xs, ys = x[start : start + rows], y[start : start + rows]
            with self.autocast(xs):
                logits = model(xs)
            if self._criterion is not None:
                loss = self._criterion(logits.float(), ys)
            else:
                loss = F.cross_entropy(logits.float(), ys)
            loss.backward()
            _per_example_gradients_in_float32(model)
            if k and n:
                average_copies(model, k)
            if canaries is not None and i == 0:
                canaries.append_rows(optimizer)
            if i < len(starts) - 1:
                optimizer.signal_skip_step(do_skip=True)  # clip and add to the sum; no noise, no update yet
            optimizer.step()
            part = loss.detach() * xs.shape[0]
            total = part if total is None else total + part
        self._after_step(model)
        return total / x.shape[0] if n else None

    def release_trials(self, claimed: Calibration, *, trials: int, seed: int,
                       progress: Callable[[str], None] | None = None, columns: int = 2000) -> list[ReleaseTrials]:
        """One step of this DP-SGD per trial on Dirac canaries (methods/dpsgd_mechanism.py)."""
        return one_step_trials(self, trials=trials, seed=seed, progress=progress, columns=columns)

    def _bk_step(self, model, optimizer, x, y):
        """Book-keeping: one forward and one backward pass per group of rows give the clipped sum (fast_clipping.py);
        the noise is added once, to the whole batch's sum."""
        optimizer.zero_grad(set_to_none=True)
        k = int(self.options["augmult"])
        n = x.shape[0]
        if k and n:
            x = augment_copies(x, k, self.options["augmult_kind"], self._augmenter)
            y = y.repeat_interleave(k)
        group = max(k, 1)
        rows = max(1, (int(self.options["micro_batch"]) or n) * group)
        total = None
        for start in range(0, x.shape[0], rows):
            xs, ys = x[start : start + rows], y[start : start + rows]

            def forward(xs=xs):
                with self.autocast(xs):
                    return model(xs)

            loss, _ = self._bk.clipped_sum(forward, ys, group=group)
            part = loss * xs.shape[0]
            total = part if total is None else total + part
        if self.gradient_canaries is not None:
            self.gradient_canaries.add_clipped_sum()
        optimizer.step()
        self._after_step(model)
        return total / x.shape[0] if n else None

    def _after_step(self, model: nn.Module) -> None:
        if self._ema is not None:
            self._update_ema(model)

    def _check_amp(self, mode: str) -> None:
        if self.amp != "none" and mode in ("ghost", "bk"):
            raise ConfigError(f"--amp {self.amp} is not allowed for dpsgd with grad_sample_mode={mode}: ghost and "
                              "book-keeping clipping compute the per-example norms from activations and output "
                              "gradients in the autocast dtype; use hooks or functorch")


def _per_example_gradients_in_float32(model: nn.Module) -> None:
    """Under autocast Opacus computes per-example gradients in the autocast dtype; clipping and noise must see
    float32 (the parameters' own dtype)."""
    for p in model.parameters():
        gs = getattr(p, "grad_sample", None)
        if isinstance(gs, torch.Tensor) and gs.dtype != p.dtype:
            p.grad_sample = gs.to(p.dtype)


def _noise_only_step(model: nn.Module, optimizer, canaries: Any = None) -> None:
    """Zero per-example gradients for an empty batch, so Opacus clips nothing and adds only noise (to the sampled
    gradient canaries' own rows, where an audit has them)."""
    for p in model.parameters():
        if p.requires_grad:
            p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
    if canaries is not None:
        canaries.append_rows(optimizer)
    optimizer.step()
