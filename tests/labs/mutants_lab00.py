"""Plausible wrong answers to lab 00 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

MUTANTS = [
    Mutant("q1_time_it", "the mean of the timed calls instead of the median", """
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
    return statistics.mean(times)
""", expect="median"),
]
