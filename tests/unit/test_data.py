"""Tests for perfkit.data: the prefetcher (order, batch types, exceptions, threads, CUDA).

No test asserts on wall-clock speed (the machine is shared); speed targets live in
benchmarks/prefetch.py. Thread checks wait for the prefetch thread by name.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback

import pytest
import torch
from torch.utils.data import DataLoader

from perfkit.data import Prefetcher, SlowDataset, map_tensors

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "perfkit-prefetch"]


@pytest.fixture(autouse=True)
def no_thread_left_behind():
    """Every test must leave no prefetch thread running."""
    yield
    assert prefetch_threads() == [], "a test leaked a prefetch thread"


# --- Prefetcher: order, batch types, len ---------------------------------------------------

Pair = collections.namedtuple("Pair", "x y")


def test_order_of_plain_items_is_preserved():
    assert list(Prefetcher(range(500), depth=3)) == list(range(500))


def test_tensor_tuple_dict_and_namedtuple_batches_come_back_unchanged_on_cpu():
    batches = [
        {"x": torch.full((2, 3), float(i)), "meta": f"b{i}", "pair": Pair(torch.ones(1) * i, i)}
        for i in range(20)
    ]
    out = list(Prefetcher(batches, device="cpu"))
    assert len(out) == 20
    for i, b in enumerate(out):
        assert b["meta"] == f"b{i}"
        assert isinstance(b["pair"], Pair) and b["pair"].y == i
        assert b["x"] is batches[i]["x"]  # CPU: no copy
    tuples = [(torch.tensor([i]), [torch.tensor([-i])]) for i in range(10)]
    assert [int(x) for x, _ in Prefetcher(tuples)] == list(range(10))


def test_map_tensors_keeps_container_types():
    class Batch(dict):
        pass

    b = Batch(a=torch.ones(2), b=[torch.zeros(1), "s"], c=Pair(torch.ones(1), 3))
    out = map_tensors(b, lambda t: t + 1)
    assert type(out) is Batch and type(out["c"]) is Pair and out["b"][1] == "s"
    assert out["a"].tolist() == [2.0, 2.0] and out["c"].y == 3


def test_len_follows_the_source():
    assert len(Prefetcher(list(range(7)))) == 7
    loader = DataLoader(SlowDataset(10, 0.0), batch_size=4)
    assert len(Prefetcher(loader)) == 3
    with pytest.raises(TypeError, match="no len"):
        len(Prefetcher(x for x in range(3)))


def test_dataloader_with_workers_keeps_order():
    loader = DataLoader(SlowDataset(24, 0.001), batch_size=4, num_workers=2)
    firsts = [int(b[0, 0]) for b in Prefetcher(loader)]
    assert firsts == list(range(0, 24, 4))


def test_each_pass_is_fresh_and_the_same():
    pf = Prefetcher([torch.tensor(i) for i in range(5)])
    assert [int(t) for t in pf] == [int(t) for t in pf] == list(range(5))


@pytest.mark.parametrize("kw, err", [({"depth": 0}, ValueError), ({"depth": 1.5}, ValueError),
                                     ({"depth": True}, ValueError)])
def test_bad_depth(kw, err):
    with pytest.raises(err, match="depth"):
        Prefetcher([1], **kw)


def test_bad_source_and_pin_memory():
    with pytest.raises(TypeError, match="source"):
        Prefetcher(5)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="pin_memory"):
            Prefetcher([1], pin_memory=True)


# --- Prefetcher: exceptions, threads, bounded queue --------------------------------------------


def failing_source(n_good: int):
    for i in range(n_good):
        yield torch.tensor(i)
    raise ValueError("corrupt record")


def test_exception_reaches_the_consumer_after_the_good_batches_with_its_traceback():
    got = []
    with pytest.raises(ValueError, match="corrupt record") as info:
        for b in Prefetcher(failing_source(3)):
            got.append(int(b))
    assert got == [0, 1, 2]
    text = "".join(traceback.format_exception(info.value))
    assert "failing_source" in text, "the source's own frame must stay in the traceback"
    if hasattr(info.value, "__notes__"):
        assert "batch 3" in info.value.__notes__[0]


def test_early_break_stops_the_thread_and_closes_the_source_generator():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    for b in Prefetcher(endless(), depth=4):
        if b == 3:
            break
    assert prefetch_threads() == []
    assert closed.is_set(), "the source generator was not closed"


def test_early_break_with_a_slow_source_and_close_through_the_context_manager():
    with Prefetcher(SlowDataset(1000, 0.01), depth=2) as pf:
        it = iter(pf)
        assert int(next(it)[0]) == 0
        assert len(prefetch_threads()) == 1
    assert prefetch_threads() == []
    with pytest.raises(StopIteration):
        next(it)


def test_close_wakes_a_thread_blocked_on_a_full_queue(monkeypatch):
    """Closing mid-pass waits only for the load the thread has begun: a thread blocked on the
    full queue is woken by the drained queue, not by its next poll (made an hour long here)."""
    import warnings

    from perfkit.data import prefetch

    monkeypatch.setattr(prefetch, "_POLL_S", 3600.0)
    pulled = []

    def counted():
        for i in range(100):
            pulled.append(i)
            yield i

    it = iter(Prefetcher(counted(), depth=1))
    assert next(it) == 0
    deadline = time.monotonic() + 30.0  # a hang guard: the thread has filled the queue and holds one more
    while len(pulled) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "still blocked ... after 10 s": the thread slept in its put
        it.close(timeout=10.0)
    assert prefetch_threads() == []


def test_queue_is_bounded_and_filled_ahead():
    pulled = []

    def counted():
        for i in range(100):
            pulled.append(i)
            yield i

    depth = 3
    it = iter(Prefetcher(counted(), depth=depth))
    assert next(it) == 0
    deadline = time.monotonic() + 30.0  # a hang guard: the loop ends as soon as it filled
    while len(pulled) < 1 + depth and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(pulled) >= 1 + depth, "the thread did not load ahead while the consumer waited"
    time.sleep(0.1)
    # consumed 1, queue holds depth, the thread holds one more while it waits to put it
    assert len(pulled) <= 1 + depth + 1, f"loaded {len(pulled)} batches: the queue is not bounded"
    del it


def test_each_batch_is_loaded_while_the_consumer_computes():
    """Not a speed test: the consumer "computes" by waiting, with a hang guard, until the
    thread has loaded the next batch, then checks it was loaded before it was asked for.
    A prefetcher that loads on demand never loads ahead, and fails at the first step."""
    loaded = [threading.Event() for _ in range(6)]
    asked = [threading.Event() for _ in range(6)]
    early = []

    def source():
        for i in range(6):
            early.append(not asked[i].is_set())  # loaded before the loop asked for it?
            loaded[i].set()
            yield i

    it = iter(Prefetcher(source(), depth=2))
    for i in range(6):
        asked[i].set()
        assert next(it) == i
        if i + 1 < 6:
            assert loaded[i + 1].wait(timeout=30.0), f"batch {i + 1} was not loaded ahead"
    assert early[1:] == [True] * 5, f"batches loaded only when asked for: {early}"
    with pytest.raises(StopIteration):
        next(it)


# --- CUDA: side stream, pinned memory, record_stream ------------------------------------------


@gpu
@needs_cuda
def test_cuda_batches_arrive_on_the_device_in_order_with_correct_values():
    batches = [{"x": torch.full((256, 256), float(i)), "i": i} for i in range(30)]
    pf = Prefetcher(batches, device="cuda", depth=3)
    assert pf.pin_memory and pf.stream is not None
    for i, b in enumerate(pf):
        assert b["x"].is_cuda and b["i"] == i
        # used right away on the compute stream: it must wait for the copy
        assert float((b["x"] * 2).sum()) == pytest.approx(2.0 * i * 256 * 256)


@gpu
@needs_cuda
def test_cuda_one_side_stream_for_the_prefetchers_life_and_no_reserved_growth(monkeypatch):
    # The streams the copies are queued on (torch builds Stream objects for current_stream()
    # and friends too, so counting constructions would count those: seen on an H200)
    used = []
    real_ctx = torch.cuda.stream
    monkeypatch.setattr(torch.cuda, "stream", lambda s: used.append(s.stream_id) or real_ctx(s))
    batches = [torch.randn(1 << 20) for _ in range(8)]  # 4 MiB each
    pf = Prefetcher(batches, device="cuda")
    reserved = []
    for _ in range(5):
        for b in pf:
            (b * 2).sum()
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert len(used) == 5 * len(batches), f"{len(used)} copies queued on a side stream, expected 40"
    assert set(used) == {pf.stream.stream_id}, f"{len(set(used))} side streams over 5 epochs, expected 1"
    # A stream per epoch would strand a 20 MiB segment (or more) each epoch; allow one.
    assert reserved[-1] - reserved[1] <= 20 << 20, f"reserved memory grew: {reserved}"


@gpu
@needs_cuda
def test_cuda_record_stream_keeps_memory_alive_while_a_long_kernel_reads_it():
    """Drop each batch right after queueing slow work on it; results must stay exact."""
    n = 1 << 22
    batches = [torch.full((n,), float(i)) for i in range(12)]
    a = torch.randn(2048, 2048, device="cuda")
    sums = []
    for b in Prefetcher(batches, device="cuda", depth=4):
        for _ in range(5):
            a = a @ a / a.norm()  # keep the compute stream busy behind the read below
        sums.append(b.sum())
        del b  # freed while the compute stream still has to read it
    assert [float(s) for s in sums] == [float(i * n) for i in range(12)]


@gpu
@needs_cuda
def test_cuda_already_pinned_and_device_tensors_pass_through():
    pinned = [torch.ones(4).pin_memory() for _ in range(3)]
    on_gpu = [torch.ones(4, device="cuda") for _ in range(3)]
    assert all(b.is_cuda for b in Prefetcher(pinned, device="cuda"))
    assert all(b.is_cuda for b in Prefetcher(on_gpu, device="cuda"))
