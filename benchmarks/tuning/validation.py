"""The private validation split a search scores its trials on, drawn so that neighbouring data sets give neighbouring
splits under the claim's relation: one example added or removed goes to exactly one side, and the other side is
unchanged (each example's side is a hash of its own content); one input replaced or zeroed out keeps its position,
and so its side (sides are a fixed permutation of positions, public). The trial trains on one side and scores on the
other, and its release composes both (methods/accounting/repeat_select.py), so either way the trial's charge covers
the example."""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from inputdp.core.claims import ADD_REMOVE
from inputdp.core.errors import ConfigError
from inputdp.datasets import TensorData

#: the permutation of positions (one input replaced, zero-out) is drawn with this seed, whatever the run's
SPLIT_SEED = 20261208
#: the salt of the content hash (add/remove)
SALT = b"inputdp-validation"


def check_fraction(fraction: float) -> None:
    """Refuse, in one line, a validation share outside (0, 0.5)."""
    if not (isinstance(fraction, float) and 0.0 < fraction < 0.5):
        raise ConfigError(f"--validation {fraction!r} is not allowed: the share of the training split held out to "
                          "score the trials, in (0, 0.5)")


def validation_mask(data: TensorData, fraction: float, relation: str) -> np.ndarray:
    """True for each training example on the validation side."""
    n = data.train_size
    if relation == ADD_REMOVE:
        x, y = data.x_train.detach().cpu().numpy(), data.y_train.detach().cpu().numpy()
        cut = int(fraction * 2**64)
        return np.array([int.from_bytes(hashlib.blake2b(SALT + x[i].tobytes() + int(y[i]).to_bytes(8, "little"),
                                                        digest_size=8).digest(), "little") < cut for i in range(n)])
    mask = np.zeros(n, dtype=bool)
    perm = np.random.default_rng(SPLIT_SEED).permutation(n)
    mask[perm[: round(fraction * n)]] = True
    return mask


def split(data: TensorData, mask: np.ndarray) -> TensorData:
    """The trial's data: training on the examples outside the mask, its evaluation split the validation examples."""
    if mask.all() or not mask.any():
        raise ConfigError(f"the validation split holds {int(mask.sum())} of {mask.size} training examples: both sides "
                          "need examples; change --validation")
    m = torch.as_tensor(mask, device=data.x_train.device)
    fingerprint = f"{data.fingerprint}:validation-{int(mask.sum())}" if data.fingerprint else ""
    return TensorData(data.info, data.x_train[~m], data.y_train[~m], data.x_train[m], data.y_train[m],
                      data.notes, fingerprint)
