"""Gradient compression, compared: perfkit compressors vs torch's fp16/bf16 and PowerSGD hooks.

Prints one JSON object. One entry per method (``none``, ``fp16_hook``, ``bf16_hook``,
``powersgd_r{1,2,4}``, ``topk_1pct``, ``randomk_1pct``, ``qsgd``, ``sign``, the last four
also with ``_ef`` for error feedback, and ``dense``/``dense_ef``, the uncompressed gradient
through perfkit's hook, which must train exactly like ``none``), each with

* ``wire_bytes_ratio``: payload bytes per step over dense fp32 bytes (exact counts);
* ``final_loss``: training-split loss after the same number of steps of 2-process DDP
  training (``SmallCNN`` on digits, SGD with momentum, every method from the same seed on
  the same batches), and ``loss_gap = final_loss / final_loss(none) - 1``;
* ``encode_decode_GBps``: fp32 input bytes per second through encode + decode of one
  16M-element tensor (4M in QUICK mode), in this process, on the compressor's default
  path (QSGD and sign: the fused one-pass kernels of :mod:`perfkit.compress.fused` at these
  sizes); ``qsgd`` and ``sign`` also carry ``encode_decode_eager_GBps`` (the eager,
  several-pass kernels) and ``share_of_memcpy`` for both;
* ``step_s`` and ``eval_accuracy`` for context.

Plus ``memcpy_GBps`` (a copy of the same tensor into a preallocated buffer, counted the
same way: source bytes per second; every compressor also decodes into a preallocated
buffer, as the DDP hook does), the same copy as ``memcpy_read_written_GBps`` beside the
machine's DRAM ceiling ``machine_dram_copy_GBps`` (``perfkit.hw``, both counting bytes read
plus written), ``sampled_topk_speedup`` (exact over sampled top-k compress time at 1 %) and
``sampled_topk_mass_ratio`` (sum of kept magnitudes, sampled over exact),
``fused_first_call_s`` (the first QSGD and sign round trips of the process, which compile
the fused kernels or load them from Inductor's disk cache), and
``targets`` with the pass/fail checks. Times are medians measured interleaved.

Run: ``.venv/bin/python benchmarks/compression.py`` (``PERFKIT_QUICK=1`` for a short run).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import torch

from perfkit import compress, dist, hw
from perfkit.compress import fused
from perfkit.timing import Timer, interleaved

QUICK = os.environ.get("PERFKIT_QUICK", "0") == "1"
NUMEL = (4 if QUICK else 16) * 2**20
STEPS = 120 if QUICK else 500
METHODS = ["none", "fp16_hook", "bf16_hook", "powersgd_r1", "powersgd_r2", "powersgd_r4",
           "topk_1pct", "topk_1pct_ef", "randomk_1pct", "randomk_1pct_ef", "qsgd", "qsgd_ef",
           "sign", "sign_ef", "dense", "dense_ef"]


def _roundtrip(comp: compress.Compressor, x: torch.Tensor, out: torch.Tensor
               ) -> Callable[[], object]:
    return lambda: comp.decompress(comp.compress(x), out=out)


def _powersgd(x: torch.Tensor, rank: int) -> Callable[[], object]:
    """One PowerSGD round on x viewed as a square-ish matrix: P = MQ, orthogonalise P,
    Q = M^T P, approximation P Q^T (the compute the hook does per matrix)."""
    m = x.view(2048, -1)  # (2048, NUMEL / 2048)
    q = torch.randn(m.shape[1], rank)

    def fn() -> torch.Tensor:
        p = torch.linalg.qr(m @ q).Q  # (rows, r)
        return p @ (m.T @ p).T  # (rows, cols)
    return fn


def fused_first_call() -> float:
    """Seconds of the process's first fused QSGD and sign round trips (the compile)."""
    x = torch.randn(NUMEL)
    with Timer() as t:
        for comp in (compress.QSGD(fused=True), compress.Sign(fused=True)):
            comp.decompress(comp.compress(x))
    return t.elapsed_s


def encode_decode() -> dict[str, float]:
    """Input GB/s of encode + decode per method, and the memcpy reference."""
    x = torch.randn(NUMEL)
    out = torch.empty_like(x)  # decoded into a preallocated buffer, as the DDP hook does
    half, bf16 = torch.empty_like(x, dtype=torch.float16), torch.empty_like(x, dtype=torch.bfloat16)
    fns = {
        "memcpy": lambda: out.copy_(x),  # the ceiling: every value read and written once
        "fp16_hook": lambda: out.copy_(half.copy_(x)),  # the casts, into preallocated buffers
        "bf16_hook": lambda: out.copy_(bf16.copy_(x)),
        "topk_1pct": _roundtrip(compress.TopK(0.01, "sampled"), x, out),
        "topk_1pct_ef": _roundtrip(compress.ErrorFeedback(compress.TopK(0.01, "sampled")), x,
                                   out),
        "randomk_1pct": _roundtrip(compress.RandomK(0.01), x, out),
        "randomk_1pct_ef": _roundtrip(compress.ErrorFeedback(compress.RandomK(0.01)), x, out),
        "qsgd": _roundtrip(compress.QSGD(), x, out),
        "qsgd_ef": _roundtrip(compress.ErrorFeedback(compress.QSGD()), x, out),
        "sign": _roundtrip(compress.Sign(), x, out),
        "sign_ef": _roundtrip(compress.ErrorFeedback(compress.Sign()), x, out),
        "qsgd_eager": _roundtrip(compress.QSGD(fused=False), x, out),
        "sign_eager": _roundtrip(compress.Sign(fused=False), x, out),
        **{f"powersgd_r{r}": _powersgd(x, r) for r in (1, 2, 4)},
    }
    ms = interleaved(list(fns.values()), warmup=1, repeat=3 if QUICK else 5)
    return {k: x.numel() * 4 / m.median_s / 1e9 for k, m in zip(fns, ms, strict=True)}


def sampled_topk() -> dict[str, float]:
    """Exact vs sampled top-k at 1 % of NUMEL values: speed-up and kept-mass ratio."""
    x = torch.randn(NUMEL)
    exact, sampled = compress.TopK(0.01), compress.TopK(0.01, "sampled")
    m_exact, m_sampled = interleaved([lambda: exact.compress(x), lambda: sampled.compress(x)],
                                     warmup=1, repeat=3 if QUICK else 5)
    mass = (float(sampled.compress(x).tensors[0].abs().sum())
            / float(exact.compress(x).tensors[0].abs().sum()))
    return {"sampled_topk_speedup": m_exact.median_s / m_sampled.median_s,
            "sampled_topk_mass_ratio": mass, "topk_exact_s": m_exact.median_s,
            "topk_sampled_s": m_sampled.median_s}


def training() -> dict[str, dict]:
    cfg = {"workload": "digits", "steps": STEPS, "batch": 32, "lr": 0.02, "methods": METHODS}
    res = dist.launch("perfkit.jobs.compression", 2, ["--config", json.dumps(cfg)],
                      timeout_s=900)
    return {r["method"]: r for r in res[0]["runs"]}


def main() -> None:
    runs = training()
    first_call_s = fused_first_call()
    gbps = encode_decode()
    topk = sampled_topk()
    base = runs["none"]["final_loss"]
    out: dict[str, object] = {}
    for m in METHODS:
        r = runs[m]
        out[m] = {"wire_bytes_ratio": r["wire_bytes_per_step"] / r["dense_bytes_per_step"],
                  "final_loss": r["final_loss"], "loss_gap": r["final_loss"] / base - 1,
                  "encode_decode_GBps": gbps.get(m), "step_s": r["step_s"],
                  "eval_accuracy": r["eval_accuracy"]}
    for m in ("qsgd", "sign"):
        out[m]["encode_decode_eager_GBps"] = gbps[m + "_eager"]
        out[m]["share_of_memcpy"] = {"default": gbps[m] / gbps["memcpy"],
                                     "eager": gbps[m + "_eager"] / gbps["memcpy"]}
        out[m]["default_path"] = ("fused" if fused.use_fused(None, torch.empty(NUMEL))
                                  else "eager")
    out["memcpy_GBps"] = gbps["memcpy"]
    # The same copy in perfkit.hw's convention (bytes read + written, as STREAM counts), beside
    # the machine's DRAM ceiling measured one way for the whole course (hw.measure_limits):
    # a tensor smaller than 4x the last-level cache partly copies from cache, and reads faster.
    limits = hw.cached_limits(quick=QUICK)
    out["memcpy_read_written_GBps"] = 2 * gbps["memcpy"]
    out["machine_dram_copy_GBps"] = limits.copy_bytes_per_s / 1e9
    out["tensor_over_last_level_cache"] = 4 * NUMEL / limits.llc_bytes if limits.llc_bytes else None
    out["fused_first_call_s"] = first_call_s
    out.update(topk)
    out["config"] = {"quick": QUICK, "numel": NUMEL, "steps": STEPS, "world_size": 2,
                     "workload": "digits SmallCNN, SGD momentum 0.9, lr 0.02, batch 32/rank"}
    out["targets"] = {
        "topk_1pct_ef_within_5pct": out["topk_1pct_ef"]["loss_gap"] <= 0.05,
        "topk_1pct_without_ef_worse": out["topk_1pct"]["final_loss"]
        > out["topk_1pct_ef"]["final_loss"],
        "qsgd_sign_encode_decode_ge_20pct_memcpy": min(gbps["qsgd"], gbps["sign"])
        >= 0.2 * gbps["memcpy"],
        "sampled_topk_ge_3x": topk["sampled_topk_speedup"] >= 3,
        "sampled_topk_mass_ge_95pct": topk["sampled_topk_mass_ratio"] >= 0.95,
        "dense_ef_trains_like_dense": abs(out["dense_ef"]["final_loss"]
                                          - out["dense"]["final_loss"]) <= 1e-6,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
