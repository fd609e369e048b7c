"""The roofs of the threads a step ran on, and the cache threshold the batch curve counts ops against."""

import pytest
import torch

from perfkit import hw
from perfkit.compute.batch_curve import measure_batch_curve
from perfkit.compute.intensity import OpRecord, cache_fit_bytes, cache_on_threads, dram_on_threads, roofline_s

KiB, BIG = 2**10, 2**28
# the sweep: copies of 64 KiB buffers near the cache ceiling (the cache this process sees), of 1 MiB
# far below it; DRAM-sized buffers at 40 GB/s on 2 threads, 20 on 1. The OS reports a 1 GB LLC.
PTS = [hw.CopyPoint(64 * KiB, 1e-6, 190e9, 200e9, threads=2),
       hw.CopyPoint(64 * KiB, 1e-6, 95e9, 100e9, threads=1),
       hw.CopyPoint(2**20, 1e-5, 30e9, 31e9, threads=2), hw.CopyPoint(2**20, 1e-5, 20e9, 21e9, threads=1),
       hw.CopyPoint(BIG, 0.02, 39e9, 40e9, threads=2), hw.CopyPoint(BIG, 0.03, 19e9, 20e9, threads=1)]
LIM = hw.MachineLimits("cpu", "t", {"float32": 2e11}, 40e9, copy_points=PTS, cache_bytes_per_s=200e9,
                       llc_bytes=10**9, threads=2, one_thread_flops={"float32": 1e11}, dram_nbytes=BIG)


def test_the_roofs_of_one_thread_are_its_own_copies():
    assert dram_on_threads(LIM, 1) == pytest.approx(20e9) and cache_on_threads(LIM, 1) == pytest.approx(100e9)
    assert dram_on_threads(LIM, 2) == pytest.approx(40e9) and cache_on_threads(LIM, 2) == pytest.approx(200e9)
    assert cache_on_threads(LIM, None) is None and cache_on_threads(LIM, 4) is None
    assert cache_fit_bytes(LIM) == 128 * KiB  # twice the 64 KiB copy, not half the OS's 1 GB
    with pytest.raises(ValueError, match="threads"):
        cache_on_threads(LIM, 0)


def test_roofline_s_holds_one_threads_ops_to_one_threads_bandwidths_when_asked():
    fits, spills = OpRecord("add", 0, 100 * KiB), OpRecord("add", 0, 10**8)
    # the old roofline: the compute roof of 1 thread beside all cores' bandwidths (kept as the default)
    assert roofline_s([fits], LIM, threads=1) == pytest.approx(100 * KiB / 200e9)
    assert roofline_s([spills], LIM, threads=1) == pytest.approx(1e8 / 40e9)
    assert roofline_s([fits], LIM, threads=1, thread_bandwidths=True) == pytest.approx(100 * KiB / 100e9)
    assert roofline_s([spills], LIM, threads=1, thread_bandwidths=True) == pytest.approx(1e8 / 20e9)
    assert roofline_s([spills], LIM, thread_bandwidths=True) == roofline_s([spills], LIM)  # all cores
    with pytest.raises(TypeError, match="thread_bandwidths"):
        roofline_s([fits], LIM, thread_bandwidths=1)


def make_fill_step(b: int, t: int):
    def step():  # a new tensor of b*t*16 KiB, then an add in place: 2 ops, each past 128 KiB from b*t = 8 on
        torch.ones(b * t * 4096).add_(1)
    return step


def test_batch_curve_counts_ops_past_the_cache_the_roofline_uses():
    c = measure_batch_curve(make_fill_step, [1, 8], 2, LIM, fit=1, rounds=2, warmup=0, threads=1)
    # the old count held every op against half the OS's 1 GB LLC: (0, 0) while R per token rose
    assert c.over_cache == (0, 2) and c.cache_fit == 128 * KiB
    assert "0.1 MB" in c.lines()[1] and "2 ops past the cache's 0.1 MB" in c.lines()[1]
    # R(8) at one thread's DRAM roof, 20 GB/s, not all cores' 40: 256 KiB written, 512 KiB read + written
    assert c.roof_s[1] == pytest.approx(768 * KiB / 20e9)
