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

from perfkit._checks import check_int, check_real  # noqa: E402
from perfkit.roofline import attainable_flops, bound, matmul_bytes, matmul_flops  # noqa: E402
from perfkit.timing import benchmark, calibrate_number, resolve_device  # noqa: E402

__all__ = ["EMULATED_BELOW", "IMITATIONS", "METHOD", "CopyPoint", "MachineLimits", "MatmulPoint",
           "RooflinePoint", "cached_limits", "cpu_bf16", "default_limits_path", "device_name", "imitation",
           "last_level_cache_bytes", "matmul_roofline", "measure_copy", "measure_h2d",
           "measure_limits", "measure_matmul", "save_limits"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# How measure_limits measures: cached limits from another method are replaced, not merged.
METHOD = "2: best-of-sweep matmul; DRAM copy from buffers >= 4x the last-level cache"
# Below this share of fp32's ceiling a dtype is emulated (bf16 without avx512_bf16: ~0.01);
# converting to fp32 and back (AVX-512 without bf16 units) keeps ~0.5; native units double it.
EMULATED_BELOW = 0.25


def imitation() -> str | None:
    """The machine this process imitates (``$PERFKIT_IMITATE`` when perfkit was imported)."""
    return _IMITATE


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


def _entries(name: str, v: Iterable, dims: bool = False) -> list:
    """``v`` as a non-empty list (of positive ints if ``dims``); a lone string is refused."""
    if isinstance(v, str) or not isinstance(v, Iterable):
        raise TypeError(f"{name} must be a list, got {v!r}")
    if not (items := list(v)):
        raise ValueError(f"{name} must hold at least one entry, got none")
    for i, n in enumerate(items if dims else ()):
        check_int(f"{name}[{i}]", n, 1)
    return items


@dataclass(frozen=True)
class MatmulPoint:
    """One measured square matmul: size, dtype, median seconds and FLOP/s. ``best_flops_per_s``
    uses the fastest tenth of the repetitions (their 10th percentile time): what the machine
    does when nothing else competes for it, what a *ceiling* should be on a shared machine."""

    n: int
    dtype: str
    seconds: float
    flops_per_s: float
    best_flops_per_s: float


@dataclass(frozen=True)
class CopyPoint:
    """One measured copy: bytes per buffer, median seconds, bytes (read + written) per s,
    and the rate of the fastest tenth of repetitions (see :class:`MatmulPoint`)."""

    nbytes: int
    seconds: float
    bytes_per_s: float
    best_bytes_per_s: float


def measure_matmul(
    n: int, dtype: str | torch.dtype = "float32", device: torch.device | str | None = None,
    repeat: int = 7,
) -> MatmulPoint:
    """Median FLOP/s of an ``(n, n) @ (n, n)`` matmul in ``dtype`` on ``device``."""
    check_int("n", n, 1), check_int("repeat", repeat, 1)
    dev = resolve_device(device)
    dt = _dtype(dtype)
    a = torch.randn(n, n, device=dev).to(dt)  # (n, n)
    b = torch.randn(n, n, device=dev).to(dt)  # (n, n)
    out = torch.empty(n, n, device=dev, dtype=dt)
    fn = lambda: torch.mm(a, b, out=out)  # noqa: E731
    fn()  # oneDNN builds its kernel for this shape and dtype on the first call
    m = benchmark(fn, warmup=1, repeat=repeat, device=dev, number=calibrate_number(fn, 0.01, dev))
    flops = matmul_flops(n, n, n)
    return MatmulPoint(n, dtype_name(dt), m.median_s, m.rate(flops), flops / m.p10_s)


def measure_copy(nbytes: int, device: torch.device | str | None = None, repeat: int = 7) -> CopyPoint:
    """Copy bandwidth for one ``nbytes`` buffer, counting bytes read plus bytes written.

    STREAM's Copy kernel counts traffic this way: a copy of N bytes moves 2N bytes. (nccl-tests
    counts differently: its algbw is the buffer's size over the time, S / t.)
    """
    check_int("nbytes", nbytes, 1), check_int("repeat", repeat, 1)
    dev = resolve_device(device)
    numel = max(1, nbytes // 4)
    src = torch.rand(numel, device=dev)  # fp32, nbytes
    dst = torch.empty_like(src)
    fn = lambda: dst.copy_(src)  # noqa: E731
    m = benchmark(fn, warmup=1, repeat=repeat, device=dev, number=calibrate_number(fn, 0.01, dev))
    moved = 2 * numel * 4  # bytes: read src + write dst
    return CopyPoint(numel * 4, m.median_s, m.rate(moved), moved / m.p10_s)


def measure_h2d(nbytes: int, device: torch.device | str | None = None, repeat: int = 5) -> CopyPoint | None:
    """Host-to-device bandwidth from pinned memory; ``None`` when CUDA is absent."""
    check_int("nbytes", nbytes, 1), check_int("repeat", repeat, 1)
    if not torch.cuda.is_available():
        return None
    dev, numel = resolve_device(device or "cuda"), max(1, nbytes // 4)
    host = torch.rand(numel).pin_memory()  # pinned: DMA straight from host memory
    dst = torch.empty(numel, device=dev)
    m = benchmark(lambda: dst.copy_(host, non_blocking=True), warmup=2, repeat=repeat, device=dev)
    return CopyPoint(numel * 4, m.median_s, m.rate(numel * 4), numel * 4 / m.p10_s)


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
        matmul_flops: dtype name -> best measured matmul FLOP/s.
        copy_bytes_per_s: DRAM copy bandwidth, bytes read + written per second, from buffers
            at least 4x the last-level cache (STREAM's rule): no cache level holds them.
        h2d_bytes_per_s: pinned host-to-device bandwidth, ``None`` without CUDA.
        matmul_points, copy_points: the whole sweeps, for plots.
        cache_bytes_per_s, llc_bytes: the best copy of buffers that fit in half the last-level
            cache, and that cache's size (``None`` if unknown).
        method: how the ceilings were measured; limits measured another way are replaced,
            not merged (see :func:`save_limits`).
        cpu_bf16: :func:`cpu_bf16` where the limits were measured (``None`` on a GPU).
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

    def __post_init__(self) -> None:
        if not isinstance(self.matmul_flops, dict):
            raise TypeError(f"matmul_flops must be a dict of dtype name -> FLOP/s, got {self.matmul_flops!r}")
        for k, v in [*self.matmul_flops.items(), ("copy_bytes_per_s", self.copy_bytes_per_s)]:
            float(check_real(k if k == "copy_bytes_per_s" else f"matmul_flops[{k!r}]", v, 0, lo_open=True))

    def peak_flops(self, dtype: str | torch.dtype = "float32") -> float:
        """Measured matmul ceiling for ``dtype`` in FLOP/s."""
        name = dtype_name(dtype)
        if name not in self.matmul_flops:
            raise ValueError(f"dtype {name!r} was not measured; have {sorted(self.matmul_flops)}")
        return self.matmul_flops[name]

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

    def share_of_peak(self, flops_per_s: float, dtype: str | torch.dtype = "float32") -> float:
        """Achieved FLOP/s over the measured matmul ceiling (a fraction; MFU uses this)."""
        return check_real("flops_per_s", flops_per_s, 0) / self.peak_flops(dtype)

    def share_of_bandwidth(self, bytes_per_s: float) -> float:
        """Achieved bytes/s over the measured copy bandwidth (a fraction)."""
        return check_real("bytes_per_s", bytes_per_s, 0) / self.copy_bytes_per_s

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> MachineLimits:
        if not isinstance(d := json.loads(text), dict):
            raise ValueError(f"text must hold a JSON object of MachineLimits, got {text[:80]!r}")
        d["matmul_points"] = [MatmulPoint(**p) for p in d.get("matmul_points", [])]
        d["copy_points"] = [CopyPoint(**p) for p in d.get("copy_points", [])]
        return cls(**d)


def measure_limits(quick: bool = False, device: torch.device | str | None = None,
                   dtypes: Iterable[str] = ("float32", "bfloat16"), matmul_sizes: Iterable[int] | None = None,
                   copy_sizes: Iterable[int] | None = None, max_call_s: float = 1.0) -> MachineLimits:
    """Sweep matmul sizes per dtype and copy sizes; keep the best of each sweep. Each point is
    timed with :func:`perfkit.timing.benchmark`; a ceiling is the best point's fastest-tenth rate.

    Args:
        quick: smaller sweeps (a few seconds on a 2-core CPU).
        device, dtypes: ``None`` means CUDA if present, else CPU; matmul dtypes to measure.
        matmul_sizes, copy_sizes: override the sweeps (square sizes; bytes per buffer).
        max_call_s: sizes whose one call would exceed this (n^3 from the previous size) are
            skipped, absent from ``matmul_points``: bf16 without fast units would take minutes.

    Raises:
        TypeError, ValueError: for an unknown dtype, an empty list, or a size that is not
            a positive int; all checked before anything is measured.
    """
    dtypes = [dtype_name(dt) for dt in _entries("dtypes", dtypes)]
    dev = resolve_device(device)
    gpu = dev.type == "cuda"
    if matmul_sizes is None:
        matmul_sizes = [256, 512, 1024, 2048, 4096, 8192] if gpu else (
            [128, 256, 512] if quick else [128, 256, 512, 1024])
    llc = last_level_cache_bytes(dev)
    dram_min = 4 * (llc or 32 << 20)  # STREAM: each array at least 4x the last-level cache
    if copy_sizes is None:
        top = max(1 << 30 if gpu else 1 << 28, dram_min)
        copy_sizes = [1 << p for p in range(16, top.bit_length(), 2)]
    matmul_sizes = sorted(set(_entries("matmul_sizes", matmul_sizes, dims=True)))
    copy_sizes = sorted(set(_entries("copy_sizes", copy_sizes, dims=True)))
    float(check_real("max_call_s", max_call_s, 0, lo_open=True))
    if copy_sizes[-1] < dram_min:  # the DRAM ceiling needs one buffer no cache holds
        copy_sizes.append(1 << (dram_min - 1).bit_length())
    mm: list[MatmulPoint] = []
    for dt, n in ((dt, n) for dt in dtypes for n in matmul_sizes):
        last = mm[-1] if mm and mm[-1].dtype == dtype_name(dt) else None
        if last is None or last.seconds * (n / last.n) ** 3 <= max_call_s:
            mm.append(measure_matmul(n, dt, dev))
    cp = [measure_copy(s, dev) for s in copy_sizes]
    in_cache = [p.best_bytes_per_s for p in cp if llc and p.nbytes <= llc // 2]
    h2d = measure_h2d(1 << 28, dev) if gpu else None
    best = {dt: max(p.best_flops_per_s for p in mm if p.dtype == dtype_name(dt)) for dt in dtypes}
    return MachineLimits(
        device=str(dev), name=device_name(dev), matmul_flops=best,
        # Buffers no cache holds give the DRAM bandwidth a large tensor sees; a buffer only
        # twice the cache still partly hits in it and reads as much faster than DRAM.
        copy_bytes_per_s=max(p.best_bytes_per_s for p in cp if p.nbytes >= dram_min),
        h2d_bytes_per_s=h2d.best_bytes_per_s if h2d else None, matmul_points=mm, copy_points=cp,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cache_bytes_per_s=max(in_cache) if in_cache else None, llc_bytes=llc, method=METHOD,
        cpu_bf16=None if gpu else cpu_bf16())


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
    nbytes = matmul_bytes(n, n, n, _dtype(dtype).itemsize)
    flops = matmul_flops(n, n, n)
    peak, bw = limits.peak_flops(dtype), limits.copy_bytes_per_s
    return RooflinePoint(n, dtype_name(dtype), flops, nbytes, flops / nbytes,
                         attainable_flops(flops / nbytes, peak, bw), bound(flops / nbytes, peak, bw))


def default_limits_path() -> Path:
    """Where measured limits are cached: ``$PERFKIT_CACHE`` or ``~/.cache/perfkit``, one file
    per machine (an imitation has its own: the real machine's ceilings must not leak in)."""
    root = os.environ.get("PERFKIT_CACHE") or Path.home() / ".cache" / "perfkit"
    return Path(root) / f"machine_limits{'.' + imitation() if imitation() else ''}.json"


def save_limits(limits: MachineLimits, path: str | os.PathLike | None = None) -> Path:
    """Write ``limits`` to ``path`` (default :func:`default_limits_path`); return the path.
    A ceiling is what the machine *can* do, and load only ever makes a measurement slower:
    limits of the same device measured the same way (:data:`METHOD`) keep the higher of the
    old and new ceilings, each with the sweep that reached it. Limits measured another way
    are replaced: keeping their maximum would keep their error for good."""
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
            older = {k for k, v in limits.matmul_flops.items() if old.matmul_flops.get(k, 0.0) > v}
            copy_from = old if old.copy_bytes_per_s > limits.copy_bytes_per_s else limits
            limits = replace(
                limits, matmul_flops={k: old.matmul_flops[k] if k in older else v
                                      for k, v in limits.matmul_flops.items()},
                matmul_points=[p for p in limits.matmul_points if p.dtype not in older]
                + [p for p in old.matmul_points if p.dtype in older],
                copy_bytes_per_s=copy_from.copy_bytes_per_s, copy_points=copy_from.copy_points,
                cache_bytes_per_s=copy_from.cache_bytes_per_s, h2d_bytes_per_s=(max(
                    limits.h2d_bytes_per_s, old.h2d_bytes_per_s or 0.0) if limits.h2d_bytes_per_s else None))
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(limits.to_json())
    return p


def cached_limits(path: str | os.PathLike | None = None, quick: bool = False,
                  refresh: bool = False) -> MachineLimits:
    """Load limits measured earlier on this machine from ``path``, or measure and save (again
    for a file from another device or method, :data:`METHOD`): every result shares them."""
    p = Path(path) if path is not None else default_limits_path()
    dev = resolve_device(None)
    if p.exists() and not refresh:
        limits = MachineLimits.from_json(p.read_text())
        if (limits.device, limits.name, limits.method) == (str(dev), device_name(dev), METHOD):
            return limits
    save_limits(measure_limits(quick=quick, device=dev), p)
    return MachineLimits.from_json(p.read_text())
