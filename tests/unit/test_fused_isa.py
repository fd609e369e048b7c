"""Fused codecs stay right when one compile cache is shared by processes on different vector ISAs.

Inductor's on-disk graph cache does not key on the vector ISA a graph was generated for. A
QSGD graph built under ``ATEN_CPU_CAPABILITY=avx2`` (loops stepping by 8 floats) and loaded by
an AVX-512 process corrupted the heap ("free(): invalid next size") or returned codes 7.0 off
instead of 0.04. perfkit pins ``cpp.simdlen`` (part of the key) for its compiled kernels, so
each ISA gets its own entries. The test runs the two processes in that order on one empty
cache, the order that broke.
"""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perfkit.compress import compile_for_isa, fused

ROUND_TRIP = """
import torch
from perfkit.compress import QSGD, Sign
print(torch.backends.cpu.get_cpu_capability())
q, g = QSGD(seed=1, fused=True), Sign(fused=True)
worst, signs = 0.0, True
for n in (4096, (1 << 20) + 5):
    for _ in range(2):
        x = torch.randn(n)
        out = torch.empty_like(x)
        q.decompress(q.compress(x), out=out)
        worst = max(worst, ((out - x).abs().max() / x.abs().max()).item())
        signs &= bool(torch.equal(g.decompress(g.compress(x)).sign(), torch.where(x >= 0, 1.0, -1.0)))
print(worst, signs)
"""
CAPS = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _run(cache: Path, caps: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PERFKIT_IMITATE", "PERFKIT_FUSED", *CAPS)}
    env.update(caps, TORCHINDUCTOR_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", ROUND_TRIP], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, f"exit {out.returncode} with caps {caps}: {out.stderr[-2000:]}"
    return out.stdout.split()


@pytest.mark.timeout(900)
@pytest.mark.skipif("avx512f" not in Path("/proc/cpuinfo").read_text(errors="ignore")
                    if Path("/proc/cpuinfo").exists() else True,
                    reason="needs a CPU with AVX-512 (two vector widths to mix up)")
def test_avx2_graphs_in_a_shared_cache_do_not_reach_an_avx512_process(tmp_path):
    capped = _run(tmp_path, CAPS)         # fills the empty cache with AVX2 graphs
    native = _run(tmp_path, {})           # the same cache, native ISA: the order that broke
    assert capped[0] == "AVX2" and native[0] != "AVX2", "the two processes ran the same ISA"
    for name, (cap, worst, signs) in {"capped": capped, "native": native}.items():
        # QSGD's error is at most one level, 1/127 of max|x|; the broken cache gave 7.0
        assert float(worst) <= 1 / 126.99 + 1e-6 and signs == "True", (name, cap, worst, signs)


def test_compiled_kernels_name_the_vector_width_they_are_built_for(monkeypatch, caplog):
    from torch._inductor import cpu_vec_isa

    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    run = compile_for_isa(lambda x: x + 1)
    with caplog.at_level(logging.INFO, logger="perfkit.compress"):
        assert torch.equal(run(torch.zeros(2)), torch.ones(2))
        assert torch.equal(run(torch.ones(2)), 2 * torch.ones(2))  # compiled once
    assert seen == [{"dynamic": True, "fullgraph": True,
                     "options": {"cpp.simdlen": cpu_vec_isa.pick_vec_isa().bit_width() or 1}}]
    # the first call says it compiles, and how long it took
    width = seen[0]["options"]["cpp.simdlen"]
    assert [r.getMessage().split(" (")[0].split(" in ")[0] for r in caplog.records] == [
        f"perfkit.compress: compiling <lambda> for {{'cpp.simdlen': {width}}}",
        "perfkit.compress: <lambda> compiled and ran"]


def test_the_fused_kernels_are_compiled_for_the_isa():
    # each of fused's four kernels goes through compile_for_isa (a plain torch.compile would
    # share cache entries across ISAs again)
    for name in ("_QSGD_ENCODE", "_QSGD_DECODE", "_SIGN_ENCODE", "_SIGN_DECODE"):
        assert getattr(fused, name).__qualname__ == "compile_for_isa.<locals>.run", name
