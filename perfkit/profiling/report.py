"""The diagnosis report: per-rank records in, ranked findings and text/Markdown/JSON out.

:func:`rank_record` turns one rank's :class:`~perfkit.profiling.recorder.StepRecorder`
into a JSON-able dict; :func:`build_report` merges the ranks' records and judges them with
the one set of rules (:func:`~perfkit.profiling.diagnose_shares`, at
:meth:`~perfkit.profiling.Thresholds.for_command`), ranked by what removing each cause gains if
the rest of the step is unchanged (Amdahl's law: removing a share ``s`` speeds it up ``1 / (1 - s)``).
:mod:`perfkit.profiling.render` prints it.

Usage::

    report = build_report([rank_record(rec)])
    report["findings"][0]["kind"], report["memory"]["params_bytes"]
"""

from __future__ import annotations

import socket
from dataclasses import asdict
from typing import Any

from perfkit._checks import check_items, check_real, check_type
from perfkit.profiling.attribution import CATEGORIES, attribute_trace
from perfkit.profiling.footprint import memory_split
from perfkit.profiling.recorder import StepRecorder
from perfkit.profiling.rules import StepShares, diagnose_shares
from perfkit.profiling.thresholds import Thresholds
from perfkit.stats import quantile

__all__ = ["build_report", "rank_record"]


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
        "note": rec.error, "host": socket.gethostname(),
        "load": asdict(rec.load) if rec.load is not None else None,
    }
    if rec.trace_ok:
        try:
            out["attribution"] = asdict(attribute_trace(rec.trace_path))
        except ValueError as e:
            out["note"] = f"trace not attributed: {e}"
    return out


def _load(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The machine's load over the window: the ranks' mean share of it their main threads
    waited for a core, and the cores' busy time not this job's (ranks on rank 0's host)."""
    loads = [r["load"] for r in records if r.get("load")]
    if not loads:
        return None
    base = records[0].get("load") or loads[0]
    wait = sum(x["main_wait_s"] / x["window_s"] for x in loads) / len(loads)
    other = None
    if base["cores_busy_s"] is not None:  # every process's busy time, less this job's
        host = records[0].get("host")
        job = sum(r["load"]["process_cpu_s"] / r["load"]["window_s"] for r in records
                  if r.get("load") and r.get("host") == host)
        other = min(float(base["cores"]), max(0.0, base["cores_busy_s"] / base["window_s"] - job))
    return {"core_wait_share": min(1.0, wait), "other_cores": other, "cores": base["cores"],
            "loadavg": base["loadavg"]}


def _step_shares(records: list[dict[str, Any]], load: dict[str, Any] | None) -> StepShares:
    """What the rules read from the ranks' records: rank 0's split of the step, the least
    exposed rank's communication, each rank's work outside collectives, and the load."""
    att = records[0]["attribution"]
    atts = {r["rank"]: r["attribution"] for r in records if r["attribution"]}
    shares = {k: att["category_s"][k] / att["step_mean_s"] for k in CATEGORIES}
    # a fast rank's exposed collective time includes waiting for the slowest rank; the
    # least exposed rank's share is what the collectives themselves cost (the straggler
    # rule reports the waiting)
    shares["communication"] = min(a["category_s"]["communication"] / a["step_mean_s"]
                                  for a in atts.values())
    stall = None
    if records[0].get("load"):  # off its core outside the waits the trace shows
        x, step = records[0]["load"], att["step_mean_s"]
        exposed = (att["category_s"]["communication"] - att.get("comm_host_s", 0.0)
                   - att.get("comm_contention_s", 0.0))
        waits = (att["category_s"]["data"] + att["category_s"]["sync"] + exposed) / step
        stall = min(1.0, max(0.0, 1.0 - x["main_cpu_s"] / x["window_s"] - waits))
    return StepShares(
        shares, steps=att["steps"], step_mean_s=att["step_mean_s"],
        data_offload_share=min(1.0, att.get("data_offload_s", 0.0) / att["step_mean_s"]),
        main_stall_share=stall,
        sync_comm_share=min(1.0, att.get("sync_comm_s", 0.0) / att["step_mean_s"]),
        sync_read_share=min(1.0, att.get("sync_read_s", 0.0) / att["step_mean_s"]),
        syncs_per_step=att["syncs_per_step"], ops_per_step=att["ops_per_step"],
        flops_per_step=records[0].get("flops_per_step"),
        rank_work_s={r: a["step_mean_s"] - a["category_s"]["communication"]
                     for r, a in atts.items()},
        rank_step_s=max(a["step_mean_s"] for a in atts.values()), comm_ranks=len(atts),
        core_wait_share=load and load["core_wait_share"],
        other_cores=load and load["other_cores"], cores=load and load["cores"],
        loadavg=load and load["loadavg"])


def build_report(records: list[dict[str, Any]],
                 thresholds: Thresholds | None = None,
                 peak_flops: float | None = None, command: str = "") -> dict[str, Any]:
    """Merge the ranks' :func:`rank_record` dicts into the report (a JSON-able dict).

    Step-time quantiles are :func:`perfkit.stats.quantile`'s (linear interpolation); the
    findings are :func:`~perfkit.profiling.diagnose_shares`'s, as :meth:`Finding.record`
    dicts.

    Args:
        records: one per rank, rank 0 first; rank 0's trace is the one attributed.
        thresholds: when a cause is reported; default :meth:`Thresholds.for_command`.
        peak_flops: this machine's measured FLOP/s ceiling (``perfkit.hw``), or ``None``
            when it was never measured (MFU is then "unknown", not a guess).
        command: the command line, recorded in the report.

    Raises:
        TypeError, ValueError: for an empty ``records`` or bad ``thresholds``/``peak_flops``.
    """
    records = check_items("records", records)
    th = check_type("thresholds", thresholds, Thresholds, optional=True) \
        or Thresholds.for_command()
    if peak_flops is not None:
        check_real("peak_flops", peak_flops, 0, lo_open=True)
    base = records[0]
    times = base["step_times_s"]
    rep: dict[str, Any] = {
        "command": command, "status": base["status"], "world_size": len(records),
        "steps_seen": base["steps_seen"], "window_steps": len(times),
        "step_p50_s": quantile(times, 0.5) if times else None,
        "step_p95_s": quantile(times, 0.95) if times else None,
        "shares": None, "comm_overlapped_share": None, "syncs_per_step": None,
        "step_times_s": times, "step_data_s": base.get("step_data_s"),
        "throughput": None, "mfu": "unknown", "memory": base["memory"], "ranks": [],
        "findings": [], "trace": base["trace"], "load": _load(records),
        "notes": [n for n in
                                                          (base.get("note"),) if n],
    }
    for r in records:
        rt = r["step_times_s"]
        rep["ranks"].append({"rank": r["rank"], "status": r["status"],
                             "step_p50_s": quantile(rt, 0.5) if rt else None,
                             "step_p95_s": quantile(rt, 0.95) if rt else None,
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
    rep["comm_host_share"] = att.get("comm_host_s", 0.0) / att["step_mean_s"]
    rep["data_offload_share"] = att.get("data_offload_s", 0.0) / att["step_mean_s"]
    rep["comm_contention_share"] = att.get("comm_contention_s", 0.0) / att["step_mean_s"]
    rep["syncs_per_step"] = att["syncs_per_step"]
    rep["sync_read_share"] = att.get("sync_read_s", 0.0) / att["step_mean_s"]
    rep["sync_comm_share"] = att.get("sync_comm_s", 0.0) / att["step_mean_s"]
    rep["device_idle_share"] = att["device_idle_share"]
    rep["host_gap_share"] = att["host_gap_s"] / att["step_mean_s"]
    rep["flops_per_op"] = (base["flops_per_step"] / att["ops_per_step"]
                           if base["flops_per_step"] and att["ops_per_step"] else None)
    if base["flops_per_step"] and peak_flops:
        rep["mfu"] = base["flops_per_step"] / rep["step_p50_s"] / peak_flops
    elif base["flops_per_step"]:
        rep["mfu"] = "unknown (no measured peak: run `python -m perfkit limits`)"
    rep["findings"] = [f.record() for f in diagnose_shares(_step_shares(records, rep["load"]), th,
                                                           peak_flops=peak_flops)]
    return rep
