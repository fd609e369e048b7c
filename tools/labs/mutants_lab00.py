"""Plausible wrong answers to lab 00 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_TIME_IT = """
import statistics, time
def time_it(fn, warmup=3, repeat=10, sync=None):
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return STAT
"""

MUTANTS = [
    Mutant("q1_time_it", "the mean of the timed calls instead of the median",
           _TIME_IT.replace("STAT", "statistics.mean(times)"), expect="the mean"),
    Mutant("q1_time_it", "the minimum instead of the median",
           _TIME_IT.replace("STAT", "min(times)"), expect="the minimum"),
    Mutant("q1_time_it", "the total time of the timed calls",
           _TIME_IT.replace("STAT", "sum(times)"), expect="the total"),
    Mutant("q1_time_it", "the warm-up calls timed too", """
import statistics, time
def time_it(fn, warmup=3, repeat=10, sync=None):
    times = []
    for _ in range(warmup + repeat):
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
""", expect="includes the warm-up"),
    Mutant("q1_time_it", "the clock read before sync()", """
import statistics, time
def time_it(fn, warmup=3, repeat=10, sync=None):
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        if sync is not None:
            sync()
        times.append(t1 - t0)
    return statistics.median(times)
""", expect="after calling sync"),
    Mutant("q2_matmul_intensity", "FLOPs without the factor 2", """
def matmul_intensity(m, n, k, bytes_per_element=4):
    return m * n * k / ((m * k + k * n + m * n) * bytes_per_element)
""", expect="factor 2"),
    Mutant("q2_matmul_intensity", "bytes of the inputs only", """
def matmul_intensity(m, n, k, bytes_per_element=4):
    return 2 * m * n * k / ((m * k + k * n) * bytes_per_element)
""", expect="writing the output"),
    Mutant("q2_matmul_intensity", "elements instead of bytes", """
def matmul_intensity(m, n, k, bytes_per_element=4):
    return 2 * m * n * k / (m * k + k * n + m * n)
""", expect="count elements"),
    Mutant("q3_roofline", "max instead of min", """
def roofline(intensity, peak_flops, bandwidth):
    attainable = max(peak_flops, intensity * bandwidth)
    return attainable, ("memory" if intensity < peak_flops / bandwidth else "compute")
""", expect=r"min\(peak_flops, intensity \* bandwidth\)"),
    Mutant("q3_roofline", "the ridge point inverted (bandwidth / peak)", """
def roofline(intensity, peak_flops, bandwidth):
    attainable = min(peak_flops, intensity * bandwidth)
    return attainable, ("memory" if intensity < bandwidth / peak_flops else "compute")
""", expect="ridge point is peak_flops / bandwidth"),
    Mutant("q3_roofline", "memory-bound at the ridge point itself", """
def roofline(intensity, peak_flops, bandwidth):
    attainable = min(peak_flops, intensity * bandwidth)
    return attainable, ("memory" if intensity <= peak_flops / bandwidth else "compute")
""", expect="at or above it compute-bound"),
    Mutant("q4_matmul_flops_per_s", "n**3 FLOPs instead of 2*n**3", """
import torch
def matmul_flops_per_s(n, dtype=torch.float32):
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return n**3 / time_it(lambda: a @ b, warmup=3, repeat=15)
""", expect=r"n\*\*3 instead of 2\*n\*\*3"),
    Mutant("q4_matmul_flops_per_s", "the time of all repeats as one call", """
import time, torch
def matmul_flops_per_s(n, dtype=torch.float32):
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    t0 = time.perf_counter()
    for _ in range(15):
        a @ b
    return 2 * n**3 / (time.perf_counter() - t0)
""", expect="per batch of calls"),
    Mutant("q4_matmul_flops_per_s", "inputs created inside the timed function", """
import torch
def matmul_flops_per_s(n, dtype=torch.float32):
    return 2 * n**3 / time_it(lambda: torch.randn(n, n).to(dtype) @ torch.randn(n, n).to(dtype) @
                              torch.randn(n, n).to(dtype), warmup=3, repeat=15)
""", expect="inside the timed function|half"),
]
