# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 05 · A thread prefetcher
#
# Graded lab for module 07 (data loading). You will write
#
# 1. `ThreadPrefetcher`: wraps any iterable and loads the next batches in a background thread
#    while your training step runs, like `perfkit.data.Prefetcher` does on a CPU;
# 2. `hidden_fraction`: how much of the shorter of the two phases (load, compute) the
#    prefetcher hid, from measured times.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab05_data_loading.ipynb
# ```
#
# The grader checks that your prefetcher keeps the order, hands the source's exceptions to
# the consumer, leaves no thread running after the loop ends (also after a `break`), and
# overlaps loading with compute on a source whose load and compute times are known (both
# `time.sleep`, so the check does not depend on how busy the machine is). Do not rename
# the class, the function or their arguments.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import queue  # noqa: F401 (your ThreadPrefetcher needs it)
import threading
import time
import traceback

from perfkit.data import Delayed, Prefetcher
from perfkit.timing import interleaved

STEPS = 8 if QUICK else 20      # steps per timed loop
LOAD_S = COMPUTE_S = 0.02       # s: a known load (sleep, like I/O) and a known step


# %% [markdown]
# ## Q1 · `ThreadPrefetcher(source, depth=2)`
#
# ```python
# for batch in ThreadPrefetcher(loader, depth=2):   # batch i+1, i+2 load during step i
#     train_step(batch)
# ```
#
# * `__init__` stores the source and checks `depth` (an int >= 1, else `ValueError`).
# * `__iter__` is a **generator**: it starts a thread that pulls items from `source` into a
#   `queue.Queue(maxsize=depth)` (bounded: the thread is at most `depth` batches ahead, so
#   memory stays bounded), then yields the items **in order** until the source is exhausted.
#   Each call to `iter()` starts a new pass with its own thread and queue.
# * If the source raises, the consumer must get **that exception** (re-raise the original
#   object, so its traceback still shows where the source failed) after the items before it.
# * When the loop ends, for any reason (the source is exhausted, it raised, or the consumer
#   `break`s out, which closes the generator), the thread must stop and be joined. A thread
#   blocked in `put` on a full queue would wait forever: use `put(item, timeout=...)` in a
#   loop that checks a `threading.Event`, and clean up in `try`/`finally`.
#
# Send the thread's results through the queue as tagged tuples, e.g. `("item", x)`,
# `("error", exc)` and `("end", None)`.

# %%
class ThreadPrefetcher:
    def __init__(self, source, depth=2):
        ### BEGIN SOLUTION
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        self.source, self.depth = source, depth
        ### END SOLUTION

    def __iter__(self):
        ### BEGIN SOLUTION
        q = queue.Queue(maxsize=self.depth)
        stop = threading.Event()

        def put(item):
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    pass
            return False  # the consumer left

        def produce():
            try:
                for item in self.source:
                    if not put(("item", item)):
                        return
                put(("end", None))
            except BaseException as exc:  # handed over, raised in the consumer
                put(("error", exc))

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            while True:
                kind, value = q.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:  # exhausted, raised, or closed by a `break` in the consumer
            stop.set()
            thread.join()
        ### END SOLUTION


# %% [markdown]
# Try it: the order, an exception from the source, and an early `break` (the thread count
# should return to what it was).

# %%
print(list(ThreadPrefetcher(range(10), depth=3)))


def flaky_source():
    yield from range(3)
    raise ValueError("record 3 is corrupt")


got = []
try:
    for x in ThreadPrefetcher(flaky_source()):
        got.append(x)
except ValueError as e:
    print(f"got {got}, then {e!r}; the traceback still names the source:",
          "flaky_source" in "".join(traceback.format_exception(e)))

before = threading.active_count()
for x in ThreadPrefetcher(iter(int, 1)):  # an endless source
    if x == 0:
        break
time.sleep(0.2)
print(f"threads before {before}, after the break {threading.active_count()}")


# %% [markdown]
# ## Q2 · `hidden_fraction(serial_s, prefetched_s, load_s, compute_s) -> float`
#
# Serially, a step costs `load + compute`; with perfect overlap it costs `max(load, compute)`,
# so prefetching can save at most `min(load, compute)` per step. Return the share of that
# saving you measured: `(serial_s - prefetched_s) / min(load_s, compute_s)` (all per step, or
# all per loop: the ratio is the same). Raise `ValueError` when `min(load_s, compute_s) <= 0`
# (nothing to hide, so the share is undefined).

# %%
def hidden_fraction(serial_s, prefetched_s, load_s, compute_s):
    ### BEGIN SOLUTION
    if min(load_s, compute_s) <= 0:
        raise ValueError("min(load_s, compute_s) must be > 0: nothing to hide otherwise")
    return (serial_s - prefetched_s) / min(load_s, compute_s)
    ### END SOLUTION


# %% [markdown]
# ## Measure the overlap
#
# A source with a known load (`Delayed` sleeps `LOAD_S` before each batch: I/O, which frees
# the core and the GIL) and a step of known length (a `COMPUTE_S` sleep: a GPU step, during
# which the host is idle). The serial model predicts `LOAD_S + COMPUTE_S` per step, the
# overlap model `max(LOAD_S, COMPUTE_S)`. `perfkit.timing.interleaved` alternates the loops
# so load drift on the machine hits all of them alike.

# %%
def loop(source):
    for _ in source:
        time.sleep(COMPUTE_S)  # the step


src = Delayed(range(STEPS), LOAD_S)
serial, mine, ref = interleaved(
    [lambda: loop(src), lambda: loop(ThreadPrefetcher(src)), lambda: loop(Prefetcher(src))],
    warmup=1, repeat=3, device="cpu")
for name, m in (("serial", serial), ("ThreadPrefetcher", mine), ("perfkit Prefetcher", ref)):
    print(f"{name:>18}: {m.median_s / STEPS * 1e3:5.1f} ms/step")
print(f"model: serial {(LOAD_S + COMPUTE_S) * 1e3:.0f} ms/step, overlapped {max(LOAD_S, COMPUTE_S) * 1e3:.0f} ms/step")
print(f"hidden fraction: yours {hidden_fraction(serial.median_s, mine.median_s, STEPS * LOAD_S, STEPS * COMPUTE_S):.2f}, "
      f"perfkit {hidden_fraction(serial.median_s, ref.median_s, STEPS * LOAD_S, STEPS * COMPUTE_S):.2f}")

# %% [markdown]
# Both should hide most of the load (a fraction near 1). The first step cannot be hidden
# (nothing was loaded before it), so over `STEPS` steps expect at most `(STEPS - 1) / STEPS`.
#
# **To think about.** Replace the sleep in `Delayed` by `kind="spin"` (a load that computes
# in Python and holds the GIL) and the step by a real PyTorch step: why does a thread help
# much less then, and why do `DataLoader` workers use processes instead?
