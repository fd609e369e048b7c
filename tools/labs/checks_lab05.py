"""Checks for lab 05 (a thread prefetcher and the hidden fraction of the load).

Order, exceptions and threads are checked exactly. The overlap check uses a source whose
load and a step whose compute are both ``time.sleep`` calls of known length (the host is
idle during both, so the result does not depend on how many cores other jobs take); a
sleep never ends early but can end late on a busy machine, so the check asks for only
half of the possible saving (a correct prefetcher reaches about (steps - 1) / steps) and
keeps the best of three tries. Threads get 3 s to end after a loop. Used by `make grade`
and tests/labs/.
"""

from __future__ import annotations

import math
import threading
import time
import traceback

from tools.grade import require, time_limit

THREAD_GRACE_S = 3.0
MIN_HIDDEN = 0.5  # of the ideal ~(STEPS - 1) / STEPS
STEPS, LOAD_S, COMPUTE_S = 8, 0.03, 0.03


def new_threads_alive(before: set, grace_s: float = THREAD_GRACE_S) -> list:
    """Threads started since ``before`` that are still alive after ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def _probe(TP) -> None:
    """One tiny loop under a short limit: an answer that never returns fails in seconds,
    not after the question's whole timeout."""
    with time_limit(10, "list(ThreadPrefetcher([1, 2, 3])) did not return within 10 s: does "
                    "the consumer stop at the end marker, and does the thread put one?"):
        list(TP([1, 2, 3]))


def check_order(ns: dict) -> None:
    TP = require(ns, "ThreadPrefetcher")
    _probe(TP)
    got = list(TP(range(300), depth=3))
    assert got == list(range(300)), (
        f"list(ThreadPrefetcher(range(300), depth=3)) gave {got[:10]}... ({len(got)} items): "
        "items must come out once each, in the source's order")
    batches = [{"x": [i, i + 1], "i": i} for i in range(20)] + [(1, "a"), None]
    out = list(TP(batches, depth=1))
    assert len(out) == len(batches) and all(a is b for a, b in zip(out, batches)), (
        "the prefetcher must hand over each batch object unchanged (dicts, tuples, None), "
        "with depth=1 too")
    assert list(TP([], depth=2)) == [], "an empty source must give an empty loop"
    pf = TP([1, 2, 3])
    again = ("iterating the same ThreadPrefetcher twice must give the items twice: each iter() "
             "starts a new pass with its own thread and queue")
    with time_limit(10, f"the second pass over the same ThreadPrefetcher never ended; {again}"):
        passes = list(pf), list(pf)
    assert passes == ([1, 2, 3], [1, 2, 3]), f"{again} (got {passes})"
    # the bound the queue promises: with a consumer that stops after one item, the thread
    # runs at most `depth` items ahead (plus the one it holds while the queue is full)
    for depth in (1, 3):
        produced = []

        def counted(produced=produced):
            for i in range(1000):
                produced.append(i)
                yield i

        it = iter(TP(counted(), depth=depth))
        next(it)
        time.sleep(0.3)  # the thread fills the queue meanwhile
        ahead = len(produced) - 1
        it.close()
        assert ahead <= depth + 1, (
            f"with depth={depth}, the thread produced {ahead} items ahead of a consumer that took "
            f"one; a queue of maxsize depth keeps it at most {depth} (+1 it holds) ahead. Is the "
            "queue bounded (queue.Queue(maxsize=depth))?")
    for bad in (0, -1):
        try:
            TP([1], depth=bad)
        except ValueError:
            continue
        raise AssertionError(f"ThreadPrefetcher(source, depth={bad}) must raise ValueError")


def _flaky_source(n_good: int, error: BaseException):
    yield from range(n_good)
    raise error


def check_exceptions(ns: dict) -> None:
    TP = require(ns, "ThreadPrefetcher")
    _probe(TP)
    before = set(threading.enumerate())
    for n_good in (0, 3):
        got, caught, error = [], None, KeyError("record is corrupt")
        try:
            for x in TP(_flaky_source(n_good, error), depth=2):
                got.append(x)
        except KeyError as e:
            caught = e
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001 - another type is the student's bug
            raise AssertionError(
                f"the source raised KeyError but the consumer got {type(e).__name__}: {e}. "
                "Re-raise the source's own exception object in the consumer") from e
        assert caught is not None, (
            f"the source raised KeyError after {n_good} items, but the loop ended without "
            f"an error (got {got}): put the exception in the queue and raise it in __iter__")
        assert got == list(range(n_good)), (
            f"the consumer must get the {n_good} items produced before the error, got {got}")
        assert caught is error, (
            "the consumer got a KeyError, but not the one the source raised: raise the "
            "original exception object (`raise exc`), not a copy, so its traceback and "
            "attributes survive")
        tb = "".join(traceback.format_exception(type(caught), caught, caught.__traceback__))
        assert "_flaky_source" in tb, (
            "the traceback the consumer sees must still show the source's frame: raise the "
            "original exception object (`raise exc`), not a new one")
    alive = new_threads_alive(before)
    assert not alive, (f"{len(alive)} thread(s) still running after the source raised: join "
                       "the thread in a finally block")


def check_no_leaked_threads(ns: dict) -> None:
    TP = require(ns, "ThreadPrefetcher")
    _probe(TP)

    def consume(depth: int, stop_at: int) -> None:
        it = iter(TP(iter(int, 1), depth=depth))  # endless zeros
        for taken, _ in enumerate(it, 1):
            if taken == stop_at:
                break
        # A break closes the generator, which runs its finally block. Close it from another
        # thread: a finally that joins a thread blocked forever would hang the grader, and an
        # alarm raised while the loop drops its generator is swallowed by Python.
        closer = threading.Thread(target=it.close, daemon=True)
        closer.start()
        closer.join(THREAD_GRACE_S)
        assert not closer.is_alive(), (
            f"after breaking out of the loop (depth={depth}, after {stop_at} items) over an "
            f"endless source, closing the loop did not return within {THREAD_GRACE_S:g} s and "
            "its thread is still running: the finally block waits for a thread that never ends. "
            "Is the thread blocked in put() on a full queue (use put(item, timeout=...) and "
            "check the stop event)?")

    before = set(threading.enumerate())
    list(TP(range(50)))
    alive = new_threads_alive(before)
    assert not alive, f"{len(alive)} thread(s) still running after a complete loop"
    for depth, stop_at in ((2, 1), (1, 5), (4, 3)):
        consume(depth, stop_at)
        alive = new_threads_alive(before)
        assert not alive, (
            f"after breaking out of the loop (depth={depth}, after {stop_at} items) over an "
            f"endless source, {len(alive)} thread(s) were still running {THREAD_GRACE_S:g} s "
            "later. A break closes the generator, which runs its finally block: set a stop "
            "event there and join the thread. Is the thread blocked in put() on a full queue "
            "(use put(item, timeout=...) and check the event)?")


def check_overlap(ns: dict) -> None:
    TP = require(ns, "ThreadPrefetcher")
    _probe(TP)

    def source():
        for i in range(STEPS):
            time.sleep(LOAD_S)  # known load: I/O
            yield i

    best = -math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        got = []
        for x in TP(source(), depth=2):
            got.append(x)
            time.sleep(COMPUTE_S)  # known compute: a GPU step
        elapsed = time.perf_counter() - t0
        assert got == list(range(STEPS)), f"the timed loop got {got}, not the {STEPS} items"
        serial = STEPS * (LOAD_S + COMPUTE_S)
        best = max(best, (serial - elapsed) / (STEPS * min(LOAD_S, COMPUTE_S)))
        if best >= MIN_HIDDEN:
            return
    raise AssertionError(
        f"{STEPS} steps of {LOAD_S * 1e3:.0f} ms load + {COMPUTE_S * 1e3:.0f} ms compute take "
        f"{serial * 1e3:.0f} ms serially and about {(LOAD_S + STEPS * COMPUTE_S) * 1e3:.0f} ms "
        f"when loading overlaps compute; your prefetcher hid only {best:.0%} of the load "
        f"(at least {MIN_HIDDEN:.0%} needed). Does the thread load ahead while the consumer "
        "computes, or does the consumer wait for each item to be loaded on demand?")


def check_hidden_fraction(ns: dict) -> None:
    f = require(ns, "hidden_fraction")
    for args, want in (((0.040, 0.020, 0.020, 0.020), 1.0), ((0.040, 0.030, 0.020, 0.020), 0.5),
                       ((0.050, 0.040, 0.010, 0.040), 1.0), ((4.0, 4.5, 1.0, 3.0), -0.5),
                       ((12.0, 9.0, 5.0, 6.0), 0.6)):
        got = f(*args)
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"hidden_fraction{args} = {got}, expected {want}: "
            "(serial - prefetched) / min(load, compute)")
    for bad in ((1.0, 0.5, 0.0, 1.0), (1.0, 0.5, 1.0, -1.0)):
        try:
            f(*bad)
        except ValueError:
            continue
        except NotImplementedError:
            raise
        except Exception as e:  # noqa: BLE001
            raise AssertionError(f"hidden_fraction{bad} raised {type(e).__name__}; it must "
                                 "raise ValueError when min(load, compute) <= 0") from e
        raise AssertionError(f"hidden_fraction{bad} must raise ValueError "
                             "(min(load, compute) <= 0)")


QUESTIONS = {
    "q1_order": check_order,
    "q1_exceptions": check_exceptions,
    "q1_no_leaked_threads": check_no_leaked_threads,
    "q1_overlap": check_overlap,
    "q2_hidden_fraction": check_hidden_fraction,
}
TIMEOUT_S = {"q1_order": 30, "q1_exceptions": 30, "q1_no_leaked_threads": 40,
             "q1_overlap": 30, "q2_hidden_fraction": 10}
