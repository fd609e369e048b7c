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
    BucketReducer,
    MixedPrecision,
    NaiveDP,
    OverlappedDP,
    ShardedBucket,
    ShardedLossScaler,
    ShardedModule,
    ZeroOptimizer,
    all_gather_flat,
    assign_buckets,
    build_buckets,
    check_param_groups,
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
    # ZeroOptimizer: params (check_param_groups, stage named)
    ("ZeroOptimizer.params tensor", lambda: ZeroOptimizer(P, ADAMW), TypeError,
     "params must be an ordered iterable"),
    ("ZeroOptimizer.params set", lambda: ZeroOptimizer({P, Q}, ADAMW), TypeError,
     "params must be an ordered iterable.*set"),
    ("ZeroOptimizer.params int", lambda: ZeroOptimizer(3, ADAMW), TypeError,
     "params must be an ordered iterable.*int"),
    ("ZeroOptimizer.params empty", lambda: ZeroOptimizer([], ADAMW), ValueError,
     "params is empty"),
    ("ZeroOptimizer.params item", lambda: ZeroOptimizer([P, "w"], ADAMW), TypeError,
     "params of group 0 must be tensors, got str"),
    ("ZeroOptimizer.params int dtype",
     lambda: ZeroOptimizer([torch.zeros(3, dtype=torch.int64)], ADAMW), TypeError,
     "params of group 0: ZeRO-1 shards floating-point"),
    ("ZeroOptimizer.params twice", lambda: ZeroOptimizer([P, P], ADAMW), ValueError,
     "appears twice"),
    ("ZeroOptimizer.params dtypes", lambda: ZeroOptimizer([P, _p(3, torch.float64)], ADAMW),
     ValueError, "param group 0 mixes dtypes"),
    ("ZeroOptimizer.params non-leaf", lambda: ZeroOptimizer([P * 2], ADAMW), ValueError,
     "non-leaf"),
    ("ZeroOptimizer.params group key", lambda: ZeroOptimizer([{"lr": 0.1}], ADAMW),
     TypeError, "group 0 must be a dict with a 'params' key"),
    ("ZeroOptimizer.params mixed", lambda: ZeroOptimizer([{"params": [P]}, Q], ADAMW),
     TypeError, "group 1 must be a dict with a 'params' key"),
    ("ZeroOptimizer.params group set", lambda: ZeroOptimizer([{"params": {P}}], ADAMW),
     TypeError, "params of group 0 must be an ordered iterable"),
    ("ZeroOptimizer.params group empty", lambda: ZeroOptimizer([{"params": []}], ADAMW),
     ValueError, "param group 0 has no parameters"),
    # ZeroOptimizer: the other arguments
    ("ZeroOptimizer.optimizer_class str", lambda: ZeroOptimizer([P], "AdamW"), TypeError,
     "optimizer_class must be a torch.optim.Optimizer subclass"),
    ("ZeroOptimizer.optimizer_class instance",
     lambda: ZeroOptimizer([P], torch.optim.SGD([Q], lr=0.1)), TypeError, "optimizer_class"),
    ("ZeroOptimizer.reduce_grads", lambda: ZeroOptimizer([P], ADAMW, reduce_grads="yes"),
     TypeError, "reduce_grads must be a bool"),
    ("ZeroOptimizer.process_group", lambda: ZeroOptimizer([P], ADAMW, process_group="dp"),
     TypeError, "process_group must be None .*or a ProcessGroup, got str"),
    # hyperparameters are the wrapped optimizer's to check, with its own messages
    ("ZeroOptimizer.lr nan", lambda: ZeroOptimizer([P], ADAMW, lr=NAN), ValueError,
     "learning rate: nan"),
    ("ZeroOptimizer.lr negative", lambda: ZeroOptimizer([P], ADAMW, lr=-1.0), ValueError,
     "learning rate: -1"),
    ("ZeroOptimizer.weight_decay", lambda: ZeroOptimizer([P], ADAMW, weight_decay=-0.1),
     ValueError, "weight_decay"),
    ("ZeroOptimizer.defaults unknown", lambda: ZeroOptimizer([P], ADAMW, momentun=0.9),
     TypeError, "momentun"),
    ("ZeroOptimizer.load_state_dict groups",
     lambda: ZeroOptimizer([P], ADAMW).load_state_dict({"state": {}, "param_groups": []}),
     ValueError, "state_dict has 0 param groups, this optimizer has 1"),
    ("ZeroOptimizer.load_state_dict params",
     lambda: ZeroOptimizer([P], ADAMW).load_state_dict(
         {"state": {}, "param_groups": [{"params": [0, 1]}]}), ValueError,
     "param group 0: state_dict has 2 parameters, this optimizer has 1"),
    ("ZeroOptimizer.params int dtype stage 2",
     lambda: ZeroOptimizer([torch.zeros(3, dtype=torch.int64)], ADAMW, stage=2), TypeError,
     "params of group 0: ZeRO-2 shards floating-point"),
    ("ZeroOptimizer.stage 4", lambda: ZeroOptimizer([P], ADAMW, stage=4), ValueError,
     "stage must be one of 1, 2, 3, got 4"),
    ("ZeroOptimizer.stage str", lambda: ZeroOptimizer([P], ADAMW, stage="2"), ValueError,
     "stage must be one of 1, 2, 3, got '2'"),
    ("ZeroOptimizer.stage 3 of params", lambda: ZeroOptimizer([P], ADAMW, stage=3), ValueError,
     "stage 3 takes the ShardedModule .* got stage=3 and params of type list"),
    ("ZeroOptimizer.stage 2 of a ShardedModule",
     lambda: ZeroOptimizer(ShardedModule(nn.Linear(2, 2)), ADAMW, stage=2), ValueError,
     "got stage=2 and params of type ShardedModule"),
    ("ZeroOptimizer.reduce_grads stage 2",
     lambda: ZeroOptimizer([P], ADAMW, stage=2, reduce_grads=False), ValueError,
     "reduce_grads=False .* needs stage 1, got stage=2"),
    ("ZeroOptimizer.overlap", lambda: ZeroOptimizer([P], ADAMW, overlap=1), TypeError,
     "overlap must be a bool, got int"),
    ("ZeroOptimizer.module type", lambda: ZeroOptimizer([P], ADAMW, module="net"), TypeError,
     "module must be a Module or None, got str"),
    ("ZeroOptimizer.module foreign", lambda: ZeroOptimizer([P], ADAMW, module=nn.Linear(2, 2)),
     ValueError, "module holds none of the trainable parameters"),
    ("ZeroOptimizer.module stage 3",
     lambda: ZeroOptimizer(ShardedModule(nn.Linear(2, 2)), ADAMW, stage=3, module=nn.ReLU()),
     ValueError, "module is for stages 1-2"),
    ("ZeroOptimizer.bucket_cap_mb 0", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb=0),
     ValueError, "bucket_cap_mb must be a finite number >= 9.53674e-07, got 0"),
    ("ZeroOptimizer.bucket_cap_mb nan", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb=NAN),
     ValueError, "bucket_cap_mb must be a finite number"),
    ("ZeroOptimizer.bucket_cap_mb str", lambda: ZeroOptimizer([P], ADAMW, bucket_cap_mb="1"),
     TypeError, "bucket_cap_mb must be a finite number"),
    ("ZeroOptimizer.add_param_group",
     lambda: ZeroOptimizer([P], ADAMW, stage=2).add_param_group({"params": [Q]}),
     NotImplementedError, "ZeRO-2 cannot add a param group"),
    ("ZeroOptimizer.sharded optimizer_class",
     lambda: ZeroOptimizer(ShardedModule(nn.Linear(2, 2)), "AdamW", stage=3), TypeError,
     "optimizer_class must be a torch.optim.Optimizer subclass"),
    ("ZeroOptimizer.sharded lr", lambda: ZeroOptimizer(ShardedModule(nn.Linear(2, 2)), ADAMW,
                                                      stage=3, lr=-1.0), ValueError, "learning rate"),
    # check_param_groups and BucketReducer
    ("check_param_groups.params set", lambda: check_param_groups({P}, 2), TypeError,
     "params must be an ordered iterable.*set"),
    ("check_param_groups.params empty", lambda: check_param_groups([], 3), ValueError,
     "params is empty: ZeRO-3 needs"),
    ("BucketReducer.buckets", lambda: BucketReducer("b", 1, 1), TypeError,
     "buckets must be a list or tuple"),
    ("BucketReducer.buckets item", lambda: BucketReducer([P], 1, 1), TypeError,
     r"buckets\[0\] must be a ShardedBucket, got Parameter"),
    ("BucketReducer.stage", lambda: BucketReducer([], 0, 1), ValueError,
     "stage must be one of 1, 2, 3, got 0"),
    ("BucketReducer.world_size", lambda: BucketReducer([], 1, 0), ValueError,
     "world_size must be an int >= 1, got 0"),
    ("BucketReducer.reduce_grads", lambda: BucketReducer([], 3, 1, reduce_grads=False),
     ValueError, "needs stage 1, got stage=3"),
    ("BucketReducer.in_flight", lambda: BucketReducer([], 2, 1, in_flight=0), ValueError,
     "in_flight must be an int >= 1"),
    ("BucketReducer.process_group", lambda: BucketReducer([], 2, 1, process_group="dp"),
     TypeError, "process_group must be None"),
    # ShardedLossScaler
    ("ShardedLossScaler.optimizer", lambda: ShardedLossScaler(torch.optim.SGD([Q], lr=0.1)),
     TypeError, "optimizer must be a ZeroOptimizer, got SGD"),
    ("ShardedLossScaler.init_scale", lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW), 0.0),
     ValueError, "init_scale must be a finite number > 0, got 0.0"),
    ("ShardedLossScaler.init_scale inf",
     lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW), INF), ValueError, "init_scale"),
    ("ShardedLossScaler.growth_factor",
     lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW), growth_factor=1.0), ValueError,
     "growth_factor must be a finite number > 1"),
    ("ShardedLossScaler.backoff_factor",
     lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW), backoff_factor=1.0), ValueError,
     r"backoff_factor must be a finite number in \(0, 1\)"),
    ("ShardedLossScaler.growth_interval",
     lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW), growth_interval=0), ValueError,
     "growth_interval must be an int >= 1"),
    ("ShardedLossScaler.load_state_dict",
     lambda: ShardedLossScaler(ZeroOptimizer([P], ADAMW)).load_state_dict({"scale": "big"}),
     TypeError, r"state\['scale'\] must be a finite number"),
    # MixedPrecision
    ("MixedPrecision.param_dtype", lambda: MixedPrecision(torch.int8), TypeError,
     "param_dtype must be None or a floating-point torch.dtype, got torch.int8"),
    ("MixedPrecision.reduce_dtype", lambda: MixedPrecision(torch.bfloat16, "fp32"), TypeError,
     "reduce_dtype must be None or a floating-point torch.dtype, got 'fp32'"),
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
    ("ShardedModule.unsharded item", lambda: ShardedModule(nn.Linear(2, 2), unsharded=[3]),
     TypeError, r"unsharded\[0\] must be a Tensor, got int"),
    ("ShardedModule.unsharded foreign", lambda: ShardedModule(nn.Linear(2, 2), unsharded=[Q]),
     ValueError, "unsharded must list trainable parameters of module, each once"),
    ("ShardedModule.unsharded twice",
     lambda: (lambda m: ShardedModule(m, unsharded=[m.bias, m.bias]))(nn.Linear(2, 2)),
     ValueError, "each once"),
    ("ShardedModule.mixed_precision",
     lambda: ShardedModule(nn.Linear(2, 2), mixed_precision=torch.bfloat16), TypeError,
     "mixed_precision must be a MixedPrecision or None, got dtype"),
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
     "bucket_cap_bytes must be an int >= 1, got 0"),
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
     "bucket_cap_bytes must be an int >= 1, got '1MB'"),
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
     ValueError, "bucket_cap_mb must be a finite number >= 9.53674e-07, got 0"),
    ("BucketedDP.bucket_cap_mb negative", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=-1.0),
     ValueError, "bucket_cap_mb must be a finite number .* got -1.0"),
    ("BucketedDP.bucket_cap_mb nan", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=NAN),
     ValueError, "bucket_cap_mb must be a finite number .* got nan"),
    ("BucketedDP.bucket_cap_mb inf", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=INF),
     ValueError, "bucket_cap_mb must be a finite number .* got inf"),
    ("BucketedDP.bucket_cap_mb below a byte",
     lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb=1e-9), ValueError, ">= 9.53674e-07, got 1e-09"),
    ("BucketedDP.bucket_cap_mb str", lambda: BucketedDP(nn.Linear(2, 2), bucket_cap_mb="25"),
     TypeError, "bucket_cap_mb must be a finite number .* got '25'"),
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
     "bucket_cap_mb must be a finite number .* got tensor"),
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
