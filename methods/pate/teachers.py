"""M small CNN teachers trained together as one grouped network (one forward/backward for all of them).

Teacher m sees only its own part of the private data: its convolutions are the m-th group of a grouped
convolution, its linear layers the m-th slice of a batched matrix product, so no parameter is shared and each
teacher's gradient comes from its own examples only (a test checks this).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from inputdp.methods import augment as sampling


class TeacherEnsemble(nn.Module):
    """M copies of conv(w) - pool - conv(2w) - pool - fc(4w) - fc(classes), no normalisation."""

    def __init__(self, m: int, channels: int, size: int, num_classes: int, width: int = 8):
        super().__init__()
        self.m, self.c, self.size, self.k, self.w = m, channels, size, num_classes, width
        w = width
        self.conv1 = nn.Conv2d(m * channels, m * w, 3, padding=1, groups=m)
        self.conv2 = nn.Conv2d(m * w, m * 2 * w, 3, padding=1, groups=m)
        flat = 2 * w * (size // 4) ** 2
        self.fc1_w = nn.Parameter(torch.empty(m, 4 * w, flat))
        self.fc1_b = nn.Parameter(torch.zeros(m, 4 * w))
        self.fc2_w = nn.Parameter(torch.empty(m, num_classes, 4 * w))
        self.fc2_b = nn.Parameter(torch.zeros(m, num_classes))
        for weight, fan_in in ((self.fc1_w, flat), (self.fc2_w, 4 * w)):
            nn.init.uniform_(weight, -1 / math.sqrt(fan_in), 1 / math.sqrt(fan_in))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (b, m, C, H, W), teacher m's examples in slot m -> logits (b, m, classes)."""
        b = x.shape[0]
        h = x.reshape(b, self.m * self.c, self.size, self.size)
        h = F.max_pool2d(F.relu(self.conv1(h)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        h = h.reshape(b, self.m, -1)
        h = F.relu(torch.einsum("bmi,moi->bmo", h, self.fc1_w) + self.fc1_b)
        return torch.einsum("bmi,moi->bmo", h, self.fc2_w) + self.fc2_b

    @torch.no_grad()
    def predict(self, x: torch.Tensor, chunk: int = 64) -> torch.Tensor:
        """Every teacher's label for the same inputs x (n, C, H, W) -> (m, n)."""
        out = []
        for i in range(0, x.shape[0], chunk):
            xx = x[i: i + chunk]
            out.append(self(xx.unsqueeze(1).expand(-1, self.m, -1, -1, -1)).argmax(-1))
        return torch.cat(out, dim=0).T


def train_teachers(x_parts: torch.Tensor, y_parts: torch.Tensor, *, num_classes: int, width: int, epochs: int,
                   batch_size: int, lr: float, momentum: float, generator: torch.Generator, shift_pixels: int = 0,
                   fill: torch.Tensor | None = None) -> TeacherEnsemble:
    """x_parts: (m, n, C, H, W), y_parts: (m, n). Each teacher takes plain SGD steps on its own mini-batches, each
    image moved by up to ``shift_pixels`` pixels at random (what comes into view is ``fill``, per channel)."""

    m, n, c, size, _ = x_parts.shape
    ens = TeacherEnsemble(m, c, size, num_classes, width).to(x_parts.device)
    opt = torch.optim.SGD(ens.parameters(), lr=lr, momentum=momentum)
    rows = torch.arange(m, device=x_parts.device).view(m, 1)
    for _ in range(epochs):
        perm = torch.argsort(torch.rand(m, n, generator=generator), dim=1).to(x_parts.device)
        for start in range(0, n, batch_size):
            idx = perm[:, start: start + batch_size]  # (m, b)
            xb = x_parts[rows, idx].transpose(0, 1)  # (b, m, C, H, W)
            if shift_pixels:
                flat = xb.reshape(-1, *xb.shape[2:])
                filler = torch.zeros(c) if fill is None else fill
                xb = sampling.shift(flat, generator, shift_pixels, filler.to(flat.device)).view(xb.shape)
            yb = y_parts[rows, idx].T  # (b, m)
            opt.zero_grad(set_to_none=True)
            logits = ens(xb)
            # the sum over teachers of each teacher's mean loss: teacher m's gradient is its own mean-loss gradient
            loss = F.cross_entropy(logits.reshape(-1, num_classes), yb.reshape(-1)) * m
            loss.backward()
            opt.step()
    return ens
