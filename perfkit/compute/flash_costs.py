"""What attention costs, counted exactly: matmul FLOPs of FlashAttention's tiles and of the
plain op-by-op version, the bytes each saves for backward, and the fit that separates the
``T^2`` term from the linear one.

FlashAttention (:mod:`perfkit.compute.flash`) skips the tiles above the diagonal under causal
masking and recomputes the scores in backward (``10`` matmul FLOPs per score and head
dimension against eager's ``8``), and saves only ``O`` and the log-sum-exp: linear in ``T``,
where eager attention keeps ``softmax(S)``, ``B H T^2`` values.

Usage::

    print(flash_flops(1, 1, 1024, 64, causal=True, tile=64).backward)
    print(flash_saved_bytes(1, 8, 4096, 64), eager_saved_bytes(1, 8, 4096))
    a, b, c = length_terms([512, 1024, 2048], measured_bytes)   # a: bytes per T^2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from perfkit._checks import check_int, check_items, check_real, check_type
from perfkit.compute._attention_checks import acc_dtype, check_tile

__all__ = ["AttentionFlops", "eager_saved_bytes", "flash_flops", "flash_saved_bytes",
           "length_terms"]


@dataclass(frozen=True)
class AttentionFlops:
    """Matmul FLOPs of one attention (softmax's exps not counted), per pass.

    Attributes:
        forward: ``QK^T`` and ``PV`` on every computed tile: ``4 bq bk D`` each.
        backward: with recomputation, ``QK^T`` again plus ``dV``, ``dP``, ``dQ``, ``dK``.
        eager_forward, eager_backward: op by op on the full ``T x T`` matrix (no skipping,
            nothing recomputed: 4 matmuls in backward).
        tiles: how many tiles the tiled passes compute.
    """

    forward: int
    backward: int
    eager_forward: int
    eager_backward: int
    tiles: int

    @property
    def recompute_ratio(self) -> float:
        """Tiled backward over eager backward: ``10/8`` without causal skipping."""
        return self.backward / self.eager_backward


def flash_flops(batch: int, heads: int, seq_len: int, head_dim: int, causal: bool = False,
                tile: int = 64) -> AttentionFlops:
    """Exact matmul FLOPs of :func:`flash_attention` and :func:`eager_attention` (self-attention).

    Raises:
        ValueError, TypeError: for a non-positive size, a ``tile`` not a positive power of
            two, or a ``causal`` that is not a bool.
    """
    for name, n in (("batch", batch), ("heads", heads), ("seq_len", seq_len), ("head_dim", head_dim)):
        check_int(name, n, 1)
    check_tile(tile)
    check_type("causal", causal, bool)
    bh, n, full = batch * heads, -(-seq_len // tile), seq_len * seq_len  # n tiles per side
    cells, tiles = full, n * n
    if causal:  # per query tile, the key tiles up to its last query (what tile_pairs keeps)
        cells = tiles = 0
        for i0 in range(0, seq_len, tile):
            i1 = min(i0 + tile, seq_len)
            kept = (i1 - 1) // tile + 1
            tiles += kept
            cells += (i1 - i0) * min(kept * tile, seq_len)
    return AttentionFlops(4 * bh * cells * head_dim, 10 * bh * cells * head_dim,
                          4 * bh * full * head_dim, 8 * bh * full * head_dim, tiles)


def _itemsize(dtype: Any) -> int:
    check_type("dtype", dtype, torch.dtype)
    return torch.empty((), dtype=dtype).element_size()


def flash_saved_bytes(batch: int, heads: int, seq_len: int, head_dim: int,
                      dtype: torch.dtype = torch.float32) -> int:
    """Bytes :func:`flash_attention` saves besides its inputs: ``O`` and the fp32 (fp64 for
    fp64) log-sum-exp. Linear in ``seq_len``: no ``T^2`` term."""
    for name, n in (("batch", batch), ("heads", heads), ("seq_len", seq_len), ("head_dim", head_dim)):
        check_int(name, n, 1)
    rows = batch * heads * seq_len
    return rows * head_dim * _itemsize(dtype) + rows * _itemsize(acc_dtype(dtype))


def eager_saved_bytes(batch: int, heads: int, seq_len: int, dtype: torch.dtype = torch.float32,
                      causal: bool = False) -> int:
    """Bytes :func:`eager_attention` saves besides its inputs: ``softmax(S)``, ``B H T^2``
    values, plus the causal mask's ``T^2`` bools."""
    for name, n in (("batch", batch), ("heads", heads), ("seq_len", seq_len)):
        check_int(name, n, 1)
    check_type("causal", causal, bool)
    return batch * heads * seq_len**2 * _itemsize(dtype) + (seq_len**2 if causal else 0)


def length_terms(seq_lens: list[int], values: list[float]) -> tuple[float, float, float]:
    """Least-squares ``(a, b, c)`` of ``values = a T^2 + b T + c`` over ``seq_lens``.

    Exact counts at 3 or more lengths give the exact terms: eager attention's ``a`` is
    ``B H`` times the element size, FlashAttention's is 0.

    Raises:
        TypeError, ValueError: for non-lists, fewer than 3 distinct lengths or lists of
            different lengths, a length that is not an int >= 1, a value that is not finite.
    """
    import numpy as np

    seq_lens, values = check_items("seq_lens", seq_lens), check_items("values", values)
    for i, (t, v) in enumerate(zip(seq_lens, values)):
        check_int(f"seq_lens[{i}]", t, 1)
        check_real(f"values[{i}]", v)
    if len(seq_lens) != len(values) or len(set(seq_lens)) < 3:
        raise ValueError(f"seq_lens must hold at least 3 distinct lengths, one per value; got "
                         f"{len(set(seq_lens))} distinct for {len(values)} values")
    t = np.asarray(seq_lens, dtype=np.float64)
    coef, *_ = np.linalg.lstsq(np.stack([t * t, t, np.ones_like(t)], 1),
                               np.asarray(values, dtype=np.float64), rcond=None)
    return float(coef[0]), float(coef[1]), float(coef[2])
