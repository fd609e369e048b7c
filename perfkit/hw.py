"""The machine's own limits, measured: the ceilings every later result is a share of.

A vendor's data sheet says what a chip could do; what matters for a course that runs on
the reader's laptop is what *this* machine does under PyTorch. This module measures

* dense matmul throughput (FLOP/s) per dtype over a sweep of sizes,
* memory copy bandwidth (bytes read + written per second) over a sweep of sizes,
* host-to-device bandwidth from pinned memory, when CUDA is present,

and keeps the best of each sweep in a :class:`MachineLimits` record. The roofline model
(Williams, Waterman and Patterson, 2009) combines the two ceilings: an operation that
does ``I`` FLOPs per byte moved can reach at most ``min(peak_flops, I * bandwidth)``.

Usage::

    from perfkit import hw
    limits = hw.measure_limits(quick=True)
    print(limits.share_of_peak(achieved_flops, "float32"))
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

from perfkit.timing import benchmark, calibrate_number, resolve_device

__all__ = [
    "CopyPoint",
    "MachineLimits",
    "MatmulPoint",
    "RooflinePoint",
    "attainable_flops",
    "bound",
    "cached_limits",
    "default_limits_path",
    "device_name",
    "matmul_bytes",
    "matmul_flops",
    "matmul_intensity",
    "matmul_roofline",
    "measure_copy",
    "measure_h2d",
    "measure_limits",
    "measure_matmul",
    "percent_of_limit",
    "save_limits",
]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    return _DTYPES[dtype]


def _dtype_name(dtype: str | torch.dtype) -> str:
    return str(_dtype(dtype)).removeprefix("torch.")


# --- the model: FLOPs, bytes, arithmetic intensity, roofline --------------------------


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of ``(m, k) @ (k, n)``: one multiply and one add per inner-product term."""
    _check_dims(m=m, n=n, k=k)
    return 2 * m * n * k


def matmul_bytes(m: int, n: int, k: int, bytes_per_element: int = 4) -> int:
    """Minimum bytes moved by ``(m, k) @ (k, n)``: read A and B once, write C once."""
    _check_dims(m=m, n=n, k=k)
    if bytes_per_element <= 0:
        raise ValueError(f"bytes_per_element must be > 0, got {bytes_per_element}")
    return (m * k + k * n + m * n) * bytes_per_element


def matmul_intensity(m: int, n: int, k: int, bytes_per_element: int = 4) -> float:
    """Arithmetic intensity of a matmul in FLOP/byte (a square fp32 one: ``n / 6``)."""
    return matmul_flops(m, n, k) / matmul_bytes(m, n, k, bytes_per_element)


def _check_dims(**dims: int) -> None:
    for name, v in dims.items():
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline: ``min(peak_flops, intensity * bandwidth)`` in FLOP/s.

    Args:
        intensity: FLOPs per byte moved (> 0).
        peak_flops: compute ceiling in FLOP/s.
        bandwidth: memory ceiling in bytes/s.
    """
    if intensity <= 0:
        raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak_flops and bandwidth must be > 0")
    return min(peak_flops, intensity * bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """``"memory"`` below the ridge point ``peak_flops / bandwidth``, else ``"compute"``."""
    if intensity <= 0:
        raise ValueError(f"intensity must be > 0 FLOP/byte, got {intensity}")
    return "memory" if intensity < peak_flops / bandwidth else "compute"


def percent_of_limit(value: float, limit: float) -> float:
    """``100 * value / limit``: how much of a measured ceiling a result reaches."""
    if limit <= 0:
        raise ValueError(f"limit must be > 0, got {limit}")
    return 100.0 * value / limit


# --- measurements -----------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulPoint:
    """One measured square matmul: size, dtype, median seconds and FLOP/s.

    ``best_flops_per_s`` uses the fastest tenth of the repetitions (their 10th
    percentile time): what the machine does when nothing else competes for it, which is
    what a *ceiling* should be on a shared, noisy machine.
    """

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
    _check_dims(n=n)
    dev = resolve_device(device)
    dt = _dtype(dtype)
    a = torch.randn(n, n, device=dev).to(dt)  # (n, n)
    b = torch.randn(n, n, device=dev).to(dt)  # (n, n)
    out = torch.empty(n, n, device=dev, dtype=dt)
    def fn() -> None:
        torch.mm(a, b, out=out)

    fn()  # oneDNN builds its kernel for this shape and dtype on the first call
    m = benchmark(fn, warmup=1, repeat=repeat, device=dev,
                  number=calibrate_number(fn, 0.01, dev))
    flops = matmul_flops(n, n, n)
    return MatmulPoint(n, _dtype_name(dt), m.median_s, m.rate(flops), flops / m.p10_s)


def measure_copy(
    nbytes: int, device: torch.device | str | None = None, repeat: int = 7
) -> CopyPoint:
    """Copy bandwidth for one ``nbytes`` buffer, counting bytes read plus bytes written.

    nccl-tests and STREAM count traffic the same way: a copy of N bytes moves 2N bytes.
    """
    _check_dims(nbytes=nbytes)
    dev = resolve_device(device)
    numel = max(1, nbytes // 4)
    src = torch.rand(numel, device=dev)  # fp32, nbytes
    dst = torch.empty_like(src)
    def fn() -> None:
        dst.copy_(src)

    m = benchmark(fn, warmup=1, repeat=repeat, device=dev,
                  number=calibrate_number(fn, 0.01, dev))
    moved = 2 * numel * 4  # bytes: read src + write dst
    return CopyPoint(numel * 4, m.median_s, m.rate(moved), moved / m.p10_s)


def measure_h2d(nbytes: int, device: torch.device | str | None = None,
                repeat: int = 5) -> CopyPoint | None:
    """Host-to-device bandwidth from pinned memory; ``None`` when CUDA is absent."""
    if not torch.cuda.is_available():
        return None
    _check_dims(nbytes=nbytes)
    dev = resolve_device(device or "cuda")
    numel = max(1, nbytes // 4)
    host = torch.rand(numel).pin_memory()  # pinned: DMA straight from host memory
    dst = torch.empty(numel, device=dev)
    m = benchmark(lambda: dst.copy_(host, non_blocking=True), warmup=2, repeat=repeat,
                  device=dev)
    return CopyPoint(numel * 4, m.median_s, m.rate(numel * 4), numel * 4 / m.p10_s)


def device_name(device: torch.device | str | None = None) -> str:
    """A human-readable name: the GPU's name, or the CPU's model and logical core count."""
    dev = resolve_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu} ({os.cpu_count()} logical cores)"


@dataclass(frozen=True)
class MachineLimits:
    """The best throughput each sweep reached on this machine: the ceilings.

    Attributes:
        device: ``"cpu"`` or ``"cuda:0"``.
        name: what the device is (see :func:`device_name`).
        matmul_flops: dtype name -> best measured matmul FLOP/s.
        copy_bytes_per_s: best copy bandwidth, bytes read + written per second.
        h2d_bytes_per_s: pinned host-to-device bandwidth, ``None`` without CUDA.
        matmul_points, copy_points: the whole sweeps, for plots.
    """

    device: str
    name: str
    matmul_flops: dict[str, float]
    copy_bytes_per_s: float
    h2d_bytes_per_s: float | None = None
    matmul_points: list[MatmulPoint] = field(default_factory=list)
    copy_points: list[CopyPoint] = field(default_factory=list)
    measured_at: str = ""

    def peak_flops(self, dtype: str | torch.dtype = "float32") -> float:
        """Measured matmul ceiling for ``dtype`` in FLOP/s."""
        name = _dtype_name(dtype)
        if name not in self.matmul_flops:
            raise ValueError(f"dtype {name!r} was not measured; have {sorted(self.matmul_flops)}")
        return self.matmul_flops[name]

    def ridge_point(self, dtype: str | torch.dtype = "float32") -> float:
        """FLOP/byte where the roofline turns from memory- to compute-bound."""
        return self.peak_flops(dtype) / self.copy_bytes_per_s

    def attainable(self, intensity: float, dtype: str | torch.dtype = "float32") -> float:
        """Roofline ceiling in FLOP/s for an operation of ``intensity`` FLOP/byte."""
        return attainable_flops(intensity, self.peak_flops(dtype), self.copy_bytes_per_s)

    def share_of_peak(self, flops_per_s: float, dtype: str | torch.dtype = "float32") -> float:
        """Achieved FLOP/s over the measured matmul ceiling (a fraction; MFU uses this)."""
        return flops_per_s / self.peak_flops(dtype)

    def share_of_bandwidth(self, bytes_per_s: float) -> float:
        """Achieved bytes/s over the measured copy bandwidth (a fraction)."""
        return bytes_per_s / self.copy_bytes_per_s

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> MachineLimits:
        d = json.loads(text)
        d["matmul_points"] = [MatmulPoint(**p) for p in d.get("matmul_points", [])]
        d["copy_points"] = [CopyPoint(**p) for p in d.get("copy_points", [])]
        return cls(**d)


def measure_limits(
    quick: bool = False,
    device: torch.device | str | None = None,
    dtypes: Iterable[str] = ("float32", "bfloat16"),
    matmul_sizes: Iterable[int] | None = None,
    copy_sizes: Iterable[int] | None = None,
) -> MachineLimits:
    """Sweep matmul sizes per dtype and copy sizes; keep the best of each sweep.

    Each point is timed with :func:`perfkit.timing.benchmark` (warm-up, batched calls,
    repeated); a ceiling is the best point's fastest-tenth rate (see :class:`MatmulPoint`).

    Args:
        quick: smaller sweeps (a few seconds on a 2-core CPU).
        device: ``None`` means CUDA if present, else CPU.
        dtypes: matmul dtypes to measure.
        matmul_sizes, copy_sizes: override the sweeps (square sizes; bytes per buffer).
    """
    dev = resolve_device(device)
    gpu = dev.type == "cuda"
    if matmul_sizes is None:
        matmul_sizes = [256, 512, 1024, 2048, 4096, 8192] if gpu else (
            [128, 256, 512] if quick else [128, 256, 512, 1024])
    if copy_sizes is None:
        top = 1 << 30 if gpu else 1 << 28
        copy_sizes = [1 << p for p in range(16, top.bit_length(), 2)]
    mm = [measure_matmul(n, dt, dev) for dt in dtypes for n in matmul_sizes]
    cp = [measure_copy(s, dev) for s in copy_sizes]
    h2d = measure_h2d(1 << 28, dev) if gpu else None
    best = {dt: max(p.best_flops_per_s for p in mm if p.dtype == _dtype_name(dt))
            for dt in dtypes}
    return MachineLimits(
        device=str(dev),
        name=device_name(dev),
        matmul_flops=best,
        # The two largest buffers give the sustained DRAM bandwidth; small ones that fit
        # in cache run faster, and that cache speed is not the ceiling a big tensor sees.
        copy_bytes_per_s=max(p.best_bytes_per_s for p in sorted(cp, key=lambda p: p.nbytes)[-2:]),
        h2d_bytes_per_s=h2d.best_bytes_per_s if h2d else None,
        matmul_points=mm,
        copy_points=cp,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


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
    def predicted_s(self) -> float:
        """Fastest possible time for one matmul at the roofline, in seconds."""
        return self.flops / self.attainable_flops


def matmul_roofline(n: int, dtype: str, limits: MachineLimits) -> RooflinePoint:
    """Predict a square ``n`` matmul in ``dtype`` from the measured ceilings alone."""
    nbytes = matmul_bytes(n, n, n, _dtype(dtype).itemsize)
    flops = matmul_flops(n, n, n)
    peak, bw = limits.peak_flops(dtype), limits.copy_bytes_per_s
    return RooflinePoint(n, _dtype_name(dtype), flops, nbytes, flops / nbytes,
                         attainable_flops(flops / nbytes, peak, bw), bound(flops / nbytes, peak, bw))


def default_limits_path() -> Path:
    """Where measured limits are cached: ``$PERFKIT_CACHE`` or ``~/.cache/perfkit``.

    The limits belong to the machine, not to a project folder, so every notebook and
    script on this machine shares one file.
    """
    root = os.environ.get("PERFKIT_CACHE") or Path.home() / ".cache" / "perfkit"
    return Path(root) / "machine_limits.json"


def save_limits(limits: MachineLimits, path: str | os.PathLike | None = None) -> Path:
    """Write ``limits`` to ``path`` (default :func:`default_limits_path`); return the path.

    A ceiling is what the machine *can* do, and load from other programs only ever makes a
    measurement slower. So when the file already holds limits of the same device, each
    ceiling keeps the higher of the old and new values (the sweeps are the new ones): one
    measurement taken while the machine was busy cannot lower the ceilings for good.
    """
    p = Path(path) if path is not None else default_limits_path()
    if p.exists():
        try:
            old = MachineLimits.from_json(p.read_text())
        except (ValueError, TypeError, KeyError):
            old = None  # unreadable or from an older perfkit: replace it
        if old is not None and (old.device, old.name) == (limits.device, limits.name):
            limits = replace(
                limits,
                matmul_flops={k: max(v, old.matmul_flops.get(k, 0.0))
                              for k, v in limits.matmul_flops.items()},
                copy_bytes_per_s=max(limits.copy_bytes_per_s, old.copy_bytes_per_s),
                h2d_bytes_per_s=(max(limits.h2d_bytes_per_s, old.h2d_bytes_per_s or 0.0)
                                 if limits.h2d_bytes_per_s else None),
            )
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(limits.to_json())
    return p


def cached_limits(path: str | os.PathLike | None = None, quick: bool = False,
                  refresh: bool = False) -> MachineLimits:
    """Load limits measured earlier on this machine from ``path``, or measure and save.

    Later notebooks call this so that the ceilings are measured once (by notebook 00)
    and every result is a share of the same numbers. A file from another device or
    thread count is ignored and measured again.
    """
    p = Path(path) if path is not None else default_limits_path()
    dev = resolve_device(None)
    if p.exists() and not refresh:
        limits = MachineLimits.from_json(p.read_text())
        if limits.device == str(dev) and limits.name == device_name(dev):
            return limits
    save_limits(measure_limits(quick=quick, device=dev), p)
    return MachineLimits.from_json(p.read_text())
