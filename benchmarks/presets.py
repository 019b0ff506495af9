"""Presets: named bundles of run settings per data set. Explicit flags override any value here.

- ``smoke``: seconds; 2,000 training examples, a tiny CNN. For tests.
- ``cpu``: the full MNIST / Fashion-MNIST training set, the small CNN, minutes per method on 2 cores.
- ``paper``: the main paper's Section 4.1.2 configurations exactly (THEORY.md, "Dirichlet-softmax").
- ``best``: each method at its own best recipe (its own q, T, model, optimiser) at the same (epsilon, delta): the
  "own best" view, beside the matched (q, T) of the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from inputdp.core.claims import ADD_REMOVE, RELATION_VALUES, ZERO_OUT
from inputdp.core.errors import ConfigError
from inputdp.core.registry import Entry, Registry

#: what a preset may set per method: run settings, and ``configs_tried``, how many configurations were tried to
#: choose this one (tuning on private data is not free, Papernot & Steinke 2022; the leaderboard lists it)
METHOD_SETTINGS = ("optimizer", "lr", "momentum", "sampling_rate", "steps", "model", "model_width", "norm",
                   "augment", "lr_warmup_steps", "train_examples", "configs_tried")
#: a preset's view: "matched" runs every method at one (q, T); "own_best" runs each at its own best recipe, at the
#: same (epsilon, delta)
VIEWS = ("matched", "own_best")


@dataclass(frozen=True, kw_only=True)
class DatasetSettings:
    model: str
    sampling_rate: float
    steps: int
    lr: float
    delta: float = 1e-5
    momentum: float = 0.0
    augment: bool = False
    model_width: int = 0
    train_examples: int = 0
    test_examples: int = 0
    lr_warmup_steps: int = 0
    norm: str = "auto"
    #: method name -> option defaults for this preset (explicit options override them)
    method_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: method name -> run settings that differ for that method (any of METHOD_SETTINGS; explicit flags win)
    method_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: method name -> ((epsilon, settings[, relations]), ...): from that epsilon up, these settings replace the
    #: method's own (a recipe published for one budget, e.g. Tramer & Boneh's at epsilon 3), under the neighbouring
    #: relations named (the run's ``adjacency``; every relation where none is named: a recipe tuned at one relation's
    #: noise need not suit another's); the largest epsilon <= the run's among those that apply wins
    method_settings_from_epsilon: Mapping[str, tuple[tuple, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        steps_of = {m: [_recipe_step(m, step) for step in steps] for m, steps in self.method_settings_from_epsilon.items()}
        every = [(f"method_settings[{m!r}]", own) for m, own in self.method_settings.items()]
        every += [(f"method_settings_from_epsilon[{m!r}]", own) for m, steps in steps_of.items() for _eps, own, _r in steps]
        for where, own in every:
            unknown = sorted(set(own) - set(METHOD_SETTINGS))
            if unknown:
                raise ValueError(f"{where} has {unknown[0]!r}: allowed are {', '.join(METHOD_SETTINGS)}")
        object.__setattr__(self, "method_settings_from_epsilon", MappingProxyType(
            {m: tuple(sorted(steps, key=lambda step: step[0])) for m, steps in steps_of.items()}))
        # A preset is a constant: the nested mappings are copied and frozen, so two data sets that were given
        # the same dict share no state, and nobody can change a preset after it is made.
        for name in ("method_options", "method_settings"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))


    def own(self, method: str, epsilon: float, relation: str) -> Mapping[str, Any]:
        """The method's own settings in this preset at ``epsilon`` under ``relation`` (the run's adjacency,
        :func:`~inputdp.core.claims.adjacency_of`; "" for a method without one): its settings, updated by the recipe
        of the largest ``method_settings_from_epsilon`` threshold at or below epsilon that applies to the relation."""
        own = dict(self.method_settings.get(method, {}))
        for threshold, settings, relations in self.method_settings_from_epsilon.get(method, ()):
            if epsilon >= threshold and (not relations or relation in relations):
                own = {**own, **settings}
        return own


def _recipe_step(method: str, step: tuple) -> tuple[float, Mapping[str, Any], tuple[str, ...]]:
    """One ``method_settings_from_epsilon`` entry as (epsilon, frozen settings, relations)."""
    if len(step) not in (2, 3):
        raise ValueError(f"method_settings_from_epsilon[{method!r}] has {step!r}: give (epsilon, settings) or "
                         "(epsilon, settings, relations)")
    if len(step) == 3 and isinstance(step[2], str):
        raise ValueError(f"method_settings_from_epsilon[{method!r}] has relations {step[2]!r}: give a tuple of them, "
                         f"e.g. ({step[2]!r},)")
    relations = tuple(step[2]) if len(step) == 3 else ()
    unknown = sorted(set(relations) - set(RELATION_VALUES))
    if unknown:
        raise ValueError(f"method_settings_from_epsilon[{method!r}] names relation {unknown[0]!r}: allowed are "
                         f"{', '.join(RELATION_VALUES)}")
    return float(step[0]), MappingProxyType(dict(step[1])), relations


def _frozen(nested: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Mapping[str, Any]]:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in nested.items()})


@dataclass(frozen=True, kw_only=True)
class Preset(Entry):
    per_dataset: Mapping[str, DatasetSettings]
    fallback: DatasetSettings | None = None
    view: str = "matched"
    #: what one run takes, as measured (minutes on the machine named), announced when a command falls back to
    #: the preset and shown by ``bench list``; "" where none was measured
    time_per_run: str = ""
    #: (fewest, most) minutes a run of one method took there: the announced estimate of a sweep
    minutes_per_run: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"view={self.view!r}: choose one of {', '.join(VIEWS)}")
        object.__setattr__(self, "per_dataset", MappingProxyType(dict(self.per_dataset)))

    def settings(self, dataset: str) -> DatasetSettings:
        if dataset in self.per_dataset:
            return self.per_dataset[dataset]
        if self.fallback is not None:
            return self.fallback
        raise ConfigError(
            f"preset {self.name!r} has no configuration for data set {dataset!r}: it covers "
            f"{', '.join(self.per_dataset)}"
        )


#: the entry-point group that installed packages use to add presets (an entry point naming a Preset)
ENTRY_POINT_GROUP = "inputdp.presets"
PRESETS: Registry[Preset] = Registry("preset", group=ENTRY_POINT_GROUP, entry_type=Preset)


def _registered(preset: str, dataset: str) -> tuple[Preset, DatasetSettings] | None:
    """A registered preset and its settings for ``dataset``; None for an unregistered name or an uncovered set."""
    if preset not in PRESETS.names():
        return None
    p = PRESETS.get(preset)
    try:
        return p, p.settings(dataset)
    except ConfigError:
        return None


def preset_options(preset: str, dataset: str, method: str) -> dict[str, Any]:
    """The options a registered preset gives ``method`` on ``dataset`` ({} otherwise): what a run's recipe is
    compared with to name its variant."""
    found = _registered(preset, dataset)
    return dict(found[1].method_options.get(method, {})) if found else {}


def view_of(preset: str, dataset: str, method: str, epsilon: float, relation: str) -> tuple[str, int]:
    """(the preset's view, how many configurations were tried for this method there at ``epsilon`` under
    ``relation``: 1 unless the preset says); ("matched", 1) for a name that is not a registered preset."""
    found = _registered(preset, dataset)
    if found is None:
        return ("matched" if preset not in PRESETS.names() else PRESETS.get(preset).view), 1
    return found[0].view, int(found[1].own(method, epsilon, relation).get("configs_tried", 1))


_SMOKE = DatasetSettings(
    model="small_cnn", model_width=8, sampling_rate=0.05, steps=40, lr=0.05, momentum=0.9,
    train_examples=2000, test_examples=1000,
    method_options={"dirichlet_softmax": {"lr_rule": "kappa"},
                    "pate": {"teachers": 10, "threshold": 7.0, "sigma1": 2.0, "sigma2": 1.0, "queries": 200,
                             "public_pool": 800, "teacher_epochs": 10, "student_epochs": 30}},
)
PRESETS.register(Preset(name="smoke", target="", summary="seconds: 2,000 examples, 2 epochs of a tiny CNN; for tests",
                        per_dataset={}, fallback=_SMOKE, time_per_run="seconds a run on 2 cores",
                        minutes_per_run=(0.05, 0.5)))

# q = 256/60000, T = 2340 (10 epochs): Dirichlet's accountant floor here is eps ~ 0.25, so eps = 1 is feasible.
# A one-epoch linear warm-up for every method. The Dirichlet loss scales its gradient with s_y, so under SGD a
# class pushed near s_y = 0 early stays dead (methods/README.md, "dead classes"); Adam's per-parameter scaling
# revives it, so dirichlet_softmax uses Adam (lr 1e-3) here, chosen by measurement.
# The sound input-private methods read a fixed feature map: ScatterNet's scattering transform (data-independent, the
# map DP-SGD's best recipe trains a linear model on), GroupNorm per example; their one release ignores (q, T).
_SCATTER_FEATURES = {"model": "scatter_linear", "norm": "group"}
# dp_least_squares' estimator (psd, ridge 0.1) was chosen on held-out training examples among 22 settings
# (reports/sound-input-private/README.md, "How the estimator was chosen")
_SOUND_INPUT_PRIVATE = {"dp_least_squares": {**_SCATTER_FEATURES, "configs_tried": 22},
                        "feature_perturbation": _SCATTER_FEATURES}
_CPU_MNIST = DatasetSettings(
    model="small_cnn", sampling_rate=256 / 60000, steps=2340, lr=0.05, momentum=0.9, lr_warmup_steps=234,
    method_settings={"dirichlet_softmax": {"optimizer": "adam", "lr": 1e-3, "momentum": 0.0}, **_SOUND_INPUT_PRIVATE},
    # PATE: the paper's MNIST setting (250 teachers, T = 200, sigma1 = 150, sigma2 = 40, 640 queries), the two
    # sigmas scaled together to the matched epsilon
    method_options={"dirichlet_softmax": {"lr_rule": "fixed"}, "pate": {}},
)
PRESETS.register(Preset(
    name="cpu", target="", summary="minutes per method on 2 cores: full MNIST/FashionMNIST, small CNN, 10 epochs",
    per_dataset={"mnist": _CPU_MNIST, "fashionmnist": _CPU_MNIST},
    # the medians of reports/mnist-cpu's uncontended runs (2026-12-05, 2 cores): dp_least_squares 0.42 to pate 2.34
    time_per_run="0.4 to 2.3 minutes a run on 2 cores (MNIST; reports/mnist-cpu)", minutes_per_run=(0.4, 2.3),
    fallback=DatasetSettings(model="small_cnn", sampling_rate=256 / 50000, steps=1950, lr=0.05, momentum=0.9,
                             lr_warmup_steps=195,
                             method_settings={"dirichlet_softmax": {"optimizer": "adam", "lr": 1e-3, "momentum": 0.0}},
                             method_options={"dirichlet_softmax": {"lr_rule": "fixed"}}),
))

# The paper, Section 4.1.2: alpha = 3, delta = 1e-5, plain SGD, the listed (q, T, lr, model) per data set, and the
# accountants the published figures used (Dirichlet: the paper's; the penultimate Gaussian: DP-SGD's, as "similar to
# DP-SGD" reads), so that a run reproduces the published noise: numbers for comparison, not guarantees of the
# released vectors (THEORY.md, "Per-example releases under Poisson sampling"); every other preset calibrates both
# methods by the per-example curve.
_PAPER_DIRICHLET = {"alpha": 3.0, "lr_rule": "fixed", "accountant": "paper"}
_PAPER_DPSGD = {"max_grad_norm": 1.0}
_PAPER_PENULTIMATE = {"accountant": "rdp"}
PRESETS.register(Preset(
    name="paper", target="", summary="the paper's Section 4.1.2 configurations exactly (GPU-sized)",
    time_per_run="GPU-sized: not measured on a CPU (hours a run)",
    per_dataset={
        "cifar10": DatasetSettings(model="resnet18", sampling_rate=250 / 50000, steps=20000, lr=0.1, augment=True,
                                   method_options={"dirichlet_softmax": _PAPER_DIRICHLET, "dpsgd": _PAPER_DPSGD,
                                                "gaussian_penultimate": _PAPER_PENULTIMATE}),
        "mnist": DatasetSettings(model="inception_simple", sampling_rate=250 / 60000, steps=9600, lr=0.1,
                                 method_options={"dirichlet_softmax": _PAPER_DIRICHLET, "dpsgd": _PAPER_DPSGD,
                                                "gaussian_penultimate": _PAPER_PENULTIMATE}),
        "fashionmnist": DatasetSettings(model="inception_simple", sampling_rate=250 / 60000, steps=9600, lr=0.1,
                                        method_options={"dirichlet_softmax": _PAPER_DIRICHLET,
                                                        "dpsgd": _PAPER_DPSGD,
                                                        "gaussian_penultimate": _PAPER_PENULTIMATE}),
        "svhn": DatasetSettings(model="resnet18", sampling_rate=250 / 73257, steps=11722, lr=0.1,
                                method_options={"dirichlet_softmax": _PAPER_DIRICHLET, "dpsgd": _PAPER_DPSGD,
                                                "gaussian_penultimate": _PAPER_PENULTIMATE}),
        "dermamnist": DatasetSettings(model="resnet9", sampling_rate=70 / 7007, steps=6006, lr=0.05,
                                      method_options={"dirichlet_softmax": _PAPER_DIRICHLET, "dpsgd": _PAPER_DPSGD,
                                                "gaussian_penultimate": _PAPER_PENULTIMATE}),
    },
))


# Each method at its own best published or measured recipe, at the same (epsilon, delta) (view "own_best"); each
# recipe is the best of the configurations counted in its ``configs_tried``, which reports/mnist-best/README.md ("How
# the recipes were chosen") lists with their test and held-out accuracies:
# - dpsgd: Tramèr & Boneh (2021)'s ScatterNet + linear model (scattering features, GroupNorm, one linear layer; SGD
#   lr 8, momentum 0.9, C = 0.1, batch 4096 as a Poisson rate), 20 epochs, on MNIST and Fashion-MNIST alike;
# - dirichlet_softmax: the cpu preset's recipe (Adam) with twice its batch at the same T;
# - gaussian_penultimate and the non-private reference: the cpu preset's;
# - pate: the paper's MNIST setting with augmented teachers and the semi-supervised student.
_BEST_COMMON = {"dirichlet_softmax": {"optimizer": "adam", "lr": 1e-3, "momentum": 0.0, "sampling_rate": 512 / 60000,
                                     "steps": 2340, "configs_tried": 7},
                "pate": {"configs_tried": 4}, **_SOUND_INPUT_PRIVATE}
_BEST_OPTIONS = {"dirichlet_softmax": {"lr_rule": "fixed"}, "dpsgd": {"max_grad_norm": 0.1},
                 # the best of the 4 student/teacher recipes measured in the paper's setting (benchmarks/docs/speed.md, PATE)
                 "pate": {"student": "semi_supervised", "semi_epochs": 80, "teacher_shift": 2, "teacher_epochs": 40}}
_SCATTER_Q = 4096 / 60000
_BEST_SCATTER_DPSGD = {"model": "scatter_linear", "norm": "group", "sampling_rate": _SCATTER_Q,
                       "steps": 20 * round(1 / _SCATTER_Q), "lr": 8.0, "momentum": 0.9, "lr_warmup_steps": 0}


#: Tramer & Boneh's published Fashion-MNIST recipe (their README: batch 8192, lr 16, GroupNorm(27), C = 0.1, 50
#: epochs at epsilon 3): 89.49% median of 3 seeds at epsilon 2.93 against the recipe above's 89.23, but 86.66 against
#: 87.91 at epsilon 1 (reports/dpsgd-recipes), so it is the recipe from 2.93 up, at the noise it was tuned at: under
#: add/remove and zero-out (sigma 3.84), not one input replaced (sigma 7.41), where it read 87.73 +- 0.26 against the
#: recipe above's 88.60 +- 0.12 (reports/relations); choosing among the recipes counts in configs_tried (4: three
#: measured recipes and the published one, reports/dpsgd-recipes), the same 4 under every relation
_TB_FASHION_Q = 8192 / 60000
_TB_FASHION = {**_BEST_SCATTER_DPSGD, "sampling_rate": _TB_FASHION_Q, "steps": 366, "lr": 16.0, "configs_tried": 4}


def _best(dpsgd: dict, dpsgd_from_epsilon: tuple = ()) -> DatasetSettings:
    return DatasetSettings(
        model="small_cnn", sampling_rate=256 / 60000, steps=2340, lr=0.05, momentum=0.9, lr_warmup_steps=234,
        method_settings={**_BEST_COMMON, "dpsgd": dpsgd}, method_options=_BEST_OPTIONS,
        method_settings_from_epsilon={"dpsgd": dpsgd_from_epsilon} if dpsgd_from_epsilon else {},
    )


# CIFAR-10 (GPU-sized): DP-SGD as De et al. (2022) train WRN-16-4 (their released configuration for epsilon 1:
# batch 4096, 875 steps, SGD lr 2, C = 1, augmentation multiplicity 16 with crop and flip, EMA 0.999, GroupNorm and
# weight standardisation); the others as the main paper's preset (ResNet-18, q = 0.005, T = 20,000).
_BEST_CIFAR = DatasetSettings(
    model="resnet18", sampling_rate=250 / 50000, steps=20000, lr=0.1, augment=True,
    method_settings={"dpsgd": {"model": "wrn16_4", "norm": "group", "sampling_rate": 4096 / 50000, "steps": 875,
                               "lr": 2.0, "momentum": 0.0, "augment": False, "configs_tried": 1}},
    # the paper's Dirichlet recipe, calibrated (as in every preset but ``paper``) by the per-example curve
    method_options={"dirichlet_softmax": {"alpha": 3.0, "lr_rule": "fixed"},
                    # 32 examples (512 augmented copies) per backward pass: their per-copy gradients take about
                    # 5.5 GB on WRN-16-4's 2.7M parameters, where the whole batch's 65,536 would take 700 GB
                    "dpsgd": {"max_grad_norm": 1.0, "augmult": 16, "ema": 0.999, "weight_standardisation": True,
                              "micro_batch": 32}},
)

PRESETS.register(Preset(
    name="best", target="", view="own_best",
    summary="each method at its own best recipe, same (epsilon, delta): DP-SGD on ScatterNet features (CPU)",
    # reports/mnist-best (2026-12-05, 2 cores): dpsgd's median 0.22 minutes; PATE 9 to 21 (benchmarks/docs/speed.md)
    time_per_run="0.2 to 21 minutes a run on 2 cores (MNIST; PATE the longest; reports/mnist-best)",
    minutes_per_run=(0.2, 21.0),
    per_dataset={"mnist": _best({**_BEST_SCATTER_DPSGD, "configs_tried": 4}),
                 "fashionmnist": _best({**_BEST_SCATTER_DPSGD, "configs_tried": 4},
                                       ((2.93, _TB_FASHION, (ADD_REMOVE, ZERO_OUT)),)),
                 "cifar10": _BEST_CIFAR},
))


#: ``bench gpu-check``'s defaults: the paper's shapes (ResNet-18 on CIFAR-10, the simplified Inception on MNIST)
#: and the pair whose epoch-time ratio the paper reports (about 60 s / 30 s on a Quadro RTX 6000)
GPU_CHECK_SHAPES = "cifar10:resnet18,mnist:inception_simple"
GPU_CHECK_COMPARE = ("dpsgd", "dirichlet_softmax")
