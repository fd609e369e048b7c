"""Plots and sentences of notebook 00 (measure your machine), from a measured MachineLimits.

Nothing here measures: :func:`perfkit.hw.measure_limits` does, and these read its sweeps.

Usage::

    limits = hw.measure_limits(quick=True)
    fig = plot_matmul_sweep(limits); fig2 = plot_copy_sweep(limits)
    print(bf16_sentence(limits)); print("\\n".join(skipped_sizes(limits, [128, 256, 4096])))
    print("\\n".join(sweep_lines(limits) + source_lines(limits))); print(threads_sentence(limits))
    print(cache_sentence(limits))
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit._checks import check_items, check_type
from perfkit.ceilings import cached_copy_bytes, dram_copy
from perfkit.hw import (
    EMULATED_BELOW,
    GRAIN,
    CopyPoint,
    MachineLimits,
    MatmulPoint,
    imitation,
    matmul_roofline,
)
from perfkit.viz.core import Choice, IntControl, WidgetSpec, plot_roofline, si, tidy

__all__ = ["bf16_sentence", "cache_and_dram_points", "cache_lines", "cache_sentence", "dram_size_sentence",
           "matmul_roofline_widget", "plot_copy_sweep", "plot_matmul_sweep", "skipped_sizes", "source_lines",
           "sweep_lines", "threads_sentence"]


def _threads(p: MatmulPoint | CopyPoint) -> str:
    return f"{p.threads} thread{'s' * (p.threads != 1)}" if p.threads else "the default threads"


def plot_matmul_sweep(limits: MachineLimits) -> Figure:
    """Median FLOP/s of each square matmul size, one line per dtype and thread count (log-log)."""
    check_type("limits", limits, MachineLimits)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for dtype in limits.matmul_flops:
        for t in sorted({p.threads for p in limits.matmul_points if p.dtype == dtype}, reverse=True):
            pts = [p for p in limits.matmul_points if p.dtype == dtype and p.threads == t]
            ax.plot([p.n for p in pts], [p.flops_per_s for p in pts], "o-" if t != 1 else "s--",
                    label=f"{dtype}, {_threads(pts[0])}" if t else dtype)
    sizes = sorted({p.n for p in limits.matmul_points})
    ax.set(xscale="log", yscale="log", xlabel="matrix size n (n x n @ n x n)",
           ylabel="FLOP/s (median)", title=f"Matmul throughput on {limits.name}")
    ax.set_xticks(sizes, [str(n) for n in sizes])  # one label per size swept, none between
    ax.minorticks_off()
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    ax.grid(True, which="both", alpha=0.3)
    return tidy(fig)


def plot_copy_sweep(limits: MachineLimits) -> Figure:
    """Copy bandwidth (bytes read + written per s) against buffer size, one line per thread count
    (``x + y`` at the DRAM size as single points), with the DRAM and cache ceilings and, where
    the last-level cache's size is known, the buffer whose copy (source and destination) touches
    that many bytes: half of it."""
    check_type("limits", limits, MachineLimits)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for op in ("copy", "add"):
        for t in sorted({p.threads for p in limits.copy_points if p.op == op}, reverse=True):
            pts = [p for p in limits.copy_points if p.op == op and p.threads == t]
            what = "copy" if op == "copy" else "x + y"
            style = "^" if op == "add" else "s--" if t == 1 else "o-"
            ax.plot([p.nbytes for p in pts], [p.bytes_per_s for p in pts], style,
                    label=f"{what}, {_threads(pts[0])}" if t else what)
    ax.axhline(limits.copy_bytes_per_s, ls="--", c="gray",
               label=f"DRAM ceiling: {si(limits.copy_bytes_per_s, 'B/s')}")
    if limits.cache_bytes_per_s:
        ax.axhline(limits.cache_bytes_per_s, ls=":", c="tab:green",
                   label=f"cache ceiling: {si(limits.cache_bytes_per_s, 'B/s')}")
    if limits.llc_bytes:  # a copy touches its source and its destination: twice its buffer
        ax.axvline(limits.llc_bytes / 2, c="tab:red", lw=1,
                   label=f"copy touching as many bytes as the last-level\ncache the OS reports "
                         f"({si(limits.llc_bytes, 'B')}): buffer {si(limits.llc_bytes / 2, 'B')}")
    ax.set(xscale="log", yscale="log", xlabel="buffer size (bytes)",
           ylabel="bytes read + written per s\n(points: median; lines: fastest tenth)",
           title="Copy bandwidth against buffer size")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the axes: no point hidden
    ax.grid(True, which="both", alpha=0.3)
    return tidy(fig)


def cache_and_dram_points(limits: MachineLimits) -> tuple[CopyPoint, CopyPoint]:
    """The copy sweep's buffer of the cache ceiling's size (:attr:`MachineLimits.cache_nbytes`, its
    faster thread count) or, where that is unknown, its fastest buffer whose source and destination
    fit in half the last-level cache (the buffer at most a quarter of it), and its smallest buffer
    at least 4x that cache
    (STREAM's rule: no cache level holds it) or, where the sweep capped the DRAM buffers, its
    smallest one of the DRAM ceiling's size (:attr:`MachineLimits.dram_nbytes`).

    Raises:
        TypeError: for ``limits`` that are not :class:`perfkit.hw.MachineLimits`.
        ValueError: when the cache size is unknown or the sweep has no buffer on either side.
    """
    check_type("limits", limits, MachineLimits)
    llc = limits.llc_bytes
    big = min(4 * (llc or 0), limits.dram_nbytes or 4 * (llc or 0))
    cached = [p for p in limits.copy_points if llc and p.nbytes <= llc // 4 and p.op == "copy"]
    dram = [p for p in limits.copy_points if llc and p.nbytes >= big and p.op == "copy"]
    if not cached or not dram:
        raise ValueError(f"limits must hold copies in cache and from DRAM (last-level cache {llc!r} bytes; "
                         f"buffers {[p.nbytes for p in limits.copy_points]})")
    ceiling = [p for p in cached if p.nbytes == limits.cache_nbytes]  # the buffer the ceiling names
    return max(ceiling or cached, key=lambda p: p.bytes_per_s), min(dram, key=lambda p: p.nbytes)


def _trend(pts: list[MatmulPoint]) -> str:
    """How the rate moved over the last two square sizes run (on the most threads they ran on):
    what a skipped larger size could have changed of the ceiling."""
    t = max(p.threads for p in pts)
    run = sorted((p for p in pts if p.threads == t), key=lambda p: p.n)
    if len(run) < 2:
        return ""
    a, b = run[-2:]
    rates = f"from {si(a.flops_per_s, 'FLOP/s')} at n={a.n} to {si(b.flops_per_s, 'FLOP/s')} at n={b.n}"
    if b.flops_per_s < 0.9 * a.flops_per_s:
        return f"; its rate fell {rates}: a larger size is expected slower still, not to raise its ceiling"
    if b.flops_per_s > a.flops_per_s / 0.9:
        return f"; its rate rose {rates}: a skipped size might have run faster (its ceiling is the sizes run)"
    return f"; its rate held within 10 % {rates}: flattened"


def skipped_sizes(limits: MachineLimits, sizes: Sequence[int]) -> list[str]:
    """One line per dtype whose sweep left out some of ``sizes`` (one call would have taken
    over a second at the rate measured below them), with how its rate moved over its last two
    sizes (medians, on the most threads): fell by over 10 % (a larger size is expected slower
    still), rose by over 10 % (it might have been faster), or held (flattened)."""
    check_type("limits", limits, MachineLimits)
    wanted = check_items("sizes", sizes)
    lines = []
    for dtype in limits.matmul_flops:
        pts = [p for p in limits.matmul_points if p.dtype == dtype]
        skipped = [n for n in wanted if n not in {p.n for p in pts}]
        if skipped:
            lines.append(f"{dtype:>9} n={', '.join(map(str, skipped))}: skipped, one call would take "
                         f"over 1 s at this rate{_trend(pts) if pts else ''}")
    return lines


def bf16_sentence(limits: MachineLimits) -> str:
    """The fp32 and bf16 ceilings and what their ratio says about bf16 on this machine
    (native, converted to fp32 for the arithmetic, or emulated), naming an imitation. The ratio
    is taken on one thread each where both dtypes have a one-thread ceiling on a machine of
    several threads (a bf16 rate reached on one thread is not divided by fp32's all-core one),
    else on all cores; the thread count is printed with it, and the ratio that
    :meth:`MachineLimits.support` classes by beside it where the two differ: each dtype's ceiling,
    its best rate on any thread count, labelled with the point it came from (a bf16 ceiling read on
    1 thread is not called an all-core one)."""
    check_type("limits", limits, MachineLimits)
    fp32, bf16 = limits.peak_flops("float32"), limits.peak_flops("bfloat16")
    one = all(limits.one_thread_flops.get(d) for d in ("float32", "bfloat16")) and (limits.threads or 1) > 1
    t = 1 if one else None
    ratio = limits.peak_flops("bfloat16", t) / limits.peak_flops("float32", t)
    b1, f1 = (si(limits.peak_flops(d, 1), "FLOP/s") for d in ("bfloat16", "float32"))
    matched = f"{ratio:.3g}x fp32 " + (f"on 1 thread each: {b1} against {f1}" if one else "on all cores")
    if one and f"{ratio:.3g}" != f"{bf16 / fp32:.3g}":  # each ceiling is its dtype's best on any thread count
        where = {d: f" ({w})" if (w := limits.sources.get(d)) else "" for d in ("bfloat16", "float32")}
        matched += (f"; bf16's ceiling, its best on any thread count{where['bfloat16']}, over fp32's"
                    f"{where['float32']}: {bf16 / fp32:.3g}x, the ratio its class is read from")
    what = {"native": "native bf16 arithmetic",
            "converted": "no bf16 units: bf16 is converted to fp32 for the arithmetic and back",
            "emulated": f"emulated (below {EMULATED_BELOW:.0%} of fp32): later notebooks time bf16 at the "
                        "small sizes that fit their budgets, and hold its FLOP/s against the measured fp32 "
                        "ceiling",
            }[limits.support("bfloat16")]
    faked = (f"; this process imitates a CPU without native bf16 (PERFKIT_IMITATE={imitation()}), so the "
             "bf16 ceiling and its class are the imitated CPU's, not this machine's" if imitation() else "")
    return (f"fp32 ceiling: {si(fp32, 'FLOP/s')}\nbf16 ceiling: {si(bf16, 'FLOP/s')} ({matched}): "
            f"{what}{faked}")


def sweep_lines(limits: MachineLimits) -> list[str]:
    """One line per dtype and matmul (square sizes, then the course's shapes): its median FLOP/s
    on each thread count, all cores first."""
    check_type("limits", limits, MachineLimits)
    lines = []
    for dtype in limits.matmul_flops:
        pts = [p for p in limits.matmul_points + limits.shape_points if p.dtype == dtype]
        for label in dict.fromkeys(p.label for p in pts):
            same = sorted((p for p in pts if p.label == label), key=lambda p: -p.threads)
            rates = ", ".join(f"{si(p.flops_per_s, 'FLOP/s')} on {_threads(p)}" for p in same)
            lines.append(f"{dtype:>9} {label:>20}: {rates}")
    return lines


def source_lines(limits: MachineLimits) -> list[str]:
    """Each ceiling, its value and where it came from (:attr:`MachineLimits.sources`)."""
    check_type("limits", limits, MachineLimits)
    rows = [(f"{dt} matmul", limits.peak_flops(dt), "FLOP/s", dt) for dt in limits.matmul_flops]
    rows += [(f"{dt} matmul, 1 thread", v, "FLOP/s", f"{dt}, 1 thread")
             for dt, v in limits.one_thread_flops.items()]
    rows += [("DRAM bandwidth", limits.copy_bytes_per_s, "B/s", "dram")]
    if limits.cache_bytes_per_s:
        rows.append(("cache bandwidth", limits.cache_bytes_per_s, "B/s", "cache"))
    return [f"{name:>26}: {si(v, unit):>14}  from {limits.sources.get(key, 'the sweep')}"
            for name, v, unit, key in rows]


def _x(ratio: float) -> str:
    """``4.33x``, ``5,720x``: a ratio without an exponent."""
    return f"{ratio:,.0f}x" if ratio >= 100 else f"{ratio:.3g}x"


def threads_sentence(limits: MachineLimits, ratio: float = 0.5) -> str:
    """What the copy sweep on all threads did against one thread: the sizes of at least
    :data:`perfkit.hw.GRAIN` elements where it ran below ``ratio`` of one thread's rate and why
    (torch waits for every thread of such a copy at a barrier), or that none did; beside it what
    the load alone did to the sizes that run on one thread either way. Empty without both counts."""
    check_type("limits", limits, MachineLimits)
    one = {p.nbytes: p for p in limits.copy_points if p.op == "copy" and p.threads == 1}
    every = {p.nbytes: p for p in limits.copy_points if p.op == "copy" and p.threads > 1}
    sizes = sorted(set(one) & set(every))
    if not sizes:
        return ""
    t = every[sizes[0]].threads
    slower = {n: one[n].bytes_per_s / every[n].bytes_per_s for n in sizes}
    single = [n for n in sizes if n // 4 < GRAIN]
    base = ""
    if single:  # below the grain: no barrier, so what slowed it on the all-threads pass was the load
        n = single[-1]
        noise = "the noise between two passes (one median each, no interval)"
        base = (f" The {si(n, 'B')} buffer ({n // 4:,} elements) runs on one thread either way; "
                + (f"it ran {_x(slower[n])} slower on the {t}-thread pass: no barrier is involved, so that "
                   f"much is the load alone, or {noise}." if slower[n] > 1.05 else
                   f"it ran as fast on that pass, within 5 % ({slower[n]:.3f}x the time)."
                   if slower[n] >= 1 / 1.05 else
                   f"it ran {_x(1 / slower[n])} faster on the {t}-thread pass, with no barrier involved: "
                   f"{noise}."))
    slow = [n for n in sizes if n // 4 >= GRAIN and slower[n] > 1 / ratio]
    if not slow:
        return (f"On {t} threads no copy of at least {GRAIN:,} elements (PyTorch's grain size, "
                "`at::internal::GRAIN_SIZE`: a smaller op runs on one thread) ran below "
                f"{ratio:.0%} of its rate on one in the sweep: the threads' barrier cost little while it ran."
                + base)
    worst = [slower[n] for n in slow]
    which = (f"the copy of {si(slow[0], 'B')} ran {_x(worst[0])}" if len(slow) == 1 else
             f"the copies of {si(slow[0], 'B')} to {si(slow[-1], 'B')} ran {_x(min(worst))} to "
             f"{_x(max(worst))}")
    return (f"On {t} threads {which} slower than on one: torch splits a copy of at least "
            f"{GRAIN:,} elements (its grain size, `at::internal::GRAIN_SIZE`)"
            " across its threads and waits for all of them at a barrier, and a thread "
            "that lost its core to another process holds up every call for a slice of the scheduler's time."
            + base + " Each ceiling is the best of either thread count.")


def cache_sentence(limits: MachineLimits) -> str:
    """What the copy sweep shows of the cache (:func:`perfkit.ceilings.cached_copy_bytes`): the
    largest buffer whose median copy kept half the cache ceiling, the next size swept, which did
    not, any smaller buffer that did not either (with its share of the ceiling), and the
    last-level cache the OS reports beside them. The OS reports a size; what these
    copies kept of it is what the sweep shows, and the sentence claims nothing between the two."""
    check_type("limits", limits, MachineLimits)
    fit = cached_copy_bytes(limits)
    llc = f"the OS reports a last-level cache of {si(limits.llc_bytes, 'B')}" if limits.llc_bytes else ""
    if not fit:
        return ("no copy kept half the cache ceiling: operations within half the reported last-level cache "
                f"({si((limits.llc_bytes or 0) // 2, 'B')}) are held against the cache's roof below")
    larger = sorted({p.nbytes for p in limits.copy_points if p.op == "copy" and p.nbytes > fit})
    nxt = (f"; the next size swept, {si(larger[0], 'B')} ({si(2 * larger[0], 'B')} touched), did not"
           if larger else "")
    rates: dict[int, float] = {}  # bytes -> the best median over thread counts, as cached_copy_bytes reads it
    for p in limits.copy_points:
        if p.op == "copy" and p.nbytes < fit:
            rates[p.nbytes] = max(rates.get(p.nbytes, 0.0), p.bytes_per_s)
    ceiling = limits.cache_bytes_per_s
    slow = sorted(n for n, r in rates.items() if r < 0.5 * ceiling)
    under = ("; of the smaller buffers, " + ", ".join(f"{si(n, 'B')} ({rates[n] / ceiling:.0%} of it)"
                                                      for n in slow) + " did not either") if slow else ""
    return (f"the cache the sweep shows: the largest buffer whose copy kept at least half the cache ceiling "
            f"by its median is {si(fit, 'B')} ({si(2 * fit, 'B')} read and written){nxt}{under}"
            + (f". {llc[0].upper()}{llc[1:]}: that is the size it reports, and what these copies kept of it "
               "is what the sweep shows" if llc else "")
            + f". Operations of at most {si(2 * fit, 'B')} counted are held against the cache's roof below")


def dram_size_sentence(limits: MachineLimits) -> str:
    """The DRAM ceiling's buffer size (:attr:`MachineLimits.dram_nbytes`) as a multiple of the
    last-level cache the OS reports, against STREAM's rule (each array at least 4x it), saying
    where the sweep's cap kept it below; and as a multiple of the largest buffer the sweep saw
    served by the cache (:func:`perfkit.ceilings.cached_copy_bytes`). "" without a DRAM size.

    Raises:
        TypeError: for ``limits`` that are not :class:`perfkit.hw.MachineLimits`.
    """
    check_type("limits", limits, MachineLimits)
    n, llc, fit = limits.dram_nbytes, limits.llc_bytes, cached_copy_bytes(limits)
    if not n:
        return ""
    text = f"the DRAM ceiling's buffers: {si(n, 'B')}"
    if llc:
        x = n / llc
        text += (f", {x:.1f}x the last-level cache the OS reports ({si(llc, 'B')})"
                 + (", at least STREAM's 4x" if x >= 4 else
                    ": under STREAM's 4x, because the sweep caps its buffers (1 GiB, 256 MiB in QUICK runs)"))
    if fit:
        text += (f"; {n / fit:.0f}x the largest buffer whose copy kept half the cache ceiling in the sweep "
                 f"({si(fit, 'B')}), the cache these copies saw")
    return text


def cache_lines(run: MachineLimits, cached: MachineLimits) -> list[str]:
    """Each ceiling the limits file holds after :func:`perfkit.hw.save_limits` merged ``run`` into
    it, one line each: the value later notebooks divide by and, where it is not this run's figure,
    whose it is with this run's beside it: an earlier run's higher one (the file keeps the highest
    measured), or a DRAM ceiling the file credits below what this run reached (``x + y`` at most
    9/8 of a copy, :func:`perfkit.hw.credited_dram`). After DRAM's ceiling, the fastest copy of
    DRAM-sized buffers (:func:`perfkit.ceilings.dram_copy`), the figure notebook 02 divides by."""
    check_type("run", run, MachineLimits)
    check_type("cached", cached, MachineLimits)
    src = cached.sources.get
    rows = [(f"{dt} matmul", run.matmul_flops.get(dt), cached.peak_flops(dt), "FLOP/s", src(dt))
            for dt in cached.matmul_flops]
    rows += [(f"{dt} matmul, 1 thread", run.one_thread_flops.get(dt), v, "FLOP/s",
              src(f"{dt}, 1 thread")) for dt, v in cached.one_thread_flops.items()]
    copy_held, copy_src = dram_copy(cached)  # what notebook 02 divides by
    rows += [("DRAM bandwidth", run.copy_bytes_per_s, cached.copy_bytes_per_s, "B/s", src("dram")),
             ("DRAM-sized copy", dram_copy(run)[0], copy_held, "B/s", copy_src)]
    if cached.cache_bytes_per_s:
        rows.append(("cache bandwidth", run.cache_bytes_per_s, cached.cache_bytes_per_s, "B/s", src("cache")))
    lines = []
    for name, mine, held, unit, where in rows:
        head = f"{name:>26}: {si(held, unit):>14}  "
        if mine is not None and math.isclose(mine, held, rel_tol=1e-12):
            lines.append(head + "this run's")
        elif mine is not None and mine > held:  # the file credits less than this run reached
            lines.append(head + f"the file's ({where}); this run reached {si(mine, unit)}")
        else:
            ours = f"this run measured {si(mine, unit)}" if mine else "this run did not measure it"
            lines.append(head + f"an earlier run's ({where or 'its sweep'}); {ours}")
    return lines


def matmul_roofline_widget(limits: MachineLimits, measured: MachineLimits | None = None) -> WidgetSpec:
    """Matrix size and dtype controls (float32 first) placing a square matmul on the roofline of
    ``limits`` (:func:`perfkit.hw.matmul_roofline`). The point drawn is the model's, the roof at its
    intensity, not a measurement: the title names the ceiling that roof is and where it came from
    and, where ``measured``'s sweep timed that size and dtype (on its most threads), the median rate
    it measured there. A dtype's ceiling can come from another shape than the size shown (an
    emulated one's rate depends on the shape), so "attainable" is never claimed.

    Raises:
        TypeError: for ``limits`` or ``measured`` that are not :class:`perfkit.hw.MachineLimits`.
    """
    check_type("limits", limits, MachineLimits)
    check_type("measured", measured, MachineLimits, optional=True)
    dtypes = sorted(limits.matmul_flops, key=lambda dt: (dt != "float32", dt))
    swept = measured.matmul_points if measured is not None else []

    def show(log2_n: int, dtype: str) -> Figure:
        p = matmul_roofline(2 ** log2_n, dtype, limits)
        fig = plot_roofline(limits.matmul_flops, limits.copy_bytes_per_s,
                            [(f"{p.n}x{p.n} {dtype} (the model: its roof, not measured)", p.intensity,
                              p.attainable_flops)], intensity_range=(1 / 16, max(1024.0, 2 * p.intensity)))
        roof = ("the DRAM roof" if p.bound == "memory" else
                f"the {dtype} ceiling, from {limits.sources.get(dtype, 'the sweep')}")
        ran = max((q for q in swept if q.dtype == dtype and q.n == p.n), key=lambda q: q.threads,
                  default=None)  # the sweep's median at this size, on its most threads
        title = (f"{p.n} x {p.n} matmul in {dtype}: {p.intensity:.3g} FLOP/byte, under {roof}: "
                 f"{si(p.attainable_flops, 'FLOP/s')}, so at least {si(p.predicted_s, 's')} per matmul"
                 + (f"; this run's sweep measured {si(ran.flops_per_s, 'FLOP/s')} at this size "
                    + (f"({ran.flops_per_s / p.attainable_flops:.0%} of that roof)"
                       if ran.flops_per_s <= p.attainable_flops else "(above that roof: the cache held it)")
                    if ran else ""))
        fig.axes[0].set_title("\n".join(textwrap.wrap(title, 100)), fontsize=9)
        return tidy(fig)

    return WidgetSpec(show, {"log2_n": IntControl(1, 14, 8, description="log2(matrix size)"),
                             "dtype": Choice(dtypes, dtypes[0], description="dtype")},
                      title="Where does a matmul sit on this machine's roofline?")
