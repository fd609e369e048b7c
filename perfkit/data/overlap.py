"""Lecture 07's prefetcher experiment: the loops it times, the hidden fraction, and the two
models it is held against.

:func:`prefetch_loops` builds the six loops (a load alone, a step alone, serial and prefetched
loops with a load that sleeps or holds the GIL); :func:`hidden_fraction_estimate` turns their
interleaved rounds into the share of the hideable time a :class:`perfkit.data.Prefetcher` hid.
:func:`overlap_floor` is the two-stage pipeline's least time for a loop of ``n`` steps, and
:func:`overlap_hidden` the hidden fraction it allows; :func:`thread_probe` times a step beside a
busy Python thread, and :func:`gil_least_step` and :func:`gil_hidden_bound` turn that into the
most a load that holds the GIL can hide, assuming the step's average rate beside that thread.

Usage::

    loops = prefetch_loops(loader, step, (x, y), n=28, delay_s=5e-3)
    meas = timing.interleaved(list(loops.values()), repeat=15)
    print(hidden_fraction_estimate({k: m.times_s for k, m in zip(loops, meas)}, "sleep"),
          overlap_hidden(load_s + compute_s, load_s, compute_s, n=28, exhausts=True))
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from perfkit import stats
from perfkit._checks import check_choice, check_int, check_real, check_type
from perfkit.data.datasets import Delayed
from perfkit.data.prefetch import Prefetcher
from perfkit.stats import Estimate

__all__ = ["ThreadProbe", "clip_at_one", "gil_hidden_bound", "gil_least_step", "hidden_fraction",
           "hidden_fraction_estimate", "loader_gil_note", "overlap_floor", "overlap_hidden", "prefetch_loops",
           "spin_held", "spin_load_note", "thread_probe", "thread_share"]


def prefetch_loops(loader: Any, step: Callable[[Any, Any], None], batch: tuple[Any, Any], n: int,
                   delay_s: float, device: torch.device | str | None = None) -> dict[str, Callable[[], None]]:
    """The six loops of the prefetcher experiment, each ``n`` steps long.

    ``"load only"`` and ``"compute only"`` (on ``batch``) time the two parts; ``"serial, K
    load"`` and ``"Prefetcher, K load"`` train on ``loader`` with ``delay_s`` added per batch,
    spent as K = ``sleep`` (I/O: frees the GIL) or ``spin`` (Python work: holds it).

    Raises:
        TypeError, ValueError: for ``n`` < 1, ``delay_s`` not a finite number >= 0, or a
            ``step`` that is not callable.
    """
    check_int("n", n, 1)
    check_real("delay_s", delay_s, 0)
    if not callable(step):
        raise TypeError(f"step must be a callable taking (x, y), got {type(step).__name__}")

    def run(source: Any) -> None:
        it = iter(source)
        for _ in range(n):
            step(*next(it))   # leaving early closes a Prefetcher's thread

    def load_only() -> None:
        it = iter(Delayed(loader, delay_s))
        for _ in range(n):
            next(it)

    def compute_only() -> None:
        for _ in range(n):
            step(*batch)

    loops = {"load only": load_only, "compute only": compute_only}
    for kind in ("sleep", "spin"):
        src = Delayed(loader, delay_s, kind=kind)
        loops[f"serial, {kind} load"] = lambda src=src: run(src)
        loops[f"Prefetcher, {kind} load"] = lambda src=src: run(Prefetcher(src, device=device))
    return loops


def _loop_names(name: str, loops: Any, kind: str) -> list[str]:
    """The keys of ``loops`` (a mapping), refused by ``name`` unless they hold the four that
    the ``kind`` (``"sleep"`` or ``"spin"``) hidden fraction needs."""
    check_choice("kind", kind, ("sleep", "spin"))
    check_type(name, loops, Mapping)
    need = ["load only", "compute only", f"serial, {kind} load", f"Prefetcher, {kind} load"]
    if missing := [k for k in need if k not in loops]:
        raise ValueError(f"{name} must hold the loops {need}, missing {missing}")
    return list(loops)


def hidden_fraction(t: Mapping[str, float], kind: str) -> float:
    """``(serial - prefetched) / (serial - max(load, compute))`` from one set of loop times
    keyed as :func:`prefetch_loops` names them."""
    _loop_names("t", t, kind)
    serial = t[f"serial, {kind} load"]
    return (serial - t[f"Prefetcher, {kind} load"]) / (serial - max(t["load only"], t["compute only"]))


def hidden_fraction_estimate(rounds: Mapping[str, Sequence[float]], kind: str,
                             level: float = stats.LEVEL, n: int | None = None,
                             exhausts: bool = True) -> Estimate:
    """:func:`hidden_fraction` of the loops' median times (``rounds``: loop name -> its times,
    one per round of :func:`perfkit.timing.interleaved`).

    The figure is the one :func:`overlap_hidden` and :func:`gil_hidden_bound` are built in when
    they are given the same medians, so it lies above theirs exactly when the prefetched loop's
    median beats their least time per step. (The median over rounds of each round's fraction is
    another statistic: set beside a figure built from the medians, it can cross it while the
    medians themselves do not.)

    The interval: each loop's median gets its order-statistic interval at ``1 - (1 - level) / 4``
    or more (the text names their least exact coverage), so that all four hold together with
    probability at least ``level`` (Bonferroni: however the rounds' load ties them); the fraction
    spans its values at those intervals' corners (it moves one way with each loop's time). Below
    ``min_samples(1 - (1 - level) / 4)`` rounds (7 at 90 %) it has no interval.
    Given ``n`` (steps per loop) and ``exhausts`` (:func:`overlap_floor`'s), a prefetched loop whose
    interval lies below its floor at the load's and the compute's lower ends is ``beaten``
    (:func:`clip_at_one`): a part ran faster inside the loop than apart, and nothing is clipped.

    Raises:
        TypeError, ValueError: for ``rounds`` without the four loops ``kind`` needs, unequal or
            bad times, a ``kind`` other than ``"sleep"``/``"spin"``, ``level`` outside (0, 1), or
            a serial loop whose median interval reaches its longer part's (no bounded interval).
    """
    _loop_names("rounds", rounds, kind)
    check_real("level", level, 0, 1, lo_open=True, hi_open=True)
    if (steps := n) is not None and check_int("n", steps, 1):
        check_type("exhausts", exhausts, bool)
    keys = (f"serial, {kind} load", f"Prefetcher, {kind} load", "load only", "compute only")
    if len({len(rounds[k]) for k in keys}) > 1:
        raise ValueError(f"rounds must hold one time per round for each loop, got lengths "
                         f"{[len(rounds[k]) for k in keys]}")
    each = 1 - (1 - level) / len(keys)
    med = [stats.median_interval(rounds[k], each) for k in keys]  # serial, prefetched, load, compute

    def frac(s: float, p: float, load: float, compute: float) -> float:
        if s <= max(load, compute):
            raise ValueError(f"the serial loop ({s:.6g}) must take longer than its longer part "
                             f"({max(load, compute):.6g}) for a hidden fraction to be bounded")
        return (s - p) / (s - max(load, compute))

    point, n = frac(*(m.value for m in med)), min(m.n for m in med)
    how = f"fraction of the 4 loops' medians over {n} rounds, each at {min(m.confidence for m in med):.1%}"
    if any(m.needs for m in med):
        return Estimate(point, point, point, level, n, how, needs=stats.min_samples(each))
    corners = [frac(*ends) for ends in itertools.product(*((m.low, m.high) for m in med))]
    lo, hi = min(corners), max(corners)
    if lo == hi:
        return Estimate(point, point, point, level, n, "fraction of the 4 loops' medians: every loop's "
                        "middle rounds tie, every figure within reach equals")
    beaten = steps is not None and med[1].high < overlap_floor(med[2].low / steps, med[3].low / steps, steps,
                                                               exhausts)
    return clip_at_one(Estimate(point, min(lo, point), max(hi, point), level, n, how,
                                coverage=max(level, stats.joint_coverage(med))), beaten=beaten)


def clip_at_one(est: Estimate, beaten: bool = False) -> Estimate:
    """A hidden fraction's interval clipped at 1, the most a prefetcher can hide.

    A fraction above 1 says the prefetched loop beat its longer part timed apart. Where the interval
    still reaches 1, the loops' noise explains that: the figure and the top end are set to 1, and the
    method prints the unclipped figure, its excess over 1 against the width before clipping, and that
    interval's reach below 1. Left as it is: an interval wholly above 1 (the parts ran faster inside
    the loop than apart, or the run was disturbed), a figure with no interval, and, saying so, one
    past 1 with ``beaten`` (the loop beat its floor beyond the noise that floor is built from)."""
    check_type("est", est, Estimate)
    check_type("beaten", beaten, bool)
    if beaten and est.value > 1:
        return replace(est, method=f"{est.method}; not clipped at 1: the prefetched loop's interval lies "
                                   "below its floor at the lower ends of the load's and the compute's, so a "
                                   "part ran faster inside the loop than timed apart")
    if not est.has_interval or est.high <= 1 or est.low > 1:
        return est
    why = (f"clipped at 1, the most a prefetcher can hide: the medians give {est.value:.3g}, above 1 by "
           f"{est.value - 1:.2g}, {(est.value - 1) / (est.high - est.low):.0%} of the interval's width "
           f"before clipping ({est.low:.3g} to {est.high:.3g}), which reaches {1 - est.low:.2g} below 1: "
           "the noise of the four loops covers it" if est.value > 1 else
           f"its top end clipped at 1 from {est.high:.3g}, the most a prefetcher can hide")
    return replace(est, value=min(est.value, 1.0), high=1.0, method=f"{est.method}; {why}")


@dataclass(frozen=True)
class ThreadProbe:
    """A busy Python thread beside a step, each round's figures as medians with intervals.

    ``share``: the thread's progress while the step runs, over its rate with the main thread
    asleep. ``slowdown``: the step's time beside the thread over its time alone (the thread
    paused), the same round.
    """

    share: Estimate
    slowdown: Estimate


def thread_probe(step: Callable[[], None], n: int, repeat: int = 5) -> ThreadProbe:
    """Run ``n`` calls of ``step`` alone, then beside a Python thread that never gives up the
    GIL by itself (a busy loop), ``repeat`` rounds: how far the thread gets, and how much
    longer the step takes.

    The thread runs only while the step is inside code that released the GIL (most PyTorch
    kernels) or while the step waits for the GIL at a switch, and only on a core the step's
    own threads leave it; the step, for its part, waits for the GIL at every return to Python.
    A load that holds the GIL in a prefetch thread meets both: it runs at most ``share`` of the
    time, and the step, on average over its length, does ``1 / slowdown`` of its work in a given
    time (an average: inside one long kernel that released the GIL it runs at full speed).

    Raises:
        TypeError, ValueError: for a ``step`` that is not callable, ``n`` below 1 or
            ``repeat`` below 2.
    """
    if not callable(step):
        raise TypeError(f"step must be a callable taking no argument, got {type(step).__name__}")
    check_int("n", n, 1)
    check_int("repeat", repeat, 2)
    count, stop, run = [0], threading.Event(), threading.Event()

    def spin() -> None:
        while not stop.is_set():
            run.wait()  # paused: blocked, the GIL released
            while run.is_set() and not stop.is_set():
                count[0] += 1

    def timed() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        return time.perf_counter() - t0

    worker = threading.Thread(target=spin, daemon=True)
    worker.start()
    shares, slow, took = [], [], 0.05  # s: the first round's idle window
    try:
        for _ in range(repeat):
            alone = timed()  # the thread paused
            run.set()
            c0, t0 = count[0], time.perf_counter()
            time.sleep(max(took, 0.05))  # the main thread idle: the thread's own rate
            rate = (count[0] - c0) / (time.perf_counter() - t0)
            c0 = count[0]
            took = timed()
            run.clear()
            shares.append((count[0] - c0) / (rate * took))
            slow.append(took / alone)
    finally:
        stop.set()
        run.set()
        worker.join()
    return ThreadProbe(stats.median_interval(shares), stats.median_interval(slow))


def thread_share(step: Callable[[], None], n: int, repeat: int = 5) -> Estimate:
    """:func:`thread_probe`'s ``share`` alone: the most a GIL-holding load in a prefetch
    thread can run beside ``n`` calls of ``step`` (median over ``repeat`` rounds, with its
    order-statistic interval).

    Raises:
        TypeError, ValueError: for a ``step`` that is not callable, ``n`` below 1 or
            ``repeat`` below 2.
    """
    return thread_probe(step, n, repeat).share


def overlap_floor(load_s: float, compute_s: float, n: int, exhausts: bool) -> float:
    """The least time of a loop of ``n`` steps whose loads a prefetch thread overlaps with the
    steps: a two-stage pipeline, in any one unit of time (per step in, per loop out).

    Each pass of a :class:`perfkit.data.Prefetcher` starts its thread with an empty queue, so
    nothing hides the pass's first load, and nothing is left to hide the last step's compute;
    between them each step costs the longer part: ``load + compute + (n - 1) max(load,
    compute)``, that is ``n max + min``. A loop that stops before its source ends (``exhausts``
    false) also waits, when it closes the prefetcher, for the load the thread has begun, so a
    loop whose load is the longer part pays ``n + 1`` loads: then ``load + n max(load,
    compute)``. Every cost is what the loads and steps cost timed apart.

    Raises:
        TypeError, ValueError: for times that are not finite numbers >= 0, ``n`` below 1 or an
            ``exhausts`` that is not a bool.
    """
    for name, v in (("load_s", load_s), ("compute_s", compute_s)):
        check_real(name, v, 0)
    check_int("n", n, 1)
    check_type("exhausts", exhausts, bool)
    longer, shorter = max(load_s, compute_s), min(load_s, compute_s)
    floor = n * longer + shorter
    return floor if exhausts else max(floor, load_s + n * longer)


def overlap_hidden(serial_s: float, load_s: float, compute_s: float, n: int, exhausts: bool) -> float:
    """The hidden fraction (:func:`hidden_fraction`'s scale) of a prefetched loop that runs at
    :func:`overlap_floor`, against a serial loop of ``serial_s`` per step (all times per step).

    With ``serial_s = load_s + compute_s`` it is the model's own figure: ``(n - 1) / n`` for a
    loop that ends its source, ``1 - load / (n min(load, compute))`` (at most that) for one that
    stops early. A serial loop that costs more than its parts raises it: the prefetcher hides
    that excess too.

    Raises:
        TypeError, ValueError: as :func:`overlap_floor`, or a ``serial_s`` not above
            ``max(load_s, compute_s)`` (nothing to hide).
    """
    floor = overlap_floor(load_s, compute_s, n, exhausts) / n
    longer = max(load_s, compute_s)
    if check_real("serial_s", serial_s, 0) <= longer:
        raise ValueError(f"serial_s must exceed max(load_s, compute_s) = {longer}, got {serial_s}")
    return (serial_s - floor) / (serial_s - longer)


def gil_least_step(load_s: float, compute_s: float, slowdown: float, held_s: float) -> float:
    """The least time per step of a loop whose loads a prefetch thread runs while ``held_s`` of
    each is pure Python that holds the GIL throughout (a :func:`perfkit.data.spend` spin: a fixed
    amount of work, so it lasts at least ``held_s``, however little of the GIL it gets; its
    calibration can run short, which :func:`spin_held` takes from a measured spin).

    **The assumption it holds under:** while a spin runs, the step progresses at no more than its
    *average* rate beside :func:`thread_probe`'s busy thread, ``1 / slowdown`` of its rate alone
    (below 1 counts as 1). Then a step takes at least
    ``max(load, compute + held * (1 - 1 / slowdown))``. The rest of the load counts for nothing,
    though a DataLoader without workers runs Python there too (``__getitem__`` per sample and
    collate, holding the GIL; :func:`loader_gil_note`): leaving it out only lowers the figure, so
    it stays a least step, a more generous one; the first load and the last step, which nothing
    hides (:func:`overlap_floor`), would only add to it. The slowdown is an average over whole
    steps, not the slowest rate: a step that spends a spin inside one long kernel that released
    the GIL (a convolution's backward) runs meanwhile at full speed on another core, so a loop
    below this figure says that the step progressed faster during the spins than on average beside
    the probe's thread.

    Raises:
        ValueError: for ``load_s``, ``compute_s`` or ``slowdown`` not > 0, or a ``held_s``
            outside ``[0, load_s]``.
    """
    for name, v in (("load_s", load_s), ("compute_s", compute_s), ("slowdown", slowdown)):
        check_real(name, v, 0, lo_open=True)
    check_real("held_s", held_s, 0, load_s)
    return max(load_s, compute_s + held_s * (1 - 1 / max(1.0, slowdown)))


def loader_gil_note(load_ms: float, planted_ms: float) -> str:
    """A clause on a load-only loop's time per batch, ``load_ms``, beyond the ``planted_ms`` delay
    added to each batch: the DataLoader's own work (without workers, Python ``__getitem__`` per
    sample and collate, run in whichever thread iterates the loader and holding the GIL
    meanwhile) and the delay's overshoot, both in ms.

    Raises:
        ValueError: for ``load_ms`` not > 0 or ``planted_ms`` < 0.
    """
    check_real("load_ms", load_ms, 0, lo_open=True)
    check_real("planted_ms", planted_ms, 0)
    extra = load_ms - planted_ms
    if extra <= 0:
        return (f" (no more than the planted {planted_ms:.2f} ms: the DataLoader's own work is lost in the "
                "noise of this timing)")
    return (f" ({extra:.2f} ms of it, {extra / load_ms:.0%}, beyond the planted {planted_ms:.2f} ms: the "
            "DataLoader's own work, Python __getitem__ per sample and collate in the thread that iterates "
            "it, holding the GIL for nearly all of it, and the planted delay's overshoot, longer on a busy "
            "machine)")


def spin_held(planted_s: float, load_s: float, share: float) -> float:
    """The time a :func:`perfkit.data.spend` spin planted at ``planted_s`` is taken to hold the GIL,
    :func:`gil_least_step`'s ``held_s``: ``planted_s * min(1, share)``, at most ``load_s``.

    ``share`` is a spin's measured time over its planted time in an earlier run. A spin is a fixed
    number of loop turns, calibrated to ``planted_s`` by the best of a few short loops, so it can
    run faster than planted (taking the planted time would then overstate what it holds); a share
    above 1 (a spin slowed by sharing its core) is not carried over, since it need not recur.

    Raises:
        ValueError: for ``planted_s`` or ``load_s`` not a finite number >= 0, or a ``share``
            that is not > 0.
    """
    check_real("planted_s", planted_s, 0)
    check_real("load_s", load_s, 0)
    check_real("share", share, 0, lo_open=True)
    return min(planted_s * min(1.0, share), load_s)


def spin_load_note(t: Mapping[str, float], short: float) -> str:
    """A clause on the spin load's :func:`hidden_fraction`, which ``t`` (the loops' times per step)
    computes with ``t["load only"]``, a loop of the *sleep* load (:func:`prefetch_loops` times no
    spin load alone): the fraction again with a spin load ``short`` less (its spin, measured
    elsewhere, ran that much short of the planted sleep), and which way the printed one errs.

    Raises:
        TypeError, ValueError: for ``t`` without the four ``"spin"`` loops, or ``short`` not a
            finite number >= 0.
    """
    _loop_names("t", t, "spin")
    check_real("short", short, 0)
    lo, was = t["load only"], hidden_fraction(t, "spin")
    head = f"; it divides by the sleep load's load-only time, {lo:.2f} ms (no spin load alone is timed)"
    if short <= 0:
        return head + ", the spin taken to last its planted time"
    alt = hidden_fraction({**t, "load only": lo - short}, "spin")
    way = "low" if alt > was else "high"
    return (head + f": with a spin load {short:.2f} ms shorter, as the spin's measured share puts it, it "
            f"would be {alt:.3f}, so the printed figure errs {way} by {abs(alt - was):.3f}")


def gil_hidden_bound(serial_s: float, load_s: float, compute_s: float, slowdown: float,
                     held_s: float) -> float:
    """:func:`gil_least_step` as a hidden fraction (:func:`hidden_fraction`'s scale):
    ``(serial - least step) / (serial - max(load, compute))``, all times per step; the most a
    prefetch thread can hide of a load that holds the GIL for ``held_s``, under
    :func:`gil_least_step`'s assumption (the step's rate during a spin is at most its average
    rate beside the probe's thread). Given the loops' medians, it is on the scale of
    :func:`hidden_fraction_estimate`, and the fraction crosses it exactly when the prefetched
    loop's median beats the least step.

    Raises:
        ValueError: for times that are not > 0 (``held_s``: >= 0, at most ``load_s``), a
            ``serial_s`` not above ``max(load, compute)``, or a ``slowdown`` that is not > 0.
    """
    check_real("serial_s", serial_s, 0, lo_open=True)
    fastest = gil_least_step(load_s, compute_s, slowdown, held_s)
    longer = max(load_s, compute_s)
    if serial_s <= longer:
        raise ValueError(f"serial_s must exceed max(load_s, compute_s) = {longer}, got {serial_s}")
    return (serial_s - fastest) / (serial_s - longer)
