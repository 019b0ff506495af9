"""Where a method's privacy noise comes from (option ``secure_mode``; THEORY.md, "Secret noise").

A guarantee of the Gaussian (or any noise) mechanism assumes the noise is unknown to whoever sees the release: noise
drawn from a generator seeded with a published seed can be drawn again and subtracted. Two modes:

- seeded (``secure_mode=false``, the default, for studies): the noise is drawn from a generator seeded from the run's
  seed, so the run is a pure function of its configuration. The claim then reads :data:`SEEDED`: it assumes the
  noise is secret, which a published seed is not;
- secret (``secure_mode=true``, for a model that is to be released): the generator is seeded from the operating
  system's entropy (``os.urandom``), or is torchcsprng's ``/dev/urandom`` generator where that is installed; the run
  is no longer reproducible from its seed. A Gaussian is then drawn as Opacus' ``secure_mode`` draws it, the sum of
  four standard normals halved (Holohan & Braghin 2021), against attacks on the floating-point sampler; nothing here
  is a proof that the floating-point sample is exactly Gaussian.

One module so that every method asks for its generator, and says what it used, the same way.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import torch

from inputdp.core.errors import ConfigError

#: the claim's ``noise`` where the noise is drawn from a generator seeded from the run's seed
SEEDED = "seeded from the run's seed: assumes the noise is secret; seeded for reproducibility"
#: the claim's ``noise`` of a method that adds none
NO_NOISE = "none (no noise is added)"


def check_secure_mode(value) -> bool:
    """The option ``secure_mode``: a boolean, nothing else (a string "false" would read as true)."""
    if not isinstance(value, bool):
        raise ConfigError(f"secure_mode={value!r} is not allowed: true (secret noise from the OS's entropy, for a "
                          "released model) or false (noise seeded from the run's seed, for studies)")
    return value


def has_csprng() -> bool:
    return importlib.util.find_spec("torchcsprng") is not None


def secret_source(kind: str = "torch") -> str:
    """What a secret generator of ``kind`` ("torch" or "numpy") is, in words (known before it is made)."""
    if kind == "numpy":
        return "numpy PCG64 seeded from 128 bits of os.urandom (not a cryptographic generator)"
    if has_csprng():
        return "torchcsprng /dev/urandom"
    return "torch generator seeded from 63 bits of os.urandom (torchcsprng not installed: not a cryptographic generator)"


def describe(secure: bool, kind: str = "torch", *, four_sums: bool = True) -> str:
    """The claim's ``noise``: :data:`SEEDED`, or secret and from where (a generator of ``kind``, "torch" or "numpy";
    ``four_sums``: its Gaussians drawn by :func:`standard_normal`'s secure sampling)."""
    if not secure:
        return SEEDED
    gaussian = "; Gaussians as the halved sum of four draws (Opacus' secure_mode)" if four_sums and kind == "torch" else ""
    return f"secret (OS entropy): {secret_source(kind)}{gaussian}; not reproducible from the run's seed"


def torch_generator(seed: int, *, secure: bool, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator on ``device``: seeded from ``seed``, or (``secure``) torchcsprng's /dev/urandom one where it is
    installed and else one seeded from 63 bits of os.urandom."""
    if not secure:
        return torch.Generator(device=device).manual_seed(seed)
    if has_csprng():
        import torchcsprng as csprng  # type: ignore[import-not-found]

        return csprng.create_random_device_generator("/dev/urandom")
    return torch.Generator(device=device).manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)


def numpy_generator(seed: int, *, secure: bool) -> np.random.Generator:
    """NumPy's generator: seeded from ``seed``, or (``secure``) from 128 bits of os.urandom."""
    return np.random.default_rng(int.from_bytes(os.urandom(16), "little") if secure else seed)


def standard_normal(shape, generator: torch.Generator, *, secure: bool,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """N(0, 1) draws of ``shape`` on the generator's device. Seeded: one ``torch.randn`` (what the methods always
    drew, so seeded runs are unchanged). Secure: (Z_1 + Z_2 + Z_3 + Z_4) / 2, again N(0, 1), as Opacus' secure_mode
    draws its noise (its ``_generate_noise``, after Holohan & Braghin 2021)."""
    if not secure:
        return torch.randn(shape, generator=generator, dtype=dtype, device=generator.device)
    total = torch.zeros(shape, dtype=dtype, device=generator.device)
    for _ in range(4):
        total += torch.randn(shape, generator=generator, dtype=dtype, device=generator.device)
    return total / 2
