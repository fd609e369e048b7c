"""perfkit.parallel refuses bad arguments: each public function and class raises
``TypeError`` (wrong type) or ``ValueError`` (wrong value) with a message naming the
argument and what is allowed, at the call, not later inside a collective.

Every case runs inside a one-process gloo group (the data-parallel wrappers broadcast at
construction, the flat collectives need a group); nothing here needs a second process."""

import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

from perfkit import parallel
from perfkit.parallel import (
    BucketedDP,
    NaiveDP,
    OverlappedDP,
    ShardedBucket,
    ShardedModule,
    ZeroOneOptimizer,
    ZeroOptimizer,
    ZeroThreeOptimizer,
    all_gather_flat,
    assign_buckets,
    build_buckets,
    consolidated_state,
    reduce_scatter_flat,
    shard_range,
    shard_state,
)

NAN, INF = math.nan, math.inf
ADAMW = torch.optim.AdamW


def _p(n: int = 3, dtype: torch.dtype = torch.float32) -> nn.Parameter:
    return nn.Parameter(torch.zeros(n, dtype=dtype))


P, Q = _p(), _p()
PARAMS = [_p(10), _p(20)]

CASES = [  # (name, call, exception, regex on the message)
    # ZeroOneOptimizer: params
    ("ZeroOneOptimizer.params tensor", lambda: ZeroOneOptimizer(P, ADAMW), TypeError,
     "params must be an ordered iterable"),
    ("ZeroOneOptimizer.params set", lambda: ZeroOneOptimizer({P, Q}, ADAMW), TypeError,
     "params must be an ordered iterable.*set"),
    ("ZeroOneOptimizer.params int", lambda: ZeroOneOptimizer(3, ADAMW), TypeError,
     "params must be an ordered iterable.*int"),
    ("ZeroOneOptimizer.params empty", lambda: ZeroOneOptimizer([], ADAMW), ValueError,
     "params is empty"),
    ("ZeroOneOptimizer.params item", lambda: ZeroOneOptimizer([P, "w"], ADAMW), TypeError,
     "params of group 0 must be tensors, got str"),
    ("ZeroOneOptimizer.params int dtype",
     lambda: ZeroOneOptimizer([torch.zeros(3, dtype=torch.int64)], ADAMW), TypeError,
     "params of group 0: .*floating-point"),
    ("ZeroOneOptimizer.params twice", lambda: ZeroOneOptimizer([P, P], ADAMW), ValueError,
     "appears twice"),
    ("ZeroOneOptimizer.params dtypes", lambda: ZeroOneOptimizer([P, _p(3, torch.float64)], ADAMW),
     ValueError, "param group 0 mixes dtypes"),
    ("ZeroOneOptimizer.params non-leaf", lambda: ZeroOneOptimizer([P * 2], ADAMW), ValueError,
     "non-leaf"),
    ("ZeroOneOptimizer.params group key", lambda: ZeroOneOptimizer([{"lr": 0.1}], ADAMW),
     TypeError, "group 0 must be a dict with a 'params' key"),
    ("ZeroOneOptimizer.params mixed", lambda: ZeroOneOptimizer([{"params": [P]}, Q], ADAMW),
     TypeError, "group 1 must be a dict with a 'params' key"),
    ("ZeroOneOptimizer.params group set", lambda: ZeroOneOptimizer([{"params": {P}}], ADAMW),
     TypeError, "params of group 0 must be an ordered iterable"),
    ("ZeroOneOptimizer.params group empty", lambda: ZeroOneOptimizer([{"params": []}], ADAMW),
     ValueError, "param group 0 has no parameters"),
    # ZeroOneOptimizer: the other arguments
    ("ZeroOneOptimizer.optimizer_class str", lambda: ZeroOneOptimizer([P], "AdamW"), TypeError,
     "optimizer_class must be a torch.optim.Optimizer subclass"),
    ("ZeroOneOptimizer.optimizer_class instance",
     lambda: ZeroOneOptimizer([P], torch.optim.SGD([Q], lr=0.1)), TypeError, "optimizer_class"),
    ("ZeroOneOptimizer.reduce_grads", lambda: ZeroOneOptimizer([P], ADAMW, reduce_grads="yes"),
     TypeError, "reduce_grads must be a bool"),
    ("ZeroOneOptimizer.process_group", lambda: ZeroOneOptimizer([P], ADAMW, process_group="dp"),
     TypeError, "process_group must be None .*or a ProcessGroup, got str"),
    # hyperparameters are the wrapped optimizer's to check, with its own messages
    ("ZeroOneOptimizer.lr nan", lambda: ZeroOneOptimizer([P], ADAMW, lr=NAN), ValueError,
     "learning rate: nan"),
    ("ZeroOneOptimizer.lr negative", lambda: ZeroOneOptimizer([P], ADAMW, lr=-1.0), ValueError,
     "learning rate: -1"),
    ("ZeroOneOptimizer.weight_decay", lambda: ZeroOneOptimizer([P], ADAMW, weight_decay=-0.1),
     ValueError, "weight_decay"),
    ("ZeroOneOptimizer.defaults unknown", lambda: ZeroOneOptimizer([P], ADAMW, momentun=0.9),
     TypeError, "momentun"),
    ("ZeroOneOptimizer.load_state_dict groups",
     lambda: ZeroOneOptimizer([P], ADAMW).load_state_dict({"state": {}, "param_groups": []}),
     ValueError, "state_dict has 0 param groups, this optimizer has 1"),
    ("ZeroOneOptimizer.load_state_dict params",
     lambda: ZeroOneOptimizer([P], ADAMW).load_state_dict(
         {"state": {}, "param_groups": [{"params": [0, 1]}]}), ValueError,
     "param group 0: state_dict has 2 parameters, this optimizer has 1"),
    # ZeroOptimizer (its params are checked by ZeroOneOptimizer's code)
    ("ZeroOptimizer.params set", lambda: ZeroOptimizer({P, Q}, ADAMW), TypeError,
     "params must be an ordered iterable.*set"),
    ("ZeroOptimizer.params empty", lambda: ZeroOptimizer([], ADAMW), ValueError, "params is empty"),
    ("ZeroOptimizer.params twice", lambda: ZeroOptimizer([P, P], ADAMW), ValueError, "twice"),
    ("ZeroOptimizer.optimizer_class", lambda: ZeroOptimizer([P], "AdamW"), TypeError,
     "optimizer_class must be a torch.optim.Optimizer subclass"),
    ("ZeroOptimizer.stage 3", lambda: ZeroOptimizer([P], ADAMW, stage=3), ValueError,
     "stage must be one of 1, 2, got 3"),
    ("ZeroOptimizer.stage str", lambda: ZeroOptimizer([P], ADAMW, stage="2"), ValueError,
     "stage must be one of 1, 2, got '2'"),
    ("ZeroOptimizer.bucket_cap_mb 0", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb=0),
     ValueError, "bucket_cap_mb must be a finite number >= 9.53674e-07, got 0"),
    ("ZeroOptimizer.bucket_cap_mb nan", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb=NAN),
     ValueError, "bucket_cap_mb must be a finite number"),
    ("ZeroOptimizer.bucket_cap_mb str", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb="1"),
     TypeError, "bucket_cap_mb must be a finite number"),
    ("ZeroOptimizer.process_group", lambda: ZeroOptimizer([P], ADAMW, process_group="dp"),
     TypeError, "process_group must be None"),
    ("ZeroOptimizer.lr nan", lambda: ZeroOptimizer([P], ADAMW, lr=NAN), ValueError,
     "learning rate: nan"),
    ("ZeroOptimizer.load_state_dict groups",
     lambda: ZeroOptimizer([P], ADAMW).load_state_dict({"state": {}, "param_groups": []}),
     ValueError, "state_dict has 0 param groups, this optimizer has 1"),
    # ZeRO-3
    ("ShardedModule.module", lambda: ShardedModule("net"), TypeError,
     "module must be a Module, got str"),
    ("ShardedModule.blocks str", lambda: ShardedModule(nn.Linear(2, 2), blocks="h"), TypeError,
     "blocks must be a list or tuple"),
    ("ShardedModule.blocks item", lambda: ShardedModule(nn.Linear(2, 2), blocks=[3]), TypeError,
     r"blocks\[0\] must be a Module, got int"),
    ("ShardedModule.blocks foreign", lambda: ShardedModule(nn.Linear(2, 2), blocks=[nn.ReLU()]),
     ValueError, r"blocks\[0\] is not a submodule of module"),
    ("ShardedModule.blocks nested", lambda: (lambda m: ShardedModule(m, blocks=[m[0], m[0][0]]))(
        nn.Sequential(nn.Sequential(nn.Linear(2, 2)))), ValueError,
     r"blocks\[1\] shares a parameter with blocks\[0\]"),
    ("ShardedModule.module frozen", lambda: ShardedModule(nn.Linear(2, 2).requires_grad_(False)),
     ValueError, "no parameter with requires_grad=True"),
    ("ShardedModule.process_group", lambda: ShardedModule(nn.Linear(2, 2), process_group=1),
     TypeError, "process_group must be None"),
    ("ShardedModule.prefetch", lambda: ShardedModule(nn.Linear(2, 2), prefetch=1), TypeError,
     "prefetch must be a bool, got int"),
    ("ShardedModule.reshard_root", lambda: ShardedModule(nn.Linear(2, 2), reshard_root="no"),
     TypeError, "reshard_root must be a bool, got str"),
    ("ZeroThreeOptimizer.sharded", lambda: ZeroThreeOptimizer(nn.Linear(2, 2), ADAMW), TypeError,
     "sharded must be a ShardedModule, got Linear"),
    ("ZeroThreeOptimizer.optimizer_class",
     lambda: ZeroThreeOptimizer(ShardedModule(nn.Linear(2, 2)), "AdamW"), TypeError,
     "optimizer_class must be a torch.optim.Optimizer subclass"),
    ("ZeroThreeOptimizer.lr", lambda: ZeroThreeOptimizer(ShardedModule(nn.Linear(2, 2)), ADAMW,
                                                         lr=-1.0), ValueError, "learning rate"),
    # the sharded-bucket layout
    ("ShardedBucket.params empty", lambda: ShardedBucket([], [], 0, 2, 0), ValueError,
     "params must hold at least one item"),
    ("ShardedBucket.positions", lambda: ShardedBucket([P], [0, 1], 0, 2, 0), TypeError,
     "one per position"),
    ("ShardedBucket.rank", lambda: ShardedBucket([P], [0], 0, 2, 2), ValueError,
     r"rank must be an int in \[0, 1\], got 2"),
    ("ShardedBucket.world_size", lambda: ShardedBucket([P], [0], 0, 0, 0), ValueError,
     "world_size must be an int >= 1"),
    ("build_buckets.groups", lambda: build_buckets(P, 10, 2, 0), TypeError,
     "groups must be a list or tuple of lists of tensors"),
    ("build_buckets.cap_bytes", lambda: build_buckets([[P]], 0, 2, 0), ValueError,
     "cap_bytes must be an int >= 1, got 0"),
    ("build_buckets.rank", lambda: build_buckets([[P]], 10, 2, -1), ValueError,
     r"rank must be an int in \[0, 1\]"),
    ("consolidated_state.optim", lambda: consolidated_state([], "adam", [], 1), TypeError,
     "optim must be an Optimizer, got str"),
    ("consolidated_state.world_size",
     lambda: consolidated_state([], torch.optim.SGD([Q], lr=0.1), [], 0), ValueError,
     "world_size must be an int >= 1, got 0"),
    ("shard_state.optim", lambda: shard_state([], None, [], {}), TypeError,
     "optim must be an Optimizer, got NoneType"),
    ("shard_state.state_dict", lambda: shard_state([], torch.optim.SGD([Q], lr=0.1), [], []),
     TypeError, "state_dict must be a dict, got list"),
    # assign_buckets
    ("assign_buckets.params empty", lambda: assign_buckets([], 10), ValueError, "params is empty"),
    ("assign_buckets.params str", lambda: assign_buckets("wb", 10), TypeError,
     "params must be a sequence"),
    ("assign_buckets.params generator", lambda: assign_buckets(iter(PARAMS), 10), TypeError,
     "params must be a sequence"),
    ("assign_buckets.params item", lambda: assign_buckets([1.0, 2.0], 10), TypeError,
     r"params must be a sequence \(list, tuple\) of tensors, got a list of \['float'\]"),
    ("assign_buckets.bucket_cap_bytes 0", lambda: assign_buckets(PARAMS, 0), ValueError,
     "bucket_cap_bytes must be an int number of bytes >= 1, got 0"),
    ("assign_buckets.bucket_cap_bytes negative", lambda: assign_buckets(PARAMS, -8), ValueError,
     "bucket_cap_bytes must be .* >= 1"),
    ("assign_buckets.bucket_cap_bytes nan", lambda: assign_buckets(PARAMS, NAN), ValueError,
     "bucket_cap_bytes must be an int"),
    ("assign_buckets.bucket_cap_bytes inf", lambda: assign_buckets(PARAMS, INF), ValueError,
     "bucket_cap_bytes must be an int"),
    ("assign_buckets.bucket_cap_bytes float", lambda: assign_buckets(PARAMS, 100.5), ValueError,
     "bucket_cap_bytes must be an int"),
    ("assign_buckets.bucket_cap_bytes bool", lambda: assign_buckets(PARAMS, True), ValueError,
     "bucket_cap_bytes must be an int"),
    ("assign_buckets.bucket_cap_bytes str", lambda: assign_buckets(PARAMS, "1MB"), TypeError,
     "bucket_cap_bytes must be an int number of bytes >= 1, got '1MB'"),
    ("assign_buckets.first_bucket_bytes 0", lambda: assign_buckets(PARAMS, 10, 0), ValueError,
     "first_bucket_bytes must be .* >= 1"),
    ("assign_buckets.first_bucket_bytes nan", lambda: assign_buckets(PARAMS, 10, NAN), ValueError,
     "first_bucket_bytes must be an int"),
    # NaiveDP, BucketedDP, OverlappedDP
    ("NaiveDP.module", lambda: NaiveDP("model"), TypeError, "module must be an nn.Module, got str"),
    ("NaiveDP.module frozen", lambda: NaiveDP(nn.ReLU()), ValueError,
     "module has no parameters with requires_grad=True"),
    ("NaiveDP.group", lambda: NaiveDP(nn.Linear(2, 2), group="world"), TypeError,
     "group must be None .*or a ProcessGroup, got 'world'"),
    ("BucketedDP.module", lambda: BucketedDP(None), TypeError, "module must be an nn.Module"),
    ("BucketedDP.bucket_cap_mb 0", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=0),
     ValueError, r"bucket_cap_mb must be a finite number of MiB >= 2\*\*-20 \(one byte\), got 0"),
    ("BucketedDP.bucket_cap_mb negative", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=-1.0),
     ValueError, "bucket_cap_mb must be a finite number .* got -1.0"),
    ("BucketedDP.bucket_cap_mb nan", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=NAN),
     ValueError, "bucket_cap_mb must be a finite number .* got nan"),
    ("BucketedDP.bucket_cap_mb inf", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=INF),
     ValueError, "bucket_cap_mb must be a finite number .* got inf"),
    ("BucketedDP.bucket_cap_mb below a byte",
     lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=1e-9), ValueError, r"one byte\), got 1e-09"),
    ("BucketedDP.bucket_cap_mb str", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb="25"),
     TypeError, "bucket_cap_mb must be a finite number of MiB .* got '25'"),
    ("BucketedDP.bucket_cap_mb bool", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=True),
     ValueError, "bucket_cap_mb must be a finite number .* got True"),
    ("BucketedDP.group", lambda: BucketedDP(nn.Linear(2, 2), group=0), TypeError,
     "group must be None"),
    ("OverlappedDP.module", lambda: OverlappedDP([nn.Linear(2, 2)]), TypeError,
     "module must be an nn.Module, got list"),
    ("OverlappedDP.bucket_cap_mb nan", lambda: OverlappedDP(nn.Linear(2, 2), bucket_cap_mb=NAN),
     ValueError, "bucket_cap_mb must be a finite number"),
    ("OverlappedDP.bucket_cap_mb tensor",
     lambda: OverlappedDP(nn.Linear(2, 2), bucket_cap_mb=torch.tensor(1.0)), TypeError,
     "bucket_cap_mb must be a finite number of MiB .* got Tensor"),
    # shard_range
    ("shard_range.numel 0", lambda: shard_range(0, 2, 0), ValueError, "numel must be an int >= 1"),
    ("shard_range.numel negative", lambda: shard_range(-3, 2, 0), ValueError, "numel must be an int >= 1"),
    ("shard_range.world_size 0", lambda: shard_range(3, 0, 0), ValueError, "world_size must be an int >= 1"),
    ("shard_range.rank too large", lambda: shard_range(3, 2, 2), ValueError,
     r"rank must be an int in \[0, 1\], got 2"),
    ("shard_range.rank negative", lambda: shard_range(3, 2, -1), ValueError,
     "rank must be an int in.*got -1"),
    pytest.param("shard_range.numel float", lambda: shard_range(2.5, 2, 0), ValueError,
                 "numel must be an int"),
    pytest.param("shard_range.numel nan", lambda: shard_range(NAN, 2, 0), ValueError,
                 "numel must be an int"),
    pytest.param("shard_range.numel inf", lambda: shard_range(INF, 2, 0), ValueError,
                 "numel must be an int"),
    pytest.param("shard_range.numel str", lambda: shard_range("3", 2, 0), TypeError,
                 "numel must be an int"),
    pytest.param("shard_range.world_size bool", lambda: shard_range(3, True, 0), ValueError,
                 "world_size must be an int"),
    pytest.param("shard_range.rank float", lambda: shard_range(3, 2, 0.5), ValueError,
                 "rank must be an int"),
    # the flat collectives (one process: the checks must come before gloo sees the tensors)
    pytest.param("reduce_scatter_flat.out", lambda: reduce_scatter_flat([0.0], torch.zeros(1)),
                 TypeError, "out must be a Tensor"),
    pytest.param("reduce_scatter_flat.flat", lambda: reduce_scatter_flat(torch.zeros(1), [0.0]),
                 TypeError, "flat must be a Tensor"),
    pytest.param("reduce_scatter_flat.flat size",
                 lambda: reduce_scatter_flat(torch.zeros(2), torch.zeros(3)), ValueError,
                 "flat must hold"),
    pytest.param("reduce_scatter_flat.flat dtype",
                 lambda: reduce_scatter_flat(torch.zeros(2), torch.zeros(2, dtype=torch.float64)),
                 TypeError, "must share dtype and device"),
    pytest.param("all_gather_flat.shard", lambda: all_gather_flat(torch.zeros(2), [0.0, 1.0]),
                 TypeError, "shard must be a Tensor"),
    pytest.param("all_gather_flat.flat size",
                 lambda: all_gather_flat(torch.zeros(3), torch.zeros(2)), ValueError,
                 "flat must hold"),
    pytest.param("all_gather_flat.shard dtype",
                 lambda: all_gather_flat(torch.zeros(2), torch.zeros(2, dtype=torch.float64)),
                 TypeError, "must share dtype and device"),
]


def _name(case) -> str:
    return (case.values if hasattr(case, "values") else case)[0]


def _args(case):
    if hasattr(case, "values"):  # a pytest.param: keep its marks
        return pytest.param(*case.values[1:], marks=case.marks, id=case.values[0])
    return pytest.param(*case[1:], id=case[0])


@pytest.fixture
def one_process_group():
    """A gloo group of one process: what the wrappers' broadcast and the collectives need."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize(("call", "exc", "pattern"), [_args(c) for c in CASES])
def test_bad_argument_is_refused_with_a_message_naming_it(one_process_group, call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_every_public_callable_has_a_case():
    covered = {_name(c).split(".")[0] for c in CASES}
    assert set(parallel.__all__) <= covered, f"no bad-input case for {set(parallel.__all__) - covered}"
