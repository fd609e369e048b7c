"""Peak memory of a training region: CUDA allocator statistics, or the process RSS on CPU.

``MemoryMonitor`` is the memory half of module 01's monitors (:mod:`perfkit.profiling.monitor`
times the phases). On CUDA it reads the caching allocator's peak counters, which cost
nothing in the loop; on the CPU a background thread samples the resident set size.
Attach it to a :class:`~perfkit.profiling.StepMonitor` (``memory=``) and every window the
step monitor writes to its sinks carries the memory record too.

Usage::

    with MemoryMonitor() as mm:
        train_steps(wl, 10)
    print(mm.record().peak_bytes)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from perfkit._checks import check_real
from perfkit.timing import resolve_device, synchronize

__all__ = ["MemoryMonitor", "MemoryRecord"]


@dataclass(frozen=True)
class MemoryRecord:
    """Memory over a monitored region, in bytes.

    ``kind`` is ``"cuda_allocator"`` (tensors allocated by PyTorch's caching allocator;
    ``reserved`` is what it holds from the driver) or ``"process_rss"`` (resident set size
    of the whole process, sampled every ``interval_s``: short spikes can be missed).
    """

    kind: str
    baseline_bytes: int
    peak_bytes: int
    current_bytes: int
    reserved_peak_bytes: int | None = None

    @property
    def peak_increase_bytes(self) -> int:
        """Peak above the level at the start of the region."""
        return self.peak_bytes - self.baseline_bytes


class MemoryMonitor:
    """Peak memory of a region: CUDA allocator statistics, or the process RSS on CPU.

    Usage::

        with MemoryMonitor() as mm:
            train_steps(wl, 10)
        print(mm.record().peak_bytes)

    Args:
        device: CUDA device (allocator stats) or CPU (RSS). ``None``: CUDA if present.
        interval_s: RSS sampling period on the CPU (a background thread), in seconds:
            finite, > 0 and at most ``threading.TIMEOUT_MAX``.
    """

    def __init__(self, device: torch.device | str | None = None,
                 interval_s: float = 0.005) -> None:
        self.interval_s = check_real("interval_s", interval_s, 0, threading.TIMEOUT_MAX,
                                     lo_open=True)
        self.device = resolve_device(device)
        self._baseline: int | None = None
        self._peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _rss(self) -> int:
        import psutil

        return psutil.Process().memory_info().rss

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._peak = max(self._peak, self._rss())

    def __enter__(self) -> MemoryMonitor:
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._baseline = torch.cuda.memory_allocated(self.device)
        else:
            self._baseline = self._peak = self._rss()
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._peak = max(self._peak, self._rss())

    def record(self) -> MemoryRecord:
        """The region's memory so far (callable inside or after the ``with`` block).

        Raises:
            RuntimeError: if the monitor was never entered.
        """
        if self._baseline is None:
            raise RuntimeError("MemoryMonitor.record() before entering `with MemoryMonitor()`")
        if self.device.type == "cuda":
            synchronize(self.device)
            return MemoryRecord("cuda_allocator", self._baseline,
                                torch.cuda.max_memory_allocated(self.device),
                                torch.cuda.memory_allocated(self.device),
                                torch.cuda.max_memory_reserved(self.device))
        current = self._rss()
        self._peak = max(self._peak, current)
        return MemoryRecord("process_rss", self._baseline, self._peak, current)
