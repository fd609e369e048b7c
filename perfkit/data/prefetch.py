"""A prefetcher that prepares the next batches while the model runs on the current one.

A training step waits for data whenever the next batch takes longer to prepare than the
work that could hide it. :class:`Prefetcher` hides it with a background thread and a
bounded queue; on CUDA the thread also copies each batch from pinned memory on the
prefetcher's own side stream, the pattern of NVIDIA apex's ``data_prefetcher`` and of
``torch.utils.data``'s pin-memory thread. :func:`map_tensors` applies a function to every
tensor of a nested batch. The datasets notebook 07 loads are in :mod:`perfkit.data.datasets`;
``DataLoader`` measurements and the model that predicts them in :mod:`perfkit.data.loader`.

Prefetching hides loading only behind work that does not need the same resource. On a GPU
the step's work is the device's and the host's cores are free to load. On a CPU, or when
loading is CPU-bound Python (decoding, tokenizing), the thread needs the cores the step
needs (and the GIL): the step waits less for data but computes slower, and is no faster.
:meth:`Prefetcher.stats` says what the thread spent loading and the step spent waiting; the
wait is marked in a profiler trace (:data:`WAIT_ANNOTATION`), and ``perfkit diagnose``
counts a ``DataLoader`` iterated by the thread as data loading off the main thread.

Usage::

    from perfkit.data.prefetch import Prefetcher
    for x, y in Prefetcher(loader, device="cuda"):   # next batch copies during this step
        loss = model(x, y)
"""

from __future__ import annotations

import inspect
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.profiler import record_function

from perfkit._checks import check_callable, check_int
from perfkit.timing import resolve_device

__all__ = ["WAIT_ANNOTATION", "PrefetchStats", "Prefetcher", "map_tensors"]

_POLL_S = 0.05  # s: how often a blocked queue operation re-checks the stop flag
END = object()  # the item a producer thread puts last: the loader is exhausted
# the profiler range around the consumer's wait for a batch (perfkit.profiling's
# attribute_trace counts it as data wait, as a DataLoader's __next__ on the main thread)
WAIT_ANNOTATION = "perfkit.prefetch:wait"


def map_tensors(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply ``fn`` to every tensor in a batch of nested tuples, lists and dicts.

    Namedtuples and dict subclasses keep their type; non-tensor leaves pass unchanged.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    check_callable("fn", fn)
    if isinstance(batch, torch.Tensor):
        return fn(batch)
    if isinstance(batch, Mapping):
        out = {k: map_tensors(v, fn) for k, v in batch.items()}
        return out if type(batch) is dict else type(batch)(out)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_tensors(v, fn) for v in batch))
    if isinstance(batch, list | tuple):
        return type(batch)(map_tensors(v, fn) for v in batch)
    return batch


# --- the prefetcher -----------------------------------------------------------------------


@dataclass(frozen=True)
class PrefetchStats:
    """What a :class:`Prefetcher`'s passes spent, in seconds of wall-clock time.

    ``load_s``: the thread producing batches (the source's ``next``, pinning, issuing the
    copy); ``wait_s``: the consumer waiting for a batch; ``batches``: batches handed out.
    Loading that the step hides costs ``load_s`` and little ``wait_s``; when ``load_s`` per
    batch is as long as the step, the loader is the bottleneck whatever the wait says.
    """

    batches: int
    load_s: float
    wait_s: float


class _Counters:
    """The totals behind :class:`PrefetchStats`, added to by threads (under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches, self.load_s, self.wait_s = 0, 0.0, 0.0

    def add(self, load_s: float = 0.0, wait_s: float = 0.0, batches: int = 0) -> None:
        with self.lock:
            self.load_s += load_s
            self.wait_s += wait_s
            self.batches += batches


@dataclass(frozen=True)
class _Failure:
    exc: BaseException
    index: int  # the batch the source was producing when it raised


def _put(q: queue.Queue, stop: threading.Event, item: Any) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            pass
    return False


def _produce(it: Iterator, q: queue.Queue, stop: threading.Event, device: torch.device,
             pin: bool, stream: Any, counters: _Counters) -> None:
    """Body of the prefetch thread. It holds no reference to its consumer, so a consumer
    that breaks out of its loop is garbage collected, and its ``__del__`` stops us."""
    index = 0
    try:
        if stream is not None:
            torch.cuda.set_device(device)  # the current device is per thread
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                _put(q, stop, END)
                return
            if pin:  # page-locked, so the DMA engine can copy it while the GPU computes
                batch = map_tensors(batch, lambda t: t if t.is_cuda or t.is_pinned()
                                    else t.pin_memory())
            if stream is not None:
                with torch.cuda.stream(stream):  # copies queue behind earlier copies only
                    batch = map_tensors(batch, lambda t: t.to(device, non_blocking=True))
                    ready = torch.cuda.Event()
                    ready.record(stream)
                batch = (batch, ready)
            counters.add(load_s=time.perf_counter() - t0)
            if not _put(q, stop, batch):
                return
            index += 1
    except BaseException as exc:  # handed to the consumer, raised there
        _put(q, stop, _Failure(exc, index))
    finally:
        if inspect.isgenerator(it):
            it.close()  # runs the source generator's own ``finally`` blocks


class _PrefetchIterator:
    """One pass over a :class:`Prefetcher`'s source, with its own thread and queue."""

    def __init__(self, owner: Prefetcher) -> None:
        self._device, self._stream = owner.device, owner.stream
        self._counters = owner._counters
        self._queue: queue.Queue = queue.Queue(maxsize=owner.depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=_produce, name="perfkit-prefetch", daemon=True,
            args=(iter(owner.source), self._queue, self._stop, owner.device,
                  owner.pin_memory, owner.stream, owner._counters))
        self._thread.start()

    def __iter__(self) -> _PrefetchIterator:
        return self

    def _get(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _Failure(RuntimeError("the prefetch thread ended without a batch"), -1)

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        t0 = time.perf_counter()
        with record_function(WAIT_ANNOTATION):
            item = self._get()
        self._counters.add(wait_s=time.perf_counter() - t0, batches=int(
            item is not END and not isinstance(item, _Failure)))
        if item is END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            if hasattr(item.exc, "add_note"):
                item.exc.add_note(f"(raised by the source in perfkit.data.Prefetcher's thread, "
                                  f"while loading batch {item.index})")
            raise item.exc  # its __traceback__ still holds the source's frames
        if self._stream is None:
            return item
        batch, ready = item
        compute = torch.cuda.current_stream(self._device)
        compute.wait_event(ready)  # the GPU waits for the copy; the host does not
        # The copy was allocated on the side stream: tell the caching allocator this
        # stream uses it too, or it could reuse the memory while the step still reads it.
        map_tensors(batch, lambda t: t.record_stream(compute) if t.is_cuda else None)
        return batch

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread and wait for it (for the source's current ``next`` to return)."""
        self._done = True
        self._stop.set()
        self._drain()  # a thread blocked on a full queue wakes now, not at its next poll
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                warnings.warn(f"perfkit prefetch thread still blocked in the source after "
                              f"{timeout} s; it is a daemon and ends with the process",
                              RuntimeWarning, stacklevel=2)
        self._drain()

    def _drain(self) -> None:
        """Drop prepared batches (and their GPU memory)."""
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: modules may already be gone
            pass


class Prefetcher:
    """Prepare the next ``depth`` batches while the model runs on the current one.

    Iterating starts a background thread that pulls from ``source`` into a bounded queue.
    On CUDA the thread also pins each batch and copies it to ``device`` with
    ``non_blocking=True`` on a side stream; the consumer's stream waits on an event for
    that copy (on the GPU, not the host) and ``record_stream`` marks the memory as used
    by the consumer's stream. The side stream lives as long as the prefetcher: the caching
    allocator pools memory per stream, so a new stream per epoch would strand each
    epoch's cached blocks and let reserved memory grow.

    Order is preserved; an exception raised by the source is re-raised in the consumer
    with its original traceback; breaking out of the loop stops and joins the thread
    (or call :meth:`close`, or use ``with Prefetcher(...) as pf``).

    When it cannot help: the thread overlaps loading with the step only where the two do
    not need the same resource. A loader that is CPU-bound (per-sample Python, decoding,
    tokenizing) on the cores the step computes on (a CPU run with no core to spare) takes those cores
    (and the GIL) from the step: the wait moves into slower forward and backward passes
    and the step is no faster. Then make loading cheaper (cache the decoded samples),
    or load in ``DataLoader`` worker processes on cores the step does not use. Compare
    :meth:`stats`'s ``load_s`` per batch with the step: prefetching can at best hide it,
    never shorten it.

    Args:
        source: any iterable of tensors, tuples/lists/namedtuples or dicts of them
            (non-tensor leaves pass through), e.g. a ``DataLoader``.
        device: where batches go; ``None`` means CUDA if present, else CPU (no copy).
        depth: batches prepared ahead (the queue's size), >= 1.
        pin_memory: pin host tensors before copying; default: on for CUDA.

    Raises:
        TypeError: if ``source`` is not iterable.
        ValueError: for ``depth`` < 1, or ``pin_memory=True`` without CUDA.
    """

    def __init__(self, source: Iterable, device: torch.device | str | None = None,
                 depth: int = 2, pin_memory: bool | None = None) -> None:
        if not isinstance(source, Iterable) and not hasattr(source, "__getitem__"):
            raise TypeError(f"source must be iterable (a DataLoader, list or generator), "
                            f"got {type(source).__name__}")
        check_int("depth", depth, 1)
        self.source, self.depth = source, depth
        self.device = resolve_device(device)
        cuda = self.device.type == "cuda"
        if cuda and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if pin_memory and not torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA (pinned memory is for DMA to a GPU)")
        self.pin_memory = cuda if pin_memory is None else bool(pin_memory)
        self.stream = torch.cuda.Stream(self.device) if cuda else None
        self._live: weakref.WeakSet[_PrefetchIterator] = weakref.WeakSet()
        self._counters = _Counters()

    def stats(self) -> PrefetchStats:
        """Seconds the thread spent loading and the consumer spent waiting, and the batches
        handed out, over every pass so far (a pass still running included)."""
        c = self._counters
        with c.lock:
            return PrefetchStats(c.batches, c.load_s, c.wait_s)

    def __iter__(self) -> Iterator:
        it = _PrefetchIterator(self)
        self._live.add(it)
        return it

    def __len__(self) -> int:
        try:
            return len(self.source)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"this Prefetcher has no len(): its source "
                            f"({type(self.source).__name__}) has none") from None

    def close(self) -> None:
        """Stop every pass still running over this prefetcher."""
        for it in list(self._live):
            it.close()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

