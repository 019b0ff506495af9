"""Shared builders for tests: smoke configurations on real MNIST."""

from __future__ import annotations

from inputdp.benchmarks.sweep import Overrides, build_config


def smoke_config(method: str, data_dir, *, epsilon: float = 2.0, seed: int = 0, epochs: int = 1, **overrides):
    return build_config(method=method, dataset="mnist", preset="smoke", epsilon=epsilon, seed=seed,
                        overrides=Overrides(epochs=epochs, data_dir=str(data_dir), **overrides))
