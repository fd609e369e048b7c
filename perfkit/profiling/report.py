"""The diagnosis report: per-rank records in, ranked findings and text/Markdown/JSON out.

:func:`rank_record` turns one rank's :class:`~perfkit.profiling.recorder.StepRecorder`
into a JSON-able dict; :func:`build_report` merges the ranks' records, judges them against
:class:`DiagnoseThresholds` and ranks the findings by the most the fix can gain (Amdahl's
law: removing a share ``s`` of the step speeds it up at most ``1 / (1 - s)``).
:mod:`perfkit.profiling.render` prints it.

Usage::

    report = build_report([rank_record(rec)])
    report["findings"][0]["kind"], report["memory"]["params_bytes"]
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.analyzer import Thresholds, diagnose
from perfkit.profiling.attribution import CATEGORIES, attribute_trace
from perfkit.profiling.footprint import memory_split
from perfkit.profiling.recorder import StepRecorder

__all__ = ["DiagnoseThresholds", "build_report", "rank_record"]


@dataclass(frozen=True)
class DiagnoseThresholds:
    """When ``perfkit diagnose`` reports a cause, calibrated on ``examples/diagnose``.

    Measured with ``benchmarks/diagnose.py`` (``--skip 2 --steps 8``, one intra-op
    thread) on the course's 2-core CPU machine while other jobs loaded it (load average
    5-9); "planted" is the range over runs of the script planted with that cause,
    "others" the largest value seen on the healthy scripts and the other planted ones.
    Each threshold sits between the two with a margin on both sides:

    * ``data`` 0.20, share of data wait: planted 0.55-0.81; others <= 0.16 (an MLP fed
      by a TensorDataset at batch 128: per-sample indexing and collation).
    * ``sync`` 0.15, share of host-device syncs (and of the host loops they sit in):
      planted 0.16-0.54; others <= 0.01. Also reported from ``syncs_per_step`` 8 on
      (planted 512; others <= 1, the usual ``loss.item()``; syncs inside
      ``optimizer.step``, such as Adam's per-tensor ``step.item()``, are not counted).
    * ``communication`` 0.20, exposed collective share of the least exposed rank:
      planted (DDP, 1 KB buckets) 0.24-0.72 with 16 layers, 0.39-0.65 with the 32 it
      has now; a ZeRO-1 DeepSpeed engine with 2 ranks about 0.10.
    * ``optimizer`` 0.40: planted 0.75-0.79 (Adam, ``foreach=False``, 200 tensors);
      others <= 0.34 (AdamW on the healthy MLP: 0.25-0.34 at batch 128, 0.26 at 256).
    * ``overhead`` 0.45 with ``op_overhead_us`` 0.1: reported when the model's counted
      FLOPs per operator are below what the machine computes in 0.1 us at its measured peak
      (``peak_fallback`` 20 GFLOP/s when never measured) and forward + backward + other
      exceed 45 % of the step: planted 417 FLOP per operator, share 0.86-0.98; others
      >= 167 kFLOP per operator, except the optimizer plant (315 FLOP/op at share 0.25: its
      small backward really is overhead-bound). This machine's fp32 peak read 16.9 GFLOP/s
      under load and 165 GFLOP/s idle: the bar is then 1.7 or 16.5 kFLOP, at least 4x
      above the plant and 10x below the healthy scripts (at 1 us it was 165 kFLOP idle,
      level with them).
    * ``straggler`` 4.0 and ``straggler_wait`` 0.30: the slowest rank's work outside
      collectives over the other ranks' median, and the share of the step the others
      wait. DDP with equal shards (the communication plant) reached 2.9x and 0.50: 2
      ranks and their gloo threads on 2 loaded cores steal time from each other, and the
      victim looks like a straggler. Rank 1 on a 16x larger shard gave 1.75-5.8x, on a
      32x one 6.1-6.2x (wait 0.78); the plant is 64x: 13x. With a core per rank, 1.5x
      would do.
    * ``compute`` 0.60: forward + backward above it is reported as information.
    """

    data: float = 0.20
    sync: float = 0.15
    syncs_per_step: float = 8.0
    communication: float = 0.20
    optimizer: float = 0.40
    overhead: float = 0.45
    op_overhead_us: float = 0.1
    peak_fallback: float = 2e10
    straggler: float = 4.0
    straggler_wait: float = 0.30
    compute: float = 0.60

    def __post_init__(self) -> None:
        for k in ("data", "sync", "communication", "optimizer", "overhead", "compute"):
            check_real(k, getattr(self, k), 0, 1, lo_open=True, hi_open=True)
        check_real("syncs_per_step", self.syncs_per_step, 0, lo_open=True)
        check_real("straggler", self.straggler, 1, lo_open=True)
        check_real("op_overhead_us", self.op_overhead_us, 0, lo_open=True)
        check_real("peak_fallback", self.peak_fallback, 0, lo_open=True)
        check_real("straggler_wait", self.straggler_wait, 0, 1, lo_open=True, hi_open=True)


_NB = {
    "data": "notebooks/07_data_loading.ipynb, section 2 (the knobs of DataLoader)",
    "sync": "notebooks/01_profiling.ipynb, section 1 (why naive timing lies: syncs)",
    "communication": "notebooks/02_collectives.ipynb, sections 4-5 (overlap, DDP buckets)",
    "optimizer": "notebooks/06_compute.ipynb, section 2 (fusion: one kernel beats nine)",
    "overhead": "notebooks/06_compute.ipynb, sections 3 and 7 (torch.compile, batch size)",
    "straggler": "notebooks/02_collectives.ipynb, section 2 (a collective waits for the "
                 "slowest rank)",
    "compute": "notebooks/06_compute.ipynb, section 6 (MFU)",
}
_FIX = {
    "sync": ("keep metrics on the device and call .item()/.cpu()/print once every N steps",
             "accumulate per-sample values in a tensor instead of a Python loop over .item()"),
    "optimizer": ("use the foreach or fused implementation (drop foreach=False; "
                  "fused=True on GPU)",
                  "fewer, larger parameter tensors (fuse small layers)"),
    "overhead": ("give each step more work: a larger batch (or gradient accumulation)",
                 "torch.compile or CUDA graphs to cut the per-operator launch cost"),
    "straggler": ("find what differs on that rank: data, its core/GPU, other processes",
                  "balance the work per rank (equal batch sizes and sequence lengths)"),
}


def rank_record(rec: StepRecorder, rank: int = 0, status: str = "complete") -> dict[str, Any]:
    """One rank's measurements as a JSON-able dict (what ranks exchange to merge)."""
    check_type("rec", rec, StepRecorder)
    win = rec.window() if len(rec.step_ends_s) > rec.skip else slice(None)  # or what ran
    times = rec.step_times_s[win]
    rec_data = rec.data_s[: len(rec.step_ends_s)][win]
    out: dict[str, Any] = {
        "rank": rank, "status": status, "steps_seen": len(rec.step_ends_s),
        "window_steps": len(times), "step_times_s": times, "step_data_s": rec_data,
        "batch_size": rec.batch_size, "flops_per_step": rec.flops_per_step,
        # the window's end saw the model states; a script that never reached it, the peak
        "memory": rec.memory or memory_split(start=rec.start_memory),
        "trace": str(rec.trace_path) if rec.trace_ok else None,
        "attribution": None, "data_wait_s": sum(rec_data) / len(rec_data) if rec_data else None,
        "note": rec.error,
    }
    if rec.trace_ok:
        try:
            out["attribution"] = asdict(attribute_trace(rec.trace_path))
        except ValueError as e:
            out["note"] = f"trace not attributed: {e}"
    return out


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _finding(kind: str, severity: str, share: float, threshold: float, evidence: str,
             fix: tuple[str, ...]) -> dict[str, Any]:
    gain = 1 / (1 - share) if 0 <= share < 1 else None
    return {"kind": kind, "severity": severity, "share": share, "threshold": threshold,
            "evidence": evidence, "max_speedup": gain, "fix": list(fix), "notebook": _NB[kind]}


def _findings(base: dict[str, Any], ranks: list[dict[str, Any]], th: DiagnoseThresholds,
              peak_flops: float | None) -> list[dict[str, Any]]:
    att = base["attribution"]
    shares = {k: v / att["step_mean_s"] for k, v in att["category_s"].items()}
    out = []
    old = Thresholds(data=th.data, communication=th.communication, optimizer=th.optimizer,
                     compute=th.compute)
    judged = {k: shares[k] for k in ("data", "communication", "optimizer", "forward",
                                     "backward")}
    atts = [r["attribution"] for r in ranks if r["attribution"]]
    # a fast rank's exposed collective time includes waiting for the slowest rank; the
    # least exposed rank's share is what the collectives themselves cost (the straggler
    # rule below reports the waiting)
    judged["communication"] = min(a["category_s"]["communication"] / a["step_mean_s"]
                                  for a in atts)
    for f in diagnose(judged, old):  # the course's analyzer: its rules, fixes and wording
        fix = _FIX.get(f.kind, f.recommendations)
        ev = f.evidence + (f" on the least exposed of {len(atts)} ranks"
                           if f.kind == "communication" and len(atts) > 1 else "")
        out.append(_finding(f.kind, f.severity, f.value, f.threshold, ev, fix))
    step_ms = att["step_mean_s"] * 1e3
    if shares["sync"] > th.sync or att["syncs_per_step"] > th.syncs_per_step:
        sev = "high" if shares["sync"] > 2 * th.sync else "medium"
        out.append(_finding("sync", sev, shares["sync"], th.sync,
                            f"{att['syncs_per_step']:.0f} host-device syncs per step "
                            f"(.item(), .cpu(), print of a tensor) take {shares['sync']:.1%} "
                            f"of the step (threshold {th.sync:.0%} or {th.syncs_per_step:.0f} "
                            "syncs)", _FIX["sync"]))
    # launch/overhead-bound: operators too small to pay for their own dispatch. The model's
    # FLOPs per operator (forward and backward) against what the machine computes in
    # th.op_overhead_us, the fixed cost of one eager operator; the share is the step's time
    # outside data, syncs, collectives and the optimizer, which that cost dominates.
    flops, ops = base.get("flops_per_step"), att["ops_per_step"]
    if flops and ops:
        per_op, bar = flops / ops, (peak_flops or th.peak_fallback) * th.op_overhead_us * 1e-6
        share = sum(shares[k] for k in ("forward", "backward", "other"))
        if per_op < bar and share > th.overhead:
            out.append(_finding("overhead", "high" if share > 0.75 else "medium", share,
                                th.overhead, f"{ops:.0f} operators per step do "
                                f"{per_op / 1e3:.1f} kFLOP each, less than this machine "
                                f"computes in {th.op_overhead_us:g} us ({bar / 1e3:.0f} kFLOP): "
                                f"per-operator dispatch and Python overhead fill the "
                                f"{share:.1%} of the {step_ms:.2f} ms step spent in forward, "
                                f"backward and the loop (threshold {th.overhead:.0%})",
                                _FIX["overhead"]))
    busy = {r["rank"]: r["attribution"]["step_mean_s"] * (1 - r["attribution"]["category_s"][
        "communication"] / r["attribution"]["step_mean_s"]) for r in ranks if r["attribution"]}
    if len(busy) > 1:
        slow = max(busy, key=busy.get)
        med = statistics.median(v for k, v in busy.items() if k != slow)
        ratio = busy[slow] / med if med > 0 else 1.0
        wait = (busy[slow] - med) / max(a["step_mean_s"] for a in atts)  # others' wait
        if ratio > th.straggler and wait > th.straggler_wait:
            out.append(_finding("straggler", "high" if wait > 2 * th.straggler_wait else
                                "medium", wait, th.straggler_wait,
                                f"rank {slow} is the straggler: {busy[slow] * 1e3:.1f} ms of "
                                f"work per step against {med * 1e3:.1f} ms on the other ranks "
                                f"(median; {ratio:.2f}x, threshold {th.straggler}x), so they "
                                f"wait {wait:.1%} of the step for it in their collectives "
                                f"(threshold {th.straggler_wait:.0%})", _FIX["straggler"]))
            out[-1]["rank"] = slow
    out.sort(key=lambda f: (f["severity"] == "info", -f["share"]))
    return out


def build_report(records: list[dict[str, Any]],
                 thresholds: DiagnoseThresholds | None = None,
                 peak_flops: float | None = None, command: str = "") -> dict[str, Any]:
    """Merge the ranks' :func:`rank_record` dicts into the report (a JSON-able dict).

    Args:
        records: one per rank, rank 0 first; rank 0's trace is the one attributed.
        thresholds: when a cause is reported; see :class:`DiagnoseThresholds`.
        peak_flops: this machine's measured FLOP/s ceiling (``perfkit.hw``), or ``None``
            when it was never measured (MFU is then "unknown", not a guess).
        command: the command line, recorded in the report.

    Raises:
        TypeError, ValueError: for an empty ``records`` or bad ``thresholds``/``peak_flops``.
    """
    records = check_items("records", records)
    th = check_type("thresholds", thresholds, DiagnoseThresholds, optional=True) \
        or DiagnoseThresholds()
    if peak_flops is not None:
        check_real("peak_flops", peak_flops, 0, lo_open=True)
    base = records[0]
    times = base["step_times_s"]
    rep: dict[str, Any] = {
        "command": command, "status": base["status"], "world_size": len(records),
        "steps_seen": base["steps_seen"], "window_steps": len(times),
        "step_p50_s": _pct(times, 0.5) if times else None,
        "step_p95_s": _pct(times, 0.95) if times else None,
        "shares": None, "comm_overlapped_share": None, "syncs_per_step": None,
        "step_times_s": times, "step_data_s": base.get("step_data_s"),
        "throughput": None, "mfu": "unknown", "memory": base["memory"], "ranks": [],
        "findings": [], "trace": base["trace"], "notes": [n for n in
                                                          (base.get("note"),) if n],
    }
    for r in records:
        rt = r["step_times_s"]
        rep["ranks"].append({"rank": r["rank"], "status": r["status"],
                             "step_p50_s": _pct(rt, 0.5) if rt else None,
                             "step_p95_s": _pct(rt, 0.95) if rt else None,
                             "peak_bytes": r["memory"]["bytes"],
                             "work_s": (r["attribution"]["step_mean_s"]
                                        - r["attribution"]["category_s"]["communication"])
                             if r["attribution"] else None})
    att = base["attribution"]
    if times and base["batch_size"]:
        rep["throughput"] = {"samples_per_s": base["batch_size"] / rep["step_p50_s"],
                             "batch_size": base["batch_size"]}
    if att is None:
        rep["notes"].append("no complete profiled window: shares, syncs and findings need "
                            f"--skip + --steps = {base.get('needed', '?')} optimizer steps")
        return rep
    rep["shares"] = {k: att["category_s"][k] / att["step_mean_s"] for k in CATEGORIES}
    rep["comm_overlapped_share"] = att["comm_overlapped_s"] / att["step_mean_s"]
    rep["syncs_per_step"] = att["syncs_per_step"]
    rep["device_idle_share"] = att["device_idle_share"]
    rep["host_gap_share"] = att["host_gap_s"] / att["step_mean_s"]
    rep["flops_per_op"] = (base["flops_per_step"] / att["ops_per_step"]
                           if base["flops_per_step"] and att["ops_per_step"] else None)
    if base["flops_per_step"] and peak_flops:
        rep["mfu"] = base["flops_per_step"] / rep["step_p50_s"] / peak_flops
    elif base["flops_per_step"]:
        rep["mfu"] = "unknown (no measured peak: run `python -m perfkit limits`)"
    rep["findings"] = _findings(base, records, th, peak_flops)
    return rep
