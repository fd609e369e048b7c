"""The machine's own limits, measured: the ceilings every later result is a share of.

What matters is what *this* machine does under PyTorch, not a data sheet: dense matmul
FLOP/s per dtype, copy bandwidth (bytes read + written per second) and, with CUDA, pinned
host-to-device bandwidth, each the best of a sweep, kept in a :class:`MachineLimits` record
whose ceilings :mod:`perfkit.roofline` combines. ``$PERFKIT_IMITATE=no-bf16``, set before
any op runs, imitates a CPU without native bf16 (:data:`IMITATIONS`), always with an inductor
cache of its own (:mod:`perfkit.imitate`: kernels compiled for the native CPU crash the capped one).

Usage::

    from perfkit import hw
    limits = hw.measure_limits(quick=True)
    print(limits.share_of_peak(achieved_flops, "float32"))
"""

from __future__ import annotations

import json
import os
import platform
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

# The imitation's caps and compile cache go into the environment before torch's first op,
# inherited by every process started from here (perfkit.imitate says why the cache too).
from perfkit.imitate import IMITATIONS, imitation_env  # noqa: E402

if (_IMITATE := os.environ.get("PERFKIT_IMITATE") or None) not in (None, *IMITATIONS):
    raise ValueError(f"PERFKIT_IMITATE must be one of {sorted(IMITATIONS)} or unset, got {_IMITATE!r}")
if _IMITATE or "ATEN_CPU_CAPABILITY" not in os.environ:  # capped by hand: the caller's cache
    os.environ.update(imitation_env(_IMITATE))
import torch  # noqa: E402  (after the cap above)

if _IMITATE and torch.backends.cpu.get_cpu_capability() != "AVX2":
    warnings.warn(f"PERFKIT_IMITATE={_IMITATE} came after torch's first op: its kernels are native. "
                  "Set it before Python starts.", stacklevel=2)

from perfkit._checks import check_int, check_items, check_real  # noqa: E402
from perfkit._files import write_atomic  # noqa: E402
from perfkit.hw_sweep import (  # noqa: E402  (re-exported: hw is where the course finds them)
    ADD_OVER_COPY,
    COURSE_SHAPES,
    EMULATED_BELOW,
    GRAIN,
    CopyPoint,
    MatmulPoint,
    credited_dram,
    dtype_name,
    faster_copy_points,
    measure_copy,
    measure_h2d,
    measure_matmul,
    sweep_copy,
    sweep_matmul,
    thread_counts,
)
from perfkit.roofline import attainable_flops, bound, matmul_bytes, matmul_flops  # noqa: E402
from perfkit.timing import resolve_device  # noqa: E402

__all__ = ["ADD_OVER_COPY", "COURSE_SHAPES", "EMULATED_BELOW", "GRAIN", "IMITATIONS", "METHOD", "CopyPoint",
           "MachineLimits", "MatmulPoint", "RooflinePoint", "cached_limits", "cpu_bf16", "credited_dram",
           "default_limits_path", "device_name", "dtype_name", "faster_copy_points", "imitation",
           "last_level_cache_bytes", "matmul_roofline", "measure_copy", "measure_h2d", "measure_limits",
           "measure_matmul", "save_limits", "sweep_copy", "sweep_matmul", "thread_counts"]

# How measure_limits measures: cached limits from another method are replaced, not merged.
METHOD = ("4: best of rounds of square and course-shaped matmuls on 1 and all threads; DRAM from warm "
          "copies of buffers >= 4x the last-level cache (at most 1 GiB), or adds credited <= 9/8 of the copy")


def imitation() -> str | None:
    """The machine this process imitates (``$PERFKIT_IMITATE`` when perfkit was imported)."""
    return _IMITATE


def last_level_cache_bytes(device: torch.device | str | None = None) -> int | None:
    """Size of the last cache level the device's cores share (a GPU's L2), ``None`` if unknown;
    on Linux from ``/sys/devices/system/cpu/cpu0/cache`` (``getconf``'s may be the package's)."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", None) or None
    best: tuple[int, int] | None = None
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, text = int((d / "level").read_text()), (d / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        size = int(text.rstrip("KMGkmg")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:].upper(), 1)
        best = max(best or (level, size), (level, size))
    return best[1] if best else None


def _cpuinfo(key: str) -> str | None:
    """The first ``key : value`` of ``/proc/cpuinfo``; ``None`` without it (not Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.split(":")[0].strip() == key), None)
    except OSError:
        return None


def device_name(device: torch.device | str | None = None) -> str:
    """The GPU's name, or the CPU's model, logical cores and the machine it imitates."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    cpu = _cpuinfo("model name") or platform.processor() or platform.machine()
    return f"{cpu} ({os.cpu_count()} logical cores{f', imitating {_IMITATE}' if _IMITATE else ''})"


def cpu_bf16() -> str | None:
    """bf16 by this CPU's flags (a load cannot blur them): ``"native"`` (avx512_bf16, amx_bf16),
    ``"converted"`` (AVX-512), ``"emulated"`` (neither, or imitating no-bf16), ``None`` if unknown."""
    flags = set((_cpuinfo("flags") or "").split())
    if _IMITATE == "no-bf16" or (flags and "avx512f" not in flags):
        return "emulated"
    return None if not flags else "native" if flags & {"avx512_bf16", "amx_bf16"} else "converted"


@dataclass(frozen=True)
class MachineLimits:
    """The best throughput each sweep reached on this machine: the ceilings.

    Attributes:
        device, name: ``"cpu"`` or ``"cuda:0"``, and what it is (see :func:`device_name`).
        matmul_flops: dtype name -> best measured matmul FLOP/s, on any thread count.
        copy_bytes_per_s: DRAM bandwidth, bytes counted per second (a copy counts its buffer
            twice, ``x + y`` three times), the best copy or add of buffers at least 4x the
            last-level cache (STREAM's rule: no cache level holds them; at most 1 GiB), an add
            credited at most 9/8 of the copy (:func:`credited_dram`).
        h2d_bytes_per_s: pinned host-to-device bandwidth, ``None`` without CUDA.
        matmul_points, copy_points: the square-matmul and copy sweeps, for plots.
        cache_bytes_per_s, llc_bytes: the best copy of buffers that fit in half the last-level
            cache, and that cache's size (``None`` if unknown).
        method: how the ceilings were measured; limits measured another way are replaced,
            not merged (see :func:`save_limits`).
        cpu_bf16: :func:`cpu_bf16` where the limits were measured (``None`` on a GPU).
        threads: the intra-op threads of "all cores" (``None`` on a GPU).
        one_thread_flops: dtype name -> best matmul FLOP/s on one thread (see :meth:`peak_flops`).
        shape_points: the course's matmul shapes (:data:`COURSE_SHAPES`), each on each thread count.
        dram_nbytes, cache_nbytes: the buffer sizes the DRAM and cache ceilings came from.
        sources: ceiling -> where it came from (``"float32"``, ``"float32, 1 thread"``,
            ``"dram"``, ``"cache"``): a sweep point, or the operation that raised it
            (:func:`perfkit.ceilings.observe`).
    """

    device: str
    name: str
    matmul_flops: dict[str, float]
    copy_bytes_per_s: float
    h2d_bytes_per_s: float | None = None
    matmul_points: list[MatmulPoint] = field(default_factory=list)
    copy_points: list[CopyPoint] = field(default_factory=list)
    measured_at: str = ""
    cache_bytes_per_s: float | None = None
    llc_bytes: int | None = None
    method: str = ""
    cpu_bf16: str | None = None
    threads: int | None = None
    one_thread_flops: dict[str, float] = field(default_factory=dict)
    shape_points: list[MatmulPoint] = field(default_factory=list)
    dram_nbytes: int | None = None
    cache_nbytes: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("matmul_flops", "one_thread_flops"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a dict of dtype name -> FLOP/s, got {getattr(self, name)!r}")
        for k, v in [*self.matmul_flops.items(), ("copy_bytes_per_s", self.copy_bytes_per_s)]:
            float(check_real(k if k == "copy_bytes_per_s" else f"matmul_flops[{k!r}]", v, 0, lo_open=True))
        for k, v in self.one_thread_flops.items():
            float(check_real(f"one_thread_flops[{k!r}]", v, 0, lo_open=True))

    def peak_flops(self, dtype: str | torch.dtype = "float32", threads: int | None = None) -> float:
        """Measured matmul ceiling for ``dtype`` in FLOP/s, on ``threads`` intra-op threads
        (``None``: all cores). ``t`` threads do at most ``t`` times one thread's ceiling and at
        most all cores' (the one-thread ceiling is measured, not all cores' over the core count:
        one thread alone often runs faster than its share of all of them)."""
        name = dtype_name(dtype)
        if name not in self.matmul_flops:
            raise ValueError(f"dtype {name!r} was not measured; have {sorted(self.matmul_flops)}")
        every = self.matmul_flops[name]
        if threads is None or check_int("threads", threads, 1) >= (self.threads or 1):
            return every
        one = self.one_thread_flops.get(name)
        return every if one is None else min(every, threads * one)

    def thread_share(self, threads: int, dtype: str | torch.dtype = "float32") -> float:
        """The share of the all-cores ceiling ``threads`` threads can reach: ``peak_flops(dtype,
        threads) / peak_flops(dtype)``, for code that scales one ceiling by a share."""
        return self.peak_flops(dtype, threads) / self.peak_flops(dtype)

    def support(self, dtype: str | torch.dtype) -> str:
        """``"native"``, ``"converted"`` or ``"emulated"``: ``dtype``'s arithmetic here, from
        its measured ceiling over fp32's (emulated below :data:`EMULATED_BELOW`; native at
        or above fp32's; converted between: computed in fp32, stored in ``dtype``), and for
        bf16 no better than the CPU's flags allow (:attr:`cpu_bf16`)."""
        kinds = ["emulated", "converted", "native"]
        ratio = self.peak_flops(dtype) / self.peak_flops("float32")
        flags = self.cpu_bf16 if dtype_name(dtype) == "bfloat16" and self.cpu_bf16 in kinds else "native"
        return kinds[min((ratio >= EMULATED_BELOW) + (ratio >= 1.0), kinds.index(flags))]

    def ridge_point(self, dtype: str | torch.dtype = "float32") -> float:
        """FLOP/byte where the roofline turns from memory- to compute-bound."""
        return self.peak_flops(dtype) / self.copy_bytes_per_s

    def attainable(self, intensity: float, dtype: str | torch.dtype = "float32") -> float:
        """Roofline ceiling in FLOP/s for an operation of ``intensity`` FLOP/byte."""
        return attainable_flops(intensity, self.peak_flops(dtype), self.copy_bytes_per_s)

    def share_of_peak(self, flops_per_s: float, dtype: str | torch.dtype = "float32",
                      threads: int | None = None) -> float:
        """Achieved FLOP/s over the matmul ceiling on ``threads`` (a fraction; MFU uses this).
        Above 1 the rate beat the ceiling: :func:`perfkit.ceilings.observe` raises it first, so
        that a printed share never exceeds 100 %."""
        return check_real("flops_per_s", flops_per_s, 0) / self.peak_flops(dtype, threads)

    def share_of_bandwidth(self, bytes_per_s: float) -> float:
        """Achieved bytes/s over the measured DRAM bandwidth (a fraction; see :meth:`share_of_peak`)."""
        return check_real("bytes_per_s", bytes_per_s, 0) / self.copy_bytes_per_s

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> MachineLimits:
        if not isinstance(d := json.loads(text), dict):
            raise ValueError(f"text must hold a JSON object of MachineLimits, got {text[:80]!r}")
        for key, kind in (("matmul_points", MatmulPoint), ("shape_points", MatmulPoint),
                          ("copy_points", CopyPoint)):
            d[key] = [kind(**p) for p in d.get(key, [])]
        return cls(**d)


def measure_limits(quick: bool = False, device: torch.device | str | None = None,
                   dtypes: Iterable[str] = ("float32", "bfloat16"), matmul_sizes: Iterable[int] | None = None,
                   copy_sizes: Iterable[int] | None = None, max_call_s: float = 1.0,
                   rounds: int | None = None, shapes: Iterable[tuple[int, int, int]] = COURSE_SHAPES,
                   ) -> MachineLimits:
    """Sweep matmuls (square sizes and :data:`COURSE_SHAPES`) per dtype and copies, on every
    thread count the notebooks use (:func:`thread_counts`), ``rounds`` times; keep the best of
    each. A ceiling is the best point's fastest-tenth rate (:func:`sweep_matmul`, :func:`sweep_copy`).

    Args:
        quick: smaller sweeps and 2 rounds (seconds on a 2-core CPU), DRAM buffers at most 256 MiB.
        device, dtypes: ``None`` means CUDA if present, else CPU; matmul dtypes to measure.
        matmul_sizes, copy_sizes: override the sweeps (square sizes; bytes per buffer); a DRAM
            size is added when no copy size reaches 4x the last-level cache (or the cap).
        max_call_s: points whose one call would exceed this are skipped (:func:`sweep_matmul`).
        rounds: sweeps of everything (default 2 with ``quick``, else 3).
        shapes: the ``(m, n, k)`` matmuls swept besides square ones.

    Raises:
        TypeError, ValueError: for an unknown dtype, an empty list, or a size or ``rounds``
            that is not a positive int; all checked before anything is measured.
    """
    dtypes = [dtype_name(dt) for dt in check_items("dtypes", dtypes)]
    dev = resolve_device(device)
    gpu = dev.type == "cuda"
    if matmul_sizes is None:
        matmul_sizes = [256, 512, 1024, 2048, 4096, 8192] if gpu else (
            [128, 256, 512] if quick else [128, 256, 512, 1024, 2048])
    llc = last_level_cache_bytes(dev)
    # STREAM: each array at least 4x the last-level cache; capped, as a VM may report its host's
    # whole L3 (480 MiB: 2 GiB buffers), and a capped buffer can only read faster: still a ceiling
    dram_min = min(4 * (llc or 32 << 20), 1 << (28 if quick else 30))
    if copy_sizes is None:
        copy_sizes = [1 << p for p in range(16, 29, 2)]
    sizes = {name: sorted({check_int(f"{name}[{i}]", n, 1) for i, n in enumerate(check_items(name, v))})
             for name, v in (("matmul_sizes", matmul_sizes), ("copy_sizes", copy_sizes))}
    matmul_sizes, copy_sizes = sizes["matmul_sizes"], sizes["copy_sizes"]
    float(check_real("max_call_s", max_call_s, 0, lo_open=True))
    rounds = check_int("rounds", (2 if quick else 3) if rounds is None else rounds, 1)
    if copy_sizes[-1] < dram_min:  # the DRAM ceiling needs one buffer no cache holds
        copy_sizes.append(1 << (dram_min - 1).bit_length())
    dram = [s for s in copy_sizes if s >= dram_min]
    mm = sweep_matmul(dtypes, matmul_sizes, shapes, None, rounds, max_call_s, dev)
    cp = sweep_copy(copy_sizes, dram[:1], None, rounds, dev)
    h2d = measure_h2d(1 << 28, dev) if gpu else None
    every = torch.get_num_threads() if not gpu else None
    best = {dt: max((p for p in mm if p.dtype == dt), key=lambda p: p.best_flops_per_s) for dt in dtypes}
    one = {dt: max(ps, key=lambda p: p.best_flops_per_s) for dt in dtypes
           if (ps := [p for p in mm if p.dtype == dt and p.threads == 1]) and every and every > 1}
    top = max((p for p in cp if p.nbytes >= dram_min), key=lambda p: p.best_bytes_per_s)
    dram_rate, dram_src = credited_dram(top.best_bytes_per_s, top.where, cp, top.nbytes)  # x + y: <= 9/8 copy
    in_cache = [p for p in cp if llc and p.nbytes <= llc // 2 and p.op == "copy"]
    cache = max(in_cache, key=lambda p: p.best_bytes_per_s) if in_cache else None
    sources = {**{dt: p.where for dt, p in best.items()},
               **{f"{dt}, 1 thread": p.where for dt, p in one.items()},
               "dram": dram_src, **({"cache": cache.where} if cache else {})}
    return MachineLimits(
        device=str(dev), name=device_name(dev),
        matmul_flops={dt: p.best_flops_per_s for dt, p in best.items()},
        copy_bytes_per_s=dram_rate, h2d_bytes_per_s=h2d.best_bytes_per_s if h2d else None,
        matmul_points=[p for p in mm if p.square], copy_points=cp,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cache_bytes_per_s=cache.best_bytes_per_s if cache else None, llc_bytes=llc, method=METHOD,
        cpu_bf16=None if gpu else cpu_bf16(), threads=every,
        one_thread_flops={dt: p.best_flops_per_s for dt, p in one.items()},
        shape_points=[p for p in mm if not p.square], dram_nbytes=top.nbytes,
        cache_nbytes=cache.nbytes if cache else None, sources=sources)


@dataclass(frozen=True)
class RooflinePoint:
    """Where a square matmul of size ``n`` sits on this machine's roofline."""

    n: int
    dtype: str
    flops: int  # FLOPs of one matmul
    bytes: int  # minimum bytes moved
    intensity: float  # FLOP/byte
    attainable_flops: float  # FLOP/s, the roofline's ceiling at this intensity
    bound: str  # "memory" or "compute"

    @property
    def predicted_s(self) -> float:  # s: the fastest one matmul can run at the roofline
        return self.flops / self.attainable_flops


def matmul_roofline(n: int, dtype: str, limits: MachineLimits) -> RooflinePoint:
    """Predict a square ``n`` matmul in ``dtype`` from the measured ceilings alone."""
    check_int("n", n, 1)  # before matmul_bytes, whose message would name its own m
    if not isinstance(limits, MachineLimits):
        raise TypeError(f"limits must be a MachineLimits, got {type(limits).__name__}")
    nbytes = matmul_bytes(n, n, n, getattr(torch, dtype_name(dtype)).itemsize)
    flops = matmul_flops(n, n, n)
    peak, bw = limits.peak_flops(dtype), limits.copy_bytes_per_s
    return RooflinePoint(n, dtype_name(dtype), flops, nbytes, flops / nbytes,
                         attainable_flops(flops / nbytes, peak, bw), bound(flops / nbytes, peak, bw))


def default_limits_path() -> Path:
    """Where measured limits are cached: ``$PERFKIT_CACHE`` or ``~/.cache/perfkit``, one file
    per machine (an imitation has its own: the real machine's ceilings must not leak in)."""
    root = os.environ.get("PERFKIT_CACHE") or Path.home() / ".cache" / "perfkit"
    return Path(root) / f"machine_limits{'.' + imitation() if imitation() else ''}.json"


def _merged(new: MachineLimits, old: MachineLimits) -> MachineLimits:
    """Each ceiling at the higher of ``new`` and ``old`` with its own source, each dtype's sweep from
    the limits that reached its ceiling, each copy point at its faster run (:func:`faster_copy_points`:
    a record's faster DRAM ceiling does not bring its slower copies along); DRAM's ceiling from the
    larger buffers where the two differ."""
    older = {k for k, v in new.matmul_flops.items() if old.matmul_flops.get(k, 0.0) > v}
    ones_old = {k for k, v in old.one_thread_flops.items()
                if k in new.matmul_flops and v > new.one_thread_flops.get(k, 0.0)}
    # DRAM: the larger buffer's figure (a smaller one may partly sit in cache), then the higher
    dram = max((new, old), key=lambda lim: (lim.dram_nbytes or 0, lim.copy_bytes_per_s))
    cache = old if (old.cache_bytes_per_s or 0.0) > (new.cache_bytes_per_s or 0.0) else new
    src_from = {**{k: old if k in older else new for k in new.matmul_flops},
                **{f"{k}, 1 thread": old if k in ones_old else new for k in new.matmul_flops},
                "dram": dram, "cache": cache}

    def points(name: str) -> list[MatmulPoint]:  # each dtype's sweep from the limits that set its ceiling
        return ([p for p in getattr(new, name) if p.dtype not in older]
                + [p for p in getattr(old, name) if p.dtype in older])

    return replace(
        new, matmul_flops={k: max(v, old.matmul_flops.get(k, 0.0)) for k, v in new.matmul_flops.items()},
        one_thread_flops={k: (old if k in ones_old else new).one_thread_flops[k] for k in new.matmul_flops
                          if k in ones_old or k in new.one_thread_flops},
        matmul_points=points("matmul_points"), shape_points=points("shape_points"),
        copy_bytes_per_s=dram.copy_bytes_per_s, dram_nbytes=dram.dram_nbytes,
        copy_points=faster_copy_points(old.copy_points, new.copy_points),
        cache_bytes_per_s=cache.cache_bytes_per_s, cache_nbytes=cache.cache_nbytes,
        h2d_bytes_per_s=max(new.h2d_bytes_per_s, old.h2d_bytes_per_s or 0.0) if new.h2d_bytes_per_s else None,
        sources={k: v for k, lim in src_from.items() if (v := lim.sources.get(k))})


def save_limits(limits: MachineLimits, path: str | os.PathLike | None = None) -> Path:
    """Write ``limits`` to ``path`` (default :func:`default_limits_path`); return the path.
    A ceiling is what the machine *can* do, and load slows a measurement: limits of the same
    device measured the same way (:data:`METHOD`) keep the higher of the old and new figures,
    each ceiling and copy point with its own source (:func:`_merged`). The highest of many runs
    is also their luckiest, so two rules bound what it can keep: limits measured another way are
    replaced (keeping their maximum would keep their error for good), and the DRAM ceiling is
    credited at most 9/8 of the fastest copy of its buffers (:func:`credited_dram`)."""
    if not isinstance(limits, MachineLimits):
        raise TypeError(f"limits must be a MachineLimits, got {type(limits).__name__}")
    p = Path(path) if path is not None else default_limits_path()
    if p.exists():
        try:
            old = MachineLimits.from_json(p.read_text())
        except (ValueError, TypeError, KeyError):
            old = None  # unreadable or from an older perfkit: replace it
        if old is not None and (old.device, old.name, old.method) == (
                limits.device, limits.name, limits.method):
            limits = _merged(limits, old)
    rate, src = credited_dram(limits.copy_bytes_per_s, limits.sources.get("dram", "the DRAM ceiling"),
                              limits.copy_points, limits.dram_nbytes)
    if rate < limits.copy_bytes_per_s:
        limits = replace(limits, copy_bytes_per_s=rate, sources={**limits.sources, "dram": src})
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(p, limits.to_json())  # whole: a notebook or a test may read it now


def cached_limits(path: str | os.PathLike | None = None, quick: bool = False,
                  refresh: bool = False) -> MachineLimits:
    """Load limits measured earlier on this machine from ``path``, or measure and save (again
    for a file from another device or method, :data:`METHOD`, or an unreadable one): every
    result shares them."""
    p = Path(path) if path is not None else default_limits_path()
    dev = resolve_device(None)
    if p.exists() and not refresh:
        try:
            limits = MachineLimits.from_json(p.read_text())
        except (ValueError, TypeError, KeyError):
            limits = None  # from an older perfkit: measured again
        if limits and (limits.device, limits.name, limits.method) == (str(dev), device_name(dev), METHOD):
            return limits
    save_limits(measure_limits(quick=quick, device=dev), p)
    return MachineLimits.from_json(p.read_text())
