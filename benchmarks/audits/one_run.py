"""One-run privacy auditing (Steinke, Nasr & Jagielski 2023; THEORY.md, "Auditing").

m canaries are made; each is included in the training set independently with probability 1/2 (the truth is
recorded); the method trains once through the normal harness with its normal calibration; every canary gets a
score; the k highest are guessed "in" and the k lowest "out"; from the number of correct guesses a lower bound on
epsilon follows at confidence 1 - beta. The bound is corrected (Bonferroni) for every (score, k) it tries, so the
strongest of them may be reported.

A lower bound only: above the claim means the claim does not hold for what was scored (here: the trained
parameters); below it proves nothing. The ceiling is the largest bound the same m and k could ever show.

``exclusive_support`` canaries with the ``exclusive_weight_change`` score are the test that decides for a model
whose first layer is dense on the input: each canary is bright only where every training image is blank, so only
it moves the first-layer weights of those coordinates, and the score's guesses are fixed before the run (one
test). When one run cannot hold enough canaries, ``audit_runs`` trains many runs with and without one canary.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from scipy import stats
from torch import nn

from inputdp.core import names
from inputdp.core.claims import ADD_REMOVE, NULL, RELATION_VALUES, REPLACED, Relation
from inputdp.core.config import PerfFlags, RunConfig
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData, blank_value, load_tensor_data, normalise

from ..harness import model_for, run
from ..models import MODELS
from ..models.canary_inputs import CanaryInputs, extra_channels
from ..resolve import NOT_RESOLVED, ResolvedRun
from . import fdp_bound

CANARY_KINDS = ("mislabeled", "random_pattern", "blank_patch", "exclusive_support", "canary_inputs")
SCORES = ("loss", "margin", "reference_rank", "gradient_alignment", "relearn", "first_layer_projection",
          "exclusive_weight_change", "canary_input_change")
#: scores whose guesses are fixed before the run (every canary guessed, "in" iff the score is above 0): one test
#: each, whatever m, instead of one per k of the grid; each needs its own canary kind
ONE_TEST = ("exclusive_weight_change", "canary_input_change")
ONE_TEST_KIND = {"exclusive_weight_change": "exclusive_support", "canary_input_change": "canary_inputs"}
#: the scores a plain ``--score all`` means for the canary kinds that have no one-test score
GENERAL_SCORES = tuple(s for s in SCORES if s not in ONE_TEST)
BLACK_BOX = ("loss", "margin", "reference_rank")
WHITE_BOX = tuple(s for s in SCORES if s not in BLACK_BOX)
BETA = 0.05
#: random-pattern canaries: pixel spread as a multiple of the training data's; the scale at which a non-private
#: model memorises them best (weaker patterns are half-fitted, stronger ones answered near-uniformly: measured over
#: 1x-10x in reports/mnist-cpu/README.md, "How the audit's constants were fixed")
PATTERN_SCALE = 2.0
#: the value of canary j on its own coordinate (``canary_inputs``); every other example holds 0 there
CANARY_INPUT_VALUE = 1.0
#: fresh canaries per audit that no run trains on: the null population of the ``reference_rank`` score
REFERENCE_SIZE = 5000
#: the ``relearn`` score: full-batch plain gradient steps on all m canaries (in and out alike) from the trained
#: parameters; a step small enough not to learn the excluded canaries too, within a plateau of equal bounds
#: (reports/mnist-cpu/README.md, "How the audit's constants were fixed")
RELEARN_LR = 0.01
RELEARN_STEPS = 10


# --- the statistics ------------------------------------------------------------------------------------------
def binomial_tail(r: int, q: float, t: int) -> float:
    """f(t) = P[Binomial(r, q) >= t]."""
    if t <= 0:
        return 1.0
    return float(stats.binom.sf(t - 1, r, q))


def p_value(eps: float, *, r: int, v: int, m: int, delta: float) -> float:
    """p(eps) = f(v) + 2 m delta max_{i=1..v} (f(v-i) - f(v)) / i, with q_e = e^eps / (1 + e^eps)."""
    q = 1.0 / (1.0 + math.exp(-eps))
    ts = np.arange(0, v + 1)
    tails = stats.binom.sf(ts - 1, r, q)  # f(0), ..., f(v)
    tails[0] = 1.0
    fv = float(tails[v])
    if v == 0:
        return fv
    i = np.arange(1, v + 1)
    spread = float(np.max((tails[v - i] - fv) / i))
    return fv + 2.0 * m * delta * spread


def epsilon_lower_bound(*, r: int, v: int, m: int, delta: float, beta: float) -> float:
    """sup{eps : p(eps) < beta}, by bisection (p increases with eps); 0 if even eps = 0 is not rejected."""
    if r == 0 or p_value(0.0, r=r, v=v, m=m, delta=delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(hi, r=r, v=v, m=m, delta=delta) < beta and hi < 100:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_value(mid, r=r, v=v, m=m, delta=delta) < beta:
            lo = mid
        else:
            hi = mid
    return lo


def k_grid(m: int) -> list[int]:
    """Guess counts tried (k "in" and k "out" guesses each): 5% to 50% of the canaries.

    Small k cannot give a large bound (the ceiling grows with the number of guesses) and only costs correction,
    so the grid starts at m/20 and ends with a guess for every canary.
    """
    return sorted({k for k in (m // 20, m // 10, 3 * m // 20, m // 5, 3 * m // 10, 2 * m // 5, m // 2) if k >= 1})


@dataclass
class ScoreOutcome:
    """One score's strongest test: Steinke et al.'s bound (``epsilon_lb``, at the k it was reached) and, over the
    same tests at the same level, the f-DP bounds (benchmarks/audits/fdp_bound.py): ``fdp_epsilon_lb`` against the
    (epsilon, delta) trade-off curve (refutes any (epsilon, delta) claim) and ``gdp_mu_lb`` (refutes a mu-GDP one)."""

    score: str
    epsilon_lb: float
    ceiling: float
    k: int
    guesses: int
    correct: int
    fdp_epsilon_lb: float = 0.0
    fdp_ceiling: float = 0.0
    gdp_mu_lb: float = 0.0
    #: False where the test's guesses could not depend on the run: every fixed guess on one side (a score above 0
    #: for every canary, as when noise moves every parameter), or every score equal (the ranking is the index
    #: order). Its count of right guesses is then the inclusion draw, Binomial(guesses, 1/2) whatever the mechanism,
    #: and its ceiling is out of reach: the verdict says "no power" instead
    power: bool = True

    @property
    def decides(self) -> str:
        """Which of the two (epsilon, delta) bounds is the larger: "f-DP" or "Steinke" (ties: Steinke)."""
        return "f-DP" if self.fdp_epsilon_lb > self.epsilon_lb + fdp_bound.DECIDES_MARGIN else "Steinke"


def fdp_bounds(*, r: int, v: int, m: int, delta: float, level: float) -> tuple[float, float, float]:
    """(f-DP epsilon lower bound, its ceiling (every guess right), mu-GDP lower bound) of v right among r guesses."""
    return (fdp_bound.eps_lower_bound(m=m, guesses=r, correct=v, tau=level, delta=delta),
            fdp_bound.eps_lower_bound(m=m, guesses=r, correct=r, tau=level, delta=delta),
            fdp_bound.mu_lower_bound(m=m, guesses=r, correct=v, tau=level))


def bound_for_scores(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float, n_tests: int,
                     score: str, grid: Sequence[int] | None = None) -> ScoreOutcome:
    """The best bound over the k grid (``k_grid(m)`` unless given) for one score, each test at level beta / n_tests
    (Bonferroni)."""
    m = len(scores)
    order = np.argsort(-scores, kind="stable")
    best = ScoreOutcome(score, 0.0, 0.0, 0, 0, 0, power=bool(np.ptp(scores) > 0) if m else False)
    fdp = (0.0, 0.0, 0.0)
    for k in (k_grid(m) if grid is None else grid):
        guessed_in, guessed_out = order[:k], order[-k:]
        v = int(included[guessed_in].sum() + (~included[guessed_out]).sum())
        r = 2 * k
        lb = epsilon_lower_bound(r=r, v=v, m=m, delta=delta, beta=beta / n_tests)
        ceiling = epsilon_lower_bound(r=r, v=r, m=m, delta=delta, beta=beta / n_tests)
        # the largest bound; among equal ones (all 0, say) the k with the largest ceiling, so that the ceiling
        # shown is the most this score could have shown
        if (lb, ceiling) > (best.epsilon_lb, best.ceiling) or best.k == 0:
            best = ScoreOutcome(score, lb, ceiling, k, r, v, power=best.power)
        # the f-DP bounds of the same test, each the strongest over the grid (every test is in the family)
        fdp = tuple(max(a, b) for a, b in zip(fdp, fdp_bounds(r=r, v=v, m=m, delta=delta, level=beta / n_tests)))
    return dataclasses.replace(best, fdp_epsilon_lb=fdp[0], fdp_ceiling=fdp[1], gdp_mu_lb=fdp[2])


def bound_fixed_guesses(scores: np.ndarray, included: np.ndarray, *, delta: float, beta: float, n_tests: int,
                        score: str) -> ScoreOutcome:
    """One test whose guesses were fixed before the run: every canary guessed, "in" iff its score is above 0."""
    m = len(scores)
    v = int(((scores > 0) == included).sum())
    lb = epsilon_lower_bound(r=m, v=v, m=m, delta=delta, beta=beta / n_tests)
    ceiling = epsilon_lower_bound(r=m, v=m, m=m, delta=delta, beta=beta / n_tests)
    fdp = fdp_bounds(r=m, v=v, m=m, delta=delta, level=beta / n_tests)
    guessed_in = int((scores > 0).sum())
    return ScoreOutcome(score, lb, ceiling, m, m, v, *fdp, power=0 < guessed_in < m)


#: each set of guesses is read by two analyses, Steinke et al.'s and the f-DP bound on the (epsilon, delta) curve, and
#: the verdict takes the larger: two tests of the same claim, so both are in the Bonferroni family
ANALYSES = 2


def count_tests(scores: Sequence[str], m: int) -> int:
    """The family the Bonferroni correction covers: one guess set per fixed-guess score, one per k for the others,
    each read by ``ANALYSES`` analyses."""
    return ANALYSES * sum(1 if s in ONE_TEST else len(k_grid(m)) for s in scores)


# --- canaries ------------------------------------------------------------------------------------------------
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


def resolve_scores(text: str, canary_kind: str, model: str) -> tuple[str, ...]:
    """``auto``: for exclusive-support canaries on a dense-input model the one decisive test
    (``exclusive_weight_change``), else every general score; ``all``: every score the kind and model allow;
    otherwise a comma-separated list, taken as given (``check_arguments`` refuses what does not fit)."""

    if text not in ("auto", "all"):
        return tuple(t.strip() for t in text.split(",") if t.strip())
    if canary_kind == "canary_inputs":  # any model: the coordinates are read by a map of their own
        decisive = ("canary_input_change",)
        return decisive if text == "auto" else tuple(s for s in GENERAL_SCORES if s != "reference_rank") + decisive
    if canary_kind != "exclusive_support":
        return GENERAL_SCORES
    dense = MODELS.get(model).dense_input
    if text == "auto" and dense:
        return ("exclusive_weight_change",)
    general = tuple(s for s in GENERAL_SCORES if s != "reference_rank")  # no fresh canaries to rank against
    return general + (("exclusive_weight_change",) if dense else ())


def check_no_holdout(config: RunConfig) -> None:
    """An audit trains on every example it is given, canaries included: a held-out draw could take canaries out."""
    if config.holdout:
        raise ConfigError(f"holdout={config.holdout} is not allowed in an audit: it would hold out canaries too")


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


def check_canary_inputs(canary_kind: str, config: RunConfig, method) -> None:
    """What ``canary_inputs`` canaries need of the run: a method that trains the model's features (not a fixed map
    at initialisation) and images that are not augmented (a crop or flip would move the canaries' coordinates)."""
    if canary_kind != "canary_inputs":
        return
    if method.capabilities.fixed_features:
        raise ConfigError(f"canary kind 'canary_inputs' is not allowed for {config.method}: its model reads the data "
                          "through features fixed at initialisation, which would read the canaries' coordinates "
                          "through a zero map; audit its release with bench audit --mechanism")
    if config.augment or method.augments_inputs:
        raise ConfigError(f"canary kind 'canary_inputs' is not allowed with augmented images ({config.method}, "
                          f"augment={config.augment}): a crop or flip moves each canary's own coordinate onto another's")


def _check_dense(model: str) -> None:
    if not MODELS.get(model).dense_input:
        raise ConfigError(f"score 'exclusive_weight_change' is not allowed for model {model!r}: its first layer is a "
                          "convolution, whose weights every image moves; it needs a model whose first layer is dense "
                          "on the input (--model mlp)")


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
    random label. The data's info says how many coordinates were appended, so the model built for it is widened
    (benchmarks/models/canary_inputs.py). Any image shape takes any m."""
    info = data.info
    c, h, w = data.shape
    e = extra_channels(m, h, w)
    device = data.x_train.device

    def widen(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.new_zeros((x.shape[0], e, h, w))], dim=1)

    base = TensorData(dataclasses.replace(info, canary_inputs=m), widen(data.x_train), data.y_train,
                      widen(data.x_test), data.y_test, notes=data.notes)
    g = torch.Generator().manual_seed(10_000 + seed)
    blank = torch.tensor(blank_value(info), dtype=data.x_train.dtype, device=device).view(1, -1, 1, 1)
    coords = torch.zeros((m, e * h * w), dtype=data.x_train.dtype, device=device)
    coords[torch.arange(m), torch.arange(m)] = CANARY_INPUT_VALUE
    x = torch.cat([blank.expand(m, c, h, w), coords.view(m, e, h, w)], dim=1)
    y = torch.randint(0, info.num_classes, (m,), generator=g).to(device)
    included = (torch.rand(m, generator=g) < 0.5).numpy()
    return Canaries(x, y, included, "canary_inputs", base)


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


# --- scores --------------------------------------------------------------------------------------------------
def _first_weight(model: nn.Module) -> tuple[str, nn.Module]:
    for name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            return name, module
    raise ValueError("the model has no conv or linear layer")


@torch.no_grad()
def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x[i: i + 500]) for i in range(0, x.shape[0], 500)])


def _margin(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    true = logits.gather(1, y.view(-1, 1)).squeeze(1)
    return true - logits.scatter(1, y.view(-1, 1), float("-inf")).max(1).values


@torch.no_grad()
def black_box_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, x_ref: torch.Tensor | None = None,
                     y_ref: torch.Tensor | None = None) -> dict[str, np.ndarray]:
    """Scores from the model's outputs alone.

    - ``loss``: minus the cross-entropy of the canary's label;
    - ``margin``: the label's logit minus the largest other logit;
    - ``reference_rank`` (with a reference set): the canary's probability of its label, ranked among the same
      probability for the fresh reference canaries that carry the same label (never trained on, so they show
      what the model answers for an unseen canary of that label); ties beyond the reference broken by margin.
      It discounts the canaries an unseen input of their kind would already be given (a model that sends most
      noise images to one class), which raw loss counts as memorised.
    """
    logits = _logits(model, x)
    loss = F.cross_entropy(logits, y, reduction="none")
    margin = _margin(logits, y)
    out = {"loss": (-loss).cpu().numpy(), "margin": margin.cpu().numpy()}
    if x_ref is not None and y_ref is not None:
        p_y = F.softmax(logits.double(), 1).gather(1, y.view(-1, 1)).squeeze(1).cpu().numpy()
        p_ref = F.softmax(_logits(model, x_ref).double(), 1).cpu().numpy()
        y_np, y_ref_np = y.cpu().numpy(), y_ref.cpu().numpy()
        tiebreak = (np.argsort(np.argsort(margin.cpu().numpy(), kind="stable"), kind="stable") + 1) / (len(y_np) + 1)
        rank = np.empty(len(y_np))
        for c in np.unique(y_np):
            null = np.sort(p_ref[y_ref_np == c, c])
            sel = y_np == c
            rank[sel] = (np.searchsorted(null, p_y[sel], side="left") + tiebreak[sel]) / (len(null) + 1)
        out["reference_rank"] = rank
    return out


def white_box_scores(final: nn.Module, initial_state: dict[str, torch.Tensor], x: torch.Tensor,
                     y: torch.Tensor, wanted: Sequence[str] | None = None,
                     support: Sequence[torch.Tensor] | None = None) -> dict[str, np.ndarray]:
    """Scores for an adversary who holds the initial and the trained parameters (those in ``wanted`` only).

    - ``gradient_alignment``: <-grad L(canary; theta_T), theta_T - theta_0> / ||grad L(canary; theta_T)||:
      gradient descent moves the parameters against the gradients of the examples it trains on (the gradient
      at the trained parameters separated in- from out-canaries better than at theta_0 in our trials);
    - ``relearn``: minus the canary's loss after ``RELEARN_STEPS`` plain full-batch gradient steps on all m
      canaries from the trained parameters. An example the model was trained on and then forgot leaves traces
      that make it quicker to relearn than one it never saw; every canary gets the same steps, so the score is
      a function of the released parameters and the public canaries alone;
    - ``first_layer_projection``: ||first_layer_change(u_c)||^2 / ||u_c||^2, u_c what the first weight layer
      receives for the canary (its pixels, or a scatter model's fixed features of them): how strongly the change
      of the first layer responds to the canary's input (independent of its label);
    - ``exclusive_weight_change`` (exclusive-support canaries, a dense first layer): the norm of the first
      layer's change theta_T - theta_0 on the canary's own input coordinates. Without the canary and without
      noise on the parameters it is exactly 0;
    - ``canary_input_change`` (``canary_inputs`` canaries, any model): the same for the widened model's map of
      the canary's own appended coordinate.
    """
    wanted = tuple(s for s in WHITE_BOX if s not in ONE_TEST) if wanted is None else wanted
    initial = copy.deepcopy(final)
    initial.load_state_dict(initial_state)
    initial.eval()
    final.eval()
    out: dict[str, np.ndarray] = {}
    if "gradient_alignment" in wanted:
        out["gradient_alignment"] = _gradient_alignment(final, initial, x, y)
    if "relearn" in wanted:
        out["relearn"] = relearn_scores(final, x, y)
    if "first_layer_projection" in wanted:
        out["first_layer_projection"] = _first_layer_projection(final, initial, x)
    if "exclusive_weight_change" in wanted:
        if support is None:
            raise ConfigError("score 'exclusive_weight_change' needs exclusive_support canaries")
        out["exclusive_weight_change"] = exclusive_weight_change(final, initial, support)
    if "canary_input_change" in wanted:
        out["canary_input_change"] = canary_input_change(final, initial)
    return out


def canary_input_change(final: nn.Module, initial: nn.Module) -> np.ndarray:
    """||A_T[:, j] - A_0[:, j]|| for each canary j, A the widened model's map of the canaries' own coordinates.
    Without canary j and without noise on the parameters it is exactly 0."""
    if not isinstance(final, CanaryInputs) or not isinstance(initial, CanaryInputs):
        raise ConfigError("score 'canary_input_change' needs a model widened for canary_inputs canaries")
    change = (final.canary_weight.detach() - initial.canary_weight.detach()).double()
    return change.norm(dim=0).cpu().numpy()


def exclusive_weight_change(final: nn.Module, initial: nn.Module, support: Sequence[torch.Tensor]) -> np.ndarray:
    """||(W_T - W_0)[:, S_c]|| for each canary c with coordinates S_c, W the first (dense) layer's weight."""
    name, layer0 = _first_weight(initial)
    if not isinstance(layer0, nn.Linear):
        raise ConfigError(f"score 'exclusive_weight_change' is not allowed for this model: its first layer "
                          f"({name}) is a {type(layer0).__name__}, not dense on the input")
    layer_t = dict(final.named_modules())[name]
    dw = (layer_t.weight.detach() - layer0.weight.detach()).double()
    return np.array([float(dw[:, cols.to(dw.device)].norm()) for cols in support])


def _gradient_alignment(final: nn.Module, initial: nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    params0 = [p for p in initial.parameters() if p.requires_grad]
    params_t = [p for p in final.parameters() if p.requires_grad]
    delta = [pt.detach() - p0.detach() for pt, p0 in zip(params_t, params0)]
    align = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        loss = F.cross_entropy(final(x[i: i + 1]), y[i: i + 1])
        grads = torch.autograd.grad(loss, params_t)
        dot = sum(float((g * d).sum()) for g, d in zip(grads, delta))
        norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads)) + 1e-12
        align[i] = -dot / norm
    return align


def _first_layer_projection(final: nn.Module, initial: nn.Module, x: torch.Tensor) -> np.ndarray:
    name, layer0 = _first_weight(initial)
    layer_t = dict(final.named_modules())[name]
    dw = layer_t.weight.detach() - layer0.weight.detach()
    inputs = _layer_inputs(final, layer_t, x)
    with torch.no_grad():
        if isinstance(layer0, nn.Conv2d):
            resp = F.conv2d(inputs, dw, None, layer0.stride, layer0.padding, layer0.dilation, layer0.groups)
        else:
            resp = F.linear(inputs.flatten(1), dw)
        return (resp.flatten(1).pow(2).sum(1) / inputs.flatten(1).pow(2).sum(1).clamp_min(1e-12)).cpu().numpy()


@torch.no_grad()
def _layer_inputs(model: nn.Module, layer: nn.Module, x: torch.Tensor, chunk: int = 500) -> torch.Tensor:
    """What ``layer`` receives when ``model`` (in eval mode) is given each of ``x``: the images themselves for a
    model whose first weight layer reads them, the fixed frontend's normalised output for a scatter model."""
    got: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _module, args: got.append(args[0].detach()))
    try:
        model.eval()
        for i in range(0, x.shape[0], chunk):
            model(x[i: i + chunk])
    finally:
        hook.remove()
    return torch.cat(got)


def relearn_scores(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, lr: float = RELEARN_LR,
                   steps: int = RELEARN_STEPS, chunk: int = 500) -> np.ndarray:
    """Minus each canary's loss after ``steps`` full-batch gradient steps on the mean loss of all canaries.

    Works on a copy in eval mode (batch norm uses its running statistics, so a canary's output does not depend
    on the others in its chunk); the gradient is accumulated over chunks, so it equals the full-batch one.
    """
    tuned = copy.deepcopy(model).eval()
    params = [p for p in tuned.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    n = x.shape[0]
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        for i in range(0, n, chunk):
            loss = F.cross_entropy(tuned(x[i: i + chunk]), y[i: i + chunk], reduction="sum") / n
            loss.backward()
        opt.step()
    logits = _logits(tuned, x)
    return (-F.cross_entropy(logits, y, reduction="none")).cpu().numpy()


# --- the audit -----------------------------------------------------------------------------------------------
@dataclass
class AuditResult:
    method: str
    epsilon_claimed: float
    canary_kind: str
    canaries: int
    test_accuracy: float
    outcomes: list[ScoreOutcome]
    scope: str
    run_id: str | None = None
    tests: int = 0  # the size of the Bonferroni family
    delta: float = 1e-5  # the claim's delta, at which every bound is stated
    relation: str = ADD_REMOVE  # the claim's relation, under which the neighbouring pairs were built
    design: str = "absent"  # how an excluded canary was represented (the relation's design)

    @property
    def best(self) -> ScoreOutcome:
        return max(self.outcomes, key=lambda o: o.epsilon_lb)

    def best_of(self, threat: str) -> ScoreOutcome | None:
        """The strongest outcome among the black-box or the white-box scores (None if none was tried); among equal
        bounds one with power, and among those the largest ceiling."""
        pool = [o for o in self.outcomes if (o.score in BLACK_BOX) == (threat == "black_box")]
        return max(pool, key=lambda o: (o.epsilon_lb, o.power, o.ceiling)) if pool else None

    def ceiling_of(self, threat: str) -> float:
        """The largest ceiling among the threat model's tests that had power (0 where none had)."""
        pool = [o for o in self.outcomes if (o.score in BLACK_BOX) == (threat == "black_box") and o.power]
        return max((o.ceiling for o in pool), default=0.0)

    def verdict(self) -> str:
        """In four words, the relation named: refuted, not refuted (ceiling X), or no power (every test's guesses
        were fixed on one side or its scores all equal). "Tight" is the mechanism audit's word."""
        best = self.best
        fdp = max(o.fdp_epsilon_lb for o in self.outcomes)
        bound = max(best.epsilon_lb, fdp)
        under = f"under {self.relation} ({self.design} design)"
        if bound > self.epsilon_claimed:
            return f"refuted {under}: {bound:.2f} > {self.epsilon_claimed:g}"
        if not any(o.power for o in self.outcomes):
            return f"no power {under}: every test's guesses were fixed on one side or its scores all equal"
        ceiling = max(self.ceiling_of(t) for t in names.THREATS)
        return f"not refuted (ceiling {ceiling:.2f}) {under}"

    def family(self) -> str:
        fixed = [o.score for o in self.outcomes if o.score in ONE_TEST]
        text = (f"{self.tests} tests at level {BETA:g}/{self.tests} each (Bonferroni: {self.tests // ANALYSES} guess "
                f"set{'s' if self.tests > ANALYSES else ''}, each read by Steinke et al.'s and the f-DP bound)")
        if fixed:
            text += (f"; {', '.join(fixed)}: one test, its score and guesses fixed before the run (every canary "
                     "guessed, 'in' iff its score is above 0)")
        return text

    def as_json(self) -> dict[str, Any]:
        b = self.best
        return {
            "method": self.method, "epsilon_claimed": self.epsilon_claimed, names.METRIC_EPSILON_LB: b.epsilon_lb,
            names.METRIC_EPSILON_LB_CEILING: b.ceiling, "canaries": self.canaries, "guesses": b.guesses, "correct": b.correct,
            "score": b.score, names.TAG_CANARY_KIND: self.canary_kind, names.METRIC_TEST_ACCURACY: self.test_accuracy, "k": b.k,
            "scope": self.scope, "run_id": self.run_id, "tests": self.tests, "family": self.family(),
            "relation": self.relation, "design": self.design, "verdict": self.verdict(),
            "fdp_epsilon_lb": max(o.fdp_epsilon_lb for o in self.outcomes),
            "gdp_mu_lb": max(o.gdp_mu_lb for o in self.outcomes),
            "per_score": {o.score: {names.METRIC_EPSILON_LB: o.epsilon_lb, "ceiling": o.ceiling, "k": o.k, "guesses": o.guesses,
                                    "correct": o.correct, "fdp_epsilon_lb": o.fdp_epsilon_lb,
                                    "fdp_ceiling": o.fdp_ceiling, "gdp_mu_lb": o.gdp_mu_lb,
                                    "gdp_epsilon": fdp_bound.gdp_epsilon(o.gdp_mu_lb, self.delta),
                                    "decides": o.decides, "power": o.power} for o in self.outcomes},
        }


def audit(config: ResolvedRun, *, canaries: int = 1000, canary_kind: str = "random_pattern",
          scores: Sequence[str] | str = "auto", perf: PerfFlags | None = None, tracker=None,
          data: TensorData | None = None, beta: float = BETA, pattern_scale: float = PATTERN_SCALE) -> AuditResult:
    """Train ``config`` (resolved once, above: its calibration is the run's) once with m canaries, each in with
    probability 1/2, and bound epsilon from the scores."""
    if not isinstance(config, ResolvedRun):
        raise TypeError(NOT_RESOLVED.format(where="audit", got=type(config).__name__))
    r = config
    config = r.config
    check_no_holdout(config)
    if isinstance(scores, str):
        scores = resolve_scores(scores, canary_kind, config.model)
    check_arguments(canary_kind=canary_kind, canaries=canaries, pattern_scale=pattern_scale, scores=scores,
                    model=config.model)
    check_canary_inputs(canary_kind, config, r.method())
    perf = perf or PerfFlags(progress=False)
    if data is None:
        data = load_tensor_data(config.dataset, data_dir=config.data_dir, device=perf.resolve_device(),
                                train_examples=config.train_examples, test_examples=config.test_examples)
    made = make_canaries(canary_kind, data, canaries, config.seed, pattern_scale=pattern_scale)
    relation = audit_relation(r.claim)
    train = with_canaries(made, relation=relation)
    held = _HeldOpen(tracker) if tracker is not None else None
    result = run(r, perf, held, data=train, keep_model=True)
    try:
        out = _score(r, made, result, scores, canary_kind=canary_kind, canaries=canaries, beta=beta,
                     tracker=tracker, relation=relation)
    except BaseException as error:
        if held is not None:
            held.end("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        raise
    if held is not None:
        held.end("FINISHED")
    return out


class _HeldOpen:
    """The audit's tracker, with the training's FINISHED held back until the audit's bounds are logged: the run
    stays RUNNING (its heartbeat beating) while the canaries are scored, so a process killed then leaves a run that
    ends KILLED or is reaped, and a resumed study audits it again. Before, the run was FINISHED when training
    ended, and a study stopped during the scoring kept a FINISHED audit without bounds, which it never redid."""

    def __init__(self, tracker):
        self.tracker, self.metrics = tracker, None
        self.on_start, self.on_epoch = tracker.on_start, tracker.on_epoch  # the tracker's own, unchanged

    def on_end(self, metrics, status) -> None:
        if status == "FINISHED":
            self.metrics = metrics
        else:  # training failed: nothing to hold
            self.tracker.on_end(metrics, status)

    def end(self, status: str) -> None:
        """End the held run: FINISHED with the training's final metrics once the bounds are logged, else as it
        failed."""
        if self.metrics is not None:
            self.tracker.on_end(self.metrics, status)
            self.metrics = None


def _score(r: ResolvedRun, made: Canaries, result, scores: Sequence[str], *, canary_kind: str, canaries: int,
           beta: float, tracker, relation: Relation) -> AuditResult:
    """Score the canaries on the trained model, bound epsilon from the scores, and log the bounds."""
    config = r.config
    # score on a plain copy of the trained model: a method's wrapper (Opacus' per-sample hooks) stays out
    model = model_for(config, made.base.info, result.norm).to(made.x.device)
    model.load_state_dict(result.model.state_dict())
    values: dict[str, np.ndarray] = {}
    values.update(black_box_scores(model, made.x, made.y, made.x_ref, made.y_ref))
    wanted = [s for s in scores if s not in BLACK_BOX]
    if wanted:
        values.update(white_box_scores(model, result.initial_state, made.x, made.y, wanted, made.support))
    n_tests = count_tests(scores, canaries)
    delta = config.privacy.delta
    outcomes = [(bound_fixed_guesses if s in ONE_TEST else bound_for_scores)(
        values[s], made.included, delta=delta, beta=beta, n_tests=n_tests, score=s) for s in scores]
    out = AuditResult(config.method, config.privacy.epsilon, canary_kind, canaries,
                      result.metrics[names.METRIC_FINAL_TEST_ACCURACY], outcomes, result.claim.scope,
                      getattr(tracker, "run_id", None), tests=n_tests, delta=delta, relation=relation.key,
                      design=relation.excluded)
    if tracker is not None and tracker.run_id is not None:
        _log_audit(tracker, out)
    return out


def _log_audit(tracker, out: AuditResult) -> None:
    best = out.best
    metrics = {names.METRIC_EPSILON_LB: best.epsilon_lb, names.METRIC_EPSILON_LB_CEILING: best.ceiling,
               names.METRIC_AUDIT_GUESSES: best.guesses, names.METRIC_AUDIT_CORRECT: best.correct,
               names.METRIC_AUDIT_TESTS: out.tests}
    for threat in names.THREATS:
        o = out.best_of(threat)
        if o is not None:
            metrics[names.METRIC_THREAT_BOUND.format(threat)] = o.epsilon_lb
            metrics[names.METRIC_THREAT_CEILING.format(threat)] = out.ceiling_of(threat)
            pool = [p for p in out.outcomes if (p.score in BLACK_BOX) == (threat == "black_box")]
            metrics[names.METRIC_THREAT_FDP_BOUND.format(threat)] = max(p.fdp_epsilon_lb for p in pool)
            metrics[names.METRIC_THREAT_FDP_CEILING.format(threat)] = max((p.fdp_ceiling for p in pool if p.power),
                                                                           default=0.0)
            metrics[names.METRIC_THREAT_POWER.format(threat)] = float(any(p.power for p in pool))
            metrics[names.METRIC_THREAT_GDP_MU.format(threat)] = max(p.gdp_mu_lb for p in pool)
    for o in out.outcomes:
        metrics[names.METRIC_AUDIT_SCORE_BOUND.format(o.score)] = o.epsilon_lb
        metrics[names.METRIC_AUDIT_SCORE_CEILING.format(o.score)] = o.ceiling
    tracker.log_summary(metrics, {names.TAG_AUDIT_BEST_SCORE: best.score, names.TAG_CANARY_KIND: out.canary_kind,
                                  names.TAG_AUDIT_MODE: "one_run", names.TAG_AUDIT_RELATION: out.relation,
                                  names.TAG_AUDIT_DESIGN: out.design,
                                  names.TAG_AUDIT_SCORES: ",".join(o.score for o in out.outcomes)})
