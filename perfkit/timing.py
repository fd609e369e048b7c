"""Device-aware timing: the one place in perfkit that knows about synchronisation.

GPU kernels run asynchronously: ``time.perf_counter()`` around a CUDA call measures
how long it took to *enqueue* the kernel, not to run it. On CUDA this module records
``torch.cuda.Event`` pairs on the stream and reads them after a synchronisation; on the
CPU it reads ``time.perf_counter``. Every measurement warms up first (caches, lazy
initialisation, allocator growth) and repeats, and reports the median, as nanoGPT's
``bench.py`` and nccl-tests do.

Usage::

    from perfkit.timing import benchmark
    m = benchmark(lambda: a @ b, warmup=3, repeat=20)
    print(m.median_s, m.p10_s, m.p90_s)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch

from perfkit import stats
from perfkit._checks import check_int, check_real

__all__ = [
    "Measurement", "Timer", "balanced_orders", "benchmark", "calibrate_number", "interleaved",
    "interleaved_balanced", "resolve_device", "synchronize",
]


def resolve_device(device: torch.device | str | None = None) -> torch.device:
    """Return ``device`` as a ``torch.device``; ``None`` means CUDA if present, else CPU.

    Raises:
        TypeError: if ``device`` is not a ``torch.device``, a str, an int or ``None``.
        ValueError: for a string torch does not read as a device, or a CUDA device this
            machine does not have.
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    allowed = "None, a torch.device or a device string such as 'cpu' or 'cuda:0'"
    if isinstance(device, bool) or not isinstance(device, torch.device | str | int):
        raise TypeError(f"device must be {allowed}, got {device!r}")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must be {allowed}, got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} asks for CUDA, but CUDA is not available here")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device={str(device)!r}: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    return dev


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until all queued work on ``device`` has finished (a no-op on the CPU)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Timer:
    """Context manager timing one region on ``device``.

    On CUDA two events are recorded on ``device``'s current stream and the elapsed time is
    read lazily (the first access to :attr:`elapsed_s` synchronises on the end event), so a
    timer inside a training loop does not stall the GPU. Work queued on other streams counts
    only where that stream is made to wait for it (``wait_stream``/``wait_event``, as
    :class:`perfkit.data.Prefetcher` does). On the CPU it uses ``time.perf_counter``.

    Example::

        with Timer() as t:
            y = model(x)
        print(t.elapsed_s)
    """

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = resolve_device(device)
        self._cuda = self.device.type == "cuda"
        self._start: float | torch.cuda.Event | None = None
        self._end: float | torch.cuda.Event | None = None
        self._elapsed: float | None = None

    def __enter__(self) -> Timer:
        self._elapsed = None
        self._end = None
        if self._cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            # the Timer's device's stream: a bare record() uses the *current* device's
            self._start.record(torch.cuda.current_stream(self.device))
        else:
            self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._cuda:
            self._end = torch.cuda.Event(enable_timing=True)
            self._end.record(torch.cuda.current_stream(self.device))
        else:
            self._end = time.perf_counter()

    @property
    def elapsed_s(self) -> float:
        """Seconds between entering and leaving the block.

        Raises:
            RuntimeError: if read before the ``with`` block has finished.
        """
        if self._end is None:
            raise RuntimeError("Timer.elapsed_s read before the timed block finished")
        if self._elapsed is None:
            if self._cuda:
                self._end.synchronize()  # type: ignore[union-attr]
                self._elapsed = self._start.elapsed_time(self._end) / 1e3  # type: ignore[union-attr]
            else:
                self._elapsed = self._end - self._start  # type: ignore[operator]
        return self._elapsed


@dataclass(frozen=True)
class Measurement:
    """Repeated timings of one callable, in seconds. Plain data: print or plot it.

    Raises ``TypeError``/``ValueError`` for no times, a time that is negative, NaN or inf,
    or a ``warmup`` that is not an int >= 0.
    """

    times_s: tuple[float, ...]
    warmup: int

    def __post_init__(self) -> None:
        if isinstance(self.times_s, str) or not isinstance(self.times_s, tuple | list):
            raise TypeError(f"times_s must be a tuple of seconds, got {self.times_s!r}")
        if not self.times_s:
            raise ValueError("times_s must hold at least one time, got none")
        for t in self.times_s:
            check_real("times_s entries", t, 0)
        object.__setattr__(self, "times_s", tuple(self.times_s))  # frozen: set once here
        check_int("warmup", self.warmup, 0)

    @property
    def n(self) -> int:
        """Number of timed repetitions."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.times_s)

    @property
    def std_s(self) -> float:
        return statistics.stdev(self.times_s) if self.n > 1 else 0.0

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def p10_s(self) -> float:
        return self.quantile(0.10)

    @property
    def p90_s(self) -> float:
        return self.quantile(0.90)

    @property
    def iqr_rel(self) -> float:
        """Interquartile range over the median: a unitless spread (0.05 = 5 %)."""
        return (self.quantile(0.75) - self.quantile(0.25)) / self.median_s

    def quantile(self, q: float) -> float:
        """Quantile ``q`` in [0, 1] of the timings, in seconds (:func:`perfkit.stats.quantile`)."""
        return stats.quantile(self.times_s, q)

    def rate(self, work: float) -> float:
        """``work`` units (FLOPs, bytes, samples) per second at the median time."""
        return check_real("work", work, 0) / self.median_s

    def __str__(self) -> str:
        return (
            f"median {self.median_s * 1e3:.3f} ms "
            f"(p10 {self.p10_s * 1e3:.3f}, p90 {self.p90_s * 1e3:.3f}, n={self.n})"
        )


def _check_counts(warmup: int, repeat: int) -> None:
    check_int("warmup", warmup, 0)
    check_int("repeat", repeat, 1)


def benchmark(
    fn: Callable[[], object],
    warmup: int = 3,
    repeat: int = 10,
    device: torch.device | str | None = None,
    min_time_s: float = 0.0,
    number: int = 1,
) -> Measurement:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    Each repetition is timed on its own (so quantiles mean something) and the device is
    synchronised before the first and after every timed call, so asynchronous GPU work is
    counted where it runs.

    Args:
        fn: the callable to time; its return value is ignored.
        warmup: untimed calls first (lazy initialisation, caches, allocator growth).
        repeat: timed calls (at least 1).
        device: where ``fn`` runs; ``None`` means CUDA if present, else CPU.
        min_time_s: keep repeating past ``repeat`` until this much time was measured,
            so very short functions still get a stable median.
        number: calls per timed repetition; each repetition reports the mean per call.
            Batching microsecond-long calls amortises the timer's own cost and dilutes
            the occasional millisecond-long scheduler stall of a shared machine (see
            :func:`calibrate_number`).

    Returns:
        A :class:`Measurement` with every repetition's seconds.

    Raises:
        ValueError: for a negative ``warmup``, a ``repeat`` or ``number`` below 1, or a
            ``min_time_s`` that is negative, NaN or inf (it would never be reached).
        TypeError: if ``fn`` is not callable, or an argument is not a number.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_counts(warmup, repeat)
    check_real("min_time_s", min_time_s, 0)
    check_int("number", number, 1)
    dev = resolve_device(device)
    for _ in range(warmup):
        fn()
    synchronize(dev)
    times: list[float] = []
    while len(times) < repeat or sum(times) * number < min_time_s:
        with Timer(dev) as t:
            for _ in range(number):
                fn()
        times.append(t.elapsed_s / number)  # reading it waits for the end event on CUDA
        synchronize(dev)  # and this for work on other streams: none spills into the next call
    return Measurement(times_s=tuple(times), warmup=warmup)


def calibrate_number(
    fn: Callable[[], object], target_s: float = 0.005, device: torch.device | str | None = None
) -> int:
    """Smallest power of two of calls to ``fn`` that takes at least ``target_s`` seconds.

    Use it as ``benchmark(fn, number=calibrate_number(fn))`` for functions of a few
    microseconds, whose single-call times are dominated by timer and scheduler noise.

    Raises:
        TypeError: if ``fn`` is not callable or ``target_s`` is not a number.
        ValueError: if ``target_s`` is not a finite number > 0.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    check_real("target_s", target_s, 0, lo_open=True)
    dev = resolve_device(device)
    number = 1
    while number < 1 << 20:
        synchronize(dev)
        with Timer(dev) as t:
            for _ in range(number):
                fn()
        if t.elapsed_s >= target_s:
            break
        number *= 2
    return number


def balanced_orders(n: int) -> list[list[int]]:
    """The orders of a Williams design for ``n`` treatments: ``n`` rounds (``2n`` for odd
    ``n``, each order then also reversed) in which every index takes every position, and
    every ordered pair ``(i, j)`` is adjacent (``j`` right after ``i``), equally often.
    Row ``r`` is ``r, r+1, r-1, r+2, r-2, ...`` modulo ``n`` (Williams, Aust. J. Sci. Res.
    1949).

    Raises:
        ValueError: for an ``n`` that is not an int >= 1.
    """
    check_int("n", n, 1)
    base = [0] + [(k + 1) // 2 if k % 2 else n - k // 2 for k in range(1, n)]
    rows = [[(b + r) % n for b in base] for r in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 and n > 1 else rows


def interleaved(
    fns: Sequence[Callable[[], object]],
    warmup: int = 2,
    repeat: int = 10,
    device: torch.device | str | None = None,
    order: str = "fixed",
) -> list[Measurement]:
    """Time several callables in alternation, one round after another (A B C, A B C, ...).

    On a shared, noisy machine, load changes over seconds; alternating puts every
    candidate under the same conditions, so their *ratio* is trustworthy even when the
    absolute times drift. Sample ``r`` of every callable comes from round ``r`` (pair them
    by index).

    ``order="fixed"`` runs the callables in the order given in every round, so one may
    depend on the one before it (a forward whose graph the next callable's backward runs).
    ``order="balanced"``, for independent callables, follows a Williams design (a balanced
    Latin square, :func:`balanced_orders`): over ``n`` rounds (``2n`` for an odd ``n``) every
    callable runs in every position, and right after each other one, equally often, so what
    one leaves behind (a warm cache, a cold one, a frequency change) falls on each of the
    others alike, not always on the same neighbour.

    Returns:
        One :class:`Measurement` per callable, in the order given.

    Raises:
        TypeError: if ``fns`` is not a list or tuple of callables.
        ValueError: for no callables, a negative ``warmup``, a ``repeat`` below 1, or an
            ``order`` other than ``"fixed"`` and ``"balanced"``.
    """
    if isinstance(fns, str) or not isinstance(fns, Iterable):
        raise TypeError(f"fns must be a list or tuple of callables, got {type(fns).__name__}")
    fns = list(fns)
    if len(fns) == 0:
        raise ValueError("fns must hold at least one callable")
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"fns[{i}] must be callable, got {type(fn).__name__}")
    _check_counts(warmup, repeat)
    if order not in ("fixed", "balanced"):
        raise ValueError(f"order must be 'fixed' or 'balanced', got {order!r}")
    dev = resolve_device(device)
    for _ in range(warmup):
        for fn in fns:
            fn()
    synchronize(dev)
    times: list[list[float]] = [[] for _ in fns]
    orders = balanced_orders(len(fns)) if order == "balanced" else [list(range(len(fns)))]
    for r in range(repeat):
        for i in orders[r % len(orders)]:
            with Timer(dev) as t:
                fns[i]()
            times[i].append(t.elapsed_s)
            synchronize(dev)  # side-stream work of one callable must not overlap the next
    return [Measurement(times_s=tuple(ts), warmup=warmup) for ts in times]


def interleaved_balanced(
    fns: Sequence[Callable[[], object]],
    warmup: int = 2,
    repeat: int = 10,
    device: torch.device | str | None = None,
) -> list[Measurement]:
    """:func:`interleaved` in ``order="balanced"`` over whole cycles of the design: ``repeat``
    rounded up to a multiple of ``len(balanced_orders(len(fns)))`` rounds, so that every callable
    runs before every other one in exactly half the rounds (for two: A B, B A, A B, B A ...).
    What a round's position does to a time (the second call of a round running slower, say)
    then falls on each callable alike, and cancels from their paired ratios. Round ``r`` ran in
    the order ``balanced_orders(len(fns))[r % cycle]``.

    Raises:
        TypeError, ValueError: as :func:`interleaved`.
    """
    n = len(fns) if isinstance(fns, Sequence) and not isinstance(fns, str) else 0
    cycle = len(balanced_orders(n)) if n else 1
    rounds = -(-check_int("repeat", repeat, 1) // cycle) * cycle  # whole cycles
    return interleaved(fns, warmup=warmup, repeat=rounds, device=device, order="balanced")
