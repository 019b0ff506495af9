"""``bench list``: every registry's entries."""

from __future__ import annotations

import argparse
import sys


def cmd_list(_: argparse.Namespace) -> int:
    """Every registry's entries, plug-ins with their distribution; a broken plug-in is listed on stderr in one line
    (exit 2) and stops nothing else."""
    from inputdp.benchmarks.models import MODELS
    from inputdp.benchmarks.presets import PRESETS
    from inputdp.core.registry import BUILT_IN
    from inputdp.datasets import DATASETS
    from inputdp.methods import METHODS

    broken = 0
    for title, registry in (("methods", METHODS), ("data sets", DATASETS), ("models", MODELS), ("presets", PRESETS)):
        print(f"{title}:")
        for e in registry:
            origin = registry.origin(e.name)
            print(f"  {e.name:<22} {e.summary}" + ("" if origin == BUILT_IN else f"  [{origin}]"))
            if getattr(e, "time_per_run", ""):  # a preset's measured time per run
                print(f"  {'':<22}   {e.time_per_run}")
        if registry is DATASETS:
            print(f"  {'folder:PATH, npz:FILE':<22} your own data (README, \"Your own data\")")
        for message in registry.broken().values():
            print(f"bench list: {message}", file=sys.stderr)
            broken += 1
    return 2 if broken else 0


class List:
    name = "list"
    help = "list methods, data sets, models and presets"

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        """No flags."""

    run = staticmethod(cmd_list)
