"""The Triton kernels (perfkit.compute.flash_triton), forward and backward, against the
PyTorch tiles: in
Triton's interpreter on the CPU (a subprocess started with TRITON_INTERPRET=1, which must be
set before Triton's first import), natively on CUDA (gpu mark). Skips, with the reason,
where Triton is not installed."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perfkit.compute import flash_triton as ft

ROOT = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason=ft.triton_status("cpu")[1])

CHECK = r"""
import json, torch
from perfkit.compute.flash import attention_backward_tiles, attention_forward_tiles
from perfkit.compute.flash_triton import triton_flash_backward, triton_flash_forward, triton_status
g = torch.Generator().manual_seed(0)
out = {"status": triton_status("cpu")}
cases = [(1, 16, 16, 0, 0, False, torch.float32), (50, 50, 16, 0, 0, False, torch.float32),
         (50, 50, 16, 0, 0, True, torch.float32), (19, 45, 32, 0, 0, False, torch.float32),
         (40, 40, 16, 0, 20, True, torch.float32), (33, 33, 16, 0, 0, True, torch.float16)]
for tq, tk, d, qs, ks, causal, dtype in cases:
    q = torch.randn(1, 2, tq, d, generator=g) * 2
    k, v = (torch.randn(1, 2, tk, d, generator=g) * 2 for _ in range(2))
    o, lse = triton_flash_forward(q.to(dtype), k.to(dtype), v.to(dtype), causal, block_m=16,
                                  block_n=16, q_start=qs, k_start=ks)
    q, k, v = (x.to(dtype).float() for x in (q, k, v))  # the same rounded inputs
    ro, rl = attention_forward_tiles(q, k, v, d ** -0.5, causal, 16, qs, ks)
    seen = torch.isfinite(rl)
    do = torch.randn(ro.shape, generator=g)
    want = attention_backward_tiles(q, k, v, do, rl, (do * ro).sum(-1), d ** -0.5, causal, 16, qs, ks)
    got = triton_flash_backward(q.to(dtype), k.to(dtype), v.to(dtype), ro.to(dtype), rl,
                                do.to(dtype), causal, block_m=16, block_n=16, q_start=qs, k_start=ks)
    grad_err = max(((a.float() - b).abs().max() / b.abs().max().clamp(min=1)).item()
                   for a, b in zip(got, want))
    out[f"{tq},{tk},{d},{qs},{ks},{causal},{dtype}"] = {"grad_rel_err": grad_err,
        "grad_nan": any(bool(torch.isnan(x).any()) for x in got),
        "o_err": (o.float() - ro).abs().max().item(), "dtype": str(o.dtype),
        "lse_err": (lse - rl)[seen].abs().max().item() if seen.any() else 0.0,
        "masked_rows_ok": bool((lse[~seen] == rl[~seen]).all() and (o[~seen[..., None]
                               .expand_as(o)] == 0).all()), "nan": bool(torch.isnan(o).any())}
try:
    triton_flash_forward(*(torch.zeros(1, 1, 16, 16, dtype=torch.bfloat16),) * 3)
    out["bf16"] = "ran"
except TypeError as e:
    out["bf16"] = str(e)
print(json.dumps(out))
"""


@needs_triton
def test_interpreter_matches_pytorch_tiles():
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out.pop("status") == [True, "Triton's interpreter (CPU)"]
    assert "triton-lang/triton#11584" in out.pop("bf16")
    assert len(out) == 6
    for case, r in out.items():
        # fp16: P is rounded to fp16 before the PV dot and O on the way out (2^-11 of |O|)
        tol = 4e-3 if "float16" in case else 1e-5
        assert r["o_err"] <= tol and r["lse_err"] <= tol, (case, r)
        assert r["masked_rows_ok"] and not r["nan"] and not r["grad_nan"], case
        # backward: dQ, dK, dV over the largest reference gradient (fp16: P and dS rounded)
        assert r["grad_rel_err"] <= (1e-2 if "float16" in case else 1e-5), (case, r)
        assert r["dtype"] == case.split(",")[-1], case


def test_status_explains_and_bad_arguments():
    ok, why = ft.triton_status("meta")
    assert not ok and why
    q = torch.zeros(1, 1, 16, 16)
    with pytest.raises(ValueError, match="D"):
        ft.triton_flash_forward(*(torch.zeros(1, 1, 16, 8),) * 3)
    with pytest.raises(ValueError, match="block_m"):
        ft.triton_flash_forward(q, q, q, block_m=8)
    with pytest.raises(ValueError, match="tile"):
        ft.triton_flash_forward(q, q, q, block_n=24)
    with pytest.raises(ValueError, match="4-D"):
        ft.triton_flash_forward(q[0], q[0], q[0])
    with pytest.raises(TypeError, match="float64|must be one of"):
        ft.triton_flash_forward(q.double(), q.double(), q.double())
    with pytest.raises(ValueError, match="q, k, v"):
        ft.triton_flash_forward(q, q[..., :8], q)
    with pytest.raises(TypeError, match="causal"):
        ft.triton_flash_forward(q, q, q, causal="yes")
    with pytest.raises(ValueError, match="lse"):
        ft.triton_flash_backward(q, q, q, q, torch.zeros(1, 1, 8), q)
    with pytest.raises(ValueError, match="do"):
        ft.triton_flash_backward(q, q, q, q, torch.zeros(1, 1, 16), q[..., :8, :])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (native Triton)")
def test_native_cuda_matches_pytorch_tiles():
    from perfkit.compute.flash import attention_backward_tiles, attention_forward_tiles

    ok, why = ft.triton_status("cuda")
    if not ok:
        pytest.skip(why)
    g = torch.Generator().manual_seed(0)
    for causal in (False, True):
        for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 2e-3), (torch.bfloat16, 2e-2)):
            q, k, v = (torch.randn(2, 3, 300, 64, generator=g) for _ in range(3))
            o, lse = ft.triton_flash_forward(*(x.to("cuda", dtype) for x in (q, k, v)), causal,
                                             block_m=64, block_n=32)
            ro, rl = attention_forward_tiles(q.double(), k.double(), v.double(), 0.125, causal)
            assert (o.double().cpu() - ro).abs().max() <= tol, (causal, dtype)
            assert (lse.double().cpu() - rl).abs().max() <= tol, (causal, dtype)
            do = torch.randn(ro.shape, generator=g)
            want = attention_backward_tiles(q.double(), k.double(), v.double(), do.double(), rl,
                                            (do.double() * ro).sum(-1), 0.125, causal)
            got = ft.triton_flash_backward(*(x.to("cuda", dtype) for x in (q, k, v)), o, lse,
                                           do.to("cuda", dtype), causal, block_m=64, block_n=32)
            for a, b in zip(got, want):
                assert (a.double().cpu() - b).abs().max() <= 10 * tol * b.abs().max(), (causal, dtype)
