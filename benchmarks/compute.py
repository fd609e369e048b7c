"""Mixed precision and torch.compile on a tiny GPT-2 training step, with MFU.

One process, one model shape, three settings of the same training step (AdamW, random
tokens, same seed): fp32 eager, bf16 autocast eager and fp32 through ``torch.compile``
(mode ``default``). After the compile (the compiled step's first call, timed by
:func:`perfkit.compute.measure_compile`), the three steps run interleaved in one loop
(:func:`perfkit.timing.interleaved`), so load on a shared machine hits all of them alike;
``*_spread`` is the p10-p90 range of back-to-back pair ratios. MFU is model FLOPs
(:func:`perfkit.compute.gpt_train_flops`) per second over the measured ceiling of the dtype
the matmuls run in (:func:`perfkit.hw.cached_limits`). ``compile_seconds`` includes
inductor's code generation; a warm on-disk cache (``fx_cache_hits`` > 0) makes it much
smaller than on a fresh machine.

Prints one JSON object::

    {"bf16_speedup": ..., "compile_speedup": ..., "compile_seconds": ...,
     "mfu": {"fp32": ..., "bf16": ..., "fp32_compiled": ...}, "peak_flops": {...}, ...}

``--device cuda`` trains on the GPU (CUDA events time it; bf16 autocast runs the matmuls on
the tensor cores; inductor generates Triton kernels) with a model wide enough to keep a GPU
busy unless sizes are given: ``n_embd`` 1024, 16 heads, sequence 1024, vocabulary 32768.

Run: ``.venv/bin/python benchmarks/compute.py [--n-embd 128] [--seq-len 128] [--batch 8]``,
or ``benchmarks/compute.py --device cuda`` on a CUDA machine.
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from perfkit import compute, hw
from perfkit.compute import compiling
from perfkit.models import tiny_gpt2
from perfkit.timing import interleaved

# sizes per device: (n_embd, n_layer, n_head, seq_len, batch, vocab)
SIZES = {"cpu": (128, 2, 4, 128, 8, 1024), "cuda": (1024, 2, 16, 1024, 8, 32768)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=tuple(SIZES), default="cpu")
    for name in ("n-embd", "n-layer", "n-head", "seq-len", "batch", "vocab"):
        ap.add_argument(f"--{name}", type=int, help="default: by --device (SIZES)")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=None,
                    help="intra-op threads (default: torch's); MFU stays against the all-thread ceiling")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda needs a CUDA device")
    for key, default in zip(("n_embd", "n_layer", "n_head", "seq_len", "batch", "vocab"),
                            SIZES[args.device]):
        if getattr(args, key) is None:
            setattr(args, key, default)
    dev = torch.device(args.device)
    limits = hw.cached_limits()  # first: on a fresh machine it measures with all threads
    if args.threads:
        torch.set_num_threads(args.threads)
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len),
                      generator=torch.Generator().manual_seed(0)).to(dev)
    loss_fn = lambda m, b: m(input_ids=b, labels=b).loss  # noqa: E731

    def build(precision: str, compiled: bool = False):
        torch.manual_seed(0)
        model = tiny_gpt2(args.vocab, args.seq_len, args.n_embd, args.n_layer, args.n_head).to(dev)
        run = torch.compile(model) if compiled else model
        step = compute.make_train_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3),
                                       lambda _m, b: loss_fn(run, b), precision)
        return model, lambda: step(x)

    model, fp32 = build("fp32")
    _, bf16 = build("bf16")
    _, compiled = build("fp32", compiled=True)
    flops = compute.gpt2_shape(model, args.seq_len).train_flops(args.batch)

    # The compile first (its first call), then all three settings interleaved in one run.
    comp = compiling.measure_compile(fp32, compiled, warmup=0, repeat=1, device=dev)
    eager, half, comp_t = interleaved([fp32, bf16, compiled], warmup=1, repeat=args.repeat, device=dev)
    amp, cmp = compute.Speedup(eager, half), compute.Speedup(eager, comp_t)
    break_even = compiling.CompileRecord(comp.compile_s, eager, comp_t).break_even_calls
    mfu = {
        "fp32": compute.mfu(flops, eager.median_s, limits, "float32"),
        "bf16": compute.mfu(flops, half.median_s, limits, "bfloat16"),
        "fp32_compiled": compute.mfu(flops, comp_t.median_s, limits, "float32"),
    }
    print(json.dumps({
        "bf16_speedup": amp.ratio,
        "bf16_speedup_spread": [amp.low, amp.high],
        "compile_speedup": cmp.ratio,
        "compile_speedup_spread": [cmp.low, cmp.high],
        "compile_seconds": comp.compile_s,
        "compile_break_even_steps": break_even if math.isfinite(break_even) else None,  # None: never
        "fx_cache_hits": comp.fx_cache_hits,
        "mfu": mfu,
        "peak_flops": dict(limits.matmul_flops),
        "step_ms": {"fp32": eager.median_s * 1e3, "bf16": half.median_s * 1e3,
                    "fp32_compiled": comp_t.median_s * 1e3},
        "flops_per_step": flops,
        "model": {"n_params": compute.gpt2_shape(model).n_params, "n_embd": args.n_embd,
                  "n_layer": args.n_layer, "seq_len": args.seq_len, "batch": args.batch},
        "threads": torch.get_num_threads(),
        "device": limits.name, "device_type": dev.type,
    }))


if __name__ == "__main__":
    main()
