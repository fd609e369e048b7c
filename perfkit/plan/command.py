"""``perfkit plan``: the planner's command line, its text report and its JSON.

:func:`add_parser` adds the subcommand to ``perfkit``'s parser (:mod:`perfkit.cli`);
:func:`run` builds the model (a transformers ``config.json`` or ``--layers/--hidden/...``),
the cluster (a datasheet GPU or ``--machine local``) and the constraints, plans, and prints
:func:`report_text` or :func:`report_json`. Bad input ends with exit code 2 and a sentence.

Usage::

    perfkit plan --gpu h100-sxm --gpus 64 --config llama/config.json --global-batch-tokens 4M
    perfkit plan --gpu a100-80gb --gpus 512 --layers 48 --hidden 8192 --heads 64 --seq 2048 --tp 8
    perfkit plan --machine local --json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from typing import Any

from perfkit._checks import check_real
from perfkit.plan.cluster import GPUS, MEMORY_EFFICIENCY, Cluster, local_cluster, named_cluster
from perfkit.plan.failures import (
    add_failure_arguments,
    checkpoint_bytes,
    failure_lines,
    failure_options,
    failure_plan,
)
from perfkit.plan.model import RECOMPUTE, ModelSpec, model_from_config
from perfkit.plan.search import Plan, plan

__all__ = ["add_parser", "parse_tokens", "report_json", "report_text", "run"]

FIXABLE = ("dp", "tp", "pp", "cp", "zero", "micro_batch", "interleave", "recompute")


def parse_tokens(text: str) -> int:
    """``"4M"``, ``"512k"``, ``"1048576"`` -> tokens; k, M, G are powers of two (4M is
    4,194,304 tokens: 1024 sequences of 4096), as batch sizes are quoted.

    Raises:
        ValueError: for anything else, or a count below 1.
    """
    t = str(text).strip().lower()
    scale = {"k": 2**10, "m": 2**20, "g": 2**30}.get(t[-1:], 1)
    try:
        n = int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise ValueError(f"--global-batch-tokens must be a count such as 4M or 524288, "
                         f"got {text!r}") from None
    if n < 1:
        raise ValueError(f"--global-batch-tokens must be at least 1, got {text!r}")
    return n


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def report_text(p: Plan, top: int = 5) -> str:
    """The best ``top`` layouts as a table, why the next ones lose, and the rejections."""
    m, c = p.model, p.cluster
    size = (f"{m.num_params / 1e9:.2f} B" if m.num_params >= 1e9 else f"{m.num_params / 1e6:.2f} M")
    lines = [f"{m.name}: {size} parameters, {m.layers} layers, h={m.hidden}, "
             f"{m.heads} heads ({m.kv} kv), seq {m.seq}, on {p.gpus} x {c.gpu.name} "
             f"({c.name}), efficiency {c.efficiency:.2f}, batch {p.global_batch} sequences "
             f"({p.global_batch * m.seq:,} tokens)"]
    if not p.best:
        lines.append("no layout fits; the most common reasons:")
        reasons: dict[str, int] = {}
        for _lay, why in p.rejected:
            key = why.split(":")[0] if why.startswith("needs") else why
            reasons[key] = reasons.get(key, 0) + 1
        lines += [f"  {n:6d} x {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:5]]
        return "\n".join(lines)
    lines.append(f"{'#':>2} {'layout':34} {'step s':>9} {'tok/s/GPU':>10} {'MFU':>6} "
                 f"{'mem GB':>7} {'states':>7} {'acts':>6}  limiter")
    for i, cand in enumerate(p.best[:top]):
        t, mem = cand.time, cand.memory
        lines.append(f"{i + 1:>2} {cand.layout.label():34} {t.total_s:9.4g} "
                     f"{t.tokens_per_s / p.gpus:10.4g} {t.mfu:6.1%} {_gb(mem.total):>7} "
                     f"{_gb(mem.model_states):>7} {_gb(mem.activations):>6}  {t.limiter}")
    best = p.best[0].time
    lines.append("best layout, seconds per term: " + ", ".join(
        f"{k} {v:.3g}" for k, v in best.terms.items() if v > 0))
    lines += ["why the next ones lose:"] + [f"  {p.why_not(r)}" for r in range(1, min(top, len(p.best)))]
    lines.append(f"{len(p.best)} layouts fit, {len(p.rejected)} rejected; one of each reason:")
    kinds: dict[str, str] = {}  # a reason without its numbers -> its first example
    for lay, why in p.rejected:
        kinds.setdefault(re.sub(r"[0-9.]+", "#", why), f"  {lay.label()}: {why}")
    lines += list(kinds.values())[:4]
    return "\n".join(lines)


def report_json(p: Plan, top: int = 5) -> dict[str, Any]:
    """The plan as plain data: model, cluster, the best ``top`` layouts with every term."""
    return {
        "model": {k: getattr(p.model, k) for k in ("name", "layers", "hidden", "heads", "kv",
                                                    "ffn", "vocab", "seq", "num_params")},
        "cluster": {"name": p.cluster.name, "gpu": p.cluster.gpu.name,
                    "efficiency": p.cluster.efficiency,
                    "attention_efficiency": p.cluster.attention_efficiency,
                    "attention_backward_efficiency": p.cluster.attention_backward_efficiency,
                    "memory_efficiency": p.cluster.memory_efficiency,
                    "sharded_hidden": p.cluster.sharded_hidden,
                    "source": p.cluster.gpu.source},
        "gpus": p.gpus, "global_batch": p.global_batch,
        "best": [{"layout": vars(c.layout), "label": c.layout.label(), "step_s": c.time.total_s,
                  "terms_s": c.time.terms, "tokens_per_s": c.time.tokens_per_s, "mfu": c.time.mfu,
                  "limiter": c.time.limiter, "memory_bytes": c.memory.as_dict()}
                 for c in p.best[:top]],
        "fit": len(p.best), "rejected": len(p.rejected),
        "rejected_examples": [{"label": lay.label(), "reason": why} for lay, why in p.rejected[:5]],
    }


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``plan`` to ``perfkit``'s subparsers; return its parser."""
    ap = sub.add_parser(
        "plan", help="choose DP x TP x PP x CP, ZeRO, micro-batch and recomputation for a run",
        description="Predict memory per GPU and step time of every layout of a model on a "
        "cluster, reject those that do not fit, rank the rest and explain why the runners-up "
        "lose. The model: a transformers config.json (--config) or its sizes; the cluster: a "
        "datasheet GPU (--gpu) or this machine (--machine local).")
    g = ap.add_argument_group("model")
    g.add_argument("--config", help="a transformers config.json (Llama-style configs get SwiGLU and GQA)")
    for k in ("layers", "hidden", "heads", "ffn", "vocab", "kv-heads"):
        g.add_argument(f"--{k}", type=int)
    g.add_argument("--seq", type=int, help="training sequence length (default: the config's)")
    g.add_argument("--gated", action="store_true", help="SwiGLU MLP (three matrices)")
    c = ap.add_argument_group("cluster")
    c.add_argument("--gpu", choices=sorted(GPUS), default="h100-sxm")
    c.add_argument("--machine", choices=("local",), help="this machine's measured ceilings and link")
    c.add_argument("--gpus", type=int, help="GPUs (default 8; with --machine local: processes, default 2)")
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--inter-gbps", type=float, help="network Gb/s per GPU (default by GPU: 200/400)")
    c.add_argument("--efficiency", type=float, default=0.5, help="achieved share of the matmul peak")
    c.add_argument("--attention-efficiency", type=float,
                   help="fused attention kernel's share of the peak, forward (default: "
                        "--efficiency; on A100 FlashAttention 1 about 0.4, FlashAttention 2 about 0.6)")
    c.add_argument("--attention-backward-efficiency", type=float,
                   help="its share backward (default: --attention-efficiency; on A100 "
                        "FlashAttention 1 about 0.3, FlashAttention 2 about 0.53)")
    c.add_argument("--memory-efficiency", type=float, default=MEMORY_EFFICIENCY,
                   help="memory-bound kernels' share of the HBM bandwidth (default "
                        f"{MEMORY_EFFICIENCY:g}: the best share profiled on A100)")
    c.add_argument("--sharded-hidden", type=float, default=0.0,
                   help="share of the compute ZeRO-2/3's collectives hide behind (default 0: "
                        "FSDP as llm-foundry ran it hid none; 1: ideal prefetching)")
    r = ap.add_argument_group("run and constraints")
    r.add_argument("--global-batch-tokens", help="tokens per step: 4M, 524288 (default 1M; with "
                   "--machine local: 8 sequences per process, as notebook 13 runs)")
    for k in FIXABLE:
        r.add_argument(f"--{k.replace('_', '-')}", type=str if k == "recompute" else int,
                       choices=RECOMPUTE if k == "recompute" else None, help=f"fix {k}")
    r.add_argument("--sp", choices=("on", "off"), help="fix sequence parallelism")
    r.add_argument("--early-stop", action="store_true",
                   help="full recomputation by PyTorch's non-reentrant checkpoint (2.1+), whose "
                        "rerun skips each block's last matmul (implies --recompute full)")
    add_failure_arguments(ap)
    ap.add_argument("--top", type=int, default=5, help="layouts shown (default 5)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.set_defaults(func=run)
    return ap


def _model(args: argparse.Namespace) -> ModelSpec:
    if args.config:
        return model_from_config(args.config, seq=args.seq)
    if args.machine == "local" and args.layers is None:
        from perfkit.plan.local import tiny_gpt2_spec

        return tiny_gpt2_spec()
    missing = [k for k in ("layers", "hidden", "heads") if getattr(args, k) is None]
    if missing:
        raise ValueError(f"name a model: --config config.json, or --layers, --hidden and --heads "
                         f"(missing {', '.join('--' + k for k in missing)})")
    h = args.hidden
    return ModelSpec("model", layers=args.layers, hidden=h, heads=args.heads,
                     ffn=args.ffn or (int(8 * h / 3) if args.gated else 4 * h),
                     vocab=args.vocab or 50257, seq=args.seq or 2048, kv_heads=args.kv_heads,
                     gated=args.gated)


def _cluster(args: argparse.Namespace) -> Cluster:
    if args.machine == "local":
        from perfkit import hw
        from perfkit.plan.local import local_link

        return local_cluster(hw.cached_limits(), local_link(), processes=args.gpus,
                             efficiency=min(args.efficiency, 1.0))
    c = named_cluster(args.gpu, args.gpus_per_node, args.inter_gbps, args.efficiency,
                      args.attention_efficiency, args.attention_backward_efficiency,
                      args.memory_efficiency)
    return replace(c, sharded_hidden=check_real("--sharded-hidden", args.sharded_hidden, 0, 1))


def _check_fixed(model: ModelSpec, fixed: dict[str, Any], gpus: int, batch: int) -> None:
    """Refuse constraints no layout can meet, with the reason (before the search)."""
    degrees = [fixed.get(k) for k in ("dp", "tp", "pp", "cp")]
    product = 1
    for d in degrees:
        product *= d or 1
    if all(d is not None for d in degrees[:3]) and product != gpus or gpus % product:
        named = " x ".join(f"{k}={fixed[k]}" for k in ("dp", "tp", "pp", "cp") if k in fixed)
        raise ValueError(f"the degrees {named} multiply to {product}, which "
                         f"{'is not' if all(d is not None for d in degrees[:3]) else 'does not divide'} "
                         f"the GPU count {gpus}")
    if "tp" in fixed and model.heads % fixed["tp"]:
        raise ValueError(f"heads ({model.heads}) are not divisible by --tp ({fixed['tp']})")
    if "pp" in fixed and fixed["pp"] > 1 and batch < fixed["pp"]:
        raise ValueError(f"the batch is too small for the pipeline: {batch} sequence(s) per step "
                         f"for {fixed['pp']} stages (each stage needs a micro-batch in flight)")


def run(args: argparse.Namespace) -> int:
    """Run ``perfkit plan`` with parsed ``args``; return the exit code (2 for bad input)."""
    local = args.machine == "local"
    if args.gpus is None:
        args.gpus = 2 if local else 8
    try:
        model = _model(args)
        cluster = _cluster(args)
        tokens = (parse_tokens(args.global_batch_tokens) if args.global_batch_tokens
                  else 8 * args.gpus * model.seq if local else 2**20)
        batch = max(tokens // model.seq, 1)
        fixed = {k: getattr(args, k) for k in FIXABLE if getattr(args, k) is not None}
        if args.sp:
            fixed["sp"] = args.sp == "on"
        if args.early_stop:
            if fixed.setdefault("recompute", "full") != "full":
                raise ValueError(f"--early-stop is a kind of full recomputation, got --recompute "
                                 f"{fixed['recompute']}")
            fixed["early_stop"] = True
        _check_fixed(model, fixed, args.gpus, batch)
        failing = failure_options(args)
        result = plan(model, cluster, args.gpus, batch, fixed)
    except (TypeError, ValueError) as e:
        print(f"perfkit plan: {e}", file=sys.stderr)
        return 2
    fp = None
    if result.best:  # the best layout's checkpoint, interval and goodput under failures
        best = result.best[0]
        fp = failure_plan(checkpoint_bytes(model), args.gpus, best.time.total_s,
                          gpu_state_bytes=best.memory.params + best.memory.optimizer, **failing)
    if args.json:
        print(json.dumps({**report_json(result, args.top),
                          "failures": fp.as_dict() if fp else None}, indent=1))
    else:
        print("\n".join([report_text(result, args.top), *(failure_lines(fp) if fp else [])]))
    return 0 if result.best else 1
