"""The two pieces of the gradient-canary audit (gradient_canaries.py) that sit inside DP-SGD's training: the hook
the method calls each step (the canaries' rows and per-example gradients, clipped and noised by the method's own
code) and the trace that reads each canary's coordinate from consecutive iterates and adds its per-step
log-likelihood ratio."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from inputdp.core.errors import ConfigError
from inputdp.methods.fast_clipping import BookKeeping

from .claimed_curve import RATES, choose_rates

#: a canary's gradient before clipping, in units of C: above 1, so the method's clipping (not this module) makes it C
RAW_NORM = 2.0


# --- the hook DP-SGD calls -----------------------------------------------------------------------------------
class CanaryGradients:
    """The hook ``DPSGD.gradient_canaries``: m canary coordinates (the weight of a bias-free nn.Linear(m, 1) that no
    forward output reads), the rows of the training set that are canaries, and their per-example gradients.

    ``signs[j]``: +1 for canary j's own gradient, -1 for its replacement (replace_input, excluded). Each step the
    method calls :meth:`split` on the batch, then :meth:`append_rows` (Opacus' modes: per-example rows for the
    optimizer's own ``clip_and_accumulate``) or :meth:`add_clipped_sum` (book-keeping: the suite's own clipping of
    those rows into ``summed_grad``)."""

    def __init__(self, m: int, clip: float, signs: torch.Tensor, device: str | torch.device, mode: str):
        self.layer = nn.Linear(m, 1, bias=False).to(device)
        nn.init.zeros_(self.layer.weight)
        self.weight = self.layer.weight
        self.m, self.clip, self.mode = m, float(clip), mode
        self.signs = signs.to(device=device, dtype=torch.float32)
        self._ids = torch.zeros(0, dtype=torch.long, device=device)
        self._bk = BookKeeping(self.layer, clip) if mode == "bk" else None

    def split(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's real rows; the canary rows' indices are kept for this step."""
        flat = x.reshape(x.shape[0], -1)
        mark = torch.isnan(flat[:, 1])
        self._ids = flat[mark, 0].round().long()
        return x[~mark], y[~mark]

    def _rows(self) -> torch.Tensor:
        """(sampled canaries, m): each row RAW_NORM C sign_j e_j, the canary's gradient before clipping."""
        ids = self._ids
        rows = torch.zeros((ids.numel(), self.m), device=self.weight.device)
        rows[torch.arange(ids.numel(), device=ids.device), ids] = RAW_NORM * self.clip * self.signs[ids]
        return rows

    def append_rows(self, optimizer) -> None:
        """Opacus: every parameter's per-example gradients get the canary rows (0 on the real parameters, the
        canary's own gradient on its coordinate; the real rows are 0 on the canaries' coordinates)."""
        c = self._ids.numel()
        real = None
        for p in optimizer.params:
            if p is self.weight:
                continue
            gs = p.grad_sample
            if isinstance(gs, list):
                gs = torch.cat(gs)
            real = gs.shape[0]
            p.grad_sample = torch.cat([gs, gs.new_zeros((c, *gs.shape[1:]))])
        if real is None:
            raise ConfigError("gradient canaries need at least one trainable parameter in the model")
        own = self.weight.new_zeros((real + c, *self.weight.shape))
        own[real:, 0] = self._rows()
        self.weight.grad_sample = own

    def add_clipped_sum(self) -> None:
        """Book-keeping: the canary rows clipped by the suite's own book-keeping code into the coordinates'
        ``summed_grad`` (a canary's gradient is 0 on every real parameter, so its norm is its own row's)."""
        if self._ids.numel() == 0:
            return
        rows = self._rows()
        self._bk.clipped_sum(lambda: self.layer(rows), rows.new_zeros(0),
                             loss_fn=lambda out, _y: out.sum())


# --- the iterates, read step by step ---------------------------------------------------------------------------
class CanaryTrace:
    """Called after each step (the harness's ``step_hook``): reads theta_t, recovers each coordinate's noisy summed
    gradient z_t (in units of C) from consecutive iterates, and adds its log-likelihood ratio. O(m) memory.
    ``record``: the first ``record`` canaries' z_t and whether they were sampled (for tests), kept per step."""

    def __init__(self, hook: CanaryGradients, optimizer, *, first_row: int, row_canary: torch.Tensor,
                 sampling_rate: float, noise_multiplier: float, replaced: bool, record: int = 0):
        self.hook, self.first_row, self.row_canary = hook, first_row, row_canary
        self.group = next(g for g in optimizer.param_groups if any(p is hook.weight for p in g["params"]))
        if self.group.get("nesterov") or self.group.get("dampening", 0) or "momentum" not in self.group:
            raise ConfigError("gradient canaries need plain SGD (momentum without dampening or Nesterov): the score "
                              "inverts its update")
        self.expected = float(optimizer.expected_batch_size)
        self.q, self.sigma, self.replaced = sampling_rate, noise_multiplier, replaced
        m = hook.m
        self.theta = torch.zeros(m, dtype=torch.float64)
        self.buf = torch.zeros(m, dtype=torch.float64)
        self.llr = torch.zeros(m, dtype=torch.float64)
        self.sampled = torch.zeros(m, dtype=torch.long)
        self.steps = 0
        self.record = record
        self.z_recorded: list[torch.Tensor] = []
        self.b_recorded: list[torch.Tensor] = []

    def __call__(self, _step: int, idx: torch.Tensor) -> None:
        g = self.group
        lr, mu, wd = float(g["lr"]), float(g["momentum"]), float(g.get("weight_decay", 0.0))
        now = self.hook.weight.detach()[0].to("cpu", torch.float64)
        buf = (self.theta - now) / lr
        grad = buf - mu * self.buf - wd * self.theta
        z = grad * self.expected / self.hook.clip
        self.llr += step_log_likelihood_ratio(z, q=self.q, sigma=self.sigma, replaced=self.replaced)
        self.theta, self.buf = now, buf
        rows = idx[idx >= self.first_row].cpu() - self.first_row
        hit = self.row_canary[rows]
        self.sampled[hit] += 1
        if self.record:
            b = torch.zeros(self.hook.m, dtype=torch.bool)
            b[hit] = True
            self.z_recorded.append(z[: self.record].clone())
            self.b_recorded.append(b[: self.record])
        self.steps += 1


def step_log_likelihood_ratio(z: torch.Tensor, *, q: float, sigma: float, replaced: bool) -> torch.Tensor:
    """log p_in(z) / p_out(z) for one step's z = noisy summed gradient / C on a canary's coordinate.

    in: (1 - q) N(0, sigma^2) + q N(1, sigma^2); out: N(0, sigma^2) (absent) or (1 - q) N(0, sigma^2) + q N(-1,
    sigma^2) (replaced by the opposite gradient). N(s, sigma^2) / N(0, sigma^2) = exp((2 s z - s^2) / (2 sigma^2)).
    """
    lq, l1q = math.log(q), math.log1p(-q)
    v = 2.0 * sigma * sigma
    out = torch.logaddexp(torch.full_like(z, l1q), lq + (2.0 * z - 1.0) / v)
    if replaced:
        out = out - torch.logaddexp(torch.full_like(z, l1q), lq + (-2.0 * z - 1.0) / v)
    return out


def simulate_scores(*, sampling_rate: float, steps: int, sigma: float, score_sigma: float, sign: float, trials: int,
                    seed: int, replaced: bool) -> np.ndarray:
    """The likelihood-ratio scores of ``trials`` canaries of the ideal game, the mechanism alone: each step
    z_t = sign b_t + N(0, sigma^2), b_t ~ Bernoulli(q) (sign +1 an included canary, 0 an absent or null one, -1 a
    replaced one), scored by :func:`step_log_likelihood_ratio` at ``score_sigma``. What the audit's thresholds are
    chosen on (at the claim's sigma, a seed of its own: no data) and what the simulations of the test play."""
    generator = torch.Generator().manual_seed(int(seed))
    llr = torch.zeros(trials, dtype=torch.float64)
    for _ in range(int(steps)):
        b = torch.rand(trials, generator=generator, dtype=torch.float64) < sampling_rate
        z = torch.randn(trials, generator=generator, dtype=torch.float64) * sigma + sign * b
        llr += step_log_likelihood_ratio(z, q=sampling_rate, sigma=score_sigma, replaced=replaced)
    return llr.numpy()


#: the claimed game's simulated trials a world, and the simulation's seed (no run's: the thresholds depend on the
#: claim alone)
SIMULATED_TRIALS = 20_000
THRESHOLD_SEED = 2_026_120_7


def rates_for(family, *, sampling_rate: float, steps: int, sigma: float, in_trials: int, out_trials: int,
              replaced: bool, count: int | None = None) -> tuple[float, ...]:
    """The claimed-curve test's false-positive rates (each fixes its threshold's rank among the excluded canaries'
    likelihood-ratio scores), fixed before the run from the claimed mechanism alone: its ideal game simulated at the
    claim's sigma (``THRESHOLD_SEED``), the rate at which that game's own test would certify the most at these numbers
    of trials (claimed_curve.choose_rates)."""
    common = {"sampling_rate": sampling_rate, "steps": steps, "sigma": sigma, "score_sigma": sigma,
              "trials": SIMULATED_TRIALS, "replaced": replaced}
    sim_in = simulate_scores(**common, sign=1.0, seed=THRESHOLD_SEED)
    sim_out = simulate_scores(**common, sign=-1.0 if replaced else 0.0, seed=THRESHOLD_SEED + 1)
    return choose_rates(sim_in, sim_out, in_trials=in_trials, out_trials=out_trials, family=family,
                        count=RATES if count is None else count)
