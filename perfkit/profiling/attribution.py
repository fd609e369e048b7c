"""Where each microsecond of a recorded step went: one exclusive label per instant.

:func:`attribute_trace` reads the Chrome trace that
:class:`~perfkit.profiling.recorder.StepRecorder` writes and labels every instant of every
``ProfilerStep#N`` window on the main thread with exactly one category, the first that
covers it in this order:

1. ``data``: inside a DataLoader ``__next__`` (``phase:data``) or waiting for a
   :class:`perfkit.data.Prefetcher`'s next batch;
2. ``sync``: a host-device synchronisation (``aten::_local_scalar_dense`` under
   ``.item()``/``print``, ``cuda*Synchronize``, a blocking device-to-host copy), and the
   time between two of them with almost no operator in between (a host loop of reads):
   a wait for a collective there counts too (with ``find_unused_parameters=True`` DDP
   waits for each bucket's all-reduce, then reads one value per parameter in it), so
   ``sync_comm_s`` is the part with a collective in flight, ``sync_read_s`` the reads' own;
3. ``communication``: a collective running (gloo threads, NCCL kernels) while the
   main thread runs no operator: the *exposed* part; the rest is *overlapped*; and the
   main thread's own communication operators (``c10d::`` launches, DDP's reducer copying
   gradients into and out of its buckets: work that only communication causes);
4. ``optimizer``, ``backward``, ``forward``: the ``phase:`` markers;
5. ``other``: the rest (zero_grad, logging, the script's own Python).

:func:`perfkit.profiling.trace_breakdown` sums nested, user-named phases (a phase inside
another counts in both); here the categories must not overlap (an all-reduce waited for
inside ``backward`` is communication, not backward), so the shares add up to one. Both read
the file through :func:`perfkit.profiling.trace_events`. ``host_gap`` is the part of the
step during which the main thread ran no operator and waited for no data, sync or
collective: the per-step Python and dispatch overhead, spread over the other categories.

Loading that another thread of the process does (a ``Prefetcher``'s thread, a DataLoader
iterated off the main thread) is no main-thread category: ``data_offload_s`` is its time
while the main thread did not wait for data. Whether it was hidden or slowed the step is
the diagnosis' question (:func:`~perfkit.profiling.diagnose_shares`, with the load).

Overlap is not free on a CPU. Gloo runs a collective on its own threads, on the cores the
step's operators need: an operator that runs while a collective is in flight can take
longer than the same operator (same name, same input shapes) without one. That excess is
the collective's cost paid inside ``backward`` (``comm_contention_s``), and is moved from
the operator's category to ``communication``: the slowdown is measured per operator
signature as the ratio of the median durations of the instances that started with and
without a collective in flight (by their start, not by overlap, since a longer instance
overlaps more by chance), from :data:`MIN_SAMPLES` of each. Without that comparison a
loaded machine, which stretches every operator, hides a communication-bound step under
its own backward (the operators then cover the collectives).

Usage::

    att = attribute_trace("build/diagnose/trace.rank0.json")
    print(att.shares(), att.syncs_per_step, att.comm_overlapped_s)
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from perfkit.profiling.profiler import PHASE_PREFIX, trace_events

__all__ = ["CATEGORIES", "TraceAttribution", "attribute_trace"]

CATEGORIES = ("data", "sync", "communication", "optimizer", "backward", "forward", "other")
SYNC_OPS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize",
            "cudaEventSynchronize")
# Two syncs with less than this much operator time between them are one host loop (the
# per-element loop of examples/diagnose/sync_bound.py: a median 4 us apart, 2 cheap
# aten::select in between; two unrelated .item() calls have a forward pass between them)
SYNC_LOOP_GAP_US = 250.0
# instances of one operator signature needed with and without a collective in flight to
# judge its slowdown (a window of 8 steps of a DDP backward holds about one a step of each)
MIN_SAMPLES = 3
# the range perfkit.data.Prefetcher opens around the consumer's wait (its WAIT_ANNOTATION;
# named here too, since the profiling wing does not import the data wing)
PREFETCH_WAIT = "perfkit.prefetch:wait"
# main-thread operators that are communication's own work: collective launches and DDP's
# bucket copies (torch::distributed::reducer::mul_out, ...ddp.reducer::copy_bucket_to_grad)
_HOST_COMM = ("c10d::", "reducer::")
_COMM_WORDS = ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
               "broadcast", "all_to_all", "alltoall", "nccl", "gloo:")

Interval = tuple[float, float]


def _union(spans: Iterable[Interval]) -> list[Interval]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        elif b > a:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _intersect(x: list[Interval], y: list[Interval]) -> list[Interval]:
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def _minus(x: list[Interval], y: list[Interval]) -> list[Interval]:
    out = []
    for a, b in x:
        for c, d in y:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
            if a >= b:
                break
        if a < b:
            out.append((a, b))
    return out


def _length(x: list[Interval]) -> float:
    return sum(b - a for a, b in x)


@dataclass(frozen=True)
class TraceAttribution:
    """Mean seconds per step of each category, and the counts behind the findings.

    ``category_s`` holds every name of :data:`CATEGORIES`; ``comm_overlapped_s`` is
    collective time hidden under the main thread's operators, and ``comm_contention_s`` the
    part of it those operators were slowed by; ``communication`` holds that part, the
    main thread's own communication operators (``comm_host_s``) and the exposed rest (see
    the module doc); ``host_gap_s`` is main-thread time inside no operator;
    ``ops_per_step`` counts top-level operators outside data loading, syncs and the
    optimizer (the model's forward, backward and the script's own); ``data_offload_s`` is
    data loading on other threads while the main thread did not wait for data;
    ``sync_read_s`` is the part of ``sync`` inside the sync operators themselves, and
    ``sync_comm_s`` the part with a collective in flight (a wait for it between two reads).
    """

    steps: int
    step_mean_s: float
    category_s: dict[str, float]
    comm_overlapped_s: float
    syncs_per_step: float
    host_gap_s: float
    ops_per_step: float
    device_idle_share: float | None = None
    comm_contention_s: float = 0.0
    comm_host_s: float = 0.0
    data_offload_s: float = 0.0
    sync_read_s: float = 0.0
    sync_comm_s: float = 0.0

    def shares(self) -> dict[str, float]:
        """Category -> share of the mean step (they add up to 1)."""
        return {k: v / self.step_mean_s for k, v in self.category_s.items()}


def _is_comm(e: Mapping[str, Any]) -> bool:
    name = e["name"].lower()
    return any(w in name for w in _COMM_WORDS) and not name.startswith("c10d::")


def attribute_trace(trace: str | os.PathLike | Mapping[str, Any]) -> TraceAttribution:
    """Label each instant of the recorded steps with one category (see the module doc).

    Args:
        trace: the path of a trace written by ``StepRecorder``, or the parsed dict.

    Raises:
        TypeError: if ``trace`` is neither a path nor a mapping.
        ValueError: if it is not a Chrome trace or holds no ``ProfilerStep#`` window.
    """
    events = [e for e in trace_events(trace) if {"name", "ts", "dur"} <= e.keys()]
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    if not steps:
        raise ValueError("trace has no ProfilerStep# windows: it was not written by "
                         "StepRecorder, or no step finished inside the window")
    main = steps[0].get("tid")
    windows = _union((s["ts"], s["ts"] + s["dur"]) for s in steps)

    def spans(pred: Any) -> list[Interval]:
        return _intersect(_union((e["ts"], e["ts"] + e["dur"]) for e in events if pred(e)),
                          windows)

    def on_main(e: Mapping[str, Any]) -> bool:
        return e.get("tid") == main

    phase = {k: spans(lambda e, k=k: on_main(e) and e["name"] == PHASE_PREFIX + k)
             for k in ("optimizer", "backward", "forward")}
    phase["data"] = spans(lambda e: on_main(e) and e["name"] in (PHASE_PREFIX + "data",
                                                                 PREFETCH_WAIT))
    offload = _minus(spans(lambda e: not on_main(e) and e["name"] == PHASE_PREFIX + "data"),
                     phase["data"])
    ops = [e for e in events if on_main(e) and e.get("cat") == "cpu_op"]
    busy = _union((e["ts"], e["ts"] + e["dur"]) for e in ops)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    comm_all = spans(lambda e: (e.get("cat") == "kernel" or not on_main(e)) and _is_comm(e))
    compute_kernels = _union((e["ts"], e["ts"] + e["dur"]) for e in kernels if not _is_comm(e))
    hidden_under = busy if not kernels else compute_kernels
    exposed = _minus(comm_all, hidden_under)
    host_comm = spans(lambda e: on_main(e) and e.get("cat") == "cpu_op"
                      and any(w in e["name"] for w in _HOST_COMM))
    opt = phase["optimizer"]
    # syncs inside optimizer.step (Adam's per-tensor step.item()) belong to the optimizer
    sync_events = sorted((e for e in events if (on_main(e) and e["name"] in SYNC_OPS or (
        e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"]))
        and not any(a <= e["ts"] < b for a, b in opt)), key=lambda e: e["ts"])
    sync = [(e["ts"], e["ts"] + e["dur"]) for e in sync_events]
    # syncs with under SYNC_LOOP_GAP_US of operators between them: a host loop reading one
    # element at a time ([x.item() for x in t], print(t)): the loop is the sync's cost
    sync += [(a["ts"] + a["dur"], b["ts"]) for a, b in zip(sync_events, sync_events[1:],
                                                           strict=False)
             if b["ts"] > a["ts"] + a["dur"]
             and _busy_between(busy, a["ts"] + a["dur"], b["ts"]) < SYNC_LOOP_GAP_US]
    sync = _intersect(_union(sync), windows)
    order = [("data", phase["data"]), ("sync", sync), ("communication", exposed + host_comm),
             ("optimizer", phase["optimizer"]), ("backward", phase["backward"]),
             ("forward", phase["forward"])]
    left, cat, where = list(windows), {}, {}
    for name, label in order:
        covered = _intersect(left, _union(label))
        cat[name], where[name] = _length(covered), covered
        left = _minus(left, covered)
    cat["other"], where["other"] = _length(left), left
    n, total = len(steps), _length(windows)
    # operators of the model's own work: not inside data loading, syncs or the optimizer
    aside = _union(phase["data"] + sync + phase["optimizer"])
    top_ops = _count_top_level([e for e in ops if any(a <= e["ts"] < b for a, b in windows)
                                and not _busy_between(aside, e["ts"], e["ts"] + 1e-3)])
    contention = 0.0
    if not kernels:  # host operators share the cores with gloo's threads
        for ts, charged in _contention(ops, comm_all, host_comm, windows):
            kind = next((k for k in ("optimizer", "backward", "forward", "other")
                         if _busy_between(where[k], ts, ts + 1e-3)), None)
            if kind is not None:
                charged = min(charged, cat[kind])
                cat[kind] -= charged
                cat["communication"] += charged
                contention += charged
    idle = None
    if kernels:
        idle = 1.0 - _length(_intersect(compute_kernels, windows)) / total
    return TraceAttribution(
        steps=n, step_mean_s=total * 1e-6 / n,
        category_s={k: cat[k] * 1e-6 / n for k in CATEGORIES},
        comm_overlapped_s=_length(_minus(_minus(comm_all, exposed), _union(host_comm))) * 1e-6 / n,
        syncs_per_step=_count_top_level([e for e in sync_events if any(
            a <= e["ts"] < b for a, b in windows)]) / n,
        host_gap_s=_length(_minus(_minus(windows, busy), _union(
            phase["data"] + sync + exposed))) * 1e-6 / n,
        ops_per_step=top_ops / n, device_idle_share=idle,
        comm_contention_s=contention * 1e-6 / n,
        comm_host_s=_length(_intersect(where["communication"], _union(host_comm))) * 1e-6 / n,
        data_offload_s=_length(offload) * 1e-6 / n,
        sync_read_s=_length(_intersect(where["sync"], _union(
            (e["ts"], e["ts"] + e["dur"]) for e in sync_events))) * 1e-6 / n,
        sync_comm_s=_length(_intersect(where["sync"], comm_all)) * 1e-6 / n)


def _contention(ops: list[Mapping[str, Any]], comm: list[Interval], host_comm: list[Interval],
                windows: list[Interval]) -> list[tuple[float, float]]:
    """(start, us charged to communication) of each top-level operator that started while
    a collective was in flight and whose signature runs slower then than without one.

    An instance is charged its overlap with the collectives times ``1 - 1/slowdown``: the
    part of that overlap the operator would not have taken at its collective-free pace.
    Its parts that are communication operators already (``host_comm``) are not charged.
    """
    if not comm:
        return []
    starts = [a for a, _ in comm]

    def in_flight(t: float) -> bool:
        i = bisect.bisect_right(starts, t) - 1
        return i >= 0 and t < comm[i][1]

    groups: dict[str, tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]] = {}
    top, key, shaped, end = None, "", False, float("-inf")
    # a top-level operator's signature: its name and the input shapes of the first
    # operator under it that has any (an autograd node's own event carries none)
    for e in [*sorted(ops, key=lambda e: (e["ts"], -e["dur"])), None]:
        if e is not None and e["ts"] < end:
            dims = e.get("args", {}).get("Input Dims")
            if dims and not shaped:
                key, shaped = f"{key} {json.dumps(dims)}", True
            continue
        if top is not None and any(a <= top["ts"] < b for a, b in windows):
            groups.setdefault(key, ([], []))[in_flight(top["ts"])].append(top)
        if e is None:
            break
        dims = e.get("args", {}).get("Input Dims")
        top, end, shaped = e, e["ts"] + e["dur"], bool(dims)
        key = f"{e['name']} {json.dumps(dims)}" if dims else e["name"]
    out = []
    for clean, under in groups.values():
        if len(clean) < MIN_SAMPLES or len(under) < MIN_SAMPLES:
            continue
        base = statistics.median(e["dur"] for e in clean)
        slow = statistics.median(e["dur"] for e in under)
        if base <= 0 or slow <= base:
            continue
        keep = 1 - base / slow
        out += [(e["ts"], keep * _length(_intersect(
            _minus([(e["ts"], e["ts"] + e["dur"])], host_comm), comm))) for e in under]
    return out


def _busy_between(busy: list[Interval], a: float, b: float) -> float:
    """Operator time inside (a, b); ``busy`` is sorted and disjoint."""
    i = bisect.bisect_left(busy, (a, a)) - 1
    total = 0.0
    for x, y in busy[max(i, 0):]:
        if x >= b:
            break
        total += max(0.0, min(y, b) - max(x, a))
    return total


def _count_top_level(ops: list[Mapping[str, Any]]) -> int:
    """Operators not nested inside another operator (one sweep over start times)."""
    count, end = 0, float("-inf")
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= end:
            count += 1
            end = e["ts"] + e["dur"]
    return count
