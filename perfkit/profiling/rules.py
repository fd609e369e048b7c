"""The diagnosis rules: a step's shares in, ranked :class:`Finding` records out.

One table (:data:`RULES`: what each cause is called, how to fix it, which notebook teaches
the fix), one :class:`Thresholds` and one function, :func:`diagnose_shares`, whatever
measured the step: a :class:`~perfkit.profiling.StepMonitor` summary of your own loop, a
trace read by :func:`~perfkit.profiling.trace_breakdown` or
:func:`~perfkit.profiling.attribute_trace`, or the merged ranks of ``perfkit diagnose``
(:func:`~perfkit.profiling.build_report` builds their :class:`StepShares`). A rule whose
evidence the source did not measure (syncs, FLOPs per operator, several ranks, enough
steps for jitter) stays silent. Findings are ranked by what removing their cause gains if the
rest of the step is unchanged (Amdahl's law: removing a share ``s`` of the step speeds it up
``1 / (1 - s)``). That is no bound: removing work from the process can also speed up the rest of
the step (less contention for its cores and caches), as notebook 01's data fix measures.

Usage::

    for finding in diagnose_shares(mon.summary()):
        print(finding)                       # [high] data: the step waits ... see notebooks/07
    report_findings = [f.record() for f in diagnose_shares(shares, Thresholds.for_command())]
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfkit._checks import check_int, check_real, check_type
from perfkit.profiling.attribution import CATEGORIES, TraceAttribution
from perfkit.profiling.monitor import StepSummary
from perfkit.profiling.profiler import TraceBreakdown
from perfkit.profiling.thresholds import Thresholds

__all__ = ["RULES", "Finding", "Rule", "StepShares", "diagnose_shares"]

OVERHEAD_HIGH = 0.75  # an overhead share above which dispatch is most of the step: "high"


@dataclass(frozen=True)
class Rule:
    """What a cause is called, what to try, and where the course teaches the fix."""

    title: str
    fix: tuple[str, ...]
    notebook: str


RULES: dict[str, Rule] = {
    "data": Rule("input data holds the step up", (
        "move per-sample decoding/tokenizing out of the step: do it once and cache, or in "
        "DataLoader workers (num_workers > 0, persistent_workers=True)",
        "prefetch the next batch while the model runs (perfkit.data.Prefetcher; on GPU "
        "pin_memory=True and non_blocking copies); it cannot help when loading is CPU-bound "
        "on the cores the step computes on (a CPU run with no core to spare): the wait turns "
        "into slower steps",
        "measure the loader alone: if it cannot reach the model's samples/s, no overlap "
        "will hide it"), "notebooks/07_data_loading.ipynb"),
    "sync": Rule("the host reads tensor values back (on a GPU each read waits for the device)", (
        "keep metrics on the device and call .item()/.cpu()/print once every N steps",
        "accumulate per-sample values in a tensor instead of a Python loop over .item()"),
        "notebooks/01_profiling.ipynb, section 1 (why naive timing lies: syncs)"),
    "communication": Rule("gradient communication is exposed", (
        "overlap all-reduce with backward (DDP buckets; tune bucket_cap_mb; "
        "gradient_as_bucket_view=True saves DDP's copies into and out of its buckets)",
        "communicate less often: gradient accumulation with no_sync(), larger batches",
        "compress gradients (PowerSGD, top-k with error feedback, bf16 hooks)"),
        "notebooks/02_collectives.ipynb, sections 4-5 (overlap, DDP buckets); "
        "notebooks/03_gradient_compression.ipynb"),
    "optimizer": Rule("the optimizer update is a large share of the step", (
        "use the foreach or fused implementation (drop foreach=False; fused=True on GPU)",
        "fewer, larger parameter tensors (fuse small layers)",
        "shard optimizer work and state across ranks (ZeRO-1), or train fewer parameters "
        "(LoRA)"), "notebooks/06_compute.ipynb, section 2 (fusion: one kernel beats nine); "
        "notebooks/05_zero_and_lora.ipynb"),
    "other": Rule("much of the step is outside every timed phase", (
        "look for host-device synchronisation (.item(), print of a tensor) in the loop",
        "reduce Python overhead per step: larger batches, torch.compile, fewer small ops",
        "time the missing work as its own phase to see what it is"),
        "notebooks/01_profiling.ipynb"),
    "overhead": Rule("the operators are too small to pay for their dispatch", (
        "give each step more work: a larger batch (or gradient accumulation)",
        "torch.compile or CUDA graphs to cut the per-operator launch cost"),
        "notebooks/06_compute.ipynb, sections 3 and 7 (torch.compile, batch size)"),
    "straggler": Rule("one rank is slower than the others", (
        "find what differs on that rank: data, its core/GPU, other processes",
        "balance the work per rank (equal batch sizes and sequence lengths)"),
        "notebooks/02_collectives.ipynb, section 2 (a collective waits for the slowest rank)"),
    "jitter": Rule("step times vary a lot (a slow tail of steps)", (
        "check for periodic stalls: data workers falling behind, garbage collection, "
        "checkpointing or logging every N steps",
        "on a shared machine, other processes compete for the cores; pin threads"),
        "notebooks/07_data_loading.ipynb"),
    "compute": Rule("forward + backward dominate the step (compute- or memory-bound: the roofline decides)", (
        "use bf16 autocast where this machine computes bf16 faster than fp32 (notebook 00 measures "
        "both ceilings; where bf16 is emulated it runs slower), fp16 with GradScaler on older GPUs",
        "torch.compile to fuse memory-bound operations",
        "measure MFU against the machine's measured ceiling (notebook 00); on GPUs, shapes that are "
        "multiples of 64 fill the tensor cores' tiles (on a CPU, notebook 06 measures whether they "
        "matter)"),
        "notebooks/06_compute.ipynb, section 6 (MFU)"),
    "load": Rule("other work competes for the step's cores", (
        "diagnose on an idle machine, or give each rank cores of its own: every share "
        "above includes these waits",
        "find what holds the cores (top -H: other jobs, DataLoader workers, a prefetch "
        "thread, more intra-op threads than cores) and pin threads (OMP_NUM_THREADS, taskset)"),
        "notebooks/01_profiling.ipynb"),
}


@dataclass(frozen=True)
class Finding:
    """One diagnosis: what is slow, the measured evidence, what to do, where it is taught.

    ``share`` is the measured share of the step the rule compared with ``threshold``; the
    ``jitter`` rule judges a ratio instead (p99 over p50 step time), so its ``share`` is that
    ratio and it has no :attr:`max_speedup`. ``rank`` names the straggling rank.
    """

    kind: str
    severity: str  # "high" (>= 2x the threshold), "medium", or "info"
    share: float
    threshold: float
    evidence: str
    fix: tuple[str, ...]
    notebook: str
    rank: int | None = None

    @property
    def max_speedup(self) -> float | None:
        """What removing the cause gains if the rest of the step is unchanged (Amdahl),
        ``1 / (1 - share)``: no bound, since removing it can speed up the rest too (the name is
        ``report.json``'s key)."""
        return 1 / (1 - self.share) if self.kind != "jitter" and 0 <= self.share < 1 else None

    def record(self) -> dict[str, Any]:
        """A JSON-able dict (what ``report.json`` holds), ``max_speedup`` included."""
        out = {"kind": self.kind, "severity": self.severity, "share": self.share,
               "threshold": self.threshold, "evidence": self.evidence,
               "max_speedup": self.max_speedup, "fix": list(self.fix), "notebook": self.notebook}
        return out if self.rank is None else {**out, "rank": self.rank}

    def __str__(self) -> str:
        recs = "".join(f"\n  - {r}" for r in self.fix)
        return f"[{self.severity}] {self.kind}: {self.evidence}{recs}\n  see {self.notebook}"


@dataclass(frozen=True)
class StepShares:
    """What the rules read: a step's shares and, where the source measured them, the rest.

    Args:
        shares: phase or category -> share of the step, each in [0, 1]: of the mean step, or,
            from a :class:`~perfkit.profiling.StepSummary`, each phase's median share over the
            steps (:meth:`~perfkit.profiling.StepSummary.median_shares`), which one stalled
            step does not move (the jitter rule reports the stalls).
        steps: steps behind the numbers (the jitter rule needs ``Thresholds.min_steps``).
        step_p50_s, step_p99_s: step-time quantiles, s (the jitter rule).
        step_mean_s: the mean step, s (quoted in the overhead rule's evidence).
        syncs_per_step: host-device syncs counted in the trace (the sync rule).
        ops_per_step, flops_per_step: top-level operators and counted FLOPs per step (the
            overhead rule).
        rank_work_s: rank -> mean s per step outside collectives (the straggler rule).
        rank_step_s: the longest rank's mean step, s: what the others' wait is a share of.
        comm_ranks: ranks whose least exposed communication share is ``shares``'s.
        core_wait_share: the share of the step the main thread was ready to run but waited
            for a core (the load rule; :mod:`perfkit.profiling.machine_load`).
        other_cores, cores, loadavg: the cores other processes kept busy, the cores the job
            may use and the 1-minute load average (quoted in the load rule's evidence).
        data_offload_share: data loading on other threads of the process (a prefetcher's)
            while the main thread did not wait for data.
        main_stall_share: the share of the step the main thread was off its core outside
            its waits for data, syncs and collectives (waiting for a core, the GIL or a lock):
            with ``data_offload_share``, the data rule's evidence of contention.
        sync_comm_share, sync_read_share: the parts of the sync share with a collective in
            flight (waits for it between two reads) and inside the reads themselves (the sync
            rule names both when a collective was in flight).

    Raises:
        TypeError, ValueError: naming the field, for a share that is not a number in [0, 1],
            a negative count or time, or ``comm_ranks`` below 1.
    """

    shares: dict[str, float]
    steps: int = 0
    step_p50_s: float | None = None
    step_p99_s: float | None = None
    step_mean_s: float | None = None
    syncs_per_step: float | None = None
    ops_per_step: float | None = None
    flops_per_step: float | None = None
    rank_work_s: dict[int, float] = field(default_factory=dict)
    rank_step_s: float | None = None
    comm_ranks: int = 1
    core_wait_share: float | None = None
    other_cores: float | None = None
    cores: int | None = None
    loadavg: float | None = None
    data_offload_share: float | None = None
    main_stall_share: float | None = None
    sync_comm_share: float | None = None
    sync_read_share: float | None = None

    def __post_init__(self) -> None:
        check_type("shares", self.shares, Mapping)
        for name, v in self.shares.items():
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0 + 1e-9:
                raise ValueError(f"share of phase {name!r} must be in [0, 1], got {v}")
        check_int("steps", self.steps, 0)
        check_int("comm_ranks", self.comm_ranks, 1)
        for k in ("step_p50_s", "step_p99_s", "step_mean_s", "syncs_per_step", "ops_per_step",
                  "flops_per_step", "rank_step_s", "other_cores", "loadavg"):
            if getattr(self, k) is not None:
                check_real(k, getattr(self, k), 0)
        for k in ("core_wait_share", "data_offload_share", "main_stall_share", "sync_comm_share",
                  "sync_read_share"):
            if getattr(self, k) is not None:
                check_real(k, getattr(self, k), 0, 1)
        if self.cores is not None:
            check_int("cores", self.cores, 1)
        for r, v in check_type("rank_work_s", self.rank_work_s, Mapping).items():
            check_real(f"rank_work_s[{r!r}]", v, 0)

    @classmethod
    def of(cls, record: StepShares | StepSummary | TraceBreakdown | TraceAttribution
           | Mapping[str, float], aliases: Mapping[str, str] | None = None) -> StepShares:
        """The evidence a record holds; ``aliases`` add user-named phases to a known kind.

        Raises:
            TypeError: for a ``record`` or ``aliases`` of another type.
            ValueError: for an alias onto an unknown kind, or a share outside [0, 1].
        """
        check_type("record", record, (StepShares, StepSummary, TraceBreakdown,
                                      TraceAttribution, Mapping))
        if isinstance(record, StepShares):
            ev = record
        elif isinstance(record, StepSummary):
            ev = cls(record.median_shares(), steps=record.steps, step_p50_s=record.step.p50_s,
                     step_p99_s=record.step.p99_s, step_mean_s=record.step.mean_s)
        elif isinstance(record, TraceAttribution):
            ev = cls(record.shares(), steps=record.steps, step_mean_s=record.step_mean_s,
                     syncs_per_step=record.syncs_per_step, ops_per_step=record.ops_per_step,
                     sync_comm_share=min(1.0, record.sync_comm_s / record.step_mean_s),
                     sync_read_share=min(1.0, record.sync_read_s / record.step_mean_s))
        elif isinstance(record, TraceBreakdown):
            ev = cls(record.shares(), steps=record.steps, step_mean_s=record.step_mean_s)
        else:
            ev = cls(dict(record))
        shares = dict(ev.shares)
        for name, kind in (check_type("aliases", aliases, Mapping, optional=True) or {}).items():
            if kind not in CATEGORIES:  # the phases the rules read
                raise ValueError(f"alias {name!r} -> {kind!r}: kind must be one of {CATEGORIES}")
            shares[kind] = shares.get(kind, 0.0) + shares.pop(name, 0.0)
        return cls(**{**vars(ev), "shares": shares}) if aliases else ev


def _finding(kind: str, value: float, limit: float, detail: str, severity: str = "",
             rank: int | None = None) -> Finding:
    rule = RULES[kind]
    severity = severity or ("high" if value >= 2 * limit else "medium")
    return Finding(kind, severity, value, limit, f"{rule.title}: {detail}", rule.fix,
                   rule.notebook, rank)


def _graded(sync: float, wait: float, n_sync: float | None, th: Thresholds) -> str:
    """After the sync finding's split: it is ranked and graded on its whole share, the wait for a
    collective included; what the rest alone would make of it."""
    rest = sync - wait
    alone = (f"grade it {'high' if rest >= 2 * th.sync else 'medium'}" if rest > th.sync else
             f"grade it medium, on its count of reads alone ({n_sync:.0f} past {th.syncs_per_step:.0f})"
             if n_sync is not None and n_sync > th.syncs_per_step else "raise no finding")
    return (f"; it is ranked and graded on the whole {sync:.1%}, that wait included: the rest, "
            f"{rest:.1%} of the step, would {alone}")


def diagnose_shares(record: StepShares | StepSummary | TraceBreakdown | TraceAttribution
                    | Mapping[str, float], thresholds: Thresholds | None = None,
                    aliases: Mapping[str, str] | None = None,
                    peak_flops: float | None = None) -> list[Finding]:
    """Judge a step's shares by every rule; the most the fix can gain first, info last.

    Args:
        record: a :class:`StepShares`, a :class:`~perfkit.profiling.StepSummary` (enables
            the jitter rule; its phases' median shares over the steps are judged, so that a
            stall is the jitter rule's finding and not a share of every phase), a
            :class:`~perfkit.profiling.TraceBreakdown`, a
            :class:`~perfkit.profiling.TraceAttribution` (enables the sync and overhead
            rules' counts) or a dict of phase -> share.
        thresholds: when to report; default ``Thresholds()`` (see :class:`Thresholds`).
        aliases: map user-named phases onto the known kinds, e.g.
            ``{"allreduce": "communication"}``; their shares are added to that kind.
            Phases neither known nor aliased are not judged (their time is still part
            of the step, so they lower every other share).
        peak_flops: this machine's measured FLOP/s ceiling for the overhead rule
            (``None``: ``thresholds.peak_fallback``).

    Returns:
        A list of :class:`Finding`, empty when nothing crosses a threshold.

    Raises:
        TypeError: for a ``record``, ``thresholds`` or ``aliases`` of another type.
        ValueError: if an alias targets an unknown kind, a share is not in [0, 1], or
            ``peak_flops`` is not a finite number > 0.
    """
    ev = StepShares.of(record, aliases)
    th = check_type("thresholds", thresholds, Thresholds, optional=True) or Thresholds()
    if peak_flops is not None:
        check_real("peak_flops", peak_flops, 0, lo_open=True)
    s, found = ev.shares, []
    found += _contended_data(ev, th)
    for kind in ("data", "communication", "optimizer", "other"):
        v, limit = s.get(kind, 0.0), getattr(th, kind)
        if kind == "data" and found:
            continue  # judged with the loading off the main thread
        if limit is not None and v > limit:
            where = (f" on the least exposed of {ev.comm_ranks} ranks"
                     if kind == "communication" and ev.comm_ranks > 1 else "")
            found.append(_finding(kind, v, limit, f"{kind} takes {v:.1%} of the step "
                                                  f"(threshold {limit:.0%}){where}"))
    sync, n_sync = s.get("sync", 0.0), ev.syncs_per_step
    if sync > th.sync or (n_sync is not None and n_sync > th.syncs_per_step):
        count = f"{n_sync:.0f} host-device syncs per step" if n_sync is not None else "syncs"
        wait = ev.sync_comm_share or 0.0
        found.append(_finding("sync", sync, th.sync, f"{count} (reads of a tensor's value on the host: "
                              f".item(), .cpu(), print of a tensor) take {sync:.1%} of the step "
                              f"(threshold {th.sync:.0%} or {th.syncs_per_step:.0f} syncs)" + (
                                  f"; of that, the reads themselves took {ev.sync_read_share or 0.0:.2%} "
                                  f"of the step, and {wait:.1%} passed with a collective in flight between "
                                  "two reads: waiting for it" + _graded(sync, wait, n_sync, th)
                                  if wait >= 0.001 else "")))
    # launch/overhead-bound: operators too small to pay for their own dispatch. The FLOPs
    # per operator against what the machine computes in th.op_overhead_us, the fixed cost of
    # one eager operator; the share is the step outside data, syncs, collectives and the
    # optimizer, which that cost dominates.
    if ev.flops_per_step and ev.ops_per_step:
        per_op = ev.flops_per_step / ev.ops_per_step
        bar = (peak_flops or th.peak_fallback) * th.op_overhead_us * 1e-6  # FLOP
        share = sum(s.get(k, 0.0) for k in ("forward", "backward", "other"))
        if per_op < bar and share > th.overhead:
            step = f" {ev.step_mean_s * 1e3:.2f} ms" if ev.step_mean_s else ""
            found.append(_finding(
                "overhead", share, th.overhead, f"{ev.ops_per_step:.0f} operators per step do "
                f"{per_op / 1e3:.1f} kFLOP each, less than this machine computes in "
                f"{th.op_overhead_us:g} us ({bar / 1e3:.0f} kFLOP): per-operator dispatch and "
                f"Python overhead fill the {share:.1%} of the{step} step spent in forward, "
                f"backward and the loop (threshold {th.overhead:.0%})",
                "high" if share > OVERHEAD_HIGH else "medium"))
    found += _straggler(ev, th) + _jitter(ev, th)
    found.sort(key=lambda f: (f.kind == "jitter", -f.share))  # jitter's is a ratio
    compute = s.get("forward", 0.0) + s.get("backward", 0.0)
    if compute > th.compute:
        found.append(_finding("compute", compute, th.compute, f"forward + backward take "
                              f"{compute:.1%} of the step (threshold {th.compute:.0%})", "info"))
    return found + _load(ev, th)


def _load(ev: StepShares, th: Thresholds) -> list[Finding]:
    """The main thread's waits for a core: what the machine's load added to every phase."""
    wait = ev.core_wait_share
    if wait is None or wait <= th.load:
        return []
    who = (f"; other processes kept {ev.other_cores:.1f} of the {ev.cores} cores busy"
           if ev.other_cores is not None and ev.cores else "")
    avg = f" (load average {ev.loadavg:.1f})" if ev.loadavg is not None else ""
    return [_finding("load", wait, th.load, f"the main thread waited for a core {wait:.1%} of "
                     f"the step (the scheduler's run-queue account; threshold {th.load:.0%})"
                     f"{who}{avg}: every share above includes that wait, so a cause can hide "
                     "behind the phases it stretches", "info")]


def _contended_data(ev: StepShares, th: Thresholds) -> list[Finding]:
    """Loading on another thread of the process (a prefetcher's) while the main thread was
    kept off its core: the loading was not hidden, it took the step's cores (or the GIL)."""
    off, stall = ev.data_offload_share, ev.main_stall_share
    if not off or stall is None or stall <= th.load:
        return []
    data = ev.shares.get("data", 0.0)
    share = min(1.0, data + off)
    if share <= th.data:
        return []
    core = (f" (waiting for a core {ev.core_wait_share:.1%}, the rest for the GIL or another "
            "lock)" if ev.core_wait_share is not None else "")
    return [_finding("data", share, th.data, f"data loading contends with compute, {share:.1%} "
                     f"of the step (threshold {th.data:.0%}): another thread of the process "
                     f"loaded batches {off:.1%} of the step while the step ran, and the step "
                     f"waited for them {data:.1%}; the main thread was off its core {stall:.1%} "
                     f"of the step outside its waits{core}. Prefetching cannot hide loading "
                     "that needs the cores the step needs")]


def _straggler(ev: StepShares, th: Thresholds) -> list[Finding]:
    """The slowest rank's work outside collectives against the others' median."""
    busy = ev.rank_work_s
    if len(busy) < 2 or not ev.rank_step_s:
        return []
    slow = max(busy, key=busy.__getitem__)
    med = statistics.median(v for k, v in busy.items() if k != slow)
    ratio = busy[slow] / med if med > 0 else 1.0
    wait = (busy[slow] - med) / ev.rank_step_s  # share of the step the others wait
    if ratio <= th.straggler or wait <= th.straggler_wait:
        return []
    return [_finding("straggler", wait, th.straggler_wait, f"rank {slow} is the straggler: "
                     f"{busy[slow] * 1e3:.1f} ms of work per step against {med * 1e3:.1f} ms on "
                     f"the other ranks (median; {ratio:.2f}x, threshold {th.straggler}x), so they "
                     f"wait {wait:.1%} of the step for it in their collectives (threshold "
                     f"{th.straggler_wait:.0%})", rank=slow)]


def _jitter(ev: StepShares, th: Thresholds) -> list[Finding]:
    """p99 over p50 step time, judged from ``th.min_steps`` steps on."""
    p50, p99 = ev.step_p50_s, ev.step_p99_s
    if not p50 or p99 is None or ev.steps < th.min_steps or p99 / p50 <= th.jitter:
        return []
    ratio = p99 / p50
    return [_finding("jitter", ratio, th.jitter, f"p99 step {p99 * 1e3:.1f} ms is {ratio:.2f}x "
                     f"the median {p50 * 1e3:.1f} ms (threshold {th.jitter}x, {ev.steps} steps"
                     + (": so few that the p99 is about the slowest one" if ev.steps < 100 else "") + ")")]
