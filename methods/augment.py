"""On-device image augmentations, batched and drawn from a given generator: the harness's random crop and flip
(``RunConfig.augment``), DP-SGD's augmentation multiplicity, PATE's shifted teachers and its student's cutout."""

from __future__ import annotations

import torch
from torch import nn


def _windows(padded: torch.Tensor, h: int, w: int, pad: int, generator: torch.Generator, *,
             flip: bool = False) -> torch.Tensor:
    """An h x w window of each padded image, at a random offset in [0, 2 * pad] along each axis (x drawn first,
    then y), mirrored left to right for a random half of the images when ``flip``; batched on the images' device."""
    n = padded.shape[0]
    dev = padded.device
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(dev)
    rows = dy.view(n, 1) + torch.arange(h, device=dev).view(1, h)  # n, h
    cols = dx.view(n, 1) + torch.arange(w, device=dev).view(1, w)  # n, w
    if flip:
        mirrored = (torch.rand(n, generator=generator) < 0.5).to(dev)
        cols = torch.where(mirrored.view(n, 1), cols.flip(1), cols)
    idx = torch.arange(n, device=dev).view(n, 1, 1)
    out = padded.permute(0, 2, 3, 1)[idx, rows.view(n, h, 1), cols.view(n, 1, w)]  # n, h, w, c
    return out.permute(0, 3, 1, 2).contiguous()


def random_crop_flip(x: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop with ``pad`` pixels of zero padding and random horizontal flip, batched on x's device."""
    if x.shape[0] == 0:
        return x
    _, _, h, w = x.shape
    return _windows(torch.nn.functional.pad(x, (pad, pad, pad, pad)), h, w, pad, generator, flip=True)


def shift(x: torch.Tensor, generator: torch.Generator, most: int, fill: torch.Tensor) -> torch.Tensor:
    """Each image moved by a random whole number of pixels in [-most, most] along both axes; what comes into view
    is ``fill``: per channel (shape (C,): the data set's blank value) or per image and channel (shape (N, C))."""
    n, c, h, w = x.shape
    if n == 0 or most == 0:
        return x
    fill = fill.view(-1, c, 1, 1).to(x.dtype)
    padded = fill.expand(n, c, h + 2 * most, w + 2 * most).clone()
    padded[:, :, most: most + h, most: most + w] = x
    return _windows(padded, h, w, most, generator)


def cutout(x: torch.Tensor, generator: torch.Generator, size: int, fill: torch.Tensor) -> torch.Tensor:
    """A ``size`` x ``size`` square at a random place of each image (clipped at the borders) set to ``fill``."""
    n, c, h, w = x.shape
    if n == 0 or size == 0:
        return x
    cy = torch.randint(0, h, (n,), generator=generator).to(x.device).view(n, 1, 1)
    cx = torch.randint(0, w, (n,), generator=generator).to(x.device).view(n, 1, 1)
    ys = torch.arange(h, device=x.device).view(1, h, 1)
    xs = torch.arange(w, device=x.device).view(1, 1, w)
    half = size // 2
    inside = ((ys - cy).abs() <= half) & ((xs - cx).abs() <= half)  # n, h, w
    return torch.where(inside.unsqueeze(1), fill.view(1, c, 1, 1).to(x.dtype), x)


#: the kinds of DP-SGD's augmentation multiplicity (``augmult_kind``; "auto": crop-and-flip for colour images, a
#: shift for one-channel ones)
AUGMULT_KINDS = ("auto", "shift", "crop_flip")


def augment_copies(x: torch.Tensor, k: int, kind: str, generator: torch.Generator) -> torch.Tensor:
    """(B, C, H, W) -> (B * K, C, H, W): K augmented copies of each image, an image's copies next to each other."""

    rep = x.repeat_interleave(k, dim=0)
    if kind == "auto":
        kind = "crop_flip" if x.shape[1] == 3 else "shift"
    if kind == "crop_flip":
        return random_crop_flip(rep, generator)
    # each copy's own darkest value per channel fills what comes into view: a fill taken over the batch would make
    # one example's gradient depend on another's pixels, and the sensitivity would no longer be C
    return shift(rep, generator, 4, rep.amin(dim=(2, 3)))




def average_copies(model: nn.Module, k: int) -> None:
    """Per-example gradients of B * K augmented rows -> B rows, each the mean over its example's K copies (rows
    k*i .. k*i + K - 1): what is then clipped is one vector per example."""
    for p in model.parameters():
        gs = getattr(p, "grad_sample", None)
        if isinstance(gs, torch.Tensor):
            p.grad_sample = gs.view(gs.shape[0] // k, k, *gs.shape[1:]).mean(dim=1)
