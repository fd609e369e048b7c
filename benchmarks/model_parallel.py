"""Model parallelism against the unsplit model and against PyTorch: tensor and sequence
parallelism (perfkit.parallel.tp_gpt) on 2 gloo ranks, DP x TP on 4.

* equality: per parameter ``max |p - p_ref| / max |p_ref|`` after 5 SGD (momentum) steps in
  fp32 against the unsplit GPT on the same global batch, for TP, TP+SP, TP with its backward
  overlapped, SP recomputing its gathered inputs, DP x TP and DP x SP;
  AdamW's loss curves (largest difference);
* bytes per block: one block's forward and backward counted by perfkit.comm.traffic against
  ``tp_traffic`` (4 payloads of ``B * T * C``, each sent ``2 (t - 1) / t`` by a ring);
* step time: perfkit's TP step against DTensor's (ColwiseParallel / RowwiseParallel plan,
  ``loss_parallel``) on the same model, interleaved in one job, slowest rank per round; the
  median ratio with its bootstrap interval (perfkit.stats.median_ratio).

Targets (``targets``): every max relative difference <= 1e-5; bytes per block equal to the
model's count; perfkit's TP step <= 1.0x DTensor's (the interval says how sure).

``pipeline`` (perfkit.jobs.pipeline_bench.report): every schedule equal to the unsplit model;
bubble share within 10% of (p - 1)/(m + p - 1) for sleep stages at p = 2 and 4, m in {1, 4, 8}
(GPipe) and {4, 8} (1F1B), within 15% with GPT blocks at p = 2; 1F1B's peak saved-for-backward
bytes <= p/m of GPipe's at m = 2p and 4p (exact); perfkit 1F1B step <= 1.0x ``Schedule1F1B``.

Prints one JSON object. Run::

    .venv/bin/python benchmarks/model_parallel.py [--repeat 20] [--n-embd 256] [--batch 8]
"""

from __future__ import annotations

import argparse
import json

from perfkit import dist, stats
from perfkit.jobs.pipeline_bench import report as pipeline_report

TOL = 1e-5


def tensor_parallel(repeat: int, n_embd: int, batch: int, seq: int) -> dict:
    """The ``tensor_parallel`` part of the JSON object (two torchrun jobs)."""
    two = dist.launch("perfkit.jobs.tensor_parallel", 2, ["--config", json.dumps(
        {"equality": {}, "traffic": {},
         "timing": {"repeat": repeat, "batch": batch,
                    "model": {"n_embd": n_embd, "n_head": 4, "n_layer": 2, "block_size": seq,
                              "vocab_size": 512}}})], timeout_s=600)[0]
    four = dist.launch("perfkit.jobs.tensor_parallel", 4, ["--config", json.dumps(
        {"dp_tp": {"dp": 2}})], timeout_s=300)[0]
    eq = two["equality"]
    rel = {**{k: e["rel"] for k, e in eq.items()},   # tp, sp, tp_overlap, sp_recompute
           "dp_x_tp": four["dp_tp"]["tp"]["rel"], "dp_x_sp": four["dp_tp"]["sp"]["rel"]}
    blocks = {k: {"measured_sent_bytes": sum(t["block"][2].values()),
                  "model_sent_bytes": sum(t["block_model"][2].values()),
                  "calls": t["block"][0], "equal": t["block"] == t["block_model"],
                  "step_equal": t["step"] == t["model"]}
              for k, t in two["traffic"].items()}
    tm = two["timing"]
    ratio = stats.median_ratio(tm["perfkit_s"], tm["dtensor_s"])
    return {
        "max_rel_diff": rel,
        "adamw_loss_diff": {k: e["loss_diff"] for k, e in eq.items()},
        "bytes_per_block": blocks,
        "step_ms": {k.removesuffix("_s"): 1e3 * stats.median(v) for k, v in tm.items()},
        "step_time_ratio_vs_dtensor": ratio.record(),
        "overlapped_step_time_ratio_vs_plain": stats.median_ratio(
            tm["perfkit_overlap_s"], tm["perfkit_s"]).record(),
        "targets": {
            "max_rel_diff_le_1e-5": {k: v <= TOL for k, v in rel.items()},
            "adamw_loss_diff_le_1e-5": all(e["loss_diff"] <= TOL for e in eq.values()),
            "bytes_per_block_equal_model": {k: b["equal"] and b["step_equal"]
                                            for k, b in blocks.items()},
            "perfkit_tp_step_le_1.0x_dtensor": ratio.value <= 1.0,
            "perfkit_tp_step_le_1.0x_dtensor_whole_interval": ratio.high <= 1.0,
        },
        "config": {"repeat": repeat, "n_embd": n_embd, "batch": batch, "seq": seq, "tp": 2},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20, help="timed steps per implementation")
    ap.add_argument("--n-embd", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    out = {"tensor_parallel": tensor_parallel(a.repeat, a.n_embd, a.batch, a.seq),
           "pipeline": pipeline_report(repeat=a.repeat)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
