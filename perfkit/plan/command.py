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
from perfkit.plan.framework import FRAMEWORKS, recipe_words
from perfkit.plan.model import RECOMPUTE, ModelSpec, model_from_config
from perfkit.plan.overlap import OVERLAP_RULES
from perfkit.plan.search import TIE_BAND, Plan, carried_note, plan

__all__ = ["add_parser", "header_lines", "parse_tokens", "report_json", "report_text", "run"]

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


LEGEND = ("labels: dpN tpN ppN cpN the data-, tensor-, pipeline- and context-parallel degrees; zN "
          "ZeRO stage; mbN sequences per micro-batch; vN interleaved chunks per stage; sel / full "
          "selective / full recomputation (es: PyTorch's early stop); op torchtitan's op-level "
          "checkpointing (asked for only); sp sequence parallelism; "
          "stages a-b-c blocks per pipeline stage")
FLOPS_NOTE = ("MFU: model FLOPs as PaLM counts them (6N + 12 L h s: attention over the whole "
              "square, no recomputation) per second over the peak; EFU: the FLOPs the GPUs execute "
              "(recomputation counted, attention as its kernel runs it: a fused causal kernel 7 L h s of "
              "the 12 L h s) per second over the peak. PaLM's HFU (hardware FLOPs utilisation: MFU's "
              "count plus recomputation) counts attention's whole square too, so it is at least its MFU; "
              "EFU is not, and reads below MFU where causal attention saves more than "
              "recomputation adds (so with a causal kernel MFU can read above the efficiency)")


def header_lines(p: Plan, defaults: dict[str, str] | None = None) -> list[str]:
    """The model, the cluster and the run, each figure with where it came from:
    ``defaults`` maps a figure the user did not give (``"efficiency"``, ``"vocab"``, ...) to
    the words that say so."""
    m, c, d = p.model, p.cluster, defaults or {}
    size = (f"{m.num_params / 1e9:.2f} B" if m.num_params >= 1e9 else f"{m.num_params / 1e6:.2f} M")

    def said(key: str) -> str:
        return f" ({d[key]})" if key in d else ""

    return [
        f"model{'' if m.name == 'model' else ' ' + m.name}: {size} parameters, {m.layers} layers, "
        f"h={m.hidden}, {m.heads} heads "
        f"({m.kv} kv), MLP {m.ffn}, vocab {m.vocab:,}{said('vocab')}, "
        f"{'tied' if m.tied else 'untied'} embeddings{said('tied')}, "
        f"{'biases' if m.bias else 'no biases'}, {'dropout' if m.dropout else 'no dropout'}, "
        f"seq {m.seq}{said('seq')}",
        f"cluster: {p.gpus} x {c.gpu.name} ({c.name}); matmul efficiency {c.efficiency:.2f}"
        f"{said('efficiency')}; {c.attention_words()}; usable memory {_gb(c.usable_memory)} GB per GPU "
        f"({c.memory_share:.0%} of {c.gpu.memory_words()}: the rest for the driver's share, the CUDA "
        "context, communication buffers, fragmentation)",
        f"links: start-up latency {c.intra.alpha_s * 1e6:.3g} us inside a node, "
        f"{c.inter.alpha_s * 1e6:.3g} us across nodes" + (f" ({c.note})" if c.note else ""),
        _overlap_line(c),
        f"run: {p.global_batch} sequences per step ({p.global_batch * m.seq:,} tokens); "
        f"{d.get('recipe', 'bytes per parameter: bf16 weights 2 + gradients 2 + fp32 Adam 12')}"
        + (f"; framework: {d['framework']}" if "framework" in d else ""),
    ]


def _overlap_line(c: Cluster) -> str:
    """What of the data-parallel collectives the step hides, and on whose authority."""
    if c.sharded_hidden is not None:
        return (f"overlap: ZeRO-2/3's collectives hide behind {c.sharded_hidden:.0%} of the compute "
                f"(--sharded-hidden); others: {c.overlap_rule.describe()}")
    return f"overlap: {c.overlap_rule.describe()}"


def _reasons(rejected: list[tuple[Any, str]]) -> list[tuple[int, str, str]]:
    """Each problem with its numbers as ``#``: how many layouts it rejected, an example."""
    seen: dict[str, list] = {}
    for lay, why in rejected:
        for part in (why.split("; ") if not why.startswith("needs") else [why]):
            key = re.sub(r"[0-9][0-9.,]*", "#", part)
            seen.setdefault(key, [0, f"{lay.label()}: {part}"])[0] += 1
    return sorted(((n, k, ex) for k, (n, ex) in seen.items()), key=lambda t: -t[0])


def report_text(p: Plan, top: int = 5, defaults: dict[str, str] | None = None) -> str:
    """The best ``top`` layouts as a table, why the next ones lose, and the rejections,
    under :func:`header_lines` (``defaults``: see there)."""
    lines = header_lines(p, defaults)
    if not p.best:
        lines.append(f"no layout fits: {len(p.rejected)} checked; the most common reasons, "
                     "with an example of each:" if p.rejected else
                     "no layout fits, and none could be checked: the GPU count or a fixed degree "
                     "leaves no candidate")
        lines += [f"  {n:,} layout{'s' * (n != 1)}, e.g. {ex}" for n, _k, ex in _reasons(p.rejected)[:5]]
        return "\n".join(lines)
    lines.append(f"{'#':>2} {'layout':34} {'step s':>9} {'tok/s/GPU':>10} {'MFU':>6} {'EFU':>6} "
                 f"{'mem GB':>7} {'states':>7} {'acts':>6} {'buffers':>7}  limiter")
    for i, cand in enumerate(p.best[:top]):
        t, gb = cand.time, cand.memory.table_gb()  # mem GB = states + acts + buffers, as printed
        lines.append(f"{i + 1:>2} {cand.layout.label():34} {t.total_s:9.4g} "
                     f"{t.tokens_per_s / p.gpus:10.4g} {t.mfu:6.1%} {t.hfu:6.1%} {gb[0]:7.1f} "
                     f"{gb[1]:7.1f} {gb[2]:6.1f} {gb[3]:7.1f}  {t.limiter}")
    lines += [LEGEND, FLOPS_NOTE, _ties_line(p)]
    best = p.best[0].time
    lines.append("best layout, seconds per term: " + ", ".join(
        f"{k} {v:.3g}" for k, v in best.terms.items() if v > 0))
    lines += ["why the next ones lose:"] + [f"  {p.why_not(r)}" for r in range(1, min(top, len(p.best)))]
    lines.append(f"{len(p.best)} layouts fit, {len(p.rejected)} rejected"
                 + ("; the most common reasons (a layout can fail several checks, each counted):"
                    if p.rejected else ""))
    lines += [f"  {n:,} layout{'s' * (n != 1)}, e.g. {ex}" for n, _k, ex in _reasons(p.rejected)[:4]]
    return "\n".join(lines)


def _ties_line(p: Plan) -> str:
    """How many layouts lie within :data:`TIE_BAND` of the best and where it bounds nothing (carried_note)"""
    n, note = len(p.ties()), carried_note(p)
    return (f"ties: {n} layout{'s' * (n != 1)} within {TIE_BAND:.0%} of the best step, the 80th percentile "
            "of the planner's error on the ratio of two published runs, rounded (perfkit.plan.TIE_BAND)"
            + (": it cannot rank them; measure them" if n > 1 else ": the best stands alone") + note)


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
                    "dp_overlap": p.cluster.dp_overlap, "overlap": _overlap_line(p.cluster),
                    "source": p.cluster.gpu.source},
        "gpus": p.gpus, "global_batch": p.global_batch,
        "best": [{"layout": vars(c.layout), "label": c.layout.label(), "step_s": c.time.total_s,
                  "terms_s": c.time.terms, "tokens_per_s": c.time.tokens_per_s, "mfu": c.time.mfu,
                  "limiter": c.time.limiter, "memory_bytes": c.memory.as_dict()}
                 for c in p.best[:top]],
        "fit": len(p.best), "rejected": len(p.rejected), "tie_band": TIE_BAND, "ties": len(p.ties()),
        "rejected_examples": [{"label": lay.label(), "reason": why} for lay, why in p.rejected[:5]],
    }


def _at_least(lo: int) -> Any:
    """An argparse type: an int >= ``lo``, refused with the flag's name and what is allowed."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v
    parse.__name__ = f"int >= {lo}"
    return parse


PRECISIONS = {"bf16": ("mixed_adam", "bytes per parameter: bf16 weights 2 + gradients 2 + fp32 Adam "
                       "12 (master weights, two moments)"),
              "fp16": ("mixed_adam", "bytes per parameter: fp16 weights 2 + gradients 2 + fp32 Adam "
                       "12 (master weights, two moments), a dynamic loss scale"),
              "fp32": ("fp32_adam", "bytes per parameter: fp32 weights 4 + gradients 4 + Adam 8")}
DEFAULT_VOCAB = 50257  # GPT-2's tokenizer


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
    for k, what in (("layers", "transformer blocks"), ("hidden", "model width h"),
                    ("heads", "attention heads"), ("ffn", "MLP width (default 4 h, 8 h / 3 gated)"),
                    ("vocab", f"vocabulary (default {DEFAULT_VOCAB:,}, GPT-2's)"),
                    ("kv-heads", "key/value heads (GQA; default: --heads)")):
        g.add_argument(f"--{k}", type=_at_least(1), help=what)
    g.add_argument("--seq", type=_at_least(1), help="training sequence length in tokens (default: "
                   "the config's, else 2048)")
    g.add_argument("--gated", action="store_true", help="SwiGLU MLP (three matrices)")
    g.add_argument("--untied-embeddings", action="store_true",
                   help="the output layer has its own weights (default: tied to the embedding)")
    g.add_argument("--bias", action="store_true", help="linear layers with biases (GPT-2)")
    g.add_argument("--dropout", action="store_true", help="dropout masks kept for backward")
    g.add_argument("--positions", type=_at_least(0), default=0,
                   help="a learned position table of this many rows (default 0: RoPE or ALiBi)")
    g.add_argument("--precision", choices=sorted(PRECISIONS), default=None,
                   help="bf16 / fp16: mixed precision with fp32 Adam (2 + 2 + 12 bytes per "
                        "parameter); fp32: 4 + 4 + 8 (default bf16; with --framework, the "
                        "framework's)")
    g.add_argument("--framework", choices=("any", *FRAMEWORKS), default="any",
                   help="search only what this framework and version offered, with its bytes "
                        "per parameter: megatron-lm-2021 is Megatron-LM as of April 2021 (no ZeRO, "
                        "SP or CP; stages that divide the layers; fp16 with 20 bytes per "
                        "parameter), read from NVIDIA/Megatron-LM@a8d172b3 (default any: every "
                        "option the planner knows)")
    c = ap.add_argument_group("cluster")
    c.add_argument("--gpu", choices=sorted(GPUS), default="h100-sxm")
    c.add_argument("--machine", choices=("local",), help="this machine's measured ceilings and link")
    c.add_argument("--gpus", type=_at_least(1),
                   help="GPUs (default 8; with --machine local: processes, default 2)")
    c.add_argument("--gpus-per-node", type=_at_least(1), default=8, help="default 8")
    c.add_argument("--inter-gbps", type=float, help="network Gb/s per GPU (default by GPU: 200/400)")
    c.add_argument("--efficiency", type=float,
                   help="achieved share of the matmul peak (default 0.5, not fitted: "
                        "benchmarks/plan.py fits it on published runs, table by table)")
    c.add_argument("--attention-efficiency", type=float,
                   help="fused attention kernel's share of the peak, forward (default: "
                        "--efficiency; on A100 FlashAttention 1 about 0.4, FlashAttention 2 about 0.6)")
    c.add_argument("--attention-backward-efficiency", type=float,
                   help="its share backward (default: --attention-efficiency; on A100 "
                        "FlashAttention 1 about 0.3, FlashAttention 2 about 0.53)")
    c.add_argument("--memory-efficiency", type=float, default=MEMORY_EFFICIENCY,
                   help="memory-bound kernels' share of the HBM bandwidth (default "
                        f"{MEMORY_EFFICIENCY:g}: the best share profiled on A100)")
    c.add_argument("--overlap", choices=tuple(OVERLAP_RULES), default="pytorch",
                   help="whose overlap of the data-parallel and ZeRO collectives with compute the "
                        "step follows: pytorch (DDP buckets, FSDP prefetch), megatron "
                        "(overlap_grad_reduce / overlap_param_gather), deepspeed (overlap_comm), "
                        "composer (FSDP with BACKWARD_POST), none (default pytorch; one chunk "
                        "always exposed, never more hidden than the compute)")
    c.add_argument("--sharded-hidden", type=float, default=None,
                   help="instead of --overlap for ZeRO-2/3: the share of the compute their "
                        "collectives hide behind (0: none, as llm-foundry's FSDP sweep suggests; "
                        "1: all of it)")
    r = ap.add_argument_group("run and constraints")
    r.add_argument("--global-batch-tokens", help="tokens per step, a whole number of sequences: "
                   "4M, 512k, 524288; k, M and G are powers of two (4M = 4,194,304 tokens, as "
                   "batch sizes are quoted) (default 1M; with --machine local: 8 sequences per "
                   "process, as notebook 13 runs)")
    for k in FIXABLE:
        r.add_argument(f"--{k.replace('_', '-')}",
                       type=str if k == "recompute" else _at_least(0 if k == "zero" else 1),
                       choices=RECOMPUTE if k == "recompute" else None,
                       help=f"fix {k}" + (" (0-3)" if k == "zero" else ""))
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
                     vocab=args.vocab or DEFAULT_VOCAB, seq=args.seq or 2048, kv_heads=args.kv_heads,
                     gated=args.gated, tied=not args.untied_embeddings, bias=args.bias,
                     dropout=args.dropout, positions=args.positions)


def _defaults(args: argparse.Namespace) -> dict[str, str]:
    """The figures the user did not give, with the words that say where they came from."""
    fw = FRAMEWORKS.get(args.framework)
    out = {"recipe": recipe_words(fw) if fw else PRECISIONS[args.precision or "bf16"][1]}
    out["framework"] = (f"{fw.name} (--framework {args.framework}: only what it offered)" if fw
                        else "any option the planner knows (default; set --framework)")
    if args.efficiency is None and args.machine != "local":
        out["efficiency"] = ("default, not fitted: benchmarks/plan.py fits one on published runs; "
                             "set --efficiency")
    if not args.config and args.vocab is None:
        out["vocab"] = "default: GPT-2's; set --vocab"
    if not args.config:
        out["tied"] = "default" if not args.untied_embeddings else "--untied-embeddings"
    if not args.config and args.seq is None and args.machine != "local":
        out["seq"] = "default; set --seq"
    return out


def _sequences(tokens: int, seq: int) -> int:
    """Whole sequences in ``tokens``; a count that does not split is refused with the nearest."""
    if tokens % seq:
        lo, hi = tokens // seq, tokens // seq + 1
        near = " or ".join(f"{n * seq:,} ({n} sequence{'s' * (n != 1)})" for n in (lo, hi) if n >= 1)
        raise ValueError(f"--global-batch-tokens {tokens:,} is not a whole number of {seq:,}-token "
                         f"sequences: the nearest are {near}")
    return tokens // seq


def _cluster(args: argparse.Namespace) -> Cluster:
    if args.machine == "local":
        from perfkit import hw
        from perfkit.plan.local import local_link

        return local_cluster(hw.cached_limits(), local_link(), processes=args.gpus,
                             efficiency=min(0.5 if args.efficiency is None else args.efficiency, 1.0))
    c = named_cluster(args.gpu, args.gpus_per_node, args.inter_gbps,
                      0.5 if args.efficiency is None else args.efficiency,
                      args.attention_efficiency, args.attention_backward_efficiency,
                      args.memory_efficiency)
    hidden = args.sharded_hidden
    return replace(c, dp_overlap=args.overlap,
                   sharded_hidden=None if hidden is None else check_real("--sharded-hidden", hidden, 0, 1))


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
                         f"for {fixed['pp']} stages (the planner asks for at least one micro-batch per "
                         "stage: fewer run, idle at least half the step in the bubble)")


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
        batch = _sequences(tokens, model.seq)
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
        framework = FRAMEWORKS.get(args.framework)
        if framework is not None and args.precision is not None:
            raise ValueError(f"--precision {args.precision} with --framework {args.framework}: "
                             f"the framework sets the bytes per parameter ({recipe_words(framework)})"
                             "; leave --precision out")
        result = plan(model, cluster, args.gpus, batch, fixed, framework=framework,
                      recipe=PRECISIONS[args.precision or "bf16"][0] if framework is None
                      else "mixed_adam")
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
        print("\n".join([report_text(result, args.top, _defaults(args)),
                         *(failure_lines(fp) if fp else [])]))
    return 0 if result.best else 1
