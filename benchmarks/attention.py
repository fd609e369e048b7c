"""FlashAttention's tiles and ring attention: equality, saved bytes, FLOPs, time, imbalance.

* ``equality``: perfkit's FlashAttention (PyTorch) against float64 attention (forward and
  the three gradients, max difference over the largest value or 1: fp32 <= 1e-5, bf16 <= 2^-6;
  lengths off the tile; causal), and ring
  attention on 2, 3 and 4 processes (non-causal, causal contiguous, causal zig-zag).
* ``saved_bytes``: exact saved-for-backward bytes (SavedTensorMeter) of eager attention and
  FlashAttention at 4 lengths from 256; the fitted ``T^2`` term (target: ``B H`` x element
  size for eager, 0 for FlashAttention) and the log-log exponent.
* ``time``: forward + backward of FlashAttention (PyTorch), eager attention and SDPA at
  T = 1024 and 4096, interleaved; median ratios with their 90 % bootstrap intervals (no
  target on CPU), beside the FLOP ratio the recomputation predicts.
* ``ring``: per-rank work imbalance counted in tile FLOPs (targets: zig-zag <= 1.1 at P = 2
  and 4; contiguous equal to (2P-1)/P with the diagonal's upper half skipped, 2P/(P+1)
  without), timed at P = 2; bytes sent per rank (counted against sent); the transfer time
  hidden behind compute; the longest sequence in a 1 GiB budget against P.

With ``--gpu`` (CUDA only) it runs the GPU part instead: perfkit's Triton FlashAttention kernel
(:mod:`perfkit.compute.flash_triton`, compiled natively) against SDPA's flash backend, bf16,
causal, B = 2, H = 16, D = 64, at T = 1024 to 16384. Both are compared, forward and the three
gradients, with an fp32 reference (SDPA's memory-efficient kernel on fp32 copies: no T x T
matrix), as max difference over the largest reference value or 1. Targets: the kernel within
bf16's tolerance (2^-6, as above), and within twice SDPA's own error plus 2^-8 (the rule of
FlashAttention's tests: no worse than PyTorch's kernel in the same dtype). Speed: forward and
forward + backward interleaved with SDPA's, their median ratio with its 90 % interval, and
each one's TFLOP/s on the causal FLOPs (``4 B H D T (T+1) / 2`` forward, 2.5x that backward).

Prints one JSON object. Run: ``.venv/bin/python benchmarks/attention.py`` (``PERFKIT_QUICK=1``
for a small run: T = 256 and 1024), or ``benchmarks/attention.py --gpu`` on a CUDA machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from perfkit import dist, sizing, stats
from perfkit.compute import flash as fl
from perfkit.memory.saved_tensors import SavedTensorMeter
from perfkit.parallel import context_model as cm
from perfkit.timing import interleaved

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")
B, H, D = 1, 4, 32


def _qkv(t: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, t, D, generator=g).to(dtype).requires_grad_() for _ in range(3)]


def equality() -> dict:
    """Max abs differences against float64, single process and the ring."""
    worst: dict[str, float] = {"float32": 0.0, "bfloat16": 0.0}
    for name in worst:
        dtype = getattr(torch, name)
        for t, tile, causal in ((1, 16, True), (100, 32, False), (100, 32, True), (257, 64, True)):
            q, k, v = _qkv(t, dtype)
            out = fl.flash_attention(q, k, v, causal, tile)
            qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
            ref, _ = fl.reference_attention(qd, kd, vd, causal)
            g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
            mine = torch.autograd.grad(out, (q, k, v), g.to(dtype))
            theirs = torch.autograd.grad(ref, (qd, kd, vd), g.double())
            # relative to the largest reference value: bf16 rounds at 2^-8 of the magnitude
            errs = [((a.double() - b).abs().max() / b.abs().max().clamp(min=1.0)).item()
                    for a, b in
                    zip((out, *mine), (ref, *theirs))]
            worst[name] = max(worst[name], *errs)
    ring = {}
    for p in (2, 3, 4):
        res = dist.launch("perfkit.jobs.context_parallel", p, ["--config", json.dumps(
            {"equal": {"seq_len": 2 * p * 7, "tile": 4}})], timeout_s=300)
        ring[p] = {dt: max(e[k] for r in res for e in r["equal"] if e["dtype"] == dt
                           for k in ("out_err", "dq_err", "dk_err", "dv_err"))
                   for dt in ("float64", "float32")}
        ring[p]["bytes_as_counted"] = all(e["stats"]["sent_forward"] == e["want_bytes"]["forward"]
                                          and e["stats"]["sent_backward"]
                                          == e["want_bytes"]["backward"]
                                          for r in res for e in r["equal"])
    return {"flash_max_rel_err": worst, "flash_fp32_ok": worst["float32"] <= 1e-5,
            "flash_bf16_ok": worst["bfloat16"] <= 2**-6, "ring_max_err": ring,
            "ring_ok": all(r["float32"] <= 1e-5 and r["float64"] <= 1e-12
                           and r["bytes_as_counted"] for r in ring.values())}


def saved_bytes() -> dict:
    """Exact saved bytes against T; the fitted T^2 term and log-log exponent."""
    lens = [256, 384, 512, 768] if QUICK else [256, 512, 1024, 2048]
    got: dict[str, list[int]] = {"eager": [], "flash": []}
    for t in lens:
        q, k, v = _qkv(t)
        for name, fn in (("eager", fl.eager_attention), ("flash", fl.flash_attention)):
            with SavedTensorMeter(inputs=[q, k, v]) as meter:
                fn(q, k, v)
            got[name].append(meter.report().activation_bytes)
    out = {"seq_lens": lens, "bytes": got, "target_eager_t2": B * H * 4}
    for name, ys in got.items():
        out[f"{name}_t2_term"] = fl.length_terms(lens, ys)[0]
        out[f"{name}_exponent"] = math.log(ys[-1] / ys[-2]) / math.log(lens[-1] / lens[-2])
    out["formula_exact"] = all(
        e == fl.eager_saved_bytes(B, H, t) and f == fl.flash_saved_bytes(B, H, t, D)
        for t, e, f in zip(lens, got["eager"], got["flash"]))
    return out


def _time_at(t: int) -> dict:
    """Forward + backward of the three implementations at one length, interleaved."""
    q, k, v = _qkv(t)
    g = torch.randn(B, H, t, D)
    impls = {"flash": lambda: fl.flash_attention(q, k, v, tile=128),
             "eager": lambda: fl.eager_attention(q, k, v),
             "sdpa": lambda: F.scaled_dot_product_attention(q, k, v)}
    steps = [lambda f=f: f().backward(g) for f in impls.values()]
    ms = dict(zip(impls, interleaved(steps, warmup=1, repeat=3 if QUICK else 5)))
    flops = fl.flash_flops(B, H, t, D, tile=128)
    rec = {f"{n}_s": m.median_s for n, m in ms.items()}
    for other in ("eager", "sdpa"):
        r = stats.median_ratio(ms["flash"].times_s, ms[other].times_s)
        rec[f"flash_over_{other}"] = [r.value, r.low, r.high]
    rec["flop_ratio_flash_over_eager"] = ((flops.forward + flops.backward)
                                          / (flops.eager_forward + flops.eager_backward))
    return rec


def timing() -> dict:
    """:func:`_time_at` at T = 1024 and 4096 (256 and 1024 when QUICK), on the threads other
    processes leave free (small tiles on busy OpenMP threads stall at every barrier)."""
    threads = sizing.timing_threads()
    with sizing.pinned_threads(threads):
        out = {str(t): _time_at(t) for t in ([256, 1024] if QUICK else [1024, 4096])}
    return {"threads": threads, **out}


def ring() -> dict:
    """Counted and timed per-rank work, bytes, hidden transfer, longest sequence."""
    t = 4096
    counted = {}
    for p in (2, 4):
        counted[p] = {
            "zigzag_tiles": cm.imbalance(cm.ring_work(t, p, "zigzag", tile=64)),
            "contiguous_half": cm.imbalance(cm.ring_work(t, p, "contiguous", diagonal="half")),
            "contiguous_full": cm.imbalance(cm.ring_work(t, p, "contiguous", diagonal="full")),
            "contiguous_tiles": cm.imbalance(cm.ring_work(t, p, "contiguous", tile=64)),
            "formula_half": cm.contiguous_imbalance(p, "half"),
            "formula_full": cm.contiguous_imbalance(p, "full")}
    seq = 512 if QUICK else 2048
    res = dist.launch("perfkit.jobs.context_parallel", 2, ["--config", json.dumps(
        {"time": {"seq_len": seq, "tile": 64, "repeat": 3 if QUICK else 5}})], timeout_s=600)
    timed = {}
    for split in ("contiguous", "zigzag"):
        per_rank = [statistics.median(r["time"]["splits"][split]["compute_s"]) for r in res]
        timed[split] = {"compute_s": per_rank, "imbalance": cm.imbalance(per_rank),
                        "counted": cm.imbalance(cm.ring_work(seq, 2, split, tile=64))}
    # transfers per forward + backward at P = 2, as the ring posts them: P single exchanges and
    # P - 1 pairs posted together (perfkit.parallel.ring_transfers_s); overlapped, a step costs
    # about max(compute, transfers)
    exchange = statistics.median(x for r in res for x in r["time"]["exchange_s"])
    pair = statistics.median(x for r in res for x in r["time"]["pair_exchange_s"])
    comm = cm.ring_transfers_s(2, exchange, pair)
    zig = [r["time"]["splits"]["zigzag"] for r in res]
    compute = max(statistics.median(z["compute_s"]) for z in zig)
    hidden = {"transfer_alone_s": comm, "compute_s": compute,
              "waited_s": max(statistics.median(z["wait_s"]) for z in zig),
              "step_s": max(statistics.median(z["step_s"]) for z in zig),
              "serial_s": compute + comm, "overlapped_s": max(compute, comm),
              "hideable_share": min(1.0, compute / comm)}
    budget = 2**30
    longest = {p: cm.longest_sequence(budget, p, heads=32, head_dim=128) for p in (1, 2, 4, 8)}
    return {"counted": counted, "timed_p2": timed, "overlap": hidden,
            "zigzag_ok": all(c["zigzag_tiles"] <= 1.1 for c in counted.values()),
            "contiguous_formula_ok": all(
                math.isclose(c["contiguous_half"], c["formula_half"])
                and math.isclose(c["contiguous_full"], c["formula_full"])
                for c in counted.values()),
            "bytes_per_rank_fp32": {p: vars(cm.ring_bytes(B, H, t, D, p)) for p in (2, 4)},
            "longest_seq_1GiB_32x128": longest}


GPU_SHAPE = (2, 16, 64)  # B, H, D of the GPU part
GPU_LENGTHS = (1024, 2048, 4096, 8192, 16384)
BF16_TOL, SDPA_SLACK = 2**-6, 2**-8


def _rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max difference over the largest reference value or 1 (as :func:`equality`)."""
    return ((got.float() - ref).abs().max() / ref.abs().max().clamp(min=1.0)).item()


def _sdpa(q, k, v, do, backend) -> list[torch.Tensor]:
    """SDPA's output and gradients (causal) through one backend: [O, dQ, dK, dV]."""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    with sdpa_kernel(backend):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return [o.detach(), *torch.autograd.grad(o, (q, k, v), do)]


def triton_against_sdpa(repeat: int = 7, lengths: tuple[int, ...] = GPU_LENGTHS,
                        device: str = "cuda") -> dict:
    """The Triton kernel against SDPA's flash backend (see the module's docstring). On CUDA in
    bf16; ``device="cpu"`` runs the same code in fp32 through Triton's interpreter (set
    ``TRITON_INTERPRET=1`` first) against SDPA's math kernel: a check of this function, at small T."""
    from perfkit.compute.flash_triton import triton_flash_backward, triton_flash_forward, triton_status

    ok, why = triton_status(device)
    if not ok:
        return {"ran": False, "why": why}
    b, h, d = GPU_SHAPE
    dev, names = torch.device(device), ("out", "dq", "dk", "dv")
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    exact = SDPBackend.EFFICIENT_ATTENTION if cuda else SDPBackend.MATH  # no T x T on the GPU
    res = {"ran": True, "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "dtype": str(dtype).split(".")[1], "causal": True, "shape_bhd": [b, h, d], "lengths": {}}
    for t in lengths:
        g = torch.Generator(device=dev).manual_seed(t)
        q, k, v, do = (torch.randn(b, h, t, d, device=dev, generator=g).to(dtype) for _ in range(4))
        ref = _sdpa(q.float(), k.float(), v.float(), do.float(), exact)
        sdpa = _sdpa(q, k, v, do, SDPBackend.FLASH_ATTENTION)
        o, lse = triton_flash_forward(q, k, v, causal=True)
        mine = [o, *triton_flash_backward(q, k, v, o, lse, do, causal=True)]
        err_t = {n: _rel_err(x, r) for n, x, r in zip(names, mine, ref)}
        err_s = {n: _rel_err(x, r) for n, x, r in zip(names, sdpa, ref)}
        del ref, sdpa, mine

        def tri_both(q=q, k=k, v=v, do=do) -> None:
            o, lse = triton_flash_forward(q, k, v, causal=True)
            triton_flash_backward(q, k, v, o, lse, do, causal=True)

        def sdpa_fwd(q=q, k=k, v=v) -> torch.Tensor:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        steps = [lambda q=q, k=k, v=v: triton_flash_forward(q, k, v, causal=True), sdpa_fwd,
                 tri_both, lambda q=q, k=k, v=v, do=do: _sdpa(q, k, v, do, SDPBackend.FLASH_ATTENTION)]
        fwd_t, fwd_s, both_t, both_s = interleaved(steps, warmup=2, repeat=repeat, device=dev)
        fwd_flops = 4 * b * h * d * t * (t + 1) / 2  # the causal half of the square
        rec = {"max_rel_err_triton": err_t, "max_rel_err_sdpa_flash": err_s,
               "within_bf16_tol": all(e <= BF16_TOL for e in err_t.values()),
               "within_2x_sdpa": all(err_t[n] <= 2 * err_s[n] + SDPA_SLACK for n in names)}
        for label, mt, ms, flops in (("forward", fwd_t, fwd_s, fwd_flops),
                                     ("forward_backward", both_t, both_s, 3.5 * fwd_flops)):
            r = stats.median_ratio(mt.times_s, ms.times_s)
            rec[label] = {"triton_ms": mt.median_s * 1e3, "sdpa_flash_ms": ms.median_s * 1e3,
                          "triton_over_sdpa": [r.value, r.low, r.high],
                          "triton_tflops": flops / mt.median_s / 1e12,
                          "sdpa_flash_tflops": flops / ms.median_s / 1e12}
        res["lengths"][str(t)] = rec
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", action="store_true", help="only the GPU part (the Triton kernel "
                    "against SDPA's flash backend); needs CUDA")
    args = ap.parse_args(argv)
    if args.gpu:
        if not torch.cuda.is_available():
            ap.error("--gpu needs a CUDA device")
        gpu = triton_against_sdpa()  # 7 rounds: an interval needs 5 (GPU timings are cheap)
        lens = gpu.get("lengths", {}).values()
        print(json.dumps({"gpu": gpu, "targets_met": {
            "triton_equals_sdpa_bf16": bool(lens) and all(r["within_bf16_tol"] for r in lens),
            "triton_within_2x_sdpa_error": bool(lens) and all(r["within_2x_sdpa"] for r in lens)}}))
        return
    out = {"quick": QUICK, "equality": equality(), "saved_bytes": saved_bytes(),
           "time": timing(), "ring": ring()}
    sb = out["saved_bytes"]
    out["targets_met"] = {
        "equality": out["equality"]["flash_fp32_ok"] and out["equality"]["flash_bf16_ok"]
        and out["equality"]["ring_ok"],
        "saved_bytes": sb["formula_exact"] and math.isclose(sb["eager_t2_term"],
                                                            sb["target_eager_t2"])
        and abs(sb["flash_t2_term"]) < 1e-6,
        "zigzag_imbalance": out["ring"]["zigzag_ok"],
        "contiguous_formula": out["ring"]["contiguous_formula_ok"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
