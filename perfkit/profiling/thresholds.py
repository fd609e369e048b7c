"""When a diagnosis rule reports a cause: the one :class:`Thresholds` every rule reads.

Two sets of values, one type: ``Thresholds()`` for the phases of your own loop
(:class:`~perfkit.profiling.StepMonitor`, notebook 01, the Prometheus alerts), and
:meth:`Thresholds.for_command` for ``perfkit diagnose``, whose shares come from a profiled
window split exclusively (:func:`~perfkit.profiling.attribute_trace`) and whose values were
calibrated on the planted scripts of ``examples/diagnose``.

Usage::

    th = Thresholds(data=0.05)                  # the TensorBoard plugin's data rule
    diagnose_shares(mon.summary(), th)
    build_report(records, Thresholds.for_command())
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit._checks import check_int, check_real

__all__ = ["Thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """When each rule of :data:`~perfkit.profiling.RULES` reports, as shares of the step
    (0.10 = 10 %) unless said otherwise: of the mean step for a trace, each phase's median share
    over the steps for a :class:`~perfkit.profiling.StepMonitor` summary. A finding is ``high``
    at twice its threshold.

    The defaults judge a :class:`~perfkit.profiling.StepMonitor` summary of your own loop.
    Compared with the PyTorch profiler's TensorBoard plugin (``torch_tb_profiler``), which
    advises on DataLoader time above 5 % of the step and communication above 10 %:

    * ``data`` 0.10, twice the plugin's: the DataLoader's fixed per-batch cost (sampling
      indices, collation) is a few percent of the 5-30 ms CPU steps of this course even
      when nothing is wrong; notebook 01 measures it. Lower it for long GPU steps.
    * ``communication`` 0.10, as the plugin: un-overlapped gradient traffic grows with
      the world size, so 10 % on 2 ranks is a warning for 8.
    * ``optimizer`` 0.25: with Adam the update reads and writes 4 values per parameter
      and should stay well below forward + backward.
    * ``other`` 0.15: time outside every phase (Python overhead, logging, ``.item()``);
      ``None`` leaves it unjudged.
    * ``jitter`` 1.5: step-time p99 over p50 (stragglers), judged from ``min_steps`` steps.
      Below 100 steps the p99 interpolates between the two slowest steps: the rule then
      compares about the slowest step with the median, as noisy as that one step.
    * ``compute`` 0.60: forward + backward above this is reported as compute-bound (info).
    * ``load`` 0.20: the share of the step the main thread waited for a core (Linux's
      run-queue account, :mod:`perfkit.profiling.machine_load`), reported as information
      with the cores other processes kept busy: the shares are then a loaded machine's.

    The rules below need what only a profiled trace or several ranks measure; their values
    come from ``perfkit diagnose`` on ``examples/diagnose`` (see :meth:`for_command`):

    * ``sync`` 0.15, share of host-device syncs (and of the host loops they sit in), or
      more than ``syncs_per_step`` 8 of them: planted 0.16-0.54 and 512 syncs; others
      <= 0.01 and <= 1 (the usual ``loss.item()``; syncs inside ``optimizer.step``, such
      as Adam's per-tensor ``step.item()``, are not counted).
    * ``overhead`` 0.45 with ``op_overhead_us`` 0.1: reported when the counted FLOPs per
      operator are below what the machine computes in 0.1 us at its measured peak
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
    """

    data: float = 0.10
    communication: float = 0.10
    optimizer: float = 0.25
    other: float | None = 0.15
    jitter: float = 1.5
    compute: float = 0.60
    min_steps: int = 20
    sync: float = 0.15
    syncs_per_step: float = 8.0
    overhead: float = 0.45
    op_overhead_us: float = 0.1
    peak_fallback: float = 2e10
    straggler: float = 4.0
    straggler_wait: float = 0.30
    load: float = 0.20

    def __post_init__(self) -> None:
        shares = ["data", "communication", "optimizer", "sync", "overhead", "compute",
                  "straggler_wait", "load"] + ([] if self.other is None else ["other"])
        for k in shares:
            check_real(k, getattr(self, k), 0, 1, lo_open=True, hi_open=True)  # a share
        check_real("jitter", self.jitter, 1, lo_open=True)  # a p99/p50 ratio
        check_int("min_steps", self.min_steps, 0)
        check_real("syncs_per_step", self.syncs_per_step, 0, lo_open=True)
        check_real("straggler", self.straggler, 1, lo_open=True)
        check_real("op_overhead_us", self.op_overhead_us, 0, lo_open=True)
        check_real("peak_fallback", self.peak_fallback, 0, lo_open=True)

    @classmethod
    def for_command(cls) -> Thresholds:
        """The values ``perfkit diagnose`` uses, calibrated on ``examples/diagnose``.

        Measured with ``benchmarks/diagnose.py`` (``--skip 2 --steps 8``, one intra-op
        thread) on the course's 2-core CPU machine while other jobs loaded it (load average
        5-9); "planted" is the range over runs of the script planted with that cause,
        "others" the largest value seen on the healthy scripts and the other planted ones.
        Each threshold sits between the two with a margin on both sides. Where they differ
        from the defaults:

        * ``data`` 0.20: planted 0.55-0.81; others <= 0.16 (an MLP fed by a TensorDataset
          at batch 128: per-sample indexing and collation).
        * ``communication`` 0.20, the least exposed rank's share: its exposed collectives,
          its own launches and DDP bucket copies, and its operators slowed by collectives in
          flight (:func:`~perfkit.profiling.attribute_trace`). Planted (DDP, 1 KB buckets)
          0.24-0.72 with 16 layers, 0.39-0.65 with the 32 it has now, 0.57 since the
          host-side work counts (0.30 exposed alone); the wide MLP at batch 2 with 50 KB
          buckets (``comm_bound_wide``) 0.40-0.60 at loads 5-18, where the exposed share
          alone was 0.10-0.37 and below the threshold in 2 of 4 runs; a ZeRO-1 DeepSpeed
          engine with 2 ranks 0.48 (0.39-0.43 exposed).
        * ``optimizer`` 0.40: planted 0.75-0.79 (Adam, ``foreach=False``, 200 tensors);
          others <= 0.34 (AdamW on the healthy MLP: 0.25-0.34 at batch 128, 0.26 at 256).
        * ``other`` unjudged: a trace's "other" is the script's own Python between
          operators, which the overhead rule judges together with the operators' size.
        """
        return cls(data=0.20, communication=0.20, optimizer=0.40, other=None)
