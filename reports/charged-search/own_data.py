"""A user's own data set, as a new user would bring it: a folder of colour PNGs, 32x32, a few classes, with train/ and
test/ splits (``--dataset folder:PATH``). Made from Fashion-MNIST: 4 classes, the first N training and M test images of
each, each image tinted by a random colour (drawn once, seeded: colour says nothing of the class) and resized to 32x32.

    python reports/charged-search/own_data.py DATA_DIR OUT [--train 2000] [--test 500]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = {0: "tshirt", 1: "trouser", 7: "sneaker", 9: "ankle_boot"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("out")
    ap.add_argument("--train", type=int, default=2000)
    ap.add_argument("--test", type=int, default=500)
    args = ap.parse_args()
    from torchvision.datasets import FashionMNIST

    rng = np.random.default_rng(20261208)
    for split, train, per_class in (("train", True, args.train), ("test", False, args.test)):
        ds = FashionMNIST(args.data_dir, train=train, download=False)
        x, y = ds.data.numpy(), ds.targets.numpy()
        for label, name in CLASSES.items():
            folder = Path(args.out) / split / name
            folder.mkdir(parents=True, exist_ok=True)
            chosen = np.flatnonzero(y == label)[:per_class]
            if len(chosen) < per_class:
                print(f"note: class {name} has {len(chosen)} {split} images, fewer than the {per_class} asked for")
            for i, idx in enumerate(chosen):
                tint = rng.uniform(0.3, 1.0, size=3)
                rgb = (x[idx][..., None].astype(np.float64) * tint).round().astype(np.uint8)
                Image.fromarray(rgb, "RGB").resize((32, 32), Image.BILINEAR).save(folder / f"{i:05d}.png")
    print(f"wrote {args.out}: {len(CLASSES)} classes, {args.train} training and {args.test} test images each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
