"""A toy data-set plug-in: oriented stripes, one orientation per class, generated (no files)."""

import torch

from inputdp.datasets import DatasetInfo

INFO = DatasetInfo(
    name="toy_stripes", target="inputdp_toy_dataset:load", summary="(plug-in, for tests) 4 stripe orientations, 16x16",
    num_classes=4, channels=1, size=16, train_size=800, test_size=200, mean=(0.5,), std=(0.5,),
    files="nothing (generated)", normalisation="fixed 0.5")


def load(root: str, download: bool):
    """(x_train, y_train, x_test, y_test): uint8 N C H W images and int64 labels, as every loader returns."""
    g = torch.Generator().manual_seed(3)
    i, j = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    patterns = torch.stack([torch.sin(i), torch.sin(j), torch.sin((i + j) / 1.4), torch.sin((i - j) / 1.4)])

    def draw(n):
        y = torch.arange(n) % 4
        x = patterns[y] * 0.5 + 0.5 + 0.3 * torch.randn(n, 16, 16, generator=g)
        return (x.clamp(0, 1) * 255).to(torch.uint8).unsqueeze(1), y

    return (*draw(800), *draw(200))
