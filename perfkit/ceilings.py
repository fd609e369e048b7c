"""Ceilings that stay ceilings: an operation that beats one raises it, and says so where it happens.

:mod:`perfkit.hw` measures each ceiling on the course's own work (its matmul shapes and copy
sizes, on one thread and on all, the best of several rounds), but a later measurement can still
beat one: a quieter moment, a shape the sweep did not run. A share above 100 % of a ceiling says
nothing about the operation and everything about the ceiling, so it is never printed.
:func:`observe` takes the rate an operation reached, raises the ceiling it beat (in the record it
returns and in the cache that later notebooks read) and returns the share against the raised
ceiling, at most 1, with the sentence to print where it happened. Only rates of work that really
ran raise a ceiling: counted FLOPs (HFU), counted bytes; never a formula's FLOPs (MFU).

Usage::

    obs = observe(limits, "float32", counted_flops / step_s, "the MLP step", threads=1)
    print(f"HFU {obs.share:.0%}" + (f" ({obs.note})" if obs.raised else ""))
    limits = obs.limits                                      # the raised ceilings, for what follows
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

from perfkit._checks import check_int, check_real, check_type
from perfkit.hw import CopyPoint, MachineLimits, dtype_name, save_limits
from perfkit.units import si

AFTER_SWEEP = ", measured after the sweep"  # how a ceiling an operation raised names its source

__all__ = ["AFTER_SWEEP", "KINDS", "Observation", "cached_copy_bytes", "ceiling", "ceiling_note",
           "ceiling_source", "copy_ratio_floor", "dram_copy", "observe", "observe_copy"]

KINDS = ("float32", "bfloat16", "float16", "dram", "cache")
"""What a ceiling bounds: a dtype's matmul FLOP/s, DRAM bytes/s, or cache bytes/s (counted bytes)."""


def _kind(limits: MachineLimits, kind: str) -> str:
    if not isinstance(kind, str) or kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    if kind not in ("dram", "cache"):
        limits.peak_flops(kind)  # refuses a dtype the sweep did not measure
    return kind


def ceiling(limits: MachineLimits, kind: str, threads: int | None = None) -> float:
    """The ceiling of ``kind`` (:data:`KINDS`) in ``limits``: FLOP/s on ``threads`` intra-op threads
    (``None``: all cores) for a dtype, counted bytes/s for ``"dram"`` and ``"cache"`` (the cache's
    ceiling is at least DRAM's; without a cache figure, DRAM's).

    Raises:
        TypeError, ValueError: for limits that are not :class:`perfkit.hw.MachineLimits`, an
            unknown or unmeasured kind, or a ``threads`` below 1.
    """
    check_type("limits", limits, MachineLimits)
    kind = _kind(limits, kind)
    if threads is not None:
        check_int("threads", threads, 1)
    if kind == "dram":
        return limits.copy_bytes_per_s
    if kind == "cache":
        return max(limits.cache_bytes_per_s or 0.0, limits.copy_bytes_per_s)
    return limits.peak_flops(kind, threads)



def cached_copy_bytes(limits: MachineLimits, share: float = 0.5) -> int | None:
    """The largest copy buffer (bytes) of the sweep whose median rate, on its faster thread count,
    stays at least ``share`` of the cache ceiling: the cache this process really sees.

    The operating system's last-level cache (:attr:`MachineLimits.llc_bytes`) can be the host's: a
    virtual machine with 2 cores reports its host's whole L3 (480 MiB), while its copies fall to
    DRAM's rate between 1 and 4 MB buffers. A copy of ``N`` bytes reads and writes ``2N``, so an
    operation whose counted bytes are at most twice this size was served by the cache in the sweep.

    Returns:
        The buffer size in bytes, or ``None`` without a cache ceiling or a copy that reached it.

    Raises:
        TypeError, ValueError: for limits that are not :class:`perfkit.hw.MachineLimits` or a
            ``share`` outside (0, 1].
    """
    check_type("limits", limits, MachineLimits)
    check_real("share", share, 0, 1, lo_open=True)
    if not limits.cache_bytes_per_s:
        return None
    below_dram = limits.dram_nbytes or math.inf  # a DRAM-sized buffer is never the cache's
    rates: dict[int, float] = {}  # bytes -> the best median over thread counts
    for p in limits.copy_points:
        if p.op == "copy" and p.nbytes < below_dram:
            rates[p.nbytes] = max(rates.get(p.nbytes, 0.0), p.bytes_per_s)
    fast = [n for n, r in rates.items() if r >= share * limits.cache_bytes_per_s]
    return max(fast) if fast else None

def dram_copy(limits: MachineLimits) -> tuple[float, str]:
    """The fastest copy of DRAM-sized buffers in ``limits``: counted bytes per second (read +
    written, so a buffer's own rate is half of it), and where it came from.

    The DRAM ceiling (:attr:`MachineLimits.copy_bytes_per_s`) is the better of a copy and an
    ``x + y`` of that size, and at the same real bandwidth ``x + y`` counts 9/8 of a copy's rate
    (write-allocate: notebook 00; :func:`perfkit.hw.credited_dram` credits it no more). A ceiling
    an add set therefore overstates what a copy moves.
    This is the copy's own figure: the fastest tenth of the best round of the sweep's copies of
    the DRAM ceiling's buffers (:attr:`MachineLimits.dram_nbytes`; the largest copied buffer where
    that is unknown), or a faster copy of them measured after the sweep (:func:`observe_copy`),
    on any thread count, never above the DRAM ceiling. Without such a copy it is the DRAM ceiling
    itself, and the words say so.

    Returns:
        ``(bytes_per_s, source)``: counted bytes per second, and the point it came from in words.

    Raises:
        TypeError: for limits that are not :class:`perfkit.hw.MachineLimits`.
    """
    check_type("limits", limits, MachineLimits)
    copies = [p for p in limits.copy_points if p.op == "copy"]
    size = limits.dram_nbytes or max((p.nbytes for p in copies), default=None)
    best = max((p for p in copies if p.nbytes == size), key=lambda p: p.best_bytes_per_s, default=None)
    if best is None:
        return limits.copy_bytes_per_s, ("the DRAM ceiling (the limits hold no copy of its buffers): "
                                         + limits.sources.get("dram", "its sweep"))
    threads = f" on {best.threads} thread{'s' * (best.threads != 1)}" if best.threads else ""
    return (min(best.best_bytes_per_s, limits.copy_bytes_per_s),
            best.source or f"copy of {best.nbytes:,} B buffers{threads}")


def observe_copy(limits: MachineLimits, rate: float, what: str, threads: int,
                 path: str | os.PathLike | None = None, save: bool = True) -> MachineLimits:
    """Record a copy of the DRAM ceiling's buffers that ran at ``rate`` (counted bytes per second)
    after the sweep, so that :func:`dram_copy` (what a memcpy of DRAM-sized buffers reaches, read
    by later notebooks from the limits file) is not left at a sweep whose rounds the load slowed.

    The sweep's copy point of those buffers on ``threads`` keeps its median; its fastest rate
    rises to ``rate`` where that is faster, and its ``source`` names ``what``. A rate above the
    DRAM ceiling raises that ceiling too (:func:`observe`). Saved, the file keeps each copy point
    at its faster run (:func:`perfkit.hw.save_limits`), so that the file's :func:`dram_copy` is
    the fastest copy of those buffers measured on this machine, whichever run set the ceiling.

    Args:
        limits: the ceilings in use; ``rate``: counted bytes/s (read + written) of the copy.
        what: the copy, as :func:`dram_copy` will name it ("copy of 268 MB buffers on 2 threads").
        threads: the intra-op threads it ran on.
        path, save: as :func:`observe`.

    Returns:
        The limits with the copy recorded (``limits`` itself when ``rate`` beats nothing).

    Raises:
        TypeError, ValueError: as :func:`observe`, or for a ``threads`` below 1.
    """
    check_int("threads", threads, 1)
    out = observe(limits, "dram", rate, what, path=path, save=False).limits  # checks the arguments
    size = out.dram_nbytes or max((p.nbytes for p in out.copy_points if p.op == "copy"), default=0)
    old = next((p for p in out.copy_points if (p.op, p.nbytes, p.threads) == ("copy", size, threads)), None)
    if old is None or old.best_bytes_per_s < rate:
        new = (replace(old, best_bytes_per_s=rate, source=f"{what}{AFTER_SWEEP}") if old is not None else
               CopyPoint(size, 2 * size / rate, rate, rate, threads, "copy", f"{what}{AFTER_SWEEP}"))
        points = [new if p is old else p for p in out.copy_points] + [new] * (old is None)
        out = replace(out, copy_points=points)
    if save and out is not limits:
        save_limits(out, path)
    return out


def copy_ratio_floor(limits: MachineLimits, nbytes: int, threads: int = 1) -> float:
    """The lowest rate a copy of ``nbytes`` buffers, repeated, can have over a DRAM-sized copy's
    (:func:`perfkit.sizing.copy_ratio`) in an undisturbed run: below it the run was disturbed.

    Were the cache to hold none of the buffer, each call would still stream its ``2 * nbytes``
    counted bytes at DRAM's rate and add one call's fixed cost. The DRAM rate taken is the DRAM
    ceiling (the fastest measured, so the floor errs low), and the fixed cost the sweep's
    smallest copy's whole median time on ``threads`` (its bytes included, so it errs high): a
    ratio below the floor says that something other than the memory, a thread waiting for a
    core at every call's barrier or a process descheduled, slowed the many small calls.

    Returns:
        The floor, in (0, 1); 0 where the sweep holds no copy to take the fixed cost from.

    Raises:
        TypeError, ValueError: for limits that are not :class:`perfkit.hw.MachineLimits`, an
            ``nbytes`` below 1 or a ``threads`` below 1.
    """
    check_type("limits", limits, MachineLimits)
    check_int("nbytes", nbytes, 1)
    check_int("threads", threads, 1)
    copies = [p for p in limits.copy_points if p.op == "copy"]
    on = [p for p in copies if p.threads == threads] or copies
    if not on:
        return 0.0
    smallest = min(p.nbytes for p in on)
    fixed_s = max(p.seconds for p in on if p.nbytes == smallest)  # s: one call, its bytes included
    stream_s = 2 * nbytes / limits.copy_bytes_per_s  # s: the buffer's bytes at DRAM's fastest rate
    return stream_s / (stream_s + fixed_s)


@dataclass(frozen=True)
class Observation:
    """A measured rate held against its ceiling, the ceiling raised first if the rate beat it.

    Attributes:
        limits: the ceilings after the observation (the same record when nothing was beaten).
        kind, threads: which ceiling (:func:`ceiling`).
        what: the operation, as the note names it ("the MLP step").
        rate: what it reached (FLOP/s or counted bytes/s).
        before: the ceiling before the observation.
    """

    limits: MachineLimits
    kind: str
    what: str
    rate: float
    before: float
    threads: int | None = None

    @property
    def after(self) -> float:
        """The ceiling after the observation (at least ``rate``)."""
        return ceiling(self.limits, self.kind, self.threads)

    @property
    def raised(self) -> bool:
        return self.after > self.before

    @property
    def share(self) -> float:
        """``rate`` over the ceiling after the observation: at most 1."""
        return self.rate / self.after

    @property
    def note(self) -> str:
        """The sentence to print where the rate was measured ("" when no ceiling rose)."""
        return self.said()

    def said(self, show_rise: bool = False) -> str:
        """:attr:`note`; with ``show_rise``, the two ceilings at as many digits as show the rise
        (a rise of 0.2 % reads "203 GFLOP/s to 203 GFLOP/s" at three)."""
        if not self.raised:
            return ""
        unit = "B/s" if self.kind in ("dram", "cache") else "FLOP/s"
        d = next((d for d in range(3, 16) if si(self.before, unit, d) != si(self.after, unit, d)), 15) \
            if show_rise else 3
        name = (f"{self.kind.upper() if self.kind == 'dram' else self.kind} bandwidth" if unit == "B/s"
                else f"{self.kind} matmul" + (f" ({self.threads} thread{'s' * (self.threads != 1)})"
                                              if self.threads else ""))
        return (f"the {name} ceiling rose from {si(self.before, unit, d)} to {si(self.after, unit, d)}: "
                f"{self.what} ran faster than the sweep")


def _raised(limits: MachineLimits, kind: str, rate: float, what: str, threads: int | None) -> MachineLimits:
    """``limits`` with the ceiling of ``kind`` on ``threads`` raised to at least ``rate``."""
    src, what = dict(limits.sources), f"{what}{AFTER_SWEEP}"
    if kind in ("dram", "cache"):  # called only when rate beats the ceiling (the cache's: at least DRAM's)
        src[kind] = what
        return (replace(limits, copy_bytes_per_s=rate, sources=src) if kind == "dram"
                else replace(limits, cache_bytes_per_s=rate, sources=src))
    every, ones = dict(limits.matmul_flops), dict(limits.one_thread_flops)
    if every[kind] < rate:
        every[kind], src[kind] = rate, what
    fewer = threads is not None and threads < (limits.threads or 1)  # fewer than all cores
    if fewer and kind in ones and threads * ones[kind] < rate:
        one = rate / threads
        # nudged up one ulp where threads * (rate / threads) rounds below rate
        ones[kind] = one if threads * one >= rate else math.nextafter(one, math.inf)
        src[f"{kind}, 1 thread"] = what
    return replace(limits, matmul_flops=every, one_thread_flops=ones, sources=src)


def observe(limits: MachineLimits, kind: str, rate: float, what: str, threads: int | None = None,
            path: str | os.PathLike | None = None, save: bool = True) -> Observation:
    """Hold ``rate`` against its ceiling; raise the ceiling first if ``rate`` beats it.

    Args:
        limits: the ceilings in use (:func:`perfkit.hw.cached_limits`).
        kind: a dtype name (matmul FLOP/s), ``"dram"`` or ``"cache"`` (counted bytes/s).
        rate: what the operation reached: counted FLOPs or bytes per second of work that ran.
        what: the operation, for the note ("the MLP step on 1 thread").
        threads: the intra-op threads it ran on (``None``: all cores); matmul kinds only.
        path, save: where the raised ceilings are saved (:func:`perfkit.hw.save_limits`, which
            keeps the higher of each, and credits ``x + y`` no more than 9/8 of a copy in the
            DRAM ceiling it writes), and whether to.

    Returns:
        An :class:`Observation`: ``share`` at most 1, ``note`` the sentence to print.

    Raises:
        TypeError, ValueError: for bad limits, an unknown or unmeasured kind, a rate that is not a
            finite number >= 0, an empty ``what``, a ``threads`` below 1 or a ``save`` not a bool.
    """
    before = ceiling(limits, kind, threads)
    rate = float(check_real("rate", rate, 0))
    if not isinstance(what, str) or not what.strip():
        raise TypeError(f"what must be a non-empty str naming the operation, got {what!r}")
    if not isinstance(save, bool):
        raise TypeError(f"save must be a bool, got {save!r}")
    if rate <= before:
        return Observation(limits, kind, what, rate, before, threads)
    raised = _raised(limits, kind, rate, what, threads)
    if save:
        save_limits(raised, path)
    return Observation(raised, kind, what, rate, before, threads)


def _key(limits: MachineLimits, name: str, threads: int | None) -> tuple[str, bool]:
    """The ``sources`` key of the ``name`` ceiling on ``threads``, and whether it is the 1-thread one's."""
    few = threads is not None and threads < (limits.threads or 1) and threads * limits.one_thread_flops.get(
        name, float("inf")) < limits.matmul_flops[name]
    return (f"{name}, 1 thread" if few else name), few


def ceiling_source(limits: MachineLimits, dtype: str, threads: int | None = None,
                   loaded: MachineLimits | None = None) -> str:
    """Where the ``dtype`` ceiling on ``threads`` came from: notebook 00's sweep, or the operation that
    raised it, before this notebook (as in ``loaded``, the limits it loaded) or in it. Raises
    TypeError or ValueError for bad limits or an unmeasured dtype."""
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    source = limits.sources.get(key := _key(limits, name, threads)[0], "")
    if not source.endswith(AFTER_SWEEP):
        return f"notebook 00's sweep: {source}" if source else "notebook 00's sweep"
    before = loaded is not None and (loaded.sources.get(key) == source
                                     and loaded.peak_flops(name, threads) >= limits.peak_flops(name, threads))
    when = ("in this run or an earlier one" if loaded is None else "in this notebook" if not before else
            "before this notebook ran (an earlier notebook or run: the limits file keeps each one's highest)")
    return f"set by {source[:-len(AFTER_SWEEP)]} after notebook 00's sweep, {when}"


def ceiling_note(limits: MachineLimits, dtype: str, rate: float, threads: int | None = None,
                 mine: str = "", loaded: MachineLimits | None = None) -> str:
    """``rate``'s share of the ``dtype`` ceiling on ``threads``, saying whose ceiling it is.

    A ceiling is notebook 00's sweep point, or the rate of an operation that beat it later
    (:func:`observe` raises it and keeps it in the cache: ceilings only rise). For a raised one
    the sentence names the operation and when it ran (:func:`ceiling_source`: before the notebook
    that asks, as in ``loaded``, the limits it loaded, or in it), and the best sweep point the
    limits file keeps on those threads; when the operation's name holds ``mine`` (this same work,
    in this run or an earlier one), it adds that the share measures the work against itself, not
    the machine. Call it after :func:`observe`, so that the share is at most 1.

    Raises:
        TypeError, ValueError: for bad limits, an unmeasured dtype, a ``rate`` that is not a
            finite number > 0 or above the ceiling, or a ``threads`` below 1.
    """
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    peak = limits.peak_flops(name, threads)
    check_real("rate", rate, 0, peak, lo_open=True)
    key, few = _key(limits, name, threads)
    source = limits.sources.get(key, "")
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"
    head = f"{rate / peak:.0%} of the {name} ceiling{on}, {si(peak, 'FLOP/s')}"
    if not source.endswith(AFTER_SWEEP):
        return head + (f" (notebook 00's sweep: {source})" if source else "")
    what = source[:-len(AFTER_SWEEP)]
    best = max((p.best_flops_per_s * (threads if few else 1) for p in (*limits.matmul_points,
                *limits.shape_points) if p.dtype == name and p.threads == (1 if few else limits.threads)),
               default=0.0)  # the sweep's best point at the threads the ceiling is for
    return (head + ", " + ceiling_source(limits, name, threads, loaded)
            + (f" (the best {name} sweep point{on} in the sweep the limits file keeps, that of the "
               f"notebook 00 run that set the all-cores ceiling, not always this run's, reached "
               f"{si(best, 'FLOP/s')}"
               + (f"; this rate is {rate / best:.2f}x that" if rate > best else "") + ")" if best else "")
            + (": a ceiling this notebook's own work set (in this run or an earlier one, perhaps at another "
               "size), so the share measures it against itself, not how much of the machine it used"
               if mine and mine in what else ""))
