"""Data loading (module 07): the prefetcher, datasets with known costs, loader measurements.

Prefetcher overlaps the next batch with the step; datasets simulate or do real per-sample
work; measure_loader and simulate_pipeline measure and predict a DataLoader.

Usage::

    for batch in Prefetcher(loader, device="cuda"):
        step(batch)
    print(measure_loader(dataset, LoaderConfig(num_workers=2)).samples_per_s)
"""

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
from perfkit.data.loader import (
    LoaderConfig,
    LoaderRecord,
    PipelineRecord,
    measure_loader,
    simulate_pipeline,
)
from perfkit.data.prefetch import (
    Prefetcher,
    map_tensors,
)

__all__ = [
    "AugmentedDigits",
    "Delayed",
    "LoaderConfig",
    "LoaderRecord",
    "map_tensors",
    "measure_loader",
    "PadCollate",
    "PipelineRecord",
    "Prefetcher",
    "ShardedStream",
    "simulate_pipeline",
    "SlowDataset",
    "spend",
    "TextChunks",
    "write_shards",
]
