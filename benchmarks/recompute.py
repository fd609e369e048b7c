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

Run: ``.venv/bin/python benchmarks/recompute.py [--hidden 4096 --layers 4 --seq 2048 --batch 2]``
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from perfkit import stats
from perfkit.parallel.gpt import Block, GPTConfig
from perfkit.plan import ATTENTION_EFFICIENCY, ModelSpec
from perfkit.timing import interleaved


def _step(blocks: nn.ModuleList, x: torch.Tensor, mode: str):
    """One forward + backward: ``plain``, ``early`` (checkpoint, early stop) or ``full``."""
    def run() -> None:
        with set_checkpoint_early_stop(mode != "full"):
            y = x
            for blk in blocks:
                y = blk(y) if mode == "plain" else checkpoint(blk, y, use_reentrant=False)
            y.float().square().mean().backward()
    return run


def main() -> None:
    cuda = torch.cuda.is_available()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hidden", type=int, default=4096 if cuda else 256)
    ap.add_argument("--heads", type=int, default=32 if cuda else 4)
    ap.add_argument("--layers", type=int, default=4 if cuda else 2)
    ap.add_argument("--seq", type=int, default=2048 if cuda else 256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    for k in ("hidden", "heads", "layers", "seq", "batch", "repeat"):
        if getattr(a, k) < 1:
            ap.error(f"--{k} must be at least 1, got {getattr(a, k)}")
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
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
