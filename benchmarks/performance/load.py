"""Whether other work shared the cores while a run was timed: the machine's load average, read per epoch or
sampled through an own-loop fit, and the verdict a run's metrics carry (``contended``)."""

from __future__ import annotations

import math
import os
import statistics
import threading

from inputdp.core import names


def load_average() -> float:
    """The machine's 1-minute load average (NaN where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return float("nan")


def contention(history: list[dict[str, float]], threads: int) -> dict[str, float]:
    """Whether other work shared the cores while the run was timed: the median load average over its timed epochs
    (the first is warm-up) above the run's own threads plus one busy thread. A 1-minute average lags by about a
    minute: an epoch just after other work ended can read high, so the median, not the largest, decides."""
    loads = [h[names.METRIC_LOAD] for h in history[1:] or history if math.isfinite(h.get(names.METRIC_LOAD, math.nan))]
    if not loads:
        return {}
    return {names.METRIC_CONTENDED: float(statistics.median(loads) > threads + 1.0),
            names.METRIC_MAX_LOAD: max(loads)}


class LoadSampler:
    """The machine's load average every ``interval`` seconds while an own-loop fit runs (its phases last minutes, so
    a reading per phase would be too few to tell whether other work shared the cores)."""

    def __init__(self, interval: float = 10.0):
        self.interval, self.loads = interval, [load_average()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.loads.append(load_average())

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.loads.append(load_average())
