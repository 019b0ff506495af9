"""The canaries of a one-run audit (THEORY.md, "Auditing"): how each kind is made, and the training set under the
claim's relation (an excluded canary absent for add/remove, its slot holding its replacement for replace_input;
input canaries cannot build zero-out's null example and say so)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from inputdp.core.claims import ADD_REMOVE, NULL, RELATION_VALUES, REPLACED, Relation
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData, blank_value, normalise

from ..models import MODELS
from ..models.canary_inputs import CanaryInputs, extra_channels
from .scores import ONE_TEST_KIND, SCORES

CANARY_KINDS = ("mislabeled", "random_pattern", "blank_patch", "exclusive_support", "canary_inputs")


#: random-pattern canaries: pixel spread as a multiple of the training data's; the scale at which a non-private
#: model memorises them best (weaker patterns are half-fitted, stronger ones answered near-uniformly: measured over
#: 1x-10x in reports/mnist-cpu/README.md, "How the audit's constants were fixed")
PATTERN_SCALE = 2.0


#: the value of canary j on its own coordinate (``canary_inputs``); every other example holds 0 there
CANARY_INPUT_VALUE = 1.0


#: fresh canaries per audit that no run trains on: the null population of the ``reference_rank`` score
REFERENCE_SIZE = 5000


@dataclass
class Canaries:
    x: torch.Tensor
    y: torch.Tensor
    included: np.ndarray
    kind: str
    base: TensorData = field(repr=False)  # the training data without any canary
    #: fresh canaries of the same kind and recipe that no training run sees: the null population of the
    #: ``reference_rank`` score (drawn from their own generator, independent of the inclusion coins)
    x_ref: torch.Tensor | None = field(default=None, repr=False)
    y_ref: torch.Tensor | None = field(default=None, repr=False)
    #: exclusive-support canaries: each one's own flat input coordinates
    support: list[torch.Tensor] | None = field(default=None, repr=False)
    #: the audit's hook into the run (``harness.run``'s ``wrap_model``): the model built for the data, widened to
    #: read the canaries' own coordinates (``canary_inputs``); None for canaries in the data's own input space
    widen: Callable[[nn.Module], nn.Module] | None = field(default=None, repr=False)


def _synthetic(kind: str, data: TensorData, n: int, g: torch.Generator,
               level: tuple[float, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """n input-space canaries (inputs, labels) of a synthetic kind, drawn from ``g``. ``level``: (noise std, 0)
    for random patterns, (background, patch) pixel values for blank patches."""
    c = data.info.num_classes
    device = data.x_train.device
    if kind == "random_pattern":
        x = (level[0] * torch.randn((n, *data.shape), generator=g)).to(device)
        return x, torch.randint(0, c, (n,), generator=g).to(device)
    ch, h, w = data.shape
    size = max(3, h // 4)
    x = torch.full((n, ch, h, w), level[0], device=device)
    rows = torch.randint(0, h - size + 1, (n,), generator=g)
    cols = torch.randint(0, w - size + 1, (n,), generator=g)
    for i in range(n):
        x[i, :, rows[i]: rows[i] + size, cols[i]: cols[i] + size] = level[1]
    return x, torch.randint(0, c, (n,), generator=g).to(device)


def make_canaries(kind: str, data: TensorData, m: int, seed: int, *, pattern_scale: float = PATTERN_SCALE,
                  reference: int = REFERENCE_SIZE) -> Canaries:
    """m canaries of a kind, the training data they are added to, and a reference set of the same kind.

    - ``mislabeled``: m real training images removed from the training set and given a wrong label (the
      classic black-box canary; a loss that scales its gradient with s_y may simply refuse to fit them);
      the reference: test images given a wrong label by the same rule;
    - ``random_pattern``: i.i.d. Gaussian pixel images (far from the data) with ``pattern_scale`` times the
      training pixels' standard deviation, each with a fixed random label;
    - ``blank_patch``: a blank image with one bright random square patch, a fixed random label;
    - ``exclusive_support``: a blank image that is bright only on input coordinates that are blank in every
      training example, each canary on its own disjoint set of them (the free coordinates shared out equally
      at random), a fixed random label. In a model whose first layer is dense on the input, the weights of a
      canary's coordinates receive gradient from that canary alone. No reference set.
    """
    check_arguments(canary_kind=kind, canaries=m, pattern_scale=pattern_scale, minimum=1)
    if kind == "exclusive_support":
        return _exclusive_support(data, m, seed)
    if kind == "canary_inputs":
        return _canary_inputs(data, m, seed)
    check_canary_count(m, data.train_size)
    g = torch.Generator().manual_seed(10_000 + seed)
    c = data.info.num_classes
    device = data.x_train.device
    base = data
    if kind == "mislabeled":
        perm = torch.randperm(data.train_size, generator=g)
        take, keep = perm[:m].to(device), perm[m:].to(device)
        x = data.x_train[take]
        y = (data.y_train[take] + torch.randint(1, c, (m,), generator=g).to(device)) % c
        base = TensorData(data.info, data.x_train[keep], data.y_train[keep], data.x_test, data.y_test)
    else:  # the data's pixel statistics, once for canaries and reference alike
        level = ((pattern_scale * float(data.x_train.std()), 0.0) if kind == "random_pattern"
                 else (float(data.x_train.min()), float(data.x_train.max())))
        x, y = _synthetic(kind, data, m, g, level)
    included = (torch.rand(m, generator=g) < 0.5).numpy()
    gr = torch.Generator().manual_seed(20_000 + seed)
    if kind == "mislabeled":
        n = min(reference, data.x_test.shape[0])
        idx = torch.randperm(data.x_test.shape[0], generator=gr)[:n].to(device)
        x_ref = data.x_test[idx]
        y_ref = (data.y_test[idx] + torch.randint(1, c, (n,), generator=gr).to(device)) % c
    else:
        x_ref, y_ref = _synthetic(kind, data, reference, gr, level)
    return Canaries(x, y, included, kind, base, x_ref, y_ref)


def free_coordinates(data: TensorData) -> torch.Tensor:
    """The flat input coordinates (channel, row, column) that hold the blank value in every training example."""
    blank = torch.tensor(blank_value(data.info), device=data.x_train.device).view(1, -1, 1, 1)
    free = torch.ones(data.shape, dtype=torch.bool, device=data.x_train.device)
    for i in range(0, data.train_size, 10_000):  # in chunks: no N x C x H x W boolean copy of the data
        free &= (data.x_train[i: i + 10_000] == blank).all(0)
    return free.flatten().nonzero().flatten()


def _exclusive_support(data: TensorData, m: int, seed: int) -> Canaries:
    free = free_coordinates(data)
    if m > len(free):
        raise ConfigError(f"canaries={m} is not allowed for exclusive_support: the {data.train_size} training "
                          f"examples leave {len(free)} input coordinates blank in all of them and each canary needs "
                          f"one of its own; give --canaries <= {len(free)} (a smaller --train-examples leaves more)")
    g = torch.Generator().manual_seed(10_000 + seed)
    info, device = data.info, data.x_train.device
    per = len(free) // m
    chosen = free[torch.randperm(len(free), generator=g)[: m * per].to(free.device)].view(m, per)
    blank = torch.tensor(blank_value(info), device=device).view(1, -1, 1, 1)
    bright = normalise(info, torch.full((1, info.channels, 1, 1), 255, dtype=torch.uint8)).to(device)
    x = blank.expand(m, *data.shape).clone()
    flat = x.view(m, -1)
    bright_flat = bright.expand(1, *data.shape).reshape(-1)
    for i in range(m):
        flat[i, chosen[i]] = bright_flat[chosen[i]]
    y = torch.randint(0, info.num_classes, (m,), generator=g).to(device)
    included = (torch.rand(m, generator=g) < 0.5).numpy()
    return Canaries(x, y, included, "exclusive_support", data, support=[c for c in chosen])


def _canary_inputs(data: TensorData, m: int, seed: int) -> Canaries:
    """m canaries with an input coordinate each of their own, appended to every image (as extra channels, zero in
    every example of the data): canary j is a blank image with ``CANARY_INPUT_VALUE`` on coordinate j, a fixed
    random label. The run's model is widened to read them through the
    canaries' ``widen`` hook (benchmarks/models/canary_inputs.py). Any image shape takes any m."""
    info = data.info
    c, h, w = data.shape
    e = extra_channels(m, h, w)
    device = data.x_train.device

    def widen(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.new_zeros((x.shape[0], e, h, w))], dim=1)

    base = TensorData(info, widen(data.x_train), data.y_train, widen(data.x_test), data.y_test, notes=data.notes)
    g = torch.Generator().manual_seed(10_000 + seed)
    blank = torch.tensor(blank_value(info), dtype=data.x_train.dtype, device=device).view(1, -1, 1, 1)
    coords = torch.zeros((m, e * h * w), dtype=data.x_train.dtype, device=device)
    coords[torch.arange(m), torch.arange(m)] = CANARY_INPUT_VALUE
    x = torch.cat([blank.expand(m, c, h, w), coords.view(m, e, h, w)], dim=1)
    y = torch.randint(0, info.num_classes, (m,), generator=g).to(device)
    included = (torch.rand(m, generator=g) < 0.5).numpy()
    return Canaries(x, y, included, "canary_inputs", base,
                    widen=functools.partial(CanaryInputs, channels=info.channels, extra=m))


def replacements(canaries: Canaries) -> torch.Tensor:
    """What an excluded canary's slot holds under a replace relation: the blank image with the canary's own label
    (for ``canary_inputs`` the canary with its own coordinate zeroed, for ``exclusive_support`` with its own support
    blanked: both are the blank image). Any input is a valid replacement under replace_input; the blank one is fixed
    before the run and the same for every canary."""
    x = canaries.x
    blank = torch.tensor(blank_value(canaries.base.info), dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    out = torch.zeros_like(x)
    out[:, : blank.shape[1]] = blank
    return out


def with_canaries(canaries: Canaries, *, relation: Relation) -> TensorData:
    """The audit's training set under the claim's relation (THEORY.md, "Auditing"): the base data with every canary
    whose coin says "in" appended; an excluded canary is absent (add/remove) or holds its slot with its replacement,
    its label kept (replace_input: n, every index and every label the same in both worlds)."""
    check_input_design(relation)
    inc = torch.from_numpy(canaries.included).to(canaries.x.device)
    b = canaries.base
    if relation.excluded == REPLACED:
        x = torch.where(inc.view(-1, *([1] * (canaries.x.dim() - 1))), canaries.x, replacements(canaries))
        return TensorData(b.info, torch.cat([b.x_train, x]), torch.cat([b.y_train, canaries.y]), b.x_test, b.y_test)
    return TensorData(b.info, torch.cat([b.x_train, canaries.x[inc]]), torch.cat([b.y_train, canaries.y[inc]]),
                      b.x_test, b.y_test)


def check_input_design(relation: Relation) -> None:
    """Input canaries build add/remove's and replace_input's pairs; zero-out's null example (a slot whose every
    contribution is zero) would need each method's loss to mask it: refused in one line, gradient canaries build it."""
    if relation.excluded == NULL:
        raise ConfigError(f"an audit with input canaries is not allowed under {relation.key}: its null example (a slot "
                          "that contributes nothing) is not built for input canaries; audit DP-SGD with --canary-kind "
                          "gradient_canaries, whose excluded canaries contribute a zero gradient")


def design_suffix(claim) -> str:
    """What an audit's store key adds for its claim's design: nothing for add/remove (the design every audit had
    before the relation was read), ":replaced" for a replace relation, so an audit made with the absent design is
    never taken for one under the claim's relation."""
    excluded = audit_relation(claim).excluded
    return {REPLACED: ":replaced", NULL: ":null"}.get(excluded, "")


def audit_relation(claim) -> Relation:
    """The relation an audit of a run with this claim builds its pairs under: the claim's own; a claim that names
    none (a non-private reference) is audited as add/remove, membership being what any leak reveals first."""
    rel = getattr(claim, "relation", None)
    return rel if isinstance(rel, Relation) else RELATION_VALUES[ADD_REMOVE]


def check_canary_count(m: int, train_size: int, minimum: int = 1) -> None:
    """Canaries that replace training examples (mislabeled, random_pattern, blank_patch): fewer than the data hold."""
    if not (minimum <= m < train_size):
        raise ConfigError(f"canaries={m!r} is not allowed: it must be an integer in [{minimum}, {train_size}) (the "
                          f"{train_size} training examples, which the canaries replace)")


def check_arguments(*, canary_kind: str, canaries: int, pattern_scale: float, scores: Sequence[str] | None = None,
                    model: str | None = None, minimum: int = 2) -> None:
    """Every audit argument that needs no data: checked before any data is read or any run is opened.
    ``minimum``: the fewest canaries (a one-run audit needs 2; each run of a multi-run audit holds 1)."""
    if canary_kind not in CANARY_KINDS:
        raise ConfigError(f"canary kind {canary_kind!r} is not allowed: choose one of {', '.join(CANARY_KINDS)}")
    if not (isinstance(canaries, int) and canaries >= minimum):
        raise ConfigError(f"canaries={canaries!r} is not allowed: it must be an integer >= {minimum}")
    if not (isinstance(pattern_scale, (int, float)) and math.isfinite(pattern_scale) and pattern_scale > 0):
        raise ConfigError(f"pattern_scale={pattern_scale!r} is not allowed: it must be a finite number > 0")
    if scores is not None and not scores:
        raise ConfigError("--score is empty: give auto, all, or a comma-separated list of scores")
    for score in scores or ():
        if score not in SCORES:
            raise ConfigError(f"score {score!r} is not allowed: choose auto, all or one of {', '.join(SCORES)}")
    scores = scores or ()
    for score, kind in ONE_TEST_KIND.items():
        if score in scores and canary_kind != kind:
            raise ConfigError(f"score {score!r} is not allowed with {canary_kind} canaries: it scores a canary by "
                              f"the weights of its own input coordinates; use --canary-kind {kind}")
    if "exclusive_weight_change" in scores and model is not None:
        _check_dense(model)
    if canary_kind in ("exclusive_support", "canary_inputs") and "reference_rank" in scores:
        raise ConfigError(f"score 'reference_rank' is not allowed with {canary_kind} canaries: every coordinate of "
                          "their own is taken by a canary, so no fresh canary of that kind is left to rank against")


def _check_dense(model: str) -> None:
    if not MODELS.get(model).dense_input:
        raise ConfigError(f"score 'exclusive_weight_change' is not allowed for model {model!r}: its first layer is a "
                          "convolution, whose weights every image moves; it needs a model whose first layer is dense "
                          "on the input (--model mlp)")
