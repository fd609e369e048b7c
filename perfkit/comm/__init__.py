"""Communication (module 02): collectives measured as nccl-tests does, the alpha-beta model, a ring.

Benchmarks report algbw and busbw; the alpha-beta fit predicts a message's time; the ring
all-reduce is built from point-to-point messages.

Usage::

    points = sweep(["all_reduce"], [1 << 10, 1 << 20])     # in a torchrun worker
    fit = fit_alpha_beta([p.nbytes for p in points], [p.time_s for p in points])
    print(fit.alpha_s, fit.bandwidth)
"""

from perfkit.comm.alpha_beta import (
    UNRESOLVED_BANDWIDTH,
    AlphaBeta,
    fit_alpha_beta,
    ring_allreduce_time,
)
from perfkit.comm.bucketing import (
    BucketSaving,
    alone_against_model_text,
    bucket_count_effect,
    bucket_saving,
)
from perfkit.comm.call_cost import alpha_used_text, small_call_cost
from perfkit.comm.collectives import (
    OPS,
    CollectivePoint,
    all_gather_single,
    benchmark_collective,
    bus_factor,
    busbw_fall_text,
    busbw_share,
    gloo_reduce_scatter_text,
    isolated_times,
    medians_against_pairs,
    peak_busbw_text,
    reduce_scatter_single,
    sweep,
)
from perfkit.comm.experiments import (
    FitQuality,
    RingCheck,
    fit_quality,
    ring_check,
    ring_check_text,
    ring_regime_text,
    small_sizes_text,
)
from perfkit.comm.fits import fits_table, fits_text, loopback_copy_share
from perfkit.comm.networks import (
    INTERCONNECTS,
    Interconnect,
    PaysOn,
    encoding_pays,
)
from perfkit.comm.overlap import (
    backward_reading,
    ddp_against_text,
    hidden_share,
    overlap_apart_text,
    overlap_held_text,
    overlap_said,
    step_comm_text,
    together_share,
)
from perfkit.comm.ring import (
    fit_below_text,
    held_by_text,
    measured_rate_text,
    ring_all_reduce,
)
from perfkit.comm.traffic import (
    COUNTED,
    Traffic,
    count_traffic,
    ring_factor,
)

__all__ = [
    "alone_against_model_text",
    "backward_reading",
    "bucket_count_effect",
    "ddp_against_text",
    "bucket_saving",
    "BucketSaving",
    "busbw_fall_text",
    "busbw_share",
    "fit_below_text",
    "held_by_text",
    "measured_rate_text",
    "encoding_pays",
    "fit_quality",
    "fits_table",
    "fits_text",
    "loopback_copy_share",
    "gloo_reduce_scatter_text",
    "gloo_reduce_scatter_text",
    "FitQuality",
    "hidden_share",
    "medians_against_pairs",
    "peak_busbw_text",
    "overlap_apart_text",
    "overlap_held_text",
    "overlap_said",
    "together_share",
    "INTERCONNECTS",
    "Interconnect",
    "PaysOn",
    "ring_check",
    "ring_check_text",
    "alpha_used_text",
    "small_call_cost",
    "small_sizes_text",
    "step_comm_text",
    "ring_regime_text",
    "RingCheck",
    "all_gather_single",
    "AlphaBeta",
    "benchmark_collective",
    "bus_factor",
    "isolated_times",
    "CollectivePoint",
    "count_traffic",
    "COUNTED",
    "fit_alpha_beta",
    "UNRESOLVED_BANDWIDTH",
    "OPS",
    "reduce_scatter_single",
    "ring_all_reduce",
    "ring_allreduce_time",
    "ring_factor",
    "sweep",
    "Traffic",
]
