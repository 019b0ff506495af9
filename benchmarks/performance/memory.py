"""Peak memory of a run: CUDA max allocated on a GPU, peak resident set size (sampled) on the CPU."""

from __future__ import annotations

import os
import resource
import threading

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_bytes() -> int:
    """The process's resident memory now (Linux: /proc/self/statm), else its lifetime peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:  # not Linux: fall back to the process-lifetime peak
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class PeakMemory:
    """Context manager; ``peak_mb`` after exit. On CPU a thread samples RSS every ``interval`` seconds."""

    def __init__(self, device: str, interval: float = 0.02):
        self.device, self.interval = device, interval
        self.peak_bytes = 0
        self.kind = "cuda_max_allocated" if device.startswith("cuda") else "cpu_peak_rss"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_bytes = max(self.peak_bytes, current_rss_bytes())

    def __enter__(self) -> PeakMemory:
        if self.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.peak_bytes = current_rss_bytes()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.startswith("cuda"):
            self.peak_bytes = int(torch.cuda.max_memory_allocated(self.device))
        else:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            self.peak_bytes = max(self.peak_bytes, current_rss_bytes())

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / 2**20
