"""The hidden-state audit: do the released vectors of a per-example mechanism say more about one input than that
input's own vectors can? (THEORY.md, "Per-example releases under Poisson sampling")

The per-example curve is exact for one example's own vectors when the model is fixed. In training, the example's
update moves the model (through the clean network at the private input, with no noise), and every later vector of
every other example is a noisy readout of that model. This audit makes the readout strong and measures it:

- a linear network ``head(features(u))`` on three input coordinates: ``features`` a trained 3 -> 2 map without bias,
  ``head`` the identity, fixed (a public architecture and initialisation: the audit's own model, not a registered
  one). For a method that releases the softmax it is a linear softmax model; for one that releases the features,
  a trained layer under a fixed head;
- the target: ``x = (c, 0, 0)`` in world A, ``x' = (0, c, 0)`` in world B, label 0 in both (one input replaced, its
  label and its membership public: the per-example curve's relation);
- ``m`` probe examples at ``(p, 0, p)`` and ``m`` at ``(0, p, p)``, label 1, the same in both worlds. The third
  column starts at ``(K/p) (-1, 1)``, so every probe starts confident in its own label (logit margin 2K; feature
  norm K sqrt(2), clipped), which makes its own gradient 0 (a released softmax saturates) or tiny (released
  features: the clipping's Jacobian); the target starts at the origin, where its gradient is largest;
- the learning rate is large, so the target's update moves the column of its own coordinate far enough to flip
  the probes that share it (from confident in class 1 to confident in class 0), and them alone;
- the method trains as it always does (its own calibration to the target epsilon, Poisson batches, its own step);
  every released vector is observed, and a run's score uses **the probes' vectors only**: with ``u(v)`` the
  centred log of a simplex vector (or the vector itself), the mean of ``u`` over the releases of the probes at the
  first coordinate, minus that at the second, projected on ``(1, -1) / sqrt(2)``: positive in world A, negative in B;
- ``runs`` independent runs, half (at random) in world A; the rule "world A iff score > tau" is chosen on half of
  the runs and bounds epsilon on the others by Clopper-Pearson (``audit_runs``), at 95%.

A bound above the per-example curve's epsilon for the target's own vectors shows that no accountant that charges an
example only for the steps that sample it is an upper bound on what this training releases.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from inputdp.core.config import PrivacySpec
from inputdp.core.errors import ConfigError
from inputdp.methods import create_method
from inputdp.methods.base import TrainingSetup

from ..sampling import batch_generator, poisson_batches
from .multi_run import assign_inclusion, choose_rule, counts, rate_bound, split_halves


@dataclass(frozen=True, kw_only=True)
class HiddenStateSetup:
    """The construction's public parameters (defaults: the figures in THEORY.md)."""

    probes: int = 2000  # per coordinate
    target_scale: float = 1.0  # c
    probe_scale: float = 1e-6  # p
    margin: float = 20.0  # K
    # large, since the batch loss is a mean (the target's gradient arrives divided by the batch size, ~800) and the
    # probes read the target's column through p
    lr: float = 1e14
    sampling_rate: float = 0.2
    steps: int = 50
    delta: float = 1e-5

    def __post_init__(self) -> None:
        if not (isinstance(self.probes, int) and self.probes >= 1):
            raise ConfigError(f"probes={self.probes!r} is not allowed: it must be an integer >= 1")
        for name in ("target_scale", "probe_scale", "margin", "lr"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ConfigError(f"{name}={v!r} is not allowed: it must be a finite number > 0")


class LinearProbe(nn.Module):
    """head(features(u)): ``features`` a 3 -> 2 linear map without bias (trained), ``head`` the identity, fixed. The
    features start at 0 but for the probes' shared third column, (K/p) (-1, 1)."""

    feature_dim = 2

    def __init__(self, setup: HiddenStateSetup) -> None:
        super().__init__()
        self.features = nn.Linear(3, 2, bias=False)
        self.head = nn.Linear(2, 2, bias=False)
        k = setup.margin / setup.probe_scale
        with torch.no_grad():
            self.features.weight.copy_(torch.tensor([[0.0, 0.0, -k], [0.0, 0.0, k]]))
            self.head.weight.copy_(torch.eye(2))
        self.head.weight.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _data(setup: HiddenStateSetup, world_a: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0 the target (label 0), then the probes at the first coordinate, then those at the second (label 1)."""
    m, p, c = setup.probes, setup.probe_scale, setup.target_scale
    target = torch.tensor([[c, 0.0, 0.0]] if world_a else [[0.0, c, 0.0]])
    x = torch.cat([target, torch.tensor([[p, 0.0, p]]).repeat(m, 1), torch.tensor([[0.0, p, p]]).repeat(m, 1)])
    y = torch.cat([torch.zeros(1, dtype=torch.long), torch.ones(2 * m, dtype=torch.long)])
    return x, y


def readout(v: torch.Tensor) -> torch.Tensor:
    """The centred log of rows in the simplex (Dirichlet vectors), else the rows themselves (feature vectors)."""
    if bool((v > 0).all()) and torch.allclose(v.sum(1), torch.ones(v.shape[0], dtype=v.dtype), atol=1e-4):
        logs = torch.log(v)
        return logs - logs.mean(1, keepdim=True)
    return v


def run_score(method_name: str, options: dict, epsilon: float, setup: HiddenStateSetup, *, world_a: bool,
              seed: int) -> float:
    """One training run in one world; the score of the probes' released vectors."""
    torch.manual_seed(seed)
    method = create_method(method_name, dict(options))
    if not method.capabilities.releases_vectors:
        raise ConfigError(f"method {method_name!r} releases no per-example vectors: the hidden-state audit reads them")
    spec = PrivacySpec(epsilon=epsilon, delta=setup.delta, sampling_rate=setup.sampling_rate, steps=setup.steps)
    method.calibrate(spec)
    x, y = _data(setup, world_a)
    model = LinearProbe(setup)
    optimizer = torch.optim.SGD(model.features.parameters(), lr=setup.lr)
    m = setup.probes
    sums = torch.zeros(2, 2, dtype=torch.float64)
    seen = torch.zeros(2, dtype=torch.float64)
    batch: list[torch.Tensor] = []

    def observe(released: torch.Tensor) -> None:
        idx = batch[0]
        u = readout(released.double())
        for side in (0, 1):
            rows = (idx >= 1 + side * m) & (idx < 1 + (side + 1) * m)
            sums[side] += u[rows].sum(0)
            seen[side] += float(rows.sum())

    model, optimizer = method.begin(model, optimizer, TrainingSetup(spec=spec, train_size=x.shape[0], num_classes=2,
                                                                    device="cpu", release_observer=observe))
    sampler = batch_generator("cpu", seed)
    for idx in poisson_batches(x.shape[0], setup.sampling_rate, setup.steps, sampler, "cpu"):
        batch[:] = [idx]
        method.train_step(model, optimizer, x[idx], y[idx])
    means = sums / seen.clamp_min(1.0)[:, None]
    return float((means[0] - means[1]) @ torch.tensor([1.0, -1.0], dtype=torch.float64)) / math.sqrt(2.0)


@dataclass
class HiddenStateResult:
    method: str
    epsilon: float
    runs: int
    own_vectors_epsilon: float  # the per-example curve's (upper) epsilon of the target's own vectors
    epsilon_lb: float
    ceiling: float
    rule: str
    correct: int
    guesses: int
    seconds: float
    setup: dict

    def as_json(self) -> dict:
        return asdict(self)


def ceiling_for(runs: int, delta: float, beta: float = 0.05) -> float:
    """The largest bound the test half can give: every guess right, n runs in each world there."""

    n = runs // 4
    return rate_bound(n, n, 0, n, delta=delta, beta=beta)


def hidden_state_audit(method_name: str, *, epsilon: float, runs: int, options: dict | None = None,
                       setup: HiddenStateSetup | None = None, seed: int = 0, beta: float = 0.05,
                       progress=None) -> HiddenStateResult:
    """``runs`` runs, half in each world; the bound of the rule chosen on half of them, counted on the others."""
    setup = setup or HiddenStateSetup()
    options = dict(options or {})
    if not (isinstance(runs, int) and runs >= 8):
        raise ConfigError(f"runs={runs!r} is not allowed: the audit needs at least 8 runs (4 per world and half)")
    probe = create_method(method_name, options)
    if not probe.capabilities.releases_vectors:
        raise ConfigError(f"method {method_name!r} releases no per-example vectors: the hidden-state audit reads them")
    probe.calibrate(PrivacySpec(epsilon=epsilon, delta=setup.delta, sampling_rate=setup.sampling_rate,
                                steps=setup.steps))
    t0 = time.perf_counter()
    world_a = assign_inclusion(runs, seed)
    scores = np.empty(runs)
    for i in range(runs):
        scores[i] = run_score(method_name, options, epsilon, setup, world_a=bool(world_a[i]), seed=seed * 100_003 + i)
        if progress is not None:
            progress(i + 1, runs)
    choose = split_halves(world_a, seed)
    rule, _ = choose_rule(scores[choose], world_a[choose], delta=setup.delta, beta=beta)
    c = counts(scores[~choose], world_a[~choose], rule.tau, rule.direction)
    return HiddenStateResult(
        method=method_name, epsilon=epsilon, runs=runs,
        own_vectors_epsilon=float(probe.calibration.details.get("epsilon_vectors_upper", probe.claim().epsilon)),
        epsilon_lb=c.bound(rule.side, delta=setup.delta, beta=beta), ceiling=ceiling_for(runs, setup.delta, beta),
        rule=rule.describe("world A"), correct=c.tp + c.tn, guesses=c.tp + c.tn + c.fp + c.fn,
        seconds=time.perf_counter() - t0, setup=asdict(setup))
