"""Poisson batches (the augmentations live with the methods that use them: ``inputdp.methods.augment``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

import torch


def steps_per_epoch(sampling_rate: float) -> int:
    """One epoch is 1/q steps (rounded): in expectation every example is seen once."""
    return max(1, round(1.0 / sampling_rate))


def epoch_lengths(sampling_rate: float, steps: int) -> list[int]:
    """Split T steps into epochs of 1/q steps; the last epoch takes the remainder."""
    per = steps_per_epoch(sampling_rate)
    full, rest = divmod(steps, per)
    lengths = [per] * full
    if rest:
        lengths.append(rest)
    return lengths


def poisson_indices(n: int, sampling_rate: float, generator: torch.Generator) -> torch.Tensor:
    """The indices of one Poisson sample: each of 0..n-1 included independently with probability q.

    Drawn as the running sum of i.i.d. Geometric(q) gaps (the waiting times between inclusions of independent
    Bernoulli(q) trials), which is the same distribution as n coin flips at O(q*n) cost instead of O(n).
    """
    if sampling_rate >= 1.0:
        return torch.arange(n)
    mean = n * sampling_rate
    chunk = int(mean + 6.0 * math.sqrt(mean) + 16)
    parts, last = [], -1.0
    while True:
        gaps = torch.empty(chunk, dtype=torch.float64).geometric_(sampling_rate, generator=generator)
        positions = last + torch.cumsum(gaps, 0)
        inside = positions[positions < n]
        parts.append(inside)
        if inside.numel() < positions.numel():
            break
        last = float(positions[-1])
    return torch.cat(parts).long()


def poisson_indices_by_coins(n: int, sampling_rate: float, generator: torch.Generator) -> torch.Tensor:
    """The same law drawn where ``generator`` lives (a GPU): n uniforms, example i included when u_i < q.

    O(n) work, but in one kernel on the device and without a host-side generator or a host-to-device copy; the
    indices come out sorted, as the geometric-gap sampler's do.
    """
    u = torch.rand(n, generator=generator, device=generator.device)
    return torch.nonzero(u < sampling_rate).squeeze(1)


def batch_generator(device: str, seed: int) -> torch.Generator:
    """The generator of a run's Poisson batches: on the CPU for a CPU run (the exact, reproducible sampler that
    every CPU figure was measured with), on the device for a GPU run."""
    dev = torch.device(device)
    return torch.Generator(device=dev if dev.type != "cpu" else "cpu").manual_seed(seed)


def poisson_batches(
    n: int, sampling_rate: float, steps: int, generator: torch.Generator, device: str | torch.device = "cpu"
) -> Iterator[torch.Tensor]:
    """Yield ``steps`` index tensors; each example is included independently with probability q.

    Batch sizes vary (Binomial(n, q)) and a batch may be empty: callers must handle ``len(idx) == 0``.
    A CPU generator draws by geometric gaps and copies the indices to ``device``; a device generator draws by
    coins on the device (same law; see :func:`poisson_indices_by_coins`).
    """
    on_device = generator.device.type != "cpu"
    for _ in range(steps):
        if on_device:
            yield poisson_indices_by_coins(n, sampling_rate, generator)
        else:
            yield poisson_indices(n, sampling_rate, generator).to(device)


def expected_batch_size(n: int, sampling_rate: float) -> float:
    """The expected Poisson batch, q n."""
    return n * sampling_rate


def batch_size_interval(n: int, sampling_rate: float, z: float = 6.0) -> tuple[int, int]:
    """A (mean +- z sd) interval for Binomial(n, q) batch sizes; used by tests."""
    mean = n * sampling_rate
    sd = math.sqrt(n * sampling_rate * (1 - sampling_rate))
    return max(0, math.floor(mean - z * sd)), math.ceil(mean + z * sd)


_WARNED: set[tuple[str, float, int]] = set()


def warn_tiny_batches(dataset: str, q: float, n: int) -> None:
    """A preset's q meant for 50,000 examples, applied to a few hundred, gives batches of one or two: said once per
    (data set, q, n), on stderr."""
    key = (dataset, q, n)
    if q * n < 4 and key not in _WARNED:
        _WARNED.add(key)
        print(f"warning: the expected batch is q*n = {q:g}*{n} = {q * n:.1f} examples; a preset's q suits the data "
              "sets it names (give --sampling-rate for yours)", file=sys.stderr)
