"""The content digest of a data set's arrays (no dependencies: the loaders and the fingerprint cache both use it)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

#: changes whenever what the digest covers changes, so no stale cached digest is ever reused
VERSION = 1


def fingerprint_of_arrays(arrays: Sequence[torch.Tensor]) -> str:
    """16 hex digits over each array's dtype, shape and bytes, in order."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"inputdp-data-v{VERSION}".encode())
    for t in arrays:
        t = t.detach().cpu().contiguous()
        h.update(f"|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(memoryview(t.numpy()).cast("B"))
    return h.hexdigest()
