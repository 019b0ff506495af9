"""Weight standardisation (Qiao et al. 2019), part of De et al.'s (2022) DP-SGD recipe with GroupNorm: every
convolution's weight standardised per output channel in the forward pass. A function of the parameters alone: it
changes nothing that is accounted."""

from __future__ import annotations

import torch
from torch import nn


class WSConv2d(nn.Conv2d):
    """A convolution whose weight is standardised per output channel in the forward pass (weight standardisation,
    Qiao et al. 2019). Opacus computes its per-example gradients with functorch (no hand-written sampler)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        var = w.var(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return self._conv_forward(x, (w - mean) / torch.sqrt(var + 1e-5), self.bias)


def standardise_weights(model: nn.Module) -> nn.Module:
    """Every nn.Conv2d of ``model`` replaced, in place, by a :class:`WSConv2d` holding the same parameters."""
    for name, child in list(model.named_children()):
        if type(child) is nn.Conv2d:
            ws = WSConv2d(child.in_channels, child.out_channels, child.kernel_size, stride=child.stride,
                          padding=child.padding, dilation=child.dilation, groups=child.groups,
                          bias=child.bias is not None, padding_mode=child.padding_mode)
            ws.weight = child.weight
            ws.bias = child.bias
            setattr(model, name, ws)
        else:
            standardise_weights(child)
    return model
