"""What full recomputation costs a block stack, measured against the planner's count.

``perfkit plan`` charges activation checkpointing one more forward of each block (less the
MLP's down-projection under PyTorch's early stop, ``Layout.early_stop``), and a fused
attention kernel's backward at its own share of the peak (``Cluster.attention_backward_efficiency``).
llm-foundry's published runs cost less with checkpointing than that count says (notebook 13,
section 4). This script measures both on the machine it runs on: a stack of MPT-like blocks
(:class:`perfkit.parallel.gpt.Block`: pre-norm, causal ``scaled_dot_product_attention``, GELU
MLP of ``4h``, no dropout) trained forward + backward plain, checkpointed block by block
with early stop and without, timed in alternation (:func:`perfkit.timing.interleaved`, CUDA
events on a GPU); and the attention kernel alone, forward and forward + backward, which gives
its backward's speed over its forward's on the FLOPs each runs (``2.5x`` the forward's in
backward).

Prints one JSON object: the measured time ratios with their 90 % intervals beside the
planner's FLOP ratios (every matmul at one rate), and the attention kernel's measured
backward-over-forward speed beside the shares :data:`perfkit.plan.ATTENTION_EFFICIENCY`
states. On CUDA the blocks run in bf16 at a model's width; on a CPU, fp32 at a small width.

With ``--gemm`` (CUDA only) it also measures the bf16 GEMM efficiency ``perfkit plan`` assumes
(``Cluster.efficiency``: achieved over peak matmul FLOP/s) at the shapes of the models in its
published tables (Megatron-LM's Table 1, llm-foundry's benchmarks): each distinct model, tensor-
parallel degree and micro-batch (tokens capped at ``--max-tokens``), one layer's four matmuls
(QKV, attention output, MLP up and down, split by TP as Megatron splits them), each forward
``(M, N, K)`` and its two backward products ``(M, K, N)`` and ``(K, N, M)``, timed alone
(:func:`perfkit.timing.benchmark`). A model's efficiency is its GEMMs' FLOPs over their summed
time, over the GPU's datasheet peak (:data:`perfkit.plan.GPUS`, matched by name) and over the
bf16 ceiling measured on this machine (:func:`perfkit.hw.cached_limits`); stored with the GPU's
name. Models past ``--gemm-budget-s`` are listed as not measured.

Run: ``.venv/bin/python benchmarks/recompute.py [--hidden 4096 --layers 4 --seq 2048 --batch 2]``
(``--gemm`` on a CUDA machine).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from perfkit import hw, stats
from perfkit.parallel.gpt import Block, GPTConfig
from perfkit.plan import ATTENTION_EFFICIENCY, GPUS, ModelSpec, foundry_runs, megatron_runs
from perfkit.timing import benchmark, calibrate_number, interleaved


def _step(blocks: nn.ModuleList, x: torch.Tensor, mode: str):
    """One forward + backward: ``plain``, ``early`` (checkpoint, early stop) or ``full``."""
    def run() -> None:
        with set_checkpoint_early_stop(mode != "full"):
            y = x
            for blk in blocks:
                y = blk(y) if mode == "plain" else checkpoint(blk, y, use_reentrant=False)
            y.float().square().mean().backward()
    return run


def layer_gemms(m: ModelSpec, tp: int, tokens: int) -> list[tuple[int, int, int]]:
    """One layer's matmuls ``(M, N, K)`` (``(M, K) @ (K, N)``) forward and backward, at TP ``tp``:
    QKV and MLP-up split by columns, attention-output and MLP-down by rows (Megatron's split)."""
    up = (2 if m.gated else 1) * m.ffn
    forward = [(tokens, (m.hidden + 2 * m.kv_dim) // tp, m.hidden), (tokens, m.hidden, m.hidden // tp),
               (tokens, up // tp, m.hidden), (tokens, m.hidden, m.ffn // tp)]
    # dX = dY @ W^T is (M, K, N); dW = X^T @ dY is (K, N, M): the same FLOPs, other shapes
    return [g for mm, n, k in forward for g in ((mm, n, k), (mm, k, n), (k, n, mm))]


def datasheet_gpu(name: str):
    """The :data:`perfkit.plan.GPUS` entry a CUDA device name matches, or ``None``."""
    for key, needle in (("h200", "H200"), ("h100-sxm", "H100"), ("a100-80gb", "A100-SXM4-80GB"),
                        ("a100-40gb", "A100")):
        if needle in name:
            return GPUS[key]
    return None


def gemm_efficiency(max_tokens: int, budget_s: float, device: str = "cuda") -> dict:
    """bf16 GEMM efficiency at the published tables' shapes on CUDA (see the docstring)."""
    dev, t0 = torch.device(device), time.monotonic()
    name = hw.device_name(dev)
    gpu, limits = datasheet_gpu(name), hw.cached_limits(quick=True)
    same = limits.device.split(":")[0] == dev.type  # the ceilings of this kind of device
    measured_peak = limits.peak_flops("bfloat16") if same else None
    seconds: dict[tuple[int, int, int], float] = {}  # s per GEMM shape, each measured once
    models, skipped, seen = [], [], set()
    for run in megatron_runs() + foundry_runs():
        m, tp = run.model, run.layout.tp
        tokens = min(run.layout.micro_batch * m.seq, max_tokens)
        if (m.name, tp, tokens) in seen:
            continue
        seen.add((m.name, tp, tokens))
        if time.monotonic() - t0 > budget_s:
            skipped.append(f"{m.name} tp={tp} tokens={tokens}")
            continue
        shapes = layer_gemms(m, tp, tokens)
        for mm, n, k in shapes:
            if (mm, n, k) not in seconds:
                a = torch.randn(mm, k, device=dev, dtype=torch.bfloat16)  # (M, K)
                b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)  # (K, N)
                out = torch.empty(mm, n, device=dev, dtype=torch.bfloat16)
                fn = lambda a=a, b=b, out=out: torch.mm(a, b, out=out)  # noqa: E731
                seconds[(mm, n, k)] = benchmark(fn, warmup=2, repeat=5, device=dev,
                                                number=calibrate_number(fn, 0.002, dev)).median_s
        flops = sum(2 * mm * n * k for mm, n, k in shapes)
        rate = flops / sum(seconds[g] for g in shapes)  # FLOP/s over the layer's GEMMs
        models.append({"model": m.name, "table": run.table, "tp": tp, "tokens": tokens,
                       "tflops": rate / 1e12,
                       "efficiency_datasheet": rate / gpu.peak_flops if gpu else None,
                       "efficiency_measured": rate / measured_peak if measured_peak else None,
                       "gemms": [{"m": mm, "n": n, "k": k, "ms": seconds[(mm, n, k)] * 1e3}
                                 for mm, n, k in shapes]})
    return {"device": name, "dtype": "bfloat16", "max_tokens": max_tokens,
            "peak_flops": {"datasheet": gpu.peak_flops if gpu else None,
                           "datasheet_gpu": gpu.name if gpu else None, "measured": measured_peak},
            "models": models, "not_measured": skipped, "seconds": time.monotonic() - t0}


def main() -> None:
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=4096 if cuda else 256)
    ap.add_argument("--heads", type=int, default=32 if cuda else 4)
    ap.add_argument("--layers", type=int, default=4 if cuda else 2)
    ap.add_argument("--seq", type=int, default=2048 if cuda else 256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--gemm", action="store_true", help="also the bf16 GEMM efficiency at the "
                    "published tables' shapes (CUDA only)")
    ap.add_argument("--max-tokens", type=int, default=16384, help="M cap of --gemm's matmuls")
    ap.add_argument("--gemm-budget-s", type=float, default=40.0, help="seconds --gemm may take")
    a = ap.parse_args()
    if a.gemm and not cuda:
        ap.error("--gemm needs a CUDA device (bf16 GEMMs of up to 16384 x 32768)")
    if not a.gemm_budget_s > 0:
        ap.error(f"--gemm-budget-s must be > 0, got {a.gemm_budget_s}")
    for k in ("hidden", "heads", "layers", "seq", "batch", "repeat", "max_tokens"):
        if getattr(a, k) < 1:
            ap.error(f"--{k.replace('_', '-')} must be at least 1, got {getattr(a, k)}")
    if a.hidden % a.heads:
        ap.error(f"--hidden ({a.hidden}) must be divisible by --heads ({a.heads})")
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    cfg = GPTConfig(n_embd=a.hidden, n_head=a.heads)
    blocks = nn.ModuleList(Block(cfg) for _ in range(a.layers)).to(dev, dtype)
    x = torch.randn(a.batch, a.seq, a.hidden, device=dev, dtype=dtype, requires_grad=True)
    plain, early, full = interleaved([_step(blocks, x, m) for m in ("plain", "early", "full")],
                                     warmup=2, repeat=a.repeat, device=dev)
    # the attention kernel alone: forward, and forward + backward
    q, k, v = (torch.randn(a.batch, a.heads, a.seq, a.hidden // a.heads, device=dev, dtype=dtype,
                           requires_grad=True) for _ in range(3))
    fwd, both = interleaved([
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()],
        warmup=2, repeat=a.repeat, device=dev)
    bwd_s = max(both.median_s - fwd.median_s, 1e-12)
    m = ModelSpec("MPT-like stack", layers=a.layers, hidden=a.hidden, heads=a.heads,
                  ffn=4 * a.hidden, vocab=8, seq=a.seq, bias=True)
    def flops(rc: str, es: bool = False) -> float:  # the stack has no head: leave it out
        return m.hardware_flops_per_token(rc, es) - m.head_flops_per_token

    def ratio(t: object) -> dict[str, object]:
        est = stats.median_ratio(t.times_s, plain.times_s)
        return {"measured": est.value, "interval_90": [est.low, est.high]}

    out = {
        "device": torch.cuda.get_device_name() if cuda else "cpu", "dtype": str(dtype).split(".")[1],
        "config": vars(a),
        "step_ms": {"plain": plain.median_s * 1e3, "checkpoint_early_stop": early.median_s * 1e3,
                    "checkpoint_full_rerun": full.median_s * 1e3},
        "early_stop_over_plain": {**ratio(early), "planner_flops": flops("full", True) / flops("none")},
        "full_rerun_over_plain": {**ratio(full), "planner_flops": flops("full") / flops("none")},
        "attention": {
            "forward_ms": fwd.median_s * 1e3, "backward_ms": bwd_s * 1e3,
            # FLOP/s backward over forward: 2.5x the forward's FLOPs in its time
            "backward_over_forward_speed": 2.5 * fwd.median_s / bwd_s,
            "stated_backward_over_forward": {k: round(b / f, 3)
                                             for k, (f, b) in ATTENTION_EFFICIENCY.items()},
        },
    }
    if a.gemm:
        out["gemm"] = gemm_efficiency(a.max_tokens, a.gemm_budget_s)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
