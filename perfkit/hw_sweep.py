"""The sweeps behind the ceilings: the course's own matmuls and copies, timed warm on each
thread count the notebooks use, over several rounds, each point kept at its best round.

A ceiling is an upper bound of the work the course runs, so it is measured on that work:
square matmuls up to large ones, plus the shapes the notebooks multiply (:data:`COURSE_SHAPES`);
copies from cache-sized to DRAM-sized buffers, plus ``x + y`` at DRAM sizes (STREAM's Copy
and Add kernels); each on one thread and on all of them, in several rounds (load changes over
seconds), each point kept at its best round. One thread matters on a shared machine: torch
splits an operation of at least :data:`GRAIN` elements across its threads and waits for all
of them at a barrier, so a thread that lost its core to another process holds every call up
for a scheduler slice. Copies of 262 kB-16.8 MB ran 17-2,500x slower on 2 threads than on 1
that way (measured, 2 cores busy with other work); the ceilings take each point's best thread
count. Buffers are touched before any timing, so no page fault lands in a timed call.
:func:`perfkit.hw.measure_limits` runs these sweeps; import them through :mod:`perfkit.hw`.

Usage::

    from perfkit import hw
    p = hw.measure_matmul(256, m=4096, k=256, threads=1)  # (4096, 256) @ (256, 256) on 1 thread
    pts = hw.sweep_copy([1 << 16, 1 << 20], add_sizes=[1 << 20], rounds=2)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch

from perfkit._checks import check_choice, check_int, check_items, check_real
from perfkit.roofline import matmul_flops
from perfkit.timing import Measurement, Timer, benchmark, calibrate_number, resolve_device

__all__ = ["ADD_OVER_COPY", "COURSE_SHAPES", "EMULATED_BELOW", "GRAIN", "CopyPoint", "MatmulPoint",
           "credited_dram", "dtype_name", "faster_copy_points", "measure_copy", "measure_h2d",
           "measure_matmul", "sweep_copy", "sweep_matmul", "thread_counts"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# Below this share of fp32's ceiling a dtype is emulated (bf16 without avx512_bf16: a few
# hundredths); converting to fp32 and back (AVX-512 without bf16 units) keeps ~0.5; native
# units double it.
EMULATED_BELOW = 0.25
# at::internal::GRAIN_SIZE: an elementwise op on fewer elements runs on one thread, no barrier
GRAIN = 32768
# x + y's counted bytes per second over a copy's at the same real bandwidth: with write-allocate a
# copy moves 3 bytes for the 2 it counts and x + y 4 for its 3, so (3/4) / (2/3) = 9/8
ADD_OVER_COPY = 9 / 8
# (m, n, k) of the matmuls, (m, k) @ (k, n), that the notebooks run besides square ones: the
# ceiling must bound them too, and a thin or wide shape can outrun a square one of equal FLOPs.
COURSE_SHAPES: tuple[tuple[int, int, int], ...] = (
    (4096, 256, 256),   # notebook 00: a linear layer at batch 4096
    (256, 512, 512),    # notebook 00's MLP step at QUICK size (its default one is n=1024)
    (1024, 1024, 256),  # notebook 06: (1024, 256) @ (256, n), the shape sweep around n=1024
    (1024, 512, 128),   # notebook 06: the tiny GPT-2's MLP, 8 x 128 tokens at width 128
    (256, 4096, 1024),  # notebook 10: the 1024-wide block's MLP at 256 tokens, up ...
    (256, 1024, 4096),  # ... and down
)


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if not isinstance(dtype, str | torch.dtype):  # e.g. a list: not hashable, not a dtype
        raise TypeError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def dtype_name(dtype: str | torch.dtype) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or ``"bfloat16"``; other dtypes are refused."""
    return str(_dtype(dtype)).removeprefix("torch.")


@contextlib.contextmanager
def _threads(n: int | None) -> Iterator[int]:
    """``n`` intra-op threads inside the block (``None``: the current setting), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n or before)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def _timed(fn: Callable[[], object], repeat: int, dev: torch.device) -> Measurement:
    """``repeat`` timed batches of calls of at least 10 ms each, after one untimed call (and one
    untimed batch when a call is shorter than that: the calibration of the batch's size)."""
    with Timer(dev) as first:
        fn()
    if first.elapsed_s >= 0.01:  # a long call: one per repetition, already warm
        return benchmark(fn, warmup=0, repeat=repeat, device=dev)
    return benchmark(fn, warmup=1, repeat=repeat, device=dev, number=calibrate_number(fn, 0.01, dev))


@dataclass(frozen=True)
class MatmulPoint:
    """One measured matmul ``(m, k) @ (k, n)`` (square when ``m`` and ``k`` are ``None``): dtype,
    median seconds and FLOP/s, and ``best_flops_per_s`` from the fastest tenth of the repetitions
    (their 10th percentile time): what the machine does when nothing else competes for it, what
    a *ceiling* should be on a shared machine. ``threads``: intra-op threads it ran on (0: not
    recorded)."""

    n: int
    dtype: str
    seconds: float
    flops_per_s: float
    best_flops_per_s: float
    threads: int = 0
    m: int | None = None
    k: int | None = None

    @property
    def mnk(self) -> tuple[int, int, int]:
        """``(m, n, k)``, square sizes filled in."""
        return (self.m or self.n, self.n, self.k or self.n)

    @property
    def square(self) -> bool:
        return self.mnk == (self.n,) * 3

    @property
    def label(self) -> str:
        """``"n=512"`` or ``"4096x256 @ 256x256"``."""
        m, n, k = self.mnk
        return f"n={n}" if self.square else f"{m}x{k} @ {k}x{n}"

    @property
    def where(self) -> str:
        """The point in words, as a ceiling's source names it: ``"n=1024 on 2 threads"``."""
        on = f" on {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else ""
        return self.label + on


@dataclass(frozen=True)
class CopyPoint:
    """One measured memory-bound kernel on buffers of ``nbytes`` each: ``op`` ``"copy"`` (STREAM's
    Copy, ``dst = src``: 2 buffers of bytes counted) or ``"add"`` (STREAM's Add, ``out = x + y``:
    3), median seconds, counted bytes per s and the rate of the fastest tenth of repetitions (see
    :class:`MatmulPoint`), on ``threads`` intra-op threads (0: not recorded). ``source`` is empty
    for a sweep's point; where a later run of the same copy was faster
    (:func:`perfkit.ceilings.observe_copy`), ``best_bytes_per_s`` is that run's rate and ``source``
    names it (the median stays the sweep's)."""

    nbytes: int
    seconds: float
    bytes_per_s: float
    best_bytes_per_s: float
    threads: int = 0
    op: str = "copy"
    source: str = ""

    @property
    def where(self) -> str:
        """The point in words, as a ceiling's source names it: ``"copy of 4,096 B buffers on 1 thread"``
        (the sweep's point: ``source`` names a later run that set ``best_bytes_per_s``)."""
        what = f"{self.op} of {self.nbytes:,} B buffers"
        return f"{what} on {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else what


def _copy_points(name: str, points: Iterable[CopyPoint]) -> list[CopyPoint]:
    pts = check_items(name, points, nonempty=False)
    for i, p in enumerate(pts):
        if not isinstance(p, CopyPoint):
            raise TypeError(f"{name}[{i}] must be a CopyPoint, got {type(p).__name__}")
    return pts


def credited_dram(rate: float, source: str, points: Iterable[CopyPoint],
                  nbytes: int | None) -> tuple[float, str]:
    """A DRAM ceiling of ``rate`` (counted bytes per second, reached by ``source``) credited at
    most :data:`ADD_OVER_COPY` of the fastest copy of ``nbytes`` buffers among ``points``.

    The DRAM ceiling is the better of a copy and an ``x + y`` of DRAM-sized buffers, and at the
    same real bandwidth ``x + y`` counts 9/8 of a copy's rate (write-allocate, notebook 00). So one
    fast run of ``x + y`` cannot lift the DRAM roof past what a copy of the same buffers showed: it
    is credited that much and no more. Without such a copy (or with ``nbytes`` ``None``) the
    ceiling is left as it is.

    Returns:
        ``(rate, source)``: the credited ceiling, and where it came from in words (the copy and
        what reached more, where the credit was capped).

    Raises:
        TypeError, ValueError: for a ``rate`` that is not a finite number > 0, a ``source`` that
            is not a non-empty str, ``points`` that are not CopyPoints, or an ``nbytes`` below 1.
    """
    check_real("rate", rate, 0, lo_open=True)
    if not isinstance(source, str) or not source:
        raise TypeError(f"source must be a non-empty str naming what reached the rate, got {source!r}")
    pts = _copy_points("points", points)
    if nbytes is not None:
        check_int("nbytes", nbytes, 1)
    best = max((p for p in pts if p.op == "copy" and p.nbytes == nbytes), key=lambda p: p.best_bytes_per_s,
               default=None)
    if best is None or rate <= ADD_OVER_COPY * best.best_bytes_per_s:
        return float(rate), source
    copy = best.source or best.where
    return (ADD_OVER_COPY * best.best_bytes_per_s,
            f"9/8 of the fastest copy of its buffers, {copy}: the most x + y is credited (faster: {source})")


def faster_copy_points(old: Iterable[CopyPoint], new: Iterable[CopyPoint]) -> list[CopyPoint]:
    """Each copy or ``x + y`` point (one op, buffer size and thread count) at the faster of its
    runs in ``old`` and ``new`` by its fastest rate, with that run's median and source: limits
    merged across runs keep each point's best on its own, never a slower point because another
    field of the same run was faster. Copies first, then adds, each by size.

    Raises:
        TypeError: for ``old`` or ``new`` that are not lists of CopyPoints.
    """
    runs = sorted([*_copy_points("old", old), *_copy_points("new", new)], key=lambda p: p.best_bytes_per_s)
    best = {(p.op, p.nbytes, p.threads): p for p in runs}  # each point's fastest run comes last (new: a tie)
    return sorted(best.values(), key=lambda p: (p.op != "copy", p.nbytes))


def measure_matmul(
    n: int, dtype: str | torch.dtype = "float32", device: torch.device | str | None = None,
    repeat: int = 7, *, m: int | None = None, k: int | None = None, threads: int | None = None,
) -> MatmulPoint:
    """FLOP/s of an ``(m, k) @ (k, n)`` matmul in ``dtype`` on ``device`` (square by default).

    Args:
        n, m, k: the output's columns, rows (default ``n``) and the inner size (default ``n``).
        dtype, device: what it runs in and where (``None``: CUDA if present, else CPU).
        repeat: timed repetitions, each a batch of calls at least 10 ms long.
        threads: intra-op threads to run on, restored after (``None``: the current setting).

    Raises:
        TypeError, ValueError: for a size or ``repeat`` that is not an int >= 1, a
            ``threads`` below 1, an unknown dtype or device.
    """
    check_int("n", n, 1), check_int("repeat", repeat, 1)
    rows, inner = (n if v is None else check_int(name, v, 1) for name, v in (("m", m), ("k", k)))
    if threads is not None:
        check_int("threads", threads, 1)
    dev = resolve_device(device)
    dt = _dtype(dtype)
    a = torch.randn(rows, inner, device=dev).to(dt)  # (m, k)
    b = torch.randn(inner, n, device=dev).to(dt)  # (k, n)
    out = torch.empty(rows, n, device=dev, dtype=dt)  # (m, n)
    fn = lambda: torch.mm(a, b, out=out)  # noqa: E731
    with _threads(threads) as used:
        mb = _timed(fn, repeat, dev)  # its first call: oneDNN builds its kernel for this shape and dtype
    flops = matmul_flops(rows, n, inner)
    return MatmulPoint(n, dtype_name(dt), mb.median_s, mb.rate(flops), flops / mb.p10_s, used,
                       None if m is None else rows, None if k is None else inner)


def measure_copy(nbytes: int, device: torch.device | str | None = None, repeat: int = 7, *,
                 threads: int | None = None, op: str = "copy") -> CopyPoint:
    """Bandwidth of a copy (or ``x + y``) of ``nbytes`` buffers, counting every buffer read or
    written once.

    STREAM counts traffic this way: a copy of N bytes moves 2N, ``x + y`` 3N. (nccl-tests counts
    differently: its algbw is the buffer's size over the time, S / t.) Every page is touched
    before timing: a freshly allocated buffer faults on its first write, which would be timed.

    Args:
        nbytes: bytes per buffer (fp32 elements, rounded down to a multiple of 4).
        device, repeat: where (``None``: CUDA if present) and how many timed repetitions.
        threads: intra-op threads to run on, restored after (``None``: the current setting).
        op: ``"copy"`` or ``"add"``.

    Raises:
        TypeError, ValueError: for ``nbytes``, ``repeat`` or ``threads`` that is not an int
            >= 1, or an unknown ``op``.
    """
    check_int("nbytes", nbytes, 1), check_int("repeat", repeat, 1)
    check_choice("op", op, ("copy", "add"))
    if threads is not None:
        check_int("threads", threads, 1)
    dev = resolve_device(device)
    return _copy_point(_buffers(nbytes, op, dev), repeat, threads, dev)


def _buffers(nbytes: int, op: str, dev: torch.device) -> tuple[torch.Tensor, ...]:
    """``(src, dst)`` for a copy, ``(x, y, out)`` for an add: fp32, ``nbytes`` each, the inputs
    written (so touched) and the output not yet."""
    numel = max(1, nbytes // 4)
    ins = [torch.full((numel,), 1.0 + i, device=dev) for i in range(1 if op == "copy" else 2)]
    return (*ins, torch.empty_like(ins[0]))


def _copy_point(bufs: tuple[torch.Tensor, ...], repeat: int, threads: int | None,
                dev: torch.device) -> CopyPoint:
    """Time the copy (two buffers) or add (three) on ``bufs`` (:func:`_buffers`)."""
    if len(bufs) == 2:
        src, dst = bufs
        fn = lambda: dst.copy_(src)  # noqa: E731
    else:
        x, y, dst = bufs
        fn = lambda: torch.add(x, y, out=dst)  # noqa: E731
    with _threads(threads) as used:
        mb = _timed(fn, repeat, dev)  # its first call touches dst: the page faults happen there
    moved = len(bufs) * dst.numel() * 4  # bytes counted: each buffer read or written once
    return CopyPoint(dst.numel() * 4, mb.median_s, mb.rate(moved), moved / mb.p10_s, used,
                     "copy" if len(bufs) == 2 else "add")


def measure_h2d(nbytes: int, device: torch.device | str | None = None, repeat: int = 5) -> CopyPoint | None:
    """Host-to-device bandwidth from pinned memory; ``None`` when CUDA is absent."""
    check_int("nbytes", nbytes, 1), check_int("repeat", repeat, 1)
    if not torch.cuda.is_available():
        return None
    dev, numel = resolve_device(device or "cuda"), max(1, nbytes // 4)
    host = torch.rand(numel).pin_memory()  # pinned: DMA straight from host memory
    dst = torch.empty(numel, device=dev)
    mb = benchmark(lambda: dst.copy_(host, non_blocking=True), warmup=2, repeat=repeat, device=dev)
    return CopyPoint(numel * 4, mb.median_s, mb.rate(numel * 4), numel * 4 / mb.p10_s)


def thread_counts(device: torch.device | str | None = None) -> list[int]:
    """The intra-op thread counts the notebooks time with, all first: every core
    (``torch.get_num_threads()``) and one (a timing section pins one on a busy machine); on
    CUDA only the current setting (the host threads only launch kernels)."""
    every = torch.get_num_threads()
    return [every] if resolve_device(device).type == "cuda" or every == 1 else [every, 1]


def _sizes(name: str, v: Iterable) -> list:
    """``v`` as a list of positive ints (a lone string or int refused), in the order given."""
    if isinstance(v, str) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a list, got {v!r}")
    items = list(v)
    for i, x in enumerate(items):
        if isinstance(x, tuple):
            for j, d in enumerate(x):
                check_int(f"{name}[{i}][{j}]", d, 1)
            if len(x) != 3:
                raise ValueError(f"{name}[{i}] must be an (m, n, k) tuple, got {x!r}")
        else:
            check_int(f"{name}[{i}]", x, 1)
    return items


def _checked(threads: Iterable[int] | None, rounds: int, device) -> tuple[list[int], torch.device]:
    """The thread counts (default :func:`thread_counts`) and device of a sweep, ``rounds`` checked."""
    check_int("rounds", rounds, 1)
    dev = resolve_device(device)
    return (thread_counts(dev) if threads is None else
            check_items("threads", _sizes("threads", threads))), dev


def sweep_matmul(dtypes: Iterable[str], matmul_sizes: Iterable[int],
                 shapes: Iterable[tuple[int, int, int]] = COURSE_SHAPES, threads: Iterable[int] | None = None,
                 rounds: int = 3, max_call_s: float = 1.0,
                 device: torch.device | str | None = None) -> list[MatmulPoint]:
    """Every square size and shape in each dtype on each thread count, ``rounds`` times; each
    point's best round (highest ``best_flops_per_s``), in sweep order.

    A point whose one call would exceed ``max_call_s`` (extrapolated by FLOPs from the dtype's
    point measured last on the same threads) is skipped: bf16 without fast units would take
    minutes. A dtype below :data:`EMULATED_BELOW` of fp32's rate at its first size is emulated:
    it is swept once, on the first thread count, at square sizes only (the course times it
    small, and holds it against fp32's ceiling).

    Raises:
        TypeError, ValueError: for an unknown dtype, an empty list, a size, shape, thread count
            or ``rounds`` that is not a positive int, or a ``max_call_s`` that is not > 0.
    """
    names = [dtype_name(d) for d in check_items("dtypes", dtypes)]
    squares = sorted(set(check_items("matmul_sizes", _sizes("matmul_sizes", matmul_sizes))))
    work = [(n, n, n) for n in squares] + [s for s in _sizes("shapes", shapes) if len(set(s)) > 1]
    check_real("max_call_s", max_call_s, 0, lo_open=True)
    counts, dev = _checked(threads, rounds, device)
    best: dict[tuple, MatmulPoint] = {}
    last: dict[tuple, MatmulPoint] = {}  # (dtype, threads) -> the point measured last
    slow: set[str] = set()
    for rnd in range(rounds):
        for dt in names:
            if rnd and dt in slow:
                continue
            for i, (m, n, k) in enumerate(work):
                for t in counts[:1] if dt in slow else counts:
                    if dt in slow and i >= len(squares):
                        break
                    # from the point measured last, not the fastest: emulated time per FLOP grows with size
                    prev = last.get((dt, t))
                    if prev and prev.seconds * matmul_flops(m, n, k) / matmul_flops(*prev.mnk) > max_call_s:
                        continue
                    sq = m == n == k
                    p = last[dt, t] = measure_matmul(n, dt, dev, 5, m=None if sq else m, k=None if sq else k,
                                                     threads=t)
                    key = (dt, p.mnk, t)
                    if key not in best or p.best_flops_per_s > best[key].best_flops_per_s:
                        best[key] = p
                    ref = best.get(("float32", p.mnk, t))
                    if rnd == 0 and i == 0 and dt != "float32" and ref is not None and (
                            p.best_flops_per_s < EMULATED_BELOW * ref.best_flops_per_s):
                        slow.add(dt)
    return list(best.values())


def sweep_copy(copy_sizes: Iterable[int], add_sizes: Iterable[int] = (), threads: Iterable[int] | None = None,
               rounds: int = 3, device: torch.device | str | None = None) -> list[CopyPoint]:
    """Copies of each size and ``x + y`` of each ``add_sizes`` (bytes per buffer) on each thread
    count, ``rounds`` times; each point's best round, copies first, in size order.

    Raises:
        TypeError, ValueError: for an empty ``copy_sizes``, a size, thread count or ``rounds``
            that is not a positive int.
    """
    work = [("copy", s) for s in sorted(set(check_items("copy_sizes", _sizes("copy_sizes", copy_sizes))))]
    work += [("add", s) for s in sorted(set(_sizes("add_sizes", add_sizes)))]
    counts, dev = _checked(threads, rounds, device)
    best: dict[tuple, CopyPoint] = {}
    for _ in range(rounds):
        for op, size in work:
            bufs = _buffers(size, op, dev)  # one allocation for every thread count
            for t in counts:
                # a few repeats for buffers of 64 MiB and more: each call takes tens of ms
                p = _copy_point(bufs, 3 if size >= 1 << 26 else 5, t, dev)
                if (key := (op, p.nbytes, t)) not in best or p.best_bytes_per_s > best[key].best_bytes_per_s:
                    best[key] = p
            del bufs  # before the next size's: two 1 GiB sets would not fit everywhere
    return list(best.values())
