"""What single kernels cost: bytes moved with and without fusion, FLOP/s against shape.

An elementwise op is memory-bound (the roofline model, Williams et al., 2009): its time is
the bytes it moves, so fusing a chain into one kernel saves the intermediates' round trips
to memory (:func:`elementwise_chain_bytes`). Attention is the same story one level up:
FlashAttention (Dao et al., 2022), behind ``scaled_dot_product_attention``, never writes the
``(B, H, T, T)`` matrix that naive attention saves for backward (:func:`attention_sweep`).
Matmuls reach their ceiling only at shapes that tile evenly, which is why nanoGPT pads
GPT-2's vocabulary from 50257 to 50304 (:func:`pad_to_multiple`, :func:`matmul_shape_sweep`);
:func:`shape_sweep` holds odd widths, and even ones off the vector grid, against the aligned
ones (:class:`ShapeSummary`).

Usage::

    chain = elementwise_chain_bytes([1, 1, 2], numel=x.numel(), inputs=2)
    print(chain.ratio)                              # bytes eager moves / bytes one kernel moves
    pts = matmul_shape_sweep([(1024, n, 256) for n in (1000, pad_to_multiple(1000))])
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from perfkit._checks import check_callable, check_int, check_items, check_real, check_type
from perfkit.compute.flops import PRECISIONS
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.stats import Estimate, median_ratio
from perfkit.timing import calibrate_number, interleaved, resolve_device
from perfkit.units import share_range, si

__all__ = [
    "AttentionPoint", "ChainBytes", "ShapePoint", "ShapeSummary", "activation_bytes",
    "attention_matrix_bytes", "attention_sweep", "elementwise_chain_bytes", "fp32_matmul_library",
    "matmul_shape_sweep", "pad_to_multiple", "shape_summary", "shape_sweep",
]


def fp32_matmul_library() -> str | None:
    """The BLAS library this PyTorch was built with (``BLAS_INFO`` in ``torch.__config__.show()``:
    ``"mkl"``, ``"open"`` for OpenBLAS, ...), which runs its fp32 matmuls on a CPU at the default
    ``torch.get_float32_matmul_precision()``, "highest": that library, not ATen, picks the
    kernels and their vector width for the CPU it finds. ``None`` for a build without one, where
    ATen's own kernels (at ``torch.backends.cpu.get_cpu_capability()``) run them."""
    found = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return found.group(1) if found else None


def _torch_dtype(dtype: str) -> torch.dtype:
    """``"float32"``/``"fp32"`` (and bf16, fp16 likewise) as a ``torch.dtype``."""
    name = PRECISIONS.get(dtype, dtype) if isinstance(dtype, str) else dtype
    if not isinstance(name, str) or name not in PRECISIONS.values():
        raise ValueError(f"dtype must be one of {sorted(PRECISIONS.values())}, got {dtype!r}")
    return getattr(torch, name)


# --- fusion: bytes moved by an elementwise chain -------------------------------------------


@dataclass(frozen=True)
class ChainBytes:
    """Bytes an elementwise chain moves run op by op (``eager``) and as one kernel."""

    eager: int
    fused: int
    kernels: int

    @property
    def ratio(self) -> float:
        """How many times more bytes eager moves: the memory-bound speedup fusion can give."""
        return self.eager / self.fused


def elementwise_chain_bytes(reads_per_op: Sequence[int], numel: int, bytes_per_element: int = 4,
                            inputs: int = 1) -> ChainBytes:
    """Memory traffic of a chain of elementwise ops on ``numel``-element tensors.

    Eager PyTorch runs one kernel per op: op ``i`` reads ``reads_per_op[i]`` full-size
    tensors from memory and writes one. A fused kernel reads the chain's ``inputs``
    full-size tensors once and writes only the final result; the intermediates stay in
    registers. Scalars and broadcast vectors (a bias) are not counted: they are tiny.

    Args:
        reads_per_op: full-size tensors each op reads (``x * y``: 2; ``x * 0.5``: 1).
        numel: elements per tensor.
        bytes_per_element: 4 for fp32, 2 for bf16.
        inputs: distinct full-size tensors the whole chain reads.

    Raises:
        ValueError: for an empty chain or non-positive counts.
    """
    reads_per_op = check_items("reads_per_op", reads_per_op)
    for r in reads_per_op:
        check_int("reads_per_op entries", r, 1)
    for name, v in (("numel", numel), ("bytes_per_element", bytes_per_element), ("inputs", inputs)):
        check_int(name, v, 1)
    eager = sum(r + 1 for r in reads_per_op) * numel * bytes_per_element
    return ChainBytes(eager, (inputs + 1) * numel * bytes_per_element, len(reads_per_op))


def attention_matrix_bytes(batch: int, heads: int, seq_len: int, bytes_per_element: int = 4) -> int:
    """Bytes of one ``(B, H, T, T)`` attention matrix: what unfused attention saves per layer."""
    for name, v in (("batch", batch), ("heads", heads), ("seq_len", seq_len),
                    ("bytes_per_element", bytes_per_element)):
        check_int(name, v, 1)
    return batch * heads * seq_len * seq_len * bytes_per_element


def activation_bytes(fn: Callable[[], object], params: nn.Module | None = None,
                     inputs: Sequence[torch.Tensor] = ()) -> int:
    """Bytes autograd saves for backward while ``fn()`` runs a forward pass (exact).

    Uses :class:`perfkit.memory.SavedTensorMeter`: saved parameters and ``inputs`` are not
    counted (they exist anyway); the graph is dropped afterwards.

    Raises:
        TypeError: if ``fn`` is not callable, or ``params``/``inputs`` hold non-tensors.
    """
    check_callable("fn", fn)
    with SavedTensorMeter(params, inputs) as meter:
        out = fn()
    del out
    return meter.report().activation_bytes


@dataclass(frozen=True)
class AttentionPoint:
    """One attention implementation at one sequence length: forward + backward seconds
    (median) and the bytes it saves for backward."""

    impl: str
    seq_len: int
    seconds: float
    saved_bytes: int


def attention_sweep(impls: dict[str, Callable[..., torch.Tensor]], seq_lens: Sequence[int],
                    batch: int = 4, heads: int = 4, head_dim: int = 16, dtype: str = "float32",
                    repeat: int = 5, device: torch.device | str | None = None) -> list[AttentionPoint]:
    """Time and activation memory of causal attention implementations against ``T``.

    Each ``impls[name](q, k, v)`` takes ``(B, H, T, head_dim)`` tensors and returns the
    ``(B, H, T, head_dim)`` output of causal attention; the implementations are timed
    interleaved at each ``T`` (forward and backward of ``out.sum()``).

    Raises:
        TypeError: for ``impls`` that is not a dict of callables, or ``seq_lens`` not a list.
        ValueError: for no implementations, no sequence lengths or non-positive sizes,
            all checked before the first measurement.
    """
    check_type("impls", impls, dict)
    if not impls:
        raise ValueError("impls must hold at least one implementation, got none")
    for name, f in impls.items():
        check_callable(f"impls[{name!r}]", f)
    seq_lens = check_items("seq_lens", seq_lens)
    for name, v in (("batch", batch), ("heads", heads), ("head_dim", head_dim),
                    *(("seq_len", t) for t in seq_lens)):
        check_int(name, v, 1)
    check_int("repeat", repeat, 1)
    dev, dt = resolve_device(device), _torch_dtype(dtype)
    points = []
    for t in seq_lens:
        qkv = [torch.randn(batch, heads, t, head_dim, device=dev,
                           dtype=dt, requires_grad=True) for _ in range(3)]  # (B, H, T, hd)
        fns = [lambda f=f, qkv=qkv: f(*qkv).sum().backward() for f in impls.values()]
        times = interleaved(fns, warmup=1, repeat=repeat, device=dev)
        for (name, f), m in zip(impls.items(), times, strict=True):
            saved = activation_bytes(lambda f=f, qkv=qkv: f(*qkv), inputs=qkv)
            points.append(AttentionPoint(name, t, m.median_s, saved))
    return points


# --- shapes ---------------------------------------------------------------------------------


def pad_to_multiple(n: int, multiple: int = 64) -> int:
    """Smallest multiple of ``multiple`` that is >= ``n`` (nanoGPT pads 50257 to 50304)."""
    check_int("n", n, 1)
    check_int("multiple", multiple, 1)
    return -(-n // multiple) * multiple


@dataclass(frozen=True)
class ShapePoint:
    """One ``(m, k) @ (k, n)`` matmul: dtype, median seconds per call and FLOP/s."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float
    flops_per_s: float


def matmul_shape_sweep(shapes: Sequence[tuple[int, int, int]], dtype: str = "float32",
                       device: torch.device | str | None = None, repeat: int = 7,
                       target_s: float = 0.004) -> list[ShapePoint]:
    """FLOP/s of ``(m, k) @ (k, n)`` for each ``(m, n, k)``, measured interleaved.

    Each shape's call is batched (:func:`perfkit.timing.calibrate_number`) to about
    ``target_s`` seconds, and the shapes take turns, so load changes hit them alike.

    Raises:
        TypeError, ValueError: for no shapes, a shape that is not three positive ints, an
            unknown dtype, a ``repeat`` below 1 or a ``target_s`` that is not a finite
            number > 0, all checked before the first measurement.
    """
    shapes = check_items("shapes", shapes)
    for i, shape in enumerate(shapes):
        if not isinstance(shape, tuple | list) or len(shape) != 3:
            raise TypeError(f"shapes[{i}] must be an (m, n, k) tuple, got {shape!r}")
        for name, v in zip("mnk", shape, strict=True):
            check_int(name, v, 1)
    check_int("repeat", repeat, 1)
    check_real("target_s", target_s, 0, lo_open=True)
    dev, dt = resolve_device(device), _torch_dtype(dtype)
    fns, numbers = [], []
    for m, n, k in shapes:
        a = torch.randn(m, k, device=dev).to(dt)  # (m, k)
        b = torch.randn(k, n, device=dev).to(dt)  # (k, n)
        out = torch.empty(m, n, device=dev, dtype=dt)

        def mm(a: torch.Tensor = a, b: torch.Tensor = b, out: torch.Tensor = out) -> None:
            torch.mm(a, b, out=out)

        mm()  # oneDNN builds a kernel per shape on its first call
        number = calibrate_number(mm, target_s, dev)
        fns.append(lambda mm=mm, number=number: [mm() for _ in range(number)])
        numbers.append(number)
    ms = interleaved(fns, warmup=1, repeat=repeat, device=dev)
    return [ShapePoint(m, n, k, str(dt).removeprefix("torch."), t.median_s / num,
                       2 * m * n * k * num / t.median_s)
            for (m, n, k), t, num in zip(shapes, ms, numbers, strict=True)]


# --- the shape sweep's summary: aligned, odd and off-grid even widths ----------------------


@dataclass(frozen=True)
class ShapeSummary:
    """One dtype of a matmul shape sweep: the aligned widths' median rate (``ref``, FLOP/s)
    and each width's rate as a share of it: ``aligned`` (multiples of ``multiple``), ``odd``,
    ``even`` widths that are not multiples of 4, so of no vector width, and ``other`` even widths
    (multiples of 4 but not of ``multiple``), which no prediction groups but the figure draws."""

    dtype: str
    ref: float
    aligned: tuple[float, ...]
    odd: tuple[float, ...]
    multiple: int = 64
    even: tuple[float, ...] = ()
    other: tuple[float, ...] = ()

    @property
    def odd_share(self) -> Estimate:
        """The odd widths' median rate over the aligned widths' median, with an interval that
        carries both groups' spread (:func:`perfkit.stats.median_ratio`, unpaired: two sets of
        widths), not the aligned median taken as exact. Every interval is at least 90 %: a group
        of fewer than 6 widths (the fewest for two separate groups) gives none, and the estimate
        says so (``needs``)."""
        est = median_ratio(self.odd, self.aligned, paired=False)
        return replace(est, method=f"ratio of the medians of {len(self.odd)} odd widths to "
                                  f"{len(self.aligned)} multiples of {self.multiple}")

    @property
    def parity(self) -> Estimate:
        """The odd widths' median rate over the off-grid even widths' (two sets of widths:
        :func:`perfkit.stats.median_ratio`, unpaired); what being odd costs beyond being off
        the vector's grid.

        Raises:
            ValueError: when the sweep held no off-grid even width.
        """
        if not self.even:
            raise ValueError(f"the {self.dtype} sweep held no even width off the vector grid (n % 4 == 2)")
        est = median_ratio(self.odd, self.even, paired=False)
        return replace(est, method=f"ratio of the medians of {len(self.odd)} odd widths to "
                                  f"{len(self.even)} even ones")

    @property
    def aligned_spread(self) -> str:
        """The slowest and fastest aligned width as shares of their median (:func:`share_range`)."""
        return share_range(min(self.aligned), max(self.aligned))

    def describe(self) -> str:
        """One line: the aligned widths' rate, and the odd, off-grid even and other even widths'
        shares of it (every width the sweep timed). A group of one width is named as one: a
        median, a spread or a slowest of one point would be the point itself."""
        aligned = (f"multiples of {self.multiple} {si(self.ref, 'FLOP/s')} (median; they spread "
                   f"{self.aligned_spread})" if len(self.aligned) > 1 else
                   f"one multiple of {self.multiple}, {si(self.ref, 'FLOP/s')}")
        odd = (f"odd n: median {statistics.median(self.odd):.0%}, slowest {min(self.odd):.0%} of the aligned "
               "median" if len(self.odd) > 1 else f"one odd n, at {self.odd[0]:.0%} of it")
        even = (f"; even n off the vector grid: median {statistics.median(self.even):.0%}"
                if len(self.even) > 1 else
                f"; one even n off the vector grid, at {self.even[0]:.0%}" if self.even else "")
        rest = "in no group above"
        other = (f"; other even n (multiples of 4, {rest}): median {statistics.median(self.other):.0%}"
                 if len(self.other) > 1 else
                 f"; one other even n (a multiple of 4, {rest}), at {self.other[0]:.0%}" if self.other
                 else "")
        single = len(self.aligned) == 1 or len(self.odd) == 1
        return (f"{self.dtype:>9}: {aligned}; {odd}{even}{other}"
                + (": one width in a group is no statistic, and nothing is judged on it" if single else ""))


def shape_summary(points: Sequence[ShapePoint], dtype: str, multiple: int = 64) -> ShapeSummary:
    """Summarise the ``dtype`` points of :func:`perfkit.compute.kernels.matmul_shape_sweep`:
    widths ``n`` that are multiples of ``multiple`` against odd ones.

    Raises:
        ValueError: when the sweep holds no aligned or no odd width of that dtype.
    """
    check_int("multiple", multiple, 1)
    pts = [p for p in check_items("points", points) if check_type("points[i]", p, ShapePoint).dtype == dtype]
    aligned = [p.flops_per_s for p in pts if p.n % multiple == 0]
    odd = [p.flops_per_s for p in pts if p.n % 2]
    even = [p.flops_per_s for p in pts if p.n % 4 == 2]  # even, but a multiple of no vector width
    other = [p.flops_per_s for p in pts if p.n % 4 == 0 and p.n % multiple]  # a vector grid's, not multiple's
    if not aligned or not odd:
        raise ValueError(f"points must hold an aligned and an odd width of {dtype}, got n="
                         f"{sorted(p.n for p in pts)}")
    ref = statistics.median(aligned)
    return ShapeSummary(dtype, ref, tuple(a / ref for a in aligned), tuple(o / ref for o in odd), multiple,
                        tuple(e / ref for e in even), tuple(o / ref for o in other))


def shape_sweep(widths: Mapping[str, Sequence[int]], m: int = 1024, k: int = 256, multiple: int = 64,
                repeat: int = 7, device: torch.device | str | None = None,
                ) -> tuple[list[ShapePoint], dict[str, ShapeSummary]]:
    """``(m, k) @ (k, n)`` for each dtype's widths ``n`` (:func:`perfkit.compute.kernels.
    matmul_shape_sweep`), for the dtypes whose widths hold an aligned and an odd one; returns
    the points and each swept dtype's :class:`ShapeSummary`."""
    if not isinstance(widths, Mapping) or not widths:
        raise TypeError(f"widths must be a non-empty mapping of dtype -> widths, got {widths!r}")
    check_int("multiple", multiple, 1)
    swept = [dt for dt, ns in widths.items() if any(n % multiple == 0 for n in ns) and any(n % 2 for n in ns)]
    pts = [p for dt in swept
           for p in matmul_shape_sweep([(m, n, k) for n in widths[dt]], dt, device=device, repeat=repeat)]
    return pts, {dt: shape_summary(pts, dt, multiple) for dt in swept}
