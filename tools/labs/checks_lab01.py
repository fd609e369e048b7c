"""Checks for lab 01 (a phase timer, the bottleneck rule, Amdahl's speedup).

Exact checks use a fake clock; measured checks use synthetic steps whose phases sleep for
known durations. Sleeping never ends early and, on a busy machine, ends late by far less than
a busy-wait does (the scheduler wakes a sleeper promptly but preempts a spinning loop for
whole time slices; measured here under load: 12.2 ms median for a 12 ms sleep, 16 ms for a
12 ms busy-wait). Measured shares get a tolerance of 0.08 (8 percentage points; 0.04
between two timers of the same run), speedups 15 %, and the perfkit-side measurements use
medians, which ignore the occasional stall. Used by `make grade` and tests/labs/.
"""

from __future__ import annotations

import math
import time

from tools.grade import require

SHARE_TOL = 0.08  # absolute, on shares in [0, 1]
SPEEDUP_TOL = 0.15  # relative


class FakeClock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


def work(ms: float) -> None:
    """A phase of known duration."""
    time.sleep(ms / 1e3)


def run_steps(timer, durations_ms: dict, other_ms: float, steps: int, monitor=None) -> None:
    for _ in range(steps):
        for name, ms in durations_ms.items():
            if monitor is None:
                with timer.phase(name):
                    work(ms)
            else:
                with timer.phase(name), monitor.phase(name):
                    work(ms)
        work(other_ms)
        timer.step()
        if monitor is not None:
            monitor.step()


def median_shares(summary) -> dict:
    """Phase -> median phase time over median step time (robust to a stalled step)."""
    return {k: p.p50_s / summary.step.p50_s for k, p in summary.phases.items()}


def check_phase_timer(ns: dict) -> None:
    PhaseTimer = require(ns, "PhaseTimer")
    # 1. exact arithmetic on a fake clock
    clock = FakeClock()
    t = PhaseTimer(clock=clock)
    try:
        t.shares()
    except RuntimeError:
        pass
    else:
        raise AssertionError("shares() before any step() must raise RuntimeError")
    for d_data, d_fwd in ((2.0, 3.0), (4.0, 3.0)):
        with t.phase("data"):
            clock.advance(d_data)
        with t.phase("forward"):
            clock.advance(d_fwd)
        with t.phase("forward"):  # a second forward in the same step: summed
            clock.advance(1.0)
        clock.advance(2.0)  # outside every phase
        t.step()
    got = t.shares()
    # totals: data 6, forward 3 + 1 + 3 + 1 = 8, steps (2+3+1+2) + (4+3+1+2) = 18, other 4;
    # steps of unequal length, so a mean of per-step shares would give other numbers
    want = {"data": 6 / 18, "forward": 8 / 18, "other": 4 / 18}
    assert isinstance(got, dict) and set(got) == set(want), (
        f"shares() returned keys {sorted(got) if isinstance(got, dict) else got}; expected "
        f"{sorted(want)}: every phase plus 'other'")
    for k, v in want.items():
        assert math.isclose(got[k], v, rel_tol=1e-9), (
            f"on a fake clock, shares()[{k!r}] = {got[k]:.4f}, expected {v:.4f}. Phases run "
            "twice in a step are summed; a step runs from the previous step() (or the first "
            "phase) to this step(); 'other' is the step time outside every phase.")
    # 2. the time between steps belongs to the next step
    clock = FakeClock()
    t = PhaseTimer(clock=clock)
    with t.phase("forward"):
        clock.advance(1.0)
    t.step()
    clock.advance(3.0)  # e.g. logging after step(): part of the second step
    with t.phase("forward"):
        clock.advance(1.0)
    t.step()
    got = t.shares()
    assert math.isclose(got["forward"], 2 / 5, rel_tol=1e-9), (
        f"forward 1 s in each of two steps, with 3 s of untimed work between them: the steps "
        f"total 5 s, so forward's share is 0.4; got {got['forward']:.4f}. Does step() start "
        "the next step at the moment it is called?")
    # 3. a phase whose body raises is still recorded
    clock = FakeClock()
    t = PhaseTimer(clock=clock)
    try:
        with t.phase("data"):
            clock.advance(1.0)
            raise KeyError("boom")
    except KeyError:
        pass
    t.step()
    assert math.isclose(t.shares().get("data", 0.0), 1.0, rel_tol=1e-9), (
        "a phase whose body raised was not recorded: use try/finally in phase()")
    # 4. real synthetic steps, against perfkit's StepMonitor on the same run
    from perfkit.profiling import StepMonitor

    durations = {"data": 12, "forward": 6, "backward": 12, "optimizer": 3}
    timer, mon = PhaseTimer(), StepMonitor(device="cpu")
    run_steps(timer, durations, other_ms=3, steps=5, monitor=mon)
    got, ref = timer.shares(), mon.summary().shares()
    for k, ms in {**durations, "other": 3}.items():
        assert abs(got[k] - ms / 36) <= SHARE_TOL, (
            f"synthetic steps: {k} sleeps {ms} ms of 36 ms ({ms / 36:.1%}); you measured "
            f"{got[k]:.1%} (tolerance {SHARE_TOL:.0%}). Are you reading self.clock() at the "
            "start and end of each phase?")
        assert abs(got[k] - ref[k]) <= SHARE_TOL / 2, (
            f"on the same steps, your {k} share {got[k]:.1%} differs from StepMonitor's "
            f"{ref[k]:.1%} by more than {SHARE_TOL / 2:.0%}")


def check_find_bottlenecks(ns: dict) -> None:
    find = require(ns, "find_bottlenecks")
    th = {"data": 0.10, "communication": 0.10, "optimizer": 0.25, "other": 0.15}
    cases = [
        ({"data": 0.05, "forward": 0.40, "backward": 0.45, "other": 0.10}, []),
        ({"data": 0.30, "forward": 0.30, "backward": 0.30, "other": 0.10}, ["data"]),
        ({"data": 0.10, "forward": 0.45, "backward": 0.45}, []),  # equal is not above
        ({"data": 0.12, "communication": 0.35, "forward": 0.3, "other": 0.23},
         ["communication", "other", "data"]),  # ratios 3.5, 1.53, 1.2
        ({"data": 0.21, "optimizer": 0.5, "forward": 0.29}, ["data", "optimizer"]),  # 2.1, 2.0
        ({"allreduce": 0.9, "forward": 0.1}, []),  # no threshold: not judged
        ({"optimizer": 0.20, "other": 0.12, "forward": 0.68}, []),  # above 10 %, below their own
    ]
    for shares, want in cases:
        got = find(dict(shares), dict(th))
        assert list(got) == want, (
            f"find_bottlenecks({shares}, thresholds) returned {got}, expected {want}: phases "
            "strictly above their threshold, ordered by share / threshold (largest first); "
            "phases without a threshold are not judged")
    # measured: synthetic steps with a planted bottleneck, timed with perfkit's monitor
    from perfkit.profiling import StepMonitor

    for planted, durations, other, want in (
        ("data", {"data": 20, "forward": 8, "backward": 8}, 1, ["data"]),
        ("communication", {"forward": 8, "backward": 8, "communication": 15}, 1,
         ["communication"]),
        (None, {"data": 1, "forward": 12, "backward": 16, "optimizer": 2}, 1, []),
    ):
        mon = StepMonitor(device="cpu")
        run_steps(mon, durations, other_ms=other, steps=4)
        shares = median_shares(mon.summary())
        got = find(shares, dict(th))
        assert list(got) == want, (
            f"synthetic steps with {planted or 'no'} bottleneck ({durations} ms, {other} ms "
            f"outside): measured shares {({k: round(v, 3) for k, v in shares.items()})} gave "
            f"{got}, expected {want}")


def check_amdahl_speedup(ns: dict) -> None:
    f = require(ns, "amdahl_speedup")
    shares = {"data": 0.5, "forward": 0.3, "other": 0.2}
    for phase, factor, want in (("data", 2.0, 1 / 0.75), ("data", float("inf"), 2.0),
                                ("forward", 3.0, 1 / 0.8), ("data", 1.0, 1.0),
                                ("other", 0.5, 1 / 1.2)):
        got = f(dict(shares), phase, factor)
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"amdahl_speedup(shares, {phase!r}, {factor}) = {got}, expected {want:.6g} = "
            "1 / (1 - s + s / factor)")
    for bad in ((shares, "data", 0.0), (shares, "data", -2.0), (shares, "attention", 2.0)):
        try:
            f(*bad)
        except ValueError:
            continue
        except Exception as e:  # noqa: BLE001 - any other error is the student's bug
            raise AssertionError(f"amdahl_speedup{bad[1:]} raised {type(e).__name__}; it must "
                                 "raise ValueError (factor <= 0 or a phase not in shares)") from e
        raise AssertionError(f"amdahl_speedup{bad[1:]} must raise ValueError (factor <= 0 or "
                             "a phase not in shares)")
    # measured: shrink a 12 ms data phase of a 36 ms step to 4 ms (3x faster)
    from perfkit.profiling import StepMonitor
    from perfkit.timing import interleaved

    durations = {"data": 12, "forward": 6, "backward": 12, "optimizer": 3}
    mon = StepMonitor(device="cpu")
    run_steps(mon, durations, other_ms=3, steps=5)
    predicted = f(median_shares(mon.summary()), "data", 3.0)
    slow, fast = interleaved([lambda: run_steps(_NoTimer(), durations, 3, 1),
                              lambda: run_steps(_NoTimer(), {**durations, "data": 4}, 3, 1)],
                             warmup=1, repeat=5, device="cpu")
    measured = slow.median_s / fast.median_s
    assert abs(predicted / measured - 1) <= SPEEDUP_TOL, (
        f"data 12 -> 4 ms in a 36 ms step: predicted {predicted:.2f}x from the measured "
        f"shares, measured {measured:.2f}x (tolerance {SPEEDUP_TOL:.0%})")


class _NoTimer:
    """Phases that time nothing: for steps timed from outside."""

    def phase(self, name):
        import contextlib

        return contextlib.nullcontext()

    def step(self):
        pass


QUESTIONS = {
    "q1_phase_timer": check_phase_timer,
    "q2_find_bottlenecks": check_find_bottlenecks,
    "q3_amdahl_speedup": check_amdahl_speedup,
}
# q2 and q3 are arithmetic on a few dicts (milliseconds): an answer that loops fails fast
TIMEOUT_S = {"q1_phase_timer": 30, "q2_find_bottlenecks": 10, "q3_amdahl_speedup": 10}
