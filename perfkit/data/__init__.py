"""Data loading (module 07): the prefetcher, datasets with known costs, loader measurements.

Prefetcher overlaps the next batch with the step; datasets simulate or do real per-sample
work; measure_loader and simulate_pipeline measure and predict a DataLoader.

Usage::

    for batch in Prefetcher(loader, device="cuda"):
        step(batch)
    print(measure_loader(dataset, LoaderConfig(num_workers=2)).samples_per_s)
"""

from perfkit.data.claims import (
    ADVISED_WORKERS,
    PinTiming,
    WorkerSweep,
    interval_gap,
    pass_rate,
    ratio_explain,
    time_pin_memory,
    worker_sweep,
)
from perfkit.data.datasets import (
    AugmentedDigits,
    Delayed,
    PadCollate,
    ShardedStream,
    SlowDataset,
    TextChunks,
    spend,
    write_shards,
)
from perfkit.data.experiments import (
    MonitoredRun,
    PaddingRecord,
    balanced_max,
    gil_explain,
    largest_gap,
    monitored_steps,
    near_edge,
    padding_waste,
    rate_context,
    rate_ratio,
    rates_held,
    run_gaps,
    sleep_explain,
    wait_share,
    worker_gain,
    workers_note,
)
from perfkit.data.loader import (
    LoaderConfig,
    LoaderRecord,
    PipelineRecord,
    beyond_model,
    handoff_part,
    measure_loader,
    simulate_pipeline,
)
from perfkit.data.overlap import (
    ThreadProbe,
    clip_at_one,
    gil_hidden_bound,
    gil_least_step,
    hidden_fraction,
    hidden_fraction_estimate,
    loader_gil_note,
    overlap_floor,
    overlap_hidden,
    prefetch_loops,
    spin_held,
    spin_load_note,
    thread_probe,
    thread_share,
)
from perfkit.data.prefetch import (
    WAIT_ANNOTATION,
    Prefetcher,
    PrefetchStats,
    map_tensors,
)
from perfkit.stats import bootstrap

__all__ = [
    "ADVISED_WORKERS",
    "PinTiming",
    "WorkerSweep",
    "interval_gap",
    "pass_rate",
    "ratio_explain",
    "time_pin_memory",
    "worker_sweep",
    "AugmentedDigits",
    "balanced_max",
    "beyond_model",
    "handoff_part",
    "bootstrap",
    "Delayed",
    "clip_at_one",
    "gil_explain",
    "hidden_fraction",
    "hidden_fraction_estimate",
    "loader_gil_note",
    "largest_gap",
    "LoaderConfig",
    "LoaderRecord",
    "map_tensors",
    "measure_loader",
    "monitored_steps",
    "near_edge",
    "MonitoredRun",
    "overlap_floor",
    "overlap_hidden",
    "PadCollate",
    "padding_waste",
    "PaddingRecord",
    "PipelineRecord",
    "prefetch_loops",
    "sleep_explain",
    "Prefetcher",
    "PrefetchStats",
    "WAIT_ANNOTATION",
    "rate_context",
    "rate_ratio",
    "rates_held",
    "run_gaps",
    "ShardedStream",
    "simulate_pipeline",
    "SlowDataset",
    "spend",
    "TextChunks",
    "ThreadProbe",
    "thread_probe",
    "thread_share",
    "gil_hidden_bound",
    "gil_least_step",
    "spin_held",
    "spin_load_note",
    "wait_share",
    "worker_gain",
    "workers_note",
    "write_shards",
]
