"""Book-keeping clipping (Bu et al. 2023) with mixed ghost norms (Bu, Mao & Xu 2022): DP-SGD's clipped sum from one
forward and one backward pass.

The backward pass asks autograd only for the gradient of the summed per-example loss with respect to each trainable
layer's *output* (no parameter gradient is formed). For each layer the per-example gradient is a function of the layer's
input a_i and that output gradient g_i, so from the same two tensors:

- the per-example squared norms: for a Linear layer on (B, d) inputs |g_i|^2 |a_i|^2 (ghost norm); on a sequence, and for
  a Conv2d (its input unfolded into patches, T output positions), the cheaper of the ghost norm (cost ~ T^2 (d + p))
  and the instantiated per-example gradient g_i^T a_i (cost ~ T d p), chosen per layer from the shapes; GroupNorm's
  weight and bias from the normalised input;
- the clipped sum: with c_i = min(1, C / |G_i|) over all layers, each layer's weight gradient sum_i c_i g_i^T a_i is
  one ordinary weight-gradient product with the output gradients scaled by c_i (or the einsum of the instantiated
  per-example gradients), written into ``p.summed_grad``.

The noise is then added once to the sum by Opacus' own DPOptimizer, whose clipping alone is replaced (``bk_optimizer``),
over the expected batch size. Opacus stays the reference implementation (``grad_sample_mode=hooks|functorch|ghost``);
tests/methods/test_fast_clipping.py checks this update against each example's own autograd gradient, clipped and summed, on
every registered model it supports.

Supported trainable layers: nn.Linear, nn.Conv2d (any stride, padding, dilation, groups; zero padding), nn.GroupNorm.
A model with any other trainable layer, or a layer called twice in one forward pass, is refused in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.core.errors import ConfigError

SUPPORTED = (nn.Linear, nn.Conv2d, nn.GroupNorm)


def unsupported_layers(model: nn.Module) -> list[str]:
    """The trainable layers book-keeping cannot clip (empty: the model is supported)."""
    out = []
    for name, module in model.named_modules():
        own = [p for p in module.parameters(recurse=False) if p.requires_grad]
        if own and (type(module) not in SUPPORTED):
            out.append(f"{name or 'model'} ({type(module).__name__})")
    return out


class BookKeeping:
    """Hooks on a model's trainable layers that record, during :meth:`clipped_sum` only, each layer's input and output."""

    def __init__(self, model: nn.Module, max_grad_norm: float):
        bad = unsupported_layers(model)
        if bad:
            raise ConfigError(f"grad_sample_mode=bk is not allowed for this model: it cannot clip {', '.join(bad[:3])}; "
                              f"use hooks, functorch or ghost (Opacus)")
        self.model = model
        self.max_grad_norm = float(max_grad_norm)
        self.layers = [m for m in model.modules() if isinstance(m, SUPPORTED)
                       and any(p.requires_grad for p in m.parameters(recurse=False))]
        self._records: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
        self._recording = False
        self._handles = [m.register_forward_hook(self._record) for m in self.layers]

    def _record(self, module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        if self._recording:
            self._records.append((module, inputs[0].detach(), output))

    def remove(self) -> None:
        for h in self._handles:
            h.remove()

    def clipped_sum(self, forward: Callable[[], torch.Tensor], targets: torch.Tensor, *, group: int = 1,
                    loss_fn: Callable[..., torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run ``forward()`` (the model on the batch's rows), backpropagate the summed loss to the layers' outputs, and
        add the sum over examples of each example's clipped gradient to every trainable parameter's ``summed_grad``.

        ``group``: rows per example (augmult's copies sit next to each other): an example's gradient is the mean of its
        rows' gradients, clipped once. Returns (the rows' mean loss, the examples' unclipped gradient norms)."""
        loss_fn = loss_fn or (lambda logits, y: F.cross_entropy(logits.float(), y, reduction="sum"))
        self._records = []
        self._recording = True
        try:
            logits = forward()
        finally:
            self._recording = False
        records, self._records = self._records, []
        if len({id(m) for m, _, _ in records}) != len(records):
            raise ConfigError("grad_sample_mode=bk is not allowed for this model: a layer is called twice in one "
                              "forward pass; use hooks or functorch (Opacus)")
        rows = logits.shape[0]
        loss = loss_fn(logits, targets)
        if rows == 0 or not records:
            return loss.detach() / max(rows, 1), torch.zeros(0)
        grads = torch.autograd.grad(loss, [out for _, _, out in records])
        n = rows // group
        scale = 1.0 / group
        plans = [_layer_plan(m, a, g.detach(), n, group, scale) for (m, a, _), g in zip(records, grads)]
        sq = torch.zeros(n, dtype=torch.float32, device=logits.device)
        for plan in plans:
            sq += plan.squared_norms()
        norms = sq.sqrt()
        factor = (self.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
        for plan in plans:
            plan.add_clipped_sum(factor)
        return loss.detach() / rows, norms


class _Plan:
    """One layer's per-example norms and clipped sum from its input and output gradient."""

    def squared_norms(self) -> torch.Tensor:
        raise NotImplementedError

    def add_clipped_sum(self, factor: torch.Tensor) -> None:
        raise NotImplementedError


def _accumulate(p: torch.Tensor | None, value: torch.Tensor) -> None:
    if p is None or not p.requires_grad:
        return
    value = value.to(p.dtype).view_as(p)
    if getattr(p, "summed_grad", None) is None:
        p.summed_grad = value
    else:
        p.summed_grad = p.summed_grad + value


def _squared(t: torch.Tensor) -> torch.Tensor:
    """Per-row squared Euclidean norms of (n, ...) in float32."""
    return torch.linalg.vector_norm(t.flatten(1).float(), dim=1).pow(2)


class _Instantiated(_Plan):
    """A layer whose per-example weight gradients (n, ...) are formed (cheaper than the ghost norm here)."""

    def __init__(self, weight, bias, per_example: torch.Tensor | None, bias_rows: torch.Tensor | None):
        self.weight, self.bias, self.per_example, self.bias_rows = weight, bias, per_example, bias_rows

    def squared_norms(self) -> torch.Tensor:
        out = 0
        if self.per_example is not None:
            out = out + _squared(self.per_example)
        if self.bias_rows is not None:
            out = out + _squared(self.bias_rows)
        return out

    def add_clipped_sum(self, factor: torch.Tensor) -> None:
        if self.per_example is not None:
            _accumulate(self.weight, factor.to(self.per_example.dtype) @ self.per_example.flatten(1))
        if self.bias_rows is not None:
            _accumulate(self.bias, factor.to(self.bias_rows.dtype) @ self.bias_rows)


class _Ghost(_Plan):
    """A layer as g_i (T, p) times a_i (T, d) per example (a conv's input unfolded): the norm from the two Gram
    matrices (or, for T = 1, the product of the two norms), the clipped sum as one weight-gradient product on the
    output gradients scaled by each example's factor (``write_weight``)."""

    def __init__(self, weight, bias, a3: torch.Tensor | None, g3: torch.Tensor, write_weight, bias_rows):
        self.weight, self.bias, self.a3, self.g3, self.write_weight = weight, bias, a3, g3, write_weight
        self.bias_rows = bias_rows

    def squared_norms(self) -> torch.Tensor:
        a, g = self.a3, self.g3
        out = 0
        if a is not None:
            if a.shape[1] == 1:
                out = out + _squared(a) * _squared(g)
            else:
                aa = torch.bmm(a.float(), a.float().transpose(1, 2))
                gg = torch.bmm(g.float(), g.float().transpose(1, 2))
                out = out + (aa * gg).sum(dim=(1, 2))
        if self.bias_rows is not None:
            out = out + _squared(self.bias_rows)
        return out

    def add_clipped_sum(self, factor: torch.Tensor) -> None:
        if self.a3 is not None:
            self.write_weight(factor)
        if self.bias_rows is not None:
            _accumulate(self.bias, factor.to(self.bias_rows.dtype) @ self.bias_rows)


def _trains(p) -> bool:
    return p is not None and p.requires_grad


def _layer_plan(module: nn.Module, a: torch.Tensor, g: torch.Tensor, n: int, group: int, scale: float) -> _Plan:
    if scale != 1.0:
        g = g * scale  # an example's gradient is the mean over its rows
    if isinstance(module, nn.Linear):
        return _linear_plan(module, a, g, n)
    if isinstance(module, nn.Conv2d):
        return _conv_plan(module, a, g, n)
    if isinstance(module, nn.GroupNorm):
        return _GroupNorm(module, a, g, n)
    raise ConfigError(f"grad_sample_mode=bk cannot clip {type(module).__name__}")  # unreachable: refused up front


def _linear_plan(module: nn.Linear, a: torch.Tensor, g: torch.Tensor, n: int) -> _Plan:
    a3 = a.reshape(n, -1, a.shape[-1])  # (n, T, d): T = the rows per example times any sequence positions
    g3 = g.reshape(n, -1, g.shape[-1])
    t, d, p = a3.shape[1], a3.shape[2], g3.shape[2]
    bias_rows = g3.sum(dim=1) if _trains(module.bias) else None
    if not _trains(module.weight):
        return _Instantiated(module.weight, module.bias, None, bias_rows)
    if t > 1 and t * t * (d + p) > t * d * p:
        return _Instantiated(module.weight, module.bias, torch.bmm(g3.transpose(1, 2), a3), bias_rows)

    def write(factor):
        gs = g3 * factor.to(g3.dtype)[:, None, None]
        _accumulate(module.weight, gs.flatten(0, 1).t() @ a3.flatten(0, 1))

    return _Ghost(module.weight, module.bias, a3, g3, write, bias_rows)


def _conv_plan(module: nn.Conv2d, a: torch.Tensor, g: torch.Tensor, n: int) -> _Plan:
    """Instantiated per-example gradients as one convolution-weight gradient with the batch as groups (no unfolding),
    or the ghost norm from the unfolded input, whichever costs fewer operations for this layer's shapes."""
    if module.padding_mode != "zeros":
        raise ConfigError("grad_sample_mode=bk needs zero padding in every convolution; use hooks or functorch")
    padding = module.padding
    if padding == "same":
        padding = tuple((module.dilation[i] * (module.kernel_size[i] - 1)) // 2 for i in range(2))
    elif padding == "valid":
        padding = (0, 0)
    rows, groups, out_c = a.shape[0], module.groups, g.shape[1]
    per = rows // n
    t = per * g.shape[2] * g.shape[3]  # output positions per example
    d = a.shape[1] // groups * module.kernel_size[0] * module.kernel_size[1]
    p = out_c // groups
    bias_rows = g.reshape(n, per, out_c, -1).sum(dim=(1, 3)) if _trains(module.bias) else None
    if not _trains(module.weight):
        return _Instantiated(module.weight, module.bias, None, bias_rows)
    conv = {"stride": module.stride, "padding": padding, "dilation": module.dilation}
    if groups > 1 or t * t * (d + p * groups) > t * d * p * groups:
        w = module.weight.shape
        per_row = torch.nn.grad.conv2d_weight(a.reshape(1, -1, *a.shape[2:]), (rows * w[0], *w[1:]),
                                              g.reshape(1, -1, *g.shape[2:]), groups=rows * groups, **conv)
        per_example = per_row.view(n, per, *w).sum(dim=1) if per > 1 else per_row.view(rows, *w)
        return _Instantiated(module.weight, module.bias, per_example, bias_rows)
    cols = F.unfold(a, module.kernel_size, **conv)  # (rows, C k k, L)
    a3 = cols.transpose(1, 2).reshape(n, -1, cols.shape[1])
    g3 = g.reshape(rows, out_c, -1).transpose(1, 2).reshape(n, -1, out_c)

    def write(factor):
        scaled = g * factor.to(g.dtype).repeat_interleave(per)[:, None, None, None]
        _accumulate(module.weight, torch.nn.grad.conv2d_weight(a, module.weight.shape, scaled, groups=groups, **conv))

    return _Ghost(module.weight, module.bias, a3, g3, write, bias_rows)


class _GroupNorm(_Plan):
    """GroupNorm: per-example weight gradient sum over positions of g * x_hat, bias gradient sum of g."""

    def __init__(self, module: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor, n: int):
        with torch.no_grad():
            xhat = F.group_norm(a.float(), module.num_groups, None, None, module.eps)
        rows, ch = a.shape[0], a.shape[1]
        gf = g.float().reshape(n, rows // n, ch, -1)
        self.module = module
        self.dw = (gf * xhat.reshape(n, rows // n, ch, -1)).sum(dim=(1, 3)) if module.affine else None
        self.db = gf.sum(dim=(1, 3)) if module.affine else None

    def squared_norms(self) -> torch.Tensor:
        out = 0
        if _trains(self.module.weight):
            out = out + _squared(self.dw)
        if _trains(self.module.bias):
            out = out + _squared(self.db)
        return out

    def add_clipped_sum(self, factor: torch.Tensor) -> None:
        if self.module.weight is not None and self.module.weight.requires_grad:
            _accumulate(self.module.weight, (factor[:, None] * self.dw).sum(0))
        if self.module.bias is not None and self.module.bias.requires_grad:
            _accumulate(self.module.bias, (factor[:, None] * self.db).sum(0))


def bk_optimizer(optimizer: torch.optim.Optimizer, *, noise_multiplier: float, max_grad_norm: float,
                 expected_batch_size: int, secure_mode: bool = False, generator: torch.Generator | None = None):
    """Opacus' DPOptimizer with its clipping replaced by book-keeping's (:class:`BookKeeping` writes each parameter's
    clipped sum into ``p.summed_grad`` during the backward pass): the noise (``_generate_noise``, ``secure_mode``
    included), the division by the expected batch size, the skipped steps of micro-batches and ``zero_grad`` are
    Opacus' own code."""
    return _bk_optimizer_class()(optimizer, noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm,
                                 expected_batch_size=expected_batch_size, loss_reduction="mean", generator=generator,
                                 secure_mode=secure_mode)


@functools.cache
def _bk_optimizer_class() -> type:
    """The subclass, made once (Opacus is imported when DP-SGD first runs, not with this module)."""
    from opacus.optimizers import DPOptimizer

    class BKOptimizer(DPOptimizer):
        @property
        def grad_samples(self) -> list[torch.Tensor]:
            """Book-keeping forms no per-example gradient: the clipped sums stand for them (Opacus reads only
            whether there are any)."""
            return [p.summed_grad for p in self.params]

        @property
        def accumulated_iterations(self) -> int:
            return 1  # one clipped sum per step, however many micro-batches wrote into it

        def clip_and_accumulate(self) -> None:
            """Nothing to clip: book-keeping wrote the clipped sum; an empty batch's is 0."""
            for p in self.params:
                if getattr(p, "summed_grad", None) is None:
                    p.summed_grad = torch.zeros_like(p)

    return BKOptimizer
