"""perfkit.compute.kernels: fusion bytes and attention's saved bytes by hand, matmul shape sweeps.

No test asserts on wall-clock speed (the machine is shared); timings are only checked for
being consistent with the work they report.
"""

import pytest
import torch
import torch.nn.functional as F

from perfkit.compute import kernels

# --- bytes: fusion and attention ----------------------------------------------------------------


def test_elementwise_chain_bytes_by_hand():
    # ops reading 1, 1, 1 and 2 tensors, each writing 1: (2 + 2 + 2 + 3) * 1000 * 4 bytes;
    # fused: 2 inputs read + 1 output written
    b = kernels.elementwise_chain_bytes([1, 1, 1, 2], numel=1000, bytes_per_element=4, inputs=2)
    assert (b.eager, b.fused, b.kernels) == (36_000, 12_000, 4)
    assert b.ratio == pytest.approx(3.0)
    with pytest.raises(ValueError, match="reads_per_op"):
        kernels.elementwise_chain_bytes([], 10)
    with pytest.raises(ValueError, match="numel"):
        kernels.elementwise_chain_bytes([1], 0)


def test_attention_bytes_and_saved_activations():
    assert kernels.attention_matrix_bytes(2, 3, 4, 4) == 2 * 3 * 4 * 4 * 4
    x = torch.randn(1000, requires_grad=True)
    # x * 2 saves nothing (the other operand is a Python scalar); exp saves its fp32 output
    assert kernels.activation_bytes(lambda: (x * 2).exp(), inputs=[x]) == 4000


def test_attention_sweep_sdpa_saves_less_than_the_matrix():
    def naive(q, k, v):
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5  # (B, H, T, T)
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return att.softmax(-1) @ v

    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    pts = kernels.attention_sweep({"naive": naive, "sdpa": sdpa}, [64], batch=2, heads=2,
                                  head_dim=8, repeat=2)
    by = {p.impl: p for p in pts}
    matrix = kernels.attention_matrix_bytes(2, 2, 64, 4)
    assert by["naive"].saved_bytes >= matrix  # softmax's output, (B, H, T, T)
    assert by["sdpa"].saved_bytes < matrix / 4  # output + log-sum-exp only
    assert all(p.seconds > 0 for p in pts)


# --- shapes -------------------------------------------------------------------------------------


def test_pad_to_multiple():
    assert kernels.pad_to_multiple(50257, 64) == 50304
    assert kernels.pad_to_multiple(64, 64) == 64 and kernels.pad_to_multiple(1) == 64
    with pytest.raises(ValueError, match="multiple"):
        kernels.pad_to_multiple(10, 0)


def test_matmul_shape_sweep_is_consistent():
    pts = kernels.matmul_shape_sweep([(8, 16, 4), (32, 32, 32)], "float32", repeat=2,
                                     target_s=0.001)
    assert [(p.m, p.n, p.k, p.dtype) for p in pts] == [(8, 16, 4, "float32"),
                                                       (32, 32, 32, "float32")]
    for p in pts:
        assert p.flops_per_s == pytest.approx(2 * p.m * p.n * p.k / p.seconds)
    with pytest.raises(ValueError, match="dtype"):
        kernels.matmul_shape_sweep([(2, 2, 2)], "int8")
    with pytest.raises(ValueError, match="k"):
        kernels.matmul_shape_sweep([(2, 2, 0)])


def test_fp32_matmul_library_reads_the_build_configuration():
    import re

    lib = kernels.fp32_matmul_library()
    found = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    assert lib == (found.group(1) if found else None)
