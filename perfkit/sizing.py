"""Size a notebook's work from the machine's measured ceilings, so each section fits its budget.

The course's budgets (90 s per QUICK notebook, 180 s at default sizes) must hold on any CPU,
not only the one a notebook was written on. Sizes written as constants do not: a CPU without
bf16 units emulates bf16 about 100x slower than fp32, so a bf16 sweep sized for native units
takes minutes. Here the work is planned from one call timed at the smallest size (untimed:
from :func:`perfkit.hw.cached_limits`, model FLOPs over a share of the measured ceiling), and
a dtype the machine emulates is timed at the sizes that fit, with a sentence saying so. Timing sections
pin their intra-op threads (:func:`timing_threads`, :func:`pinned_threads`), since an OpenMP
thread that loses its core to another process stalls its siblings at every barrier. Two sweep
points are compared on the same work (:func:`same_work_ratio`): the smaller operation repeated
to the larger one's FLOPs or bytes, the two timed in alternation, so the ratio has an interval.
Whose ceiling a share is of (notebook 00's sweep, or the operation that raised it) is said by
:func:`perfkit.ceilings.ceiling_note` and :func:`perfkit.ceilings.ceiling_source`.

Usage::

    one = timing.benchmark(bf16_step_at_batch_1, warmup=1, repeat=1).median_s  # s
    plan = plan_dtype(hw.cached_limits(), "bfloat16", flops_per_sample, [1, 4, 8], calls=8, budget_s=20,
                      probe_s=one)
    with pinned_threads(timing_threads()) as n:
        bench.measure_all([("bf16", False, b) for b in plan.batches])
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from perfkit import stats
from perfkit._checks import check_callable, check_int, check_items, check_real, check_type
from perfkit.ceilings import AFTER_SWEEP  # how a ceiling an operation raised names its source
from perfkit.hw import MachineLimits, dtype_name
from perfkit.roofline import matmul_flops
from perfkit.timing import interleaved, resolve_device
from perfkit.units import si

__all__ = ["AFTER_SWEEP", "CORES", "EFFICIENCY", "DtypePlan", "after_sweep_note", "ceiling_share",
           "copy_ratio",
           "matmul_ratio",
           "meaningful_mfu", "mfu_dtype", "pinned_threads", "plan_dtype", "same_work_ratio",
           "threads_note", "timing_threads"]

# The share of a dtype's matmul ceiling a tiny model's training step reaches (notebook 06
# measured 15-40 % in fp32 on 2 cores): an untimed plan is made at this share.
EFFICIENCY = 0.25
# Intra-op threads torch starts with (one per physical core): notebook 00 measured the
# ceilings with them, so a step pinned to fewer threads can reach that share of the ceilings.
CORES = torch.get_num_threads()


@dataclass(frozen=True)
class DtypePlan:
    """The sizes at which one dtype's work is timed, and why.

    Attributes:
        dtype: the dtype name (``"bfloat16"``).
        support: ``"native"``, ``"converted"`` or ``"emulated"`` (:meth:`MachineLimits.support`).
        batches: the batches to time, a prefix of those asked for (all of them when they fit;
            the smallest always, even past the budget).
        calls: calls (steps) per batch, as asked: every caller times each batch that many times.
        predicted_s: the planned work's seconds (from ``probe_s`` where it was timed, else at
            :data:`EFFICIENCY` of the ceiling).
        full_s: the same for every batch asked for.
        budget_s: the share of the notebook's budget this work may take.
        note: a sentence computed from the probe or the ceilings, for the notebook to print.
        probe_s: one call's measured seconds at the smallest batch (``None``: not timed).
    """

    dtype: str
    support: str
    batches: tuple[int, ...]
    calls: int
    predicted_s: float
    full_s: float
    budget_s: float
    note: str
    probe_s: float | None = None

    @property
    def reduced(self) -> bool:
        """Whether the plan times fewer batches than were asked for."""
        return self.predicted_s < self.full_s


def plan_dtype(limits: MachineLimits, dtype: str, flops_per_sample: float, batches: Sequence[int],
               calls: int, budget_s: float, efficiency: float = EFFICIENCY,
               label: str = "batch", probe_s: float | None = None, threads: int | None = None) -> DtypePlan:
    """Which of ``batches`` to time in ``dtype`` so ``calls`` calls of each fit ``budget_s``.

    With ``probe_s`` (one call at the smallest batch, timed), a batch of ``b`` costs
    ``calls * probe_s * b / smallest`` seconds: linear in the batch, which errs long, since a
    call's fixed costs do not grow with it. Without it, ``calls * b * flops_per_sample /
    (efficiency * peak(dtype))``: a ceiling swept at other shapes can miss a call's own rate
    many-fold either way (an emulated dtype's, swept at the sizes that fit, more than most),
    so a notebook that can time one call should. The plan keeps the longest prefix of the
    batches (sorted) whose summed cost fits the budget, and always the smallest batch, with
    every call (the note says when that overruns). Native dtypes are planned the same way:
    on a machine slow in fp32 too, their sweep shrinks as well.

    Args:
        limits: the machine's measured ceilings.
        dtype: the dtype the matmuls run in (``"float32"``, ``"bfloat16"``).
        flops_per_sample: model FLOPs of one call per sample (``GPTShape.train_flops(1)``).
        batches: the batches the notebook would time, at least one.
        calls: calls per batch (warm-up and timed).
        budget_s: seconds this dtype's work may take.
        efficiency: the share of the ceiling the work is assumed to reach (0 < e <= 1).
        label: what a batch is called in the note (``"n"`` for a matmul's width).
        probe_s: seconds one call at the smallest batch took, measured (``None``: plan from
            the ceiling).
        threads: the intra-op threads the work runs on (``None``: all cores): both ceilings, and
            the ratio the note prints, are then those measured on that many threads, never a
            ceiling on some threads over another's on all cores.

    Returns:
        A :class:`DtypePlan`.

    Raises:
        TypeError, ValueError: for limits that are not :class:`MachineLimits`, an unmeasured
            dtype, a batch or ``calls`` below 1, or a non-positive FLOP count, budget,
            efficiency or probe.
    """
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    check_real("flops_per_sample", flops_per_sample, 0, lo_open=True)
    asked = sorted({check_int("batches entries", b, 1) for b in check_items("batches", batches)})
    check_int("calls", calls, 1)
    check_real("budget_s", budget_s, 0, lo_open=True)
    check_real("efficiency", efficiency, 0, 1, lo_open=True)
    if probe_s is not None:
        check_real("probe_s", probe_s, 0, lo_open=True)
    if not isinstance(label, str) or not label:
        raise TypeError(f"label must be a non-empty str, got {label!r}")
    if threads is not None:
        check_int("threads", threads, 1)
    peak, support = limits.peak_flops(name, threads), limits.support(name)
    per_call = ([probe_s * b / asked[0] for b in asked] if probe_s is not None
                else [b * flops_per_sample / (efficiency * peak) for b in asked])  # s
    full_s = calls * sum(per_call)
    keep = 1  # the smallest batch always runs
    while keep < len(asked) and calls * sum(per_call[:keep + 1]) <= budget_s:
        keep += 1
    fp32 = limits.peak_flops("float32", threads)
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"  # both ceilings' threads
    what = (f"{name} is {support} here (its matmul ceiling{on} {peak / fp32:.3g}x fp32's{on}): one call at "
            f"{label} {asked[0]} took {si(probe_s, 's')}, timed now" if probe_s is not None else
            f"{name} runs at {si(peak, 'FLOP/s')} here, {peak / fp32:.3g}x the fp32 ceiling "
            f"({si(fp32, 'FLOP/s')}): {support}")
    planned = calls * sum(per_call[:keep])
    if keep == len(asked):
        note = f"{what}; every {label} ({', '.join(map(str, asked))}) fits its {budget_s:.0f} s share."
    else:
        note = (f"{what}, so it is timed at {label} {', '.join(map(str, asked[:keep]))} only: about "
                f"{planned:.0f} s of its {budget_s:.0f} s share"
                + (" (the smallest alone overruns it)" if planned > budget_s else "")
                + f", where every {label} would take about {full_s:.0f} s"
                + (" (in proportion to the probe)." if probe_s is not None else "."))
    return DtypePlan(name, support, tuple(asked[:keep]), calls, planned, full_s, float(budget_s), note,
                     None if probe_s is None else float(probe_s))


def timing_threads(cores: int | None = None, load: float | None = None) -> int:
    """Intra-op threads for a timing section: the cores other processes leave free, at least 1.

    ``load`` (default: the 1-minute load average) counts runnable processes, this one
    included: ``load - 1`` of the ``cores`` are taken by others. More threads than free cores
    make every OpenMP barrier wait for a thread the scheduler has parked, which swung a
    training step 30x between cells on a loaded 2-core machine; fewer threads are slower but
    steady.

    Args:
        cores: cores to share (default :data:`CORES`).
        load: runnable processes (default :func:`os.getloadavg`'s first figure, 0 where absent).

    Raises:
        ValueError: for ``cores`` below 1 or a negative ``load``.
    """
    cores = check_int("cores", cores if cores is not None else CORES, 1)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this OS: assume a quiet machine
            load = 0.0
    check_real("load", load, 0)
    return max(1, min(cores, round(cores - max(0.0, load - 1.0))))


def threads_note(threads: int, share: float, cores: int | None = None, load: float | None = None) -> str:
    """The sentence a notebook prints beside :func:`timing_threads`: the threads it times on,
    the load that chose them (a load average counts runnable tasks, not busy cores: above
    ``cores`` it says the machine was oversubscribed), and ``share``: these threads' fp32
    ceiling over the all-core one (each step's model FLOP/s is held against its dtype's ceiling
    on these threads: a share of a measured ceiling, which the sentence says is not an MFU).

    Raises:
        ValueError: for ``threads`` or ``cores`` below 1, a ``share`` outside (0, 1] or a
            negative ``load``.
    """
    cores = check_int("cores", cores if cores is not None else CORES, 1)
    check_int("threads", threads, 1)
    check_real("share", share, 0, 1, lo_open=True)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this OS
            load = 0.0
    check_real("load", load, 0)
    over = (f", more than its {cores} cores run at once: absolute times and rates below can be slower for "
            "it, ratios of steps timed interleaved less so" if load > cores else "")
    return (f"timing on {threads} of {cores} threads (load average {load:.1f}: on average about "
            f"{max(0.0, load - 1):.1f} tasks runnable beside this one{over}); each step's model FLOP/s is "
            f"held against the ceilings measured on these threads (fp32's: {share:.0%} of the all-core "
            "one): a share of a measured ceiling, not an MFU against a vendor's peak")


@contextlib.contextmanager
def pinned_threads(n: int) -> Iterator[int]:
    """Run the block with ``n`` intra-op threads (``torch.set_num_threads``), restored after.

    Raises:
        ValueError: for ``n`` below 1.
    """
    check_int("n", n, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def ceiling_share(threads: int, cores: int | None = None) -> float:
    """The share of the measured ceilings ``threads`` of the ``cores`` (default :data:`CORES`)
    can reach.

    Notebook 00 measured the ceilings with every core; a step pinned to fewer threads is
    held against that share of them (matmul throughput scales with cores), so its MFU is
    not understated by the pinning.

    Raises:
        ValueError: for ``threads`` or ``cores`` below 1.
    """
    cores = check_int("cores", cores if cores is not None else CORES, 1)
    return min(check_int("threads", threads, 1), cores) / cores


def after_sweep_note(limits: MachineLimits, dtype: str = "bfloat16") -> str:
    """The line a notebook prints beside the ceilings when ``dtype``'s all-core ceiling was set
    after notebook 00's sweep, by an operation that beat it ("" when the sweep set it): its
    source, and, where that rate is also ``dtype``'s one-thread ceiling (an operation timed on
    one thread of several), its ratio to fp32's one-thread ceiling, since the ratio of the
    all-core ceilings then divides a one-thread rate by an all-core one.

    Raises:
        TypeError, ValueError: for limits that are not :class:`MachineLimits` or an unmeasured dtype.
    """
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    every = limits.peak_flops(name)
    src = limits.sources.get(name, "")
    if not src.endswith(AFTER_SWEEP):
        return ""
    one, fp32_one = limits.one_thread_flops.get(name), limits.one_thread_flops.get("float32")
    matched = ""
    if one is not None and fp32_one is not None and one >= every and (limits.threads or 1) > 1:
        matched = (f"; it equals {name}'s ceiling on 1 thread, a rate reached on 1 thread, so against fp32's "
                   "all-core ceiling it reads low: on 1 thread each it is "
                   f"{one / limits.peak_flops('float32', 1):.3g}x fp32's")
    return f"(that {name} ceiling is not the sweep's: {src}{matched})"


def meaningful_mfu(limits: MachineLimits, flops_per_step: float, step_s: float, dtype: str,
                   threads: int | None = None) -> tuple[float, str, str]:
    """An MFU that means something here: ``(value, ceiling dtype, sentence)``.

    bf16 autocast runs the matmuls (linear layers, attention's batched matmuls) in bf16 and
    keeps layer norms, softmax and the loss in fp32. Where bf16 is emulated its ceiling is
    about 100x below fp32's, and a step whose fp32 work alone runs faster than that reads as
    over 100 % of it: not a share of what the machine can do. Then the MFU is held against the
    fp32 ceiling (what the same step could reach without bf16), and the sentence says why.
    Every ceiling is the one measured on the step's ``threads`` (each dtype's own one-thread
    ceiling: a dtype's share of the cores is not fp32's).

    Args:
        limits: the measured ceilings.
        flops_per_step, step_s: model FLOPs of one step and its measured seconds.
        dtype: the dtype the step's matmuls ran in (``"float32"``, ``"bfloat16"``).
        threads: the intra-op threads the step ran on (``None``: all cores).

    Raises:
        TypeError, ValueError: for bad limits, an unmeasured dtype, a FLOP count or time that
            is not a finite number > 0, or ``threads`` below 1.
    """
    check_type("limits", limits, MachineLimits)
    check_real("flops_per_step", flops_per_step, 0, lo_open=True)
    check_real("step_s", step_s, 0, lo_open=True)
    if threads is not None:
        check_int("threads", threads, 1)
    name = dtype_name(dtype)
    rate = flops_per_step / step_s  # FLOP/s
    ceiling = mfu_dtype(limits, name)
    value = rate / limits.peak_flops(ceiling, threads=threads)
    on = "" if threads is None else f" on {threads} thread{'s' * (threads != 1)}"
    if ceiling == name:
        return value, name, f"MFU {value:.1%} of the {name} ceiling{on}"
    own = limits.peak_flops(name, threads=threads)
    return value, ceiling, (
        f"MFU {value:.1%} of the {ceiling} ceiling{on}: autocast ran the matmuls in {name}, which "
        f"this CPU emulates at {si(own, 'FLOP/s')}{on}, and the rest in {ceiling}, so a share of "
        f"the {name} ceiling ({rate / own:.0%}) would not be a share of what the machine can do")


def mfu_dtype(limits: MachineLimits, dtype: str) -> str:
    """The dtype whose ceiling an MFU of work in ``dtype`` is held against: ``dtype`` itself,
    or ``"float32"`` where ``dtype`` is emulated (see :func:`meaningful_mfu`).

    Raises:
        TypeError, ValueError: for limits that are not :class:`MachineLimits` or an unmeasured dtype.
    """
    check_type("limits", limits, MachineLimits)
    name = dtype_name(dtype)
    return "float32" if limits.support(name) == "emulated" else name


def same_work_ratio(small: Callable[[], object], large: Callable[[], object], work_small: float,
                    work_large: float, repeat: int = 7, device: torch.device | str | None = None,
                    threads: int | None = None) -> stats.Estimate:
    """``small``'s rate over ``large``'s (work per second), with its interval (at least 90 %).

    Two sweep points' medians, timed seconds apart, carry no interval: here ``small`` runs
    ``round(work_large / work_small)`` times per round, so both sides do about the same work
    and take about the same time, and the two alternate (:func:`perfkit.timing.interleaved`):
    the ratio is :func:`perfkit.stats.median_ratio` of the paired rounds.

    Args:
        small, large: one call each (a matmul, a copy); ``work_*``: its FLOPs or bytes.
        repeat: timed rounds (each runs both, after one untimed round).
        device: where they run (synchronised around each call); ``None``: CUDA if present.
        threads: intra-op threads to pin while timing (:func:`pinned_threads`); ``None``
            keeps the setting. Under load, every call of a multi-threaded operation can wait at
            its barrier for a descheduled thread, a cost the many small calls pay many times.

    Raises:
        TypeError, ValueError: for a callable that is not one, work that is not > 0, or a
            ``repeat`` or ``threads`` below 2 or 1.
    """
    check_callable("small", small)
    check_callable("large", large)
    ws = check_real("work_small", work_small, 0, lo_open=True)
    wl = check_real("work_large", work_large, 0, lo_open=True)
    check_int("repeat", repeat, 2)
    copies = max(1, round(wl / ws))

    def many() -> None:
        for _ in range(copies):
            small()

    with pinned_threads(torch.get_num_threads() if threads is None else check_int("threads", threads, 1)):
        t_small, t_large = interleaved([many, large], warmup=1, repeat=repeat, device=device)
    # rate ratio = (copies * ws / t_small) / (wl / t_large)
    return stats.median_ratio(t_large.times_s, t_small.times_s).scaled(copies * ws / wl)


def matmul_ratio(n_small: int, n_large: int, dtype: torch.dtype = torch.float32, repeat: int = 7,
                 device: torch.device | str | None = None, threads: int | None = None) -> stats.Estimate:
    """FLOP/s of an ``(n_small, n_small)`` square matmul over an ``n_large`` one's, on the same
    FLOPs (:func:`same_work_ratio`).

    Raises:
        TypeError, ValueError: for sizes that are not ints >= 1, a ``dtype`` that is not a
            ``torch.dtype``, or a bad ``repeat``.
    """
    check_type("dtype", dtype, torch.dtype)
    dev, ops, work = resolve_device(device), [], []
    for name, n in (("n_small", n_small), ("n_large", n_large)):
        a, b = (torch.randn(check_int(name, n, 1), n, device=dev, dtype=dtype) for _ in range(2))  # (n, n)
        ops.append(functools.partial(torch.mm, a, b, out=torch.empty_like(a)))
        work.append(matmul_flops(n, n, n))
    return same_work_ratio(*ops, *work, repeat, dev, threads)


def copy_ratio(small_bytes: int, large_bytes: int, repeat: int = 7, device: torch.device | str | None = None,
               threads: int | None = None) -> stats.Estimate:
    """Bytes per second copying a ``small_bytes`` buffer over a ``large_bytes`` one's, on the
    same bytes (:func:`same_work_ratio`): in cache against DRAM when the sizes straddle it.

    Raises:
        TypeError, ValueError: for sizes that are not ints >= 4, or a bad ``repeat``.
    """
    dev, ops, work = resolve_device(device), [], []
    for name, nbytes in (("small_bytes", small_bytes), ("large_bytes", large_bytes)):
        src = torch.rand(check_int(name, nbytes, 4) // 4, device=dev)  # fp32
        ops.append(functools.partial(torch.Tensor.copy_, torch.empty_like(src), src))
        work.append(src.numel() * 4)  # bytes per buffer (read and written alike on both sides)
    return same_work_ratio(*ops, *work, repeat, dev, threads)
