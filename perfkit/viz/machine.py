"""Plots and sentences of notebook 00 (measure your machine), from a measured MachineLimits.

Nothing here measures: :func:`perfkit.hw.measure_limits` does, and these read its sweeps.

Usage::

    limits = hw.measure_limits(quick=True)
    fig = plot_matmul_sweep(limits); fig2 = plot_copy_sweep(limits)
    print(bf16_sentence(limits)); print("\\n".join(skipped_sizes(limits, [128, 256, 4096])))
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from perfkit._checks import check_items, check_type
from perfkit.hw import EMULATED_BELOW, CopyPoint, MachineLimits, imitation
from perfkit.viz.core import si, tidy

__all__ = ["bf16_sentence", "cache_and_dram_points", "plot_copy_sweep", "plot_matmul_sweep", "skipped_sizes"]


def plot_matmul_sweep(limits: MachineLimits) -> Figure:
    """Median FLOP/s of each square matmul size, one line per dtype (log-log)."""
    check_type("limits", limits, MachineLimits)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for dtype in limits.matmul_flops:
        pts = [p for p in limits.matmul_points if p.dtype == dtype]
        ax.plot([p.n for p in pts], [p.flops_per_s for p in pts], "o-", label=dtype)
    ax.set(xscale="log", yscale="log", xlabel="matrix size n (n x n @ n x n)",
           ylabel="FLOP/s (median)", title=f"Matmul throughput on {limits.name}")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    return tidy(fig)


def plot_copy_sweep(limits: MachineLimits) -> Figure:
    """Copy bandwidth (bytes read + written per s) against buffer size, with the DRAM and
    cache ceilings and the last-level cache's size where they are known."""
    check_type("limits", limits, MachineLimits)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([p.nbytes for p in limits.copy_points], [p.bytes_per_s for p in limits.copy_points], "o-")
    ax.axhline(limits.copy_bytes_per_s, ls="--", c="gray",
               label=f"DRAM ceiling: {si(limits.copy_bytes_per_s, 'B/s')}")
    if limits.cache_bytes_per_s:
        ax.axhline(limits.cache_bytes_per_s, ls=":", c="tab:green",
                   label=f"cache ceiling: {si(limits.cache_bytes_per_s, 'B/s')}")
    if limits.llc_bytes:
        ax.axvline(limits.llc_bytes, c="tab:red", lw=1, label=f"last-level cache {si(limits.llc_bytes, 'B')}")
    ax.set(xscale="log", yscale="log", xlabel="buffer size (bytes)", ylabel="bytes read + written per s",
           title="Copy bandwidth against buffer size")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))  # beside the axes: no point hidden
    ax.grid(True, which="both", alpha=0.3)
    return tidy(fig)


def cache_and_dram_points(limits: MachineLimits) -> tuple[CopyPoint, CopyPoint]:
    """The copy sweep's fastest buffer whose source and destination fit in half the last-level
    cache (the buffer at most a quarter of it), and its smallest buffer at least 4x that cache
    (STREAM's rule: no cache level holds it).

    Raises:
        TypeError: for ``limits`` that are not :class:`perfkit.hw.MachineLimits`.
        ValueError: when the cache size is unknown or the sweep has no buffer on either side.
    """
    check_type("limits", limits, MachineLimits)
    llc = limits.llc_bytes
    cached = [p for p in limits.copy_points if llc and p.nbytes <= llc // 4]
    dram = [p for p in limits.copy_points if llc and p.nbytes >= 4 * llc]
    if not cached or not dram:
        raise ValueError(f"limits must hold copies in cache and from DRAM (last-level cache {llc!r} bytes; "
                         f"buffers {[p.nbytes for p in limits.copy_points]})")
    return max(cached, key=lambda p: p.bytes_per_s), min(dram, key=lambda p: p.nbytes)


def skipped_sizes(limits: MachineLimits, sizes: Sequence[int]) -> list[str]:
    """One line per dtype whose sweep left out some of ``sizes`` (one call would have taken
    over a second at the rate measured below them)."""
    check_type("limits", limits, MachineLimits)
    wanted = check_items("sizes", sizes)
    lines = []
    for dtype in limits.matmul_flops:
        done = {p.n for p in limits.matmul_points if p.dtype == dtype}
        skipped = [n for n in wanted if n not in done]
        if skipped:
            lines.append(f"{dtype:>9} n={', '.join(map(str, skipped))}: skipped, one call would take "
                         "over 1 s at this rate")
    return lines


def bf16_sentence(limits: MachineLimits) -> str:
    """The fp32 and bf16 ceilings and what their ratio says about bf16 on this machine
    (native, converted to fp32 for the arithmetic, or emulated), naming an imitation."""
    check_type("limits", limits, MachineLimits)
    fp32, bf16 = limits.peak_flops("float32"), limits.peak_flops("bfloat16")
    what = {"native": "native bf16 arithmetic",
            "converted": "no bf16 units: bf16 is converted to fp32 for the arithmetic and back",
            "emulated": f"emulated (below {EMULATED_BELOW:.0%} of fp32): later notebooks time bf16 at the "
                        "small sizes that fit their budgets, and hold its MFU against the fp32 ceiling",
            }[limits.support("bfloat16")]
    faked = (f"; this process imitates a CPU without native bf16 (PERFKIT_IMITATE={imitation()})"
             if imitation() else "")
    return (f"fp32 ceiling: {si(fp32, 'FLOP/s')}\nbf16 ceiling: {si(bf16, 'FLOP/s')} "
            f"({bf16 / fp32:.3g}x fp32): {what}{faked}")
