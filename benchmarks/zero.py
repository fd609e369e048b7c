"""ZeRO stages 1, 2 and 3 side by side: perfkit from scratch, PyTorch FSDP2, DeepSpeed (2 gloo ranks).

Variants (see :mod:`perfkit.jobs.zero_bench` and :mod:`perfkit.jobs.zero_variants`):
DDP + AdamW (no sharding), perfkit's ``ZeroOptimizer(stage=1, overlap=False)`` (reduce-scatter
after backward and all-gather inside ``step()``, ``perfkit``), perfkit's ``ZeroOptimizer`` at
stage 1 and 2 (bucketed reduce-scatter during backward, all-gather waited for in the next
forward, ``zero1``/``zero2``), perfkit's ``ShardedModule`` (stage 3, ``zero3``),
PyTorch's ``fully_shard`` (``fsdp2``), DeepSpeed stages 2 and 3 with a client
``torch.optim.AdamW`` (``deepspeed_2``/``deepspeed_3``; launched by torchrun, no compiled
op). Every variant trains the same batches of the standard-library corpus on the tiny
GPT-2; steps are timed interleaved in one job (median and 10th/90th percentiles, slowest
rank), so ratios share the machine's load. One more untimed step per variant counts the
model states alive after backward (distinct storages: parameters, gradients, optimizer
state) and the bytes one rank sends per collective (ring model, :mod:`perfkit.comm.traffic`).

On a machine without a GPU, DeepSpeed's "CPU offload" has nothing to offload from: the
optimizer state already lives in host memory, so offload configurations are not run.

Targets (``targets`` in the output):

* every stage equal to AdamW on the same global batch, ``max_rel_diff_vs_adamw`` <= 1e-6
  (against DDP + AdamW, which steps with the same averaged gradient; single-process AdamW
  on the concatenated batch sums the gradient in another order, which Adam magnifies for
  gradients at rounding level in any data-parallel run: see
  ``max_rel_diff_vs_single_process_adamw``, DDP's own included);
* model-state bytes per rank within 1% of ``perfkit.memory.zero_model_states`` (fp32 Adam:
  4 + 4 + 8 bytes per parameter, sharded by stage);
* ZeRO-1 and ZeRO-2 step time <= 1.0x DDP + AdamW; ZeRO-3 <= 1.0x FSDP2 and DeepSpeed 3;
* stage-3 bytes per step / DDP's: 1.5 within 2% (perfkit's ``zero3`` reshards the root
  after forward, like every block; FSDP2 keeps its root gathered, hence less).

Prints one JSON object. Run::

    .venv/bin/python benchmarks/zero.py [--steps 12] [--n-embd 256] [--n-layer 4] [--no-rss]
"""

from __future__ import annotations

import argparse
import json

from perfkit.jobs.zero_bench import STAGE, compare
from perfkit.memory.model_states import zero_model_states

VARIANTS = ("ddp_adamw", "perfkit", "zero1", "zero2", "zero3", "fsdp2", "deepspeed_2",
            "deepspeed_3")


def summarize(c, variants: tuple[str, ...]) -> dict:
    """The JSON object: ratios, memory against the formula, bytes against DDP's."""
    v, n = c.variants, c.world_size

    def ratio(a: str, b: str) -> float | None:
        return v[a].step_s / v[b].step_s if a in v and b in v else None

    states = {k: {**r.model_states, "total": sum(r.model_states.values())}
              for k, r in v.items()}
    formula = {k: zero_model_states(c.numel, n, STAGE[k], "fp32_adam").total for k in v}
    over = {k: states[k]["total"] / formula[k] for k in v}
    sent = {k: sum(r.sent_bytes.values()) for k, r in v.items()}
    dp = sent.get("ddp_adamw")
    over_dp = {k: sent[k] / dp for k in v} if dp else {}
    diff = {k: r.max_rel_diff_vs_ddp_adamw for k, r in v.items() if k != "ddp_adamw"}
    ours = [k for k in ("zero1", "zero2", "zero3") if k in v]
    return {
        "max_rel_diff_vs_adamw": diff,
        "max_rel_diff_vs_single_process_adamw": {k: r.max_rel_diff_vs_adamw for k, r in v.items()},
        "step_ms": {k: r.step_s * 1e3 for k, r in v.items()},
        "step_ms_p10_p90": {k: [r.step_p10_s * 1e3, r.step_p90_s * 1e3] for k, r in v.items()},
        "step_time_ratio": {"zero1_vs_ddp_adamw": ratio("zero1", "ddp_adamw"),
                            "zero2_vs_ddp_adamw": ratio("zero2", "ddp_adamw"),
                            "perfkit_zero1_after_backward_vs_ddp_adamw": ratio("perfkit",
                                                                               "ddp_adamw"),
                            "zero3_vs_fsdp2": ratio("zero3", "fsdp2"),
                            "zero3_vs_deepspeed_3": ratio("zero3", "deepspeed_3"),
                            "fsdp2_vs_ddp_adamw": ratio("fsdp2", "ddp_adamw")},
        "model_state_bytes_per_rank": states,
        "formula_bytes_per_rank": formula,
        "model_states_over_formula": over,
        "transient_peak_bytes": {k: r.transient_peak_bytes for k in ours for r in [v[k]]},
        "sent_bytes_per_step": sent,
        "sent_bytes_by_collective": {k: r.sent_bytes for k, r in v.items()},
        "collective_calls_per_step": {k: r.calls for k, r in v.items()},
        "bytes_over_ddp": over_dp,
        "stage3_bytes_over_dp": over_dp.get("zero3"),
        "peak_rss_mb": {k: r.peak_rss_bytes / 2**20 for k, r in v.items()
                        if r.peak_rss_bytes is not None},
        "loss_first_last": {k: [r.losses[0], r.losses[-1]] for k, r in v.items()},
        "targets": {
            "max_rel_diff_le_1e-6": {k: diff[k] <= 1e-6 for k in ours},
            "model_states_within_1pct_of_formula": {k: abs(over[k] - 1) <= 0.01 for k in ours},
            "zero1_zero2_step_le_1.0x_ddp": {k: ratio(k, "ddp_adamw") <= 1.0
                                             for k in ("zero1", "zero2") if k in v},
            "zero3_step_le_1.0x_fsdp2_and_deepspeed_3": {
                b: ratio("zero3", b) <= 1.0 for b in ("fsdp2", "deepspeed_3") if b in v},
            "stage3_bytes_1.5x_dp_within_2pct": abs(over_dp["zero3"] / 1.5 - 1) <= 0.02
            if "zero3" in over_dp else None,
        },
        "numel": c.numel, "world_size": n, "config": c.config,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="timed steps per variant")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank")
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-RSS phase")
    a = ap.parse_args()
    names = tuple(a.variants.split(","))
    c = compare(names, nproc=a.nproc, batch=a.batch, steps=a.steps, warmup=a.warmup,
                model={"n_embd": a.n_embd, "n_layer": a.n_layer, "n_head": a.n_head},
                rss=not a.no_rss, timeout_s=1200.0)
    print(json.dumps(summarize(c, names), indent=1))


if __name__ == "__main__":
    main()
