"""Parallelism (modules 02 and 05): data parallelism from scratch and ZeRO around torch.optim.

NaiveDP, BucketedDP and OverlappedDP build DDP's gradient all-reduce step by step;
ZeroOneOptimizer shards any torch.optim optimizer's state across ranks (ZeRO stage 1);
ZeroOptimizer does stage 1 or 2 with the reduce-scatter overlapped with backward;
ShardedModule and ZeroThreeOptimizer do stage 3 (FSDP): parameters gathered block by block.

Usage::

    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()   # step() is collective
    full = opt.state_dict()                        # collective; AdamW's own format
    sharded = ShardedModule(model, blocks=list(model.transformer.h))   # stage 3
    opt3 = ZeroThreeOptimizer(sharded, torch.optim.AdamW, lr=1e-3)
"""

from perfkit.parallel.buckets import (
    ShardedBucket,
    build_buckets,
    consolidated_state,
    shard_state,
)
from perfkit.parallel.data_parallel import (
    BucketedDP,
    NaiveDP,
    OverlappedDP,
    assign_buckets,
)
from perfkit.parallel.flat import (
    all_gather_flat,
    reduce_scatter_flat,
    shard_range,
)
from perfkit.parallel.zero1 import (
    ZeroOneOptimizer,
)
from perfkit.parallel.zero2 import (
    ZeroOptimizer,
)
from perfkit.parallel.zero3 import (
    ShardedModule,
    ZeroThreeOptimizer,
)

__all__ = [
    "all_gather_flat",
    "assign_buckets",
    "BucketedDP",
    "build_buckets",
    "consolidated_state",
    "NaiveDP",
    "OverlappedDP",
    "reduce_scatter_flat",
    "shard_range",
    "shard_state",
    "ShardedBucket",
    "ShardedModule",
    "ZeroOneOptimizer",
    "ZeroOptimizer",
    "ZeroThreeOptimizer",
]
