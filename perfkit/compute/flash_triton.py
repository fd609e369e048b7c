"""FlashAttention-2 as Triton kernels, forward and backward: compiled on CUDA, interpreted on
the CPU.

Forward: one program per (query tile, batch-head) loads its ``BLOCK_M`` queries once, walks
the key tiles keeping the running max, sum and unnormalised output in registers, and writes
``O`` and the log-sum-exp ``L`` once (Dao 2023; Triton's fused-attention tutorial). Backward:
one program per key tile accumulates ``dK``, ``dV`` and one per query tile ``dQ``, each
recomputing ``P`` from ``L``. Causal programs skip the tiles above the diagonal. Without a
GPU the same kernels run in Triton's interpreter (what ``TRITON_INTERPRET=1`` selects: numpy
executes each program), which checks their logic against :mod:`perfkit.compute.flash`, not
their speed. Triton is imported on first use, so this module imports without it.

Usage::

    ok, why = triton_status(q.device)            # (False, reason) where it cannot run
    o, lse = triton_flash_forward(q, k, v, causal=True)   # q, k, v: (B, H, T, D)
    dq, dk, dv = triton_flash_backward(q, k, v, o, lse, do, causal=True)
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import torch

from perfkit._checks import check_int, check_type
from perfkit.compute._attention_checks import check_qkv, check_scale, check_tile

__all__ = ["TRITON_DTYPES", "triton_flash_backward", "triton_flash_forward", "triton_status"]

TRITON_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
tl: Any = None  # triton.language, set on first use by _kernel (Triton is optional)


def _fwd_kernel(Q, K, V, Out, Lse, stride_qb, stride_qm, stride_kb, stride_kn, stride_vb, stride_vn,
                stride_ob, stride_om, Tq, Tk, scale, q_start, k_start,
                CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                D: tl.constexpr, PRECISION: tl.constexpr):
    """One query tile of one batch-head (the body ``triton.jit`` compiles; no Python calls)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m[:, None] < Tq
    q = tl.load(Q + bh * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = Tk
    if CAUSAL:  # keys after this tile's last query are never loaded
        hi = tl.maximum(0, tl.minimum(Tk, q_start + (pid_m + 1) * BLOCK_M - k_start))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        col_ok = offs_n[:, None] < Tk
        k = tl.load(K + bh * stride_kb + offs_n[:, None] * stride_kn + offs_d[None, :],
                    mask=col_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * scale
        valid = offs_n[None, :] < Tk
        if CAUSAL:
            valid = valid & (k_start + offs_n[None, :] <= q_start + offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: no NaN
        p = tl.exp(s - shift[:, None])
        alpha = tl.exp(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + bh * stride_vb + offs_n[:, None] * stride_vn + offs_d[None, :],
                    mask=col_ok, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v,
                                            input_precision=PRECISION).to(tl.float32)
        m_i = m_new
    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    o = tl.where(seen[:, None], acc / l_safe[:, None], 0.0)
    lse = tl.where(seen, m_i + tl.log(l_safe), float("-inf"))
    tl.store(Out + bh * stride_ob + offs_m[:, None] * stride_om + offs_d[None, :],
             o.to(Out.dtype.element_ty), mask=row_ok)
    tl.store(Lse + bh * Tq + offs_m, lse, mask=offs_m < Tq)


def _bwd_dkdv_kernel(Q, K, V, DO, Lse, Delta, DK, DV, Tq, Tk, scale, q_start, k_start,
                     CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     D: tl.constexpr, PRECISION: tl.constexpr):
    """dK and dV of one key tile of one batch-head: walk the query tiles that see it,
    recomputing P from L (contiguous ``(BH, T, D)`` tensors)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    col_ok = offs_n < Tk
    kv_at = bh * Tk * D + offs_n[:, None] * D + offs_d[None, :]
    k = tl.load(K + kv_at, mask=col_ok[:, None], other=0.0)
    v = tl.load(V + kv_at, mask=col_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    lo = 0
    if CAUSAL:  # queries before this tile's first key see none of it
        lo = tl.maximum(0, k_start + pid_n * BLOCK_N - q_start) // BLOCK_M * BLOCK_M
    for start_m in range(lo, Tq, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < Tq
        q_at = bh * Tq * D + offs_m[:, None] * D + offs_d[None, :]
        q = tl.load(Q + q_at, mask=row_ok[:, None], other=0.0)
        do = tl.load(DO + q_at, mask=row_ok[:, None], other=0.0)
        lse = tl.load(Lse + bh * Tq + offs_m, mask=row_ok, other=0.0)
        lse = tl.where(lse == float("-inf"), 0.0, lse)  # all-masked rows: every p is 0 anyway
        delta = tl.load(Delta + bh * Tq + offs_m, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * scale
        valid = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            valid = valid & (k_start + offs_n[None, :] <= q_start + offs_m[:, None])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)  # (BLOCK_M, BLOCK_N), recomputed
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION).to(tl.float32)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(tl.float32)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION).to(tl.float32) * scale
    tl.store(DK + kv_at, dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + kv_at, dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


def _bwd_dq_kernel(Q, K, V, DO, Lse, Delta, DQ, Tq, Tk, scale, q_start, k_start,
                   CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   D: tl.constexpr, PRECISION: tl.constexpr):
    """dQ of one query tile of one batch-head (a second pass: no atomic adds across tiles)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    row_ok = offs_m < Tq
    q_at = bh * Tq * D + offs_m[:, None] * D + offs_d[None, :]
    q = tl.load(Q + q_at, mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + q_at, mask=row_ok[:, None], other=0.0)
    lse = tl.load(Lse + bh * Tq + offs_m, mask=row_ok, other=0.0)
    lse = tl.where(lse == float("-inf"), 0.0, lse)
    delta = tl.load(Delta + bh * Tq + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, D], tl.float32)
    hi = Tk
    if CAUSAL:
        hi = tl.maximum(0, tl.minimum(Tk, q_start + (pid_m + 1) * BLOCK_M - k_start))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        col_ok = offs_n < Tk
        kv_at = bh * Tk * D + offs_n[:, None] * D + offs_d[None, :]
        k = tl.load(K + kv_at, mask=col_ok[:, None], other=0.0)
        v = tl.load(V + kv_at, mask=col_ok[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION).to(tl.float32) * scale
        valid = row_ok[:, None] & col_ok[None, :]
        if CAUSAL:
            valid = valid & (k_start + offs_n[None, :] <= q_start + offs_m[:, None])
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION).to(tl.float32)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION).to(tl.float32) * scale
    tl.store(DQ + q_at, dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


def _interpreting() -> bool:
    """Whether the imported Triton runs kernels in its interpreter (fixed at its import:
    ``tl``'s own helpers are built interpreted or compiled then)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


def triton_status(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """Whether the kernel can run for tensors on ``device``, and if not, why.

    CUDA tensors need Triton imported without ``TRITON_INTERPRET``; CPU tensors need its
    interpreter, which is chosen when Triton is first imported: set ``TRITON_INTERPRET=1``
    before starting Python (importing ``perfkit.compute`` imports torch's compiler stack,
    which imports Triton).

    Raises:
        TypeError, ValueError: for a ``device`` that is not a torch.device or a device name.
    """
    check_type("device", device, (torch.device, str))
    try:
        device = torch.device(device)
    except RuntimeError as e:  # torch's own message does not name the argument
        raise ValueError(f"device must name a torch device such as 'cpu' or 'cuda:0', got "
                         f"{device!r}") from e
    if importlib.util.find_spec("triton") is None:
        return False, ("triton is not installed (pip install 'triton>=3.5', Linux only; it is "
                       "in perfkit's dev extra)")
    if device.type not in ("cuda", "cpu"):
        return False, f"Triton runs on CUDA, or on the CPU through its interpreter, not {device}"
    interpreting = _interpreting()
    if device.type == "cuda" and interpreting:
        return False, ("TRITON_INTERPRET=1 was set when triton was imported: its kernels run in "
                       "the interpreter; unset it to run compiled on CUDA")
    if device.type == "cpu" and not interpreting:
        return False, ("triton was imported without TRITON_INTERPRET=1, so it cannot run on the "
                       "CPU: set TRITON_INTERPRET=1 before the first import of triton")
    return True, "compiled for CUDA" if device.type == "cuda" else "Triton's interpreter (CPU)"


@functools.lru_cache(maxsize=1)
def _kernels() -> dict[str, Any]:
    """The kernels, ``triton.jit``-decorated on first use (so importing this module needs no
    Triton); their bodies name ``tl``, which is put in this module's globals here."""
    import triton
    import triton.language as tl

    globals()["tl"] = tl
    return {"fwd": triton.jit(_fwd_kernel), "dkdv": triton.jit(_bwd_dkdv_kernel),
            "dq": triton.jit(_bwd_dq_kernel)}


def _check(q: Any, k: Any, v: Any, causal: Any, scale: Any, block_m: Any, block_n: Any,
           q_start: Any, k_start: Any, allow_tf32: Any) -> float:
    """The arguments both passes share, refused by name; then whether Triton can run here.
    Returns the score scale."""
    check_qkv(q, k, v)
    if q.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D (B, H, T, D), got q of shape {tuple(q.shape)}")
    if q.dtype not in TRITON_DTYPES:
        raise TypeError(f"q, k, v must be one of {TRITON_DTYPES}, got {q.dtype}")
    if q.dtype == torch.bfloat16 and q.device.type == "cpu":
        # the interpreter keeps bf16 as uint16 and its tl.dot multiplies the bit patterns
        # (triton-lang/triton#11584: "we just don't support it yet")
        raise TypeError("bf16 does not run in Triton's interpreter (its tl.dot multiplies the raw "
                        "bits, triton-lang/triton#11584): use fp32 or fp16 on the CPU")
    d = q.shape[-1]
    if d < 16 or d & (d - 1):
        raise ValueError(f"head dim D must be a power of two >= 16 for tl.dot, got {d}")
    for name, b in (("block_m", block_m), ("block_n", block_n)):
        if check_tile(b) < 16:
            raise ValueError(f"{name} must be a power of two >= 16, got {b}")
    check_type("causal", causal, bool)
    check_type("allow_tf32", allow_tf32, bool)
    check_int("q_start", q_start, 0)
    check_int("k_start", k_start, 0)
    scale = check_scale(scale, d)
    ok, why = triton_status(q.device)
    if not ok:
        raise RuntimeError(f"the Triton kernel cannot run here: {why}")
    return scale


def triton_flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                         scale: float | None = None, block_m: int = 32, block_n: int = 32,
                         q_start: int = 0, k_start: int = 0, allow_tf32: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2's forward by the Triton kernel: ``(O, L)``, as
    :func:`perfkit.compute.flash.attention_forward_tiles` returns them.

    Args:
        q, k, v: ``(B, H, Tq, D)``, ``(B, H, Tk, D)``, ``(B, H, Tk, D)``; D a power of two
            >= 16 (``tl.dot``'s smallest); fp32, fp16 or (on CUDA) bf16.
        causal: query at position ``p`` sees keys at positions ``<= p``.
        scale: score scale, default ``D ** -0.5``.
        block_m, block_n: query and key tile sizes (powers of two >= 16).
        q_start, k_start: absolute positions of the first query and key.
        allow_tf32: let fp32 dots round their inputs to TF32 on the GPU (Triton's default,
            about 1e-3 relative; off here, so fp32 matches the PyTorch tiles to 1e-5).

    Returns:
        ``O`` in the inputs' dtype and ``L`` in fp32.

    Raises:
        RuntimeError: where the kernel cannot run (:func:`triton_status` says why).
        TypeError, ValueError: for bad tensors, dtypes, ``D`` or tile sizes, or a ``scale``
            that is not a finite number.
    """
    scale = _check(q, k, v, causal, scale, block_m, block_n, q_start, k_start, allow_tf32)
    d = q.shape[-1]
    b, h, tq, tk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    q, k, v = (x.reshape(b * h, x.shape[2], d).contiguous() for x in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty(b * h, tq, dtype=torch.float32, device=q.device)
    grid = (-(-tq // block_m), b * h)
    _kernels()["fwd"][grid](
        q, k, v, o, lse, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0),
        v.stride(1), o.stride(0), o.stride(1), tq, tk, scale, q_start, k_start,
        CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=d,
        PRECISION="tf32" if allow_tf32 else "ieee")
    return o.reshape(b, h, tq, d), lse.reshape(b, h, tq)


def triton_flash_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                          lse: torch.Tensor, do: torch.Tensor, causal: bool = False,
                          scale: float | None = None, block_m: int = 32, block_n: int = 32,
                          q_start: int = 0, k_start: int = 0, allow_tf32: bool = False
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2's backward by two Triton kernels: ``(dQ, dK, dV)``.

    ``delta = rowsum(dO * O)`` is computed in PyTorch first (FA2's preprocessing step); then
    one program per key tile accumulates ``dK``, ``dV`` over the query tiles that see it,
    and one per query tile accumulates ``dQ`` (two passes instead of atomic adds). ``P`` is
    recomputed from ``L`` in both, as :func:`perfkit.compute.flash.attention_backward_tiles`
    does.

    Args:
        q, k, v, causal, scale, block_m, block_n, q_start, k_start, allow_tf32: as
            :func:`triton_flash_forward`.
        o, lse: the forward's output ``(B, H, Tq, D)`` and log-sum-exp ``(B, H, Tq)``.
        do: the output's gradient, shaped as ``o``.

    Returns:
        ``dQ``, ``dK``, ``dV`` in the inputs' dtype.

    Raises:
        RuntimeError: where the kernels cannot run (:func:`triton_status` says why).
        TypeError, ValueError: as :func:`triton_flash_forward`, or for ``o``, ``do``, ``lse``
            of other shapes, ``o``/``do`` not of ``q``'s dtype and device (the kernels would
            read their bits as ``q``'s dtype), ``lse`` not floating point on ``q``'s device.
    """
    check_qkv(q, k, v)
    for name, t, shape in (("o", o, q.shape), ("do", do, q.shape), ("lse", lse, q.shape[:-1])):
        check_type(name, t, torch.Tensor)
        if t.shape != shape:
            raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
        if t.device != q.device or not t.is_floating_point() or (name != "lse" and t.dtype != q.dtype):
            raise TypeError(f"{name} must be {'floating point' if name == 'lse' else q.dtype} on "
                            f"{q.device}, as q, got {t.dtype} on {t.device}")
    scale = _check(q, k, v, causal, scale, block_m, block_n, q_start, k_start, allow_tf32)
    b, h, tq, d = q.shape
    tk = k.shape[2]
    delta = (do.float() * o.float()).sum(-1).reshape(b * h, tq).contiguous()
    q, k, v, do = (x.reshape(b * h, x.shape[2], d).contiguous() for x in (q, k, v, do))
    lse = lse.float().reshape(b * h, tq).contiguous()
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    meta = dict(CAUSAL=causal, BLOCK_M=block_m, BLOCK_N=block_n, D=d,
                PRECISION="tf32" if allow_tf32 else "ieee")
    kernels = _kernels()
    kernels["dkdv"][(-(-tk // block_n), b * h)](q, k, v, do, lse, delta, dk, dv, tq, tk, scale,
                                                q_start, k_start, **meta)
    kernels["dq"][(-(-tq // block_m), b * h)](q, k, v, do, lse, delta, dq, tq, tk, scale,
                                              q_start, k_start, **meta)
    return dq.reshape(b, h, tq, d), dk.reshape(b, h, tk, d), dv.reshape(b, h, tk, d)
