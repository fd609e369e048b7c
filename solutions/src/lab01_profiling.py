# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 01 · A phase timer and the bottleneck rule
#
# Graded lab for module 01. You will write
#
# 1. `PhaseTimer`: times named phases inside training steps and reports each phase's share of
#    the step (a small `perfkit.profiling.StepMonitor`);
# 2. `find_bottlenecks`: the analyzer's rule: which phases exceed their thresholds, worst first;
# 3. `amdahl_speedup`: the whole-step speedup to expect from making one phase faster.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab01_profiling.ipynb
# ```
#
# The grader runs every cell, then checks each answer on **synthetic steps with known phase
# durations** (sleeps of a few milliseconds) and on a fake clock. Do not rename the
# functions or change their arguments.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import contextlib
import time

from perfkit.profiling import StepMonitor, Thresholds, diagnose_shares

STEPS = 4 if QUICK else 10


def work(ms):
    """A phase of known duration. Sleeping is more precise than a busy-wait on a busy
    machine: the scheduler wakes a sleeper promptly but preempts a spinning loop."""
    time.sleep(ms / 1e3)


# %% [markdown]
# ## Q1 · `PhaseTimer(clock=time.perf_counter)`
#
# A timer for the phases of a training loop:
#
# ```python
# timer = PhaseTimer()
# for batch in loader:
#     with timer.phase("data"):
#         ...
#     with timer.phase("forward"):
#         ...
#     timer.step()                    # the step ends here
# timer.shares()   # {"data": 0.2, "forward": 0.7, "other": 0.1}
# ```
#
# * Read time only through `self.clock()` (the grader passes a fake clock).
# * `phase(name)` is a context manager; a phase run twice in one step counts twice (summed).
# * A step runs from the previous `step()` call to this one; the first step starts when its
#   first phase starts.
# * `shares()` returns each phase's **total time over all steps divided by the total step
#   time**, plus `"other"`: the rest of the step time, outside every phase. The shares sum to 1.
#   Before any `step()` it raises `RuntimeError`.
#
# `contextlib.contextmanager` makes a context manager from a generator; use `try`/`finally`
# so the phase is recorded even if its body raises.

# %%
class PhaseTimer:
    def __init__(self, clock=time.perf_counter):
        ### BEGIN SOLUTION
        self.clock = clock
        self.phase_s = {}        # phase -> seconds, summed over all steps
        self.step_s = 0.0        # seconds of all ended steps
        self._step_start = None  # when the current step started
        ### END SOLUTION

    @contextlib.contextmanager
    def phase(self, name):
        ### BEGIN SOLUTION
        start = self.clock()
        if self._step_start is None:
            self._step_start = start
        try:
            yield
        finally:
            self.phase_s[name] = self.phase_s.get(name, 0.0) + self.clock() - start
        ### END SOLUTION

    def step(self):
        ### BEGIN SOLUTION
        now = self.clock()
        if self._step_start is not None:
            self.step_s += now - self._step_start
        self._step_start = now
        ### END SOLUTION

    def shares(self):
        ### BEGIN SOLUTION
        if self.step_s <= 0:
            raise RuntimeError("shares() before any step ended: call step() first")
        out = {k: v / self.step_s for k, v in self.phase_s.items()}
        out["other"] = max(0.0, 1.0 - sum(out.values()))
        return out
        ### END SOLUTION


# %% [markdown]
# Try it on synthetic steps whose phases last a known time (data 12 ms, forward 6 ms,
# backward 12 ms, optimizer 3 ms, then 3 ms outside any phase), timed by your `PhaseTimer` and
# by perfkit's `StepMonitor` at once. Both should report about the same shares, close to the
# durations over their 36 ms sum.

# %%
DURATIONS_MS = {"data": 12, "forward": 6, "backward": 12, "optimizer": 3}
timer, mon = PhaseTimer(), StepMonitor(device="cpu")
for _ in range(STEPS):
    for name, ms in DURATIONS_MS.items():
        with timer.phase(name), mon.phase(name):
            work(ms)
    work(3)  # outside every phase: "other"
    timer.step()
    mon.step()
mine, ref = timer.shares(), mon.summary().shares()
for k in mine:
    expected = DURATIONS_MS.get(k, 3) / 36
    print(f"{k:>10}: yours {mine[k]:6.1%}  StepMonitor {ref[k]:6.1%}  expected {expected:6.1%}")


# %% [markdown]
# ## Q2 · `find_bottlenecks(shares, thresholds) -> list[str]`
#
# The analyzer's rule. Given `shares` (phase -> share of the step, as `shares()` returns) and
# `thresholds` (phase -> largest acceptable share), return the phases whose share is
# **strictly above** their threshold, **worst first**: ordered by share / threshold, largest
# first. Phases without a threshold are not judged; thresholds for phases that did not run
# are ignored. (`perfkit.profiling.diagnose_shares` crosses the same thresholds but ranks its
# findings by share alone: the most removing each phase can gain.)

# %%
def find_bottlenecks(shares, thresholds):
    ### BEGIN SOLUTION
    over = [k for k, limit in thresholds.items() if shares.get(k, 0.0) > limit]
    return sorted(over, key=lambda k: shares[k] / thresholds[k], reverse=True)
    ### END SOLUTION


# %%
THRESHOLDS = {"data": 0.10, "communication": 0.10, "optimizer": 0.25, "other": 0.15}
print("measured step above:", find_bottlenecks(mine, THRESHOLDS))
print("diagnose_shares:    ", [f.kind for f in diagnose_shares(mine, Thresholds()) if f.severity != "info"])


# %% [markdown]
# ## Q3 · `amdahl_speedup(shares, phase, factor) -> float`
#
# If `phase` takes share `s` of the step and becomes `factor` times faster while everything
# else stays the same, the new step takes `1 - s + s / factor` of the old one (Amdahl's law),
# so the whole step gets `1 / (1 - s + s / factor)` times faster. `factor` may be
# `float("inf")` (the phase disappears). Raise `ValueError` for `factor <= 0` or a `phase`
# that is not in `shares`.

# %%
def amdahl_speedup(shares, phase, factor):
    ### BEGIN SOLUTION
    if phase not in shares:
        raise ValueError(f"phase {phase!r} is not in shares {sorted(shares)}")
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    s = shares[phase]
    return 1.0 / (1.0 - s + s / factor)
    ### END SOLUTION


# %% [markdown]
# Check the prediction: make the data phase of the synthetic step 3x faster (12 ms -> 4 ms)
# and measure both versions with `perfkit.timing.interleaved` (slow, fast, slow, fast, ...:
# load drift on a shared machine hits both alike), comparing medians.

# %%
from perfkit.timing import interleaved


def synthetic_step(data_ms):
    for ms in (data_ms, 6, 12, 3, 3):  # data, forward, backward, optimizer, other
        work(ms)


predicted = amdahl_speedup(mine, "data", 3.0)
slow, fast = interleaved([lambda: synthetic_step(12), lambda: synthetic_step(4)],
                         warmup=1, repeat=2 * STEPS, device="cpu")
print(f"predicted {predicted:.2f}x, measured {slow.median_s / fast.median_s:.2f}x")
