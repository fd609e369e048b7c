"""Collectives on this machine: time, algbw and busbw against message size, per operation.

Launches ``perfkit.jobs.collectives`` under real torchrun (gloo on CPU, NCCL on GPUs)
and prints one JSON object:

* ``ops``: for each of all-reduce, reduce-scatter, all-gather and broadcast, the points
  (``nbytes``, ``time_s`` = slowest rank's median, ``algbw_GBps`` = bytes / time and
  ``busbw_GBps`` = algbw x the nccl-tests bus factor: 2(n-1)/n for all-reduce, (n-1)/n for
  reduce-scatter and all-gather, 1 for broadcast), the alpha-beta fit ``t = alpha + n /
  bandwidth`` with its median relative error, and the peak busbw as a share of this
  machine's copy bandwidth (``perfkit.hw.cached_limits``: what one core pair can move
  through memory, the ceiling for processes that talk through shared memory);
* ``ring``: perfkit's send/recv ring all-reduce against ``dist.all_reduce`` at each size
  (time ratio; equality is checked by the tests);
* ``config``: world size, backend, sizes.

Run: ``.venv/bin/python benchmarks/collectives.py [--nproc N]`` (``PERFKIT_QUICK=1`` for
sizes up to 4 MiB). Sizes are 1 KiB to 64 MiB in steps of 4x, as nccl-tests sweeps them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from perfkit import comm, dist, hw

QUICK = os.environ.get("PERFKIT_QUICK", "0") == "1"
SIZES = [1 << k for k in range(10, (23 if QUICK else 27), 2)]  # bytes: 1 KiB ... 4/64 MiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--repeat", type=int, default=3 if QUICK else 5,
                    help="timed repetitions per point (median)")
    args = ap.parse_args()
    if args.nproc < 2:
        ap.error(f"--nproc must be >= 2 for a collective, got {args.nproc}")
    cfg = {"sweep": {"ops": list(comm.OPS), "sizes": SIZES, "repeat": args.repeat},
           "ring": {"sizes": [s // 4 for s in SIZES], "repeat": args.repeat}}
    res = dist.launch("perfkit.jobs.collectives", args.nproc, ["--config", json.dumps(cfg)],
                      timeout_s=900)[0]
    copy_bw = hw.cached_limits(quick=QUICK).copy_bytes_per_s
    ops: dict[str, dict] = {}
    for op in comm.OPS:
        pts = [comm.CollectivePoint(**p) for p in res["sweep"] if p["op"] == op]
        fit = comm.fit_alpha_beta([p.nbytes for p in pts], [p.time_s for p in pts])
        rel = [abs(fit.predict(p.nbytes) / p.time_s - 1) for p in pts]
        peak = max(p.busbw for p in pts)
        ops[op] = {
            "points": [{"nbytes": p.nbytes, "time_s": p.time_s, "algbw_GBps": p.algbw / 1e9,
                        "busbw_GBps": p.busbw / 1e9} for p in pts],
            "alpha_us": fit.alpha_s * 1e6, "bandwidth_GBps": fit.bandwidth / 1e9,
            "half_bandwidth_bytes": fit.half_bandwidth_bytes,
            "fit_median_rel_error": statistics.median(rel),
            "peak_busbw_GBps": peak / 1e9, "peak_busbw_share_of_copy": peak / copy_bw,
        }
    ring = [{"nbytes": 4 * r["numel"], "ring_s": r["time_s"], "all_reduce_s": r["ref_time_s"],
             "ring_over_all_reduce": r["time_s"] / r["ref_time_s"]} for r in res["ring"]]
    print(json.dumps({"ops": ops, "ring": ring, "copy_GBps": copy_bw / 1e9,
                      "config": {"world_size": res["world_size"], "backend": res["backend"],
                                 "sizes_bytes": SIZES, "repeat": args.repeat,
                                 "quick": QUICK}}, indent=1))


if __name__ == "__main__":
    main()
