"""perfkit.parallel.zero (stages 1-3) on one process: sharding arithmetic, equality with the
wrapped optimizer, state_dict round trips, errors. The multi-process checks are in tests/distributed."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from perfkit.memory import optimizer_state_bytes, storage_bytes
from perfkit.parallel import ShardedGradient, ShardedModule, ZeroOptimizer, shard_range
from tools.labs.zero_check import (
    UnevenModel,
    global_batch,
    make_mlp,
    param_groups,
    uneven_rows,
)


def test_shard_range_pads_to_equal_shards():
    assert shard_range(10, 3, 0) == (0, 4, 4)
    assert shard_range(10, 3, 2) == (8, 12, 4)  # elements 10 and 11 are padding
    assert shard_range(2, 3, 2) == (2, 3, 1)  # a rank whose shard is all padding
    assert shard_range(7, 1, 0) == (0, 7, 7)
    for numel in (1, 5, 241):
        for n in (1, 2, 3, 4):
            ranges = [shard_range(numel, n, r) for r in range(n)]
            assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            assert ranges[-1][1] >= numel and ranges[-1][1] - numel < n
    with pytest.raises(ValueError, match="rank"):
        shard_range(10, 2, 2)
    with pytest.raises(ValueError, match="numel"):
        shard_range(0, 2, 0)


def _train(model, opt, steps=10):
    for s in range(steps):
        x, y = global_batch(s)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()


@pytest.mark.parametrize("opt_class,kw", [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
                                          (torch.optim.SGD, dict(lr=1e-2, momentum=0.9)),
                                          (torch.optim.Adam, dict(lr=1e-3))])
def test_world_size_one_equals_wrapped_optimizer_bitwise(opt_class, kw):
    a, b = make_mlp(), make_mlp()
    za = ZeroOptimizer(param_groups(a, True), opt_class, **kw)
    ob = opt_class(param_groups(b, True), **kw)
    _train(a, za)
    _train(b, ob)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)  # same element-wise math on one flat slice: no rounding gap
    assert za.world_size == 1 and za.rank == 0


def test_params_become_views_of_the_flat_buffer_and_state_is_one_slice():
    m = make_mlp()
    before = [p.detach().clone() for p in m.parameters()]
    opt = ZeroOptimizer(m.parameters(), torch.optim.AdamW)
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), before))  # values kept
    assert len({p.untyped_storage().data_ptr() for p in m.parameters()}) == 1
    _train(m, opt, 1)
    numel = sum(p.numel() for p in m.parameters())
    assert opt.shard_numel() == numel == 262
    # exp_avg + exp_avg_sq of every parameter's piece, and one fp32 step counter per
    # parameter (6 tensors): exactly what plain AdamW keeps on one process
    assert opt.shard_state_bytes() == optimizer_state_bytes(opt) == 2 * 262 * 4 + 6 * 4
    assert opt.param_groups[0]["betas"] == (0.9, 0.999)  # the class defaults are visible


def test_lr_scheduler_drives_the_wrapped_optimizer():
    m = make_mlp()
    opt = ZeroOptimizer(m.parameters(), torch.optim.SGD, lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    _train(m, opt, 1)
    sched.step()
    _train(m, opt, 1)
    assert opt.optim.param_groups[0]["lr"] == pytest.approx(0.05)


def test_state_dict_is_the_plain_optimizer_format_both_ways():
    a, b = make_mlp(), make_mlp()
    za = ZeroOptimizer(param_groups(a, True), torch.optim.AdamW, lr=1e-2)
    ob = torch.optim.AdamW(param_groups(b, True), lr=1e-2)
    _train(a, za, 5)
    _train(b, ob, 5)
    sa, sb = za.state_dict(), ob.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i, st in sb["state"].items():
        for k, v in st.items():
            assert torch.equal(sa["state"][i][k], v), (i, k)
    # plain AdamW state into a ZeRO optimizer, ZeRO state into a plain AdamW: both resume
    c, d = copy.deepcopy(b), copy.deepcopy(a)
    zc = ZeroOptimizer(param_groups(c, True), torch.optim.AdamW, lr=1e-2)
    zc.load_state_dict(sb)
    od = torch.optim.AdamW(param_groups(d, True), lr=1e-2)
    od.load_state_dict(copy.deepcopy(sa))
    for model, opt in ((a, za), (b, ob), (c, zc), (d, od)):
        _train(model, opt, 3)
    for p, q, r, s in zip(a.parameters(), b.parameters(), c.parameters(), d.parameters()):
        assert torch.equal(p, q) and torch.equal(p, r) and torch.equal(p, s)


def test_state_dict_before_the_first_step_loads():
    m = make_mlp()
    opt = ZeroOptimizer(m.parameters(), torch.optim.AdamW)
    sd = opt.state_dict()
    assert sd["state"] == {}
    ZeroOptimizer(make_mlp().parameters(), torch.optim.AdamW).load_state_dict(sd)


class Partial(nn.Module):
    """The test MLP, plus a frozen tensor it adds to its output and a layer used on even
    steps only (uneven sizes: 5 frozen values, 12 in the extra layer)."""

    def __init__(self):
        super().__init__()
        self.mlp = make_mlp()
        torch.manual_seed(1)
        self.extra = nn.Linear(3, 3)
        self.frozen = nn.Parameter(torch.full((5,), 2.0), requires_grad=False)
        self.use_extra = True

    def forward(self, x):
        y = self.mlp(x) + self.frozen[:3]
        return self.extra(y) if self.use_extra else y


@pytest.mark.parametrize("opt_class,kw", [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
                                          (torch.optim.SGD, dict(lr=1e-2, momentum=0.9,
                                                                 weight_decay=0.1))])
def test_frozen_and_gradless_parameters_follow_torch_optim(opt_class, kw):
    # torch.optim's contract: a parameter whose grad is None is not updated and its state
    # (Adam's step count, momentum) does not advance; weight decay must not move it either.
    a, b = Partial(), Partial()
    za, ob = ZeroOptimizer(a.parameters(), opt_class, **kw), opt_class(b.parameters(), **kw)
    for s in range(10):
        for model, opt in ((a, za), (b, ob)):
            model.use_extra = s % 2 == 0
            x, y = global_batch(s)
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    assert torch.equal(a.frozen, torch.full((5,), 2.0))  # was 1.81 when frozen was stepped
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    sa, sb = za.state_dict(), ob.state_dict()
    assert sa["state"].keys() == sb["state"].keys()  # no state for the frozen parameter
    for i, st in sb["state"].items():
        for k, v in st.items():
            assert torch.equal(sa["state"][i][k], v), (i, k)  # step counts included


def test_uneven_sizes_frozen_and_alternating_grads_equal_adamw():
    # tensors of 13, 5 (frozen), 7 and 1 values; c has grad None on odd steps. AdamW with
    # weight decay: a step with a zero gradient would move c and advance its step count.
    a, b = UnevenModel(), UnevenModel()
    za = ZeroOptimizer(a.parameters(), torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    for s in range(10):
        for model, opt in ((a, za), (b, ob)):
            model.mask = uneven_rows(s, 1)
            x, y = global_batch(s)
            opt.zero_grad()  # set_to_none=True: c's grad is None on odd steps
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    assert torch.equal(a.frozen, torch.full((5,), 2.0))
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    sa, sb = za.state_dict(), ob.state_dict()
    assert {i: float(st["step"]) for i, st in sb["state"].items()} == {0: 10.0, 2: 10.0, 3: 5.0}
    assert sa["state"].keys() == sb["state"].keys()
    for i, st in sb["state"].items():
        for k, v in st.items():
            assert torch.equal(sa["state"][i][k], v), (i, k)
    assert za.shard_numel() == 21  # the frozen tensor is not in the flat buffer


def test_frozen_parameters_stay_out_of_the_buffers_and_unfreezing_raises():
    m = UnevenModel()
    head = nn.Parameter(torch.full((4,), 3.0), requires_grad=False)  # a group of frozen only
    opt = ZeroOptimizer([{"params": list(m.parameters())}, {"params": [head], "lr": 1.0}],
                           torch.optim.AdamW, lr=1e-2, weight_decay=0.1)
    assert opt.shard_numel() == 21  # w, b, c; the frozen group has no buffer at all
    flat = m.w.untyped_storage().data_ptr()
    assert m.b.untyped_storage().data_ptr() == flat != m.frozen.untyped_storage().data_ptr()
    m.mask = None
    nn.functional.mse_loss(m(global_batch(0)[0]), global_batch(0)[1]).backward()
    opt.step()
    assert torch.equal(head, torch.full((4,), 3.0)) and torch.equal(m.frozen, torch.full((5,), 2.0))
    assert sorted(opt.state_dict()["state"]) == [0, 2]  # w and b; not frozen, c (no grad), head
    m.frozen.requires_grad_(True)  # the buffers were laid out without it: refuse, not ignore
    with pytest.raises(RuntimeError, match="frozen"):
        opt.step()


def test_a_parameter_without_grad_keeps_its_value_and_state():
    m = nn.Linear(3, 2)
    opt = ZeroOptimizer(m.parameters(), torch.optim.AdamW, lr=0.1, weight_decay=0.5)
    m(torch.ones(1, 3)).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    m.bias.grad = torch.ones(2)  # the weight has no gradient this step
    w, state_w = m.weight.detach().clone(), {k: _copy(v) for k, v in opt.state_dict()["state"][0].items()}
    opt.step()
    assert torch.equal(m.weight, w)  # weight decay did not touch it
    after = opt.state_dict()["state"]
    assert float(after[0]["step"]) == float(state_w["step"]) == 1.0 and float(after[1]["step"]) == 2.0
    assert torch.equal(after[0]["exp_avg"], state_w["exp_avg"])


def _copy(v):
    return v.clone() if isinstance(v, torch.Tensor) else v


def test_missing_grad_is_not_stepped_and_closure_returns_loss():
    m = nn.Linear(3, 2)
    opt = ZeroOptimizer(m.parameters(), torch.optim.SGD, lr=1.0)
    x = torch.ones(1, 3)
    loss = opt.step(lambda: m(x).sum().backward() or torch.tensor(5.0))
    assert float(loss) == 5.0
    w = m.weight.detach().clone()
    m.zero_grad(set_to_none=True)
    opt.step()  # no grads at all: plain SGD moves nothing
    assert torch.equal(m.weight, w)


@pytest.mark.parametrize("params,exc,match", [
    ([], ValueError, "empty"),
    ([{"params": []}], ValueError, "group 0 has no parameters"),
    ([torch.zeros(3, dtype=torch.int64)], TypeError, "floating-point"),
    ([torch.zeros(3), torch.zeros(3, dtype=torch.float64)], ValueError, "mixes dtypes"),
    (["w"], TypeError, "tensors"),
])
def test_bad_params(params, exc, match):
    with pytest.raises(exc, match=match):
        ZeroOptimizer(params, torch.optim.SGD, lr=0.1)


def test_bad_optimizer_class_duplicates_and_groups():
    p = nn.Parameter(torch.zeros(3))
    with pytest.raises(TypeError, match="optimizer_class"):
        ZeroOptimizer([p], "AdamW")
    with pytest.raises(ValueError, match="twice"):
        ZeroOptimizer([p, p], torch.optim.SGD, lr=0.1)
    opt = ZeroOptimizer([p], torch.optim.SGD, lr=0.1)
    with pytest.raises(NotImplementedError, match="param group"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))]})
    with pytest.raises(ValueError, match="param groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})


def test_collectives_are_feature_detected_at_each_call(monkeypatch):
    import torch.distributed as dist

    import perfkit.parallel.flat as Z

    if hasattr(dist, "reduce_scatter_single"):  # torch >= 2.13: the new names win
        assert Z._reduce_scatter_fn() is dist.reduce_scatter_single
        assert Z._all_gather_fn() is dist.all_gather_single
    monkeypatch.delattr(dist, "reduce_scatter_single", raising=False)
    monkeypatch.delattr(dist, "all_gather_single", raising=False)
    # an older torch: the deprecated names are used, without reloading anything
    assert Z._reduce_scatter_fn() is dist.reduce_scatter_tensor
    assert Z._all_gather_fn() is dist.all_gather_into_tensor


# --- stages 1 and 2 with small buckets, and stage 3, on one process ---------------------------------------

@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("opt_class,kw", [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
                                          (torch.optim.SGD, dict(lr=1e-2, momentum=0.9))])
def test_zero_optimizer_one_process_equals_wrapped_optimizer_bitwise(stage, opt_class, kw):
    a, b = make_mlp(), make_mlp()
    za = ZeroOptimizer(param_groups(a, True), opt_class, stage=stage, bucket_cap_mb=1e-4, **kw)
    ob = opt_class(param_groups(b, True), **kw)
    _train(a, za)
    _train(b, ob)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert len(za.buckets) > 2  # 104-byte buckets: several per group
    # the consolidated state is AdamW's/SGD's own: it loads into a plain optimizer
    plain = opt_class(param_groups(make_mlp(), True), **kw)
    plain.load_state_dict(za.state_dict())
    for i, st in ob.state_dict()["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(plain.state_dict()["state"][i][k]),
                               torch.as_tensor(v))


def test_zero_optimizer_stage2_keeps_no_full_gradient_and_refuses_a_second_backward():
    model = make_mlp()
    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, bucket_cap_mb=1e-4)
    x, y = global_batch(0)
    nn.functional.mse_loss(model(x), y).backward()
    # freed by the hooks: each .grad is a marker that holds no memory and raises on use
    assert all(isinstance(p.grad, ShardedGradient) for p in model.parameters())
    assert storage_bytes(p.grad for p in model.parameters()) == 0
    assert opt.launched_buckets == len(opt.buckets)  # all reduce-scattered during backward
    with pytest.raises(RuntimeError, match="one backward per step"):
        nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    assert sum(t.numel() for t in opt.gradient_tensors()) == opt.shard_numel() == 262
    # stage 1 keeps each full gradient once: p.grad is a view into its bucket's buffer
    model = make_mlp()
    one = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=1, bucket_cap_mb=1e-4)
    nn.functional.mse_loss(model(x), y).backward()
    buffers = {t.untyped_storage().data_ptr() for t in one.gradient_tensors()}
    assert {p.grad.untyped_storage().data_ptr() for p in model.parameters()} == buffers
    assert len(buffers) == len(one.buckets)


def test_zero_optimizer_stage2_frees_full_buckets_during_backward():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(6)])
    opt = ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=2, bucket_cap_mb=1e-4)
    assert len(opt.buckets) > opt.IN_FLIGHT + 1
    model(torch.randn(4, 8)).square().mean().backward()
    # the full buffers of all but the last IN_FLIGHT buckets were freed during backward
    assert sum(b.grads is not None for b in opt.buckets) <= opt.IN_FLIGHT
    sizes = sorted(4 * b.padded for b in opt.buckets)
    assert opt.buffer_peak_bytes <= sum(sizes[-(opt.IN_FLIGHT + 1):]) < sum(sizes)
    opt.step()
    assert all(b.grads is None for b in opt.buckets)


@pytest.mark.parametrize("reshard_root", [False, True])
def test_zero3_one_process_equals_adamw_bitwise_and_frees_blocks(reshard_root):
    a, b = make_mlp(), make_mlp()
    # blocks 0 and 4; Linear(11, 7) (84 values) is the root unit
    sharded = ShardedModule(a, blocks=[a[0], a[4]], reshard_root=reshard_root)
    za = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=1e-2, weight_decay=0.1)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    _train(sharded, za)
    _train(b, ob)
    for p, q in zip(sharded.full_parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert all(p.numel() == 0 for p in a.parameters())  # outside forward/backward: no data
    assert sharded.gathered_bytes == 0
    # in forward: the root, block 0 running and block 4 prefetched (all of it, here)
    assert sharded.gathered_peak_bytes == 4 * (84 + 154 + 24)
    plain = torch.optim.AdamW(make_mlp().parameters(), lr=1e-2)
    plain.load_state_dict(za.state_dict())
    want = ob.state_dict()["state"]
    for i, st in plain.state_dict()["state"].items():
        assert torch.equal(st["exp_avg_sq"], want[i]["exp_avg_sq"])


# --- overlap switch, stage-named errors, stage-3 mixed precision on one process -----------

def test_blocking_version_accumulates_gradients_and_equals_adamw():
    # overlap=False reads p.grad in step(): two backward passes per step sum their gradients
    for stage in (1, 2):
        a, b = make_mlp(), make_mlp()
        za = ZeroOptimizer(a.parameters(), torch.optim.AdamW, stage=stage, overlap=False,
                           bucket_cap_mb=1e-4, lr=1e-2)
        ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
        for s in range(3):
            x, y = global_batch(s)
            for model, opt in ((a, za), (b, ob)):
                opt.zero_grad()
                for half in (slice(0, 6), slice(6, 12)):
                    nn.functional.mse_loss(model(x[half]), y[half]).backward()
                opt.step()
        assert za.launched_buckets == 0  # nothing reduced during backward
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p, q), stage


def test_a_second_backward_with_overlap_names_the_stage_and_the_switch():
    model = make_mlp()
    ZeroOptimizer(model.parameters(), torch.optim.AdamW, stage=1, bucket_cap_mb=1e-4)
    x, y = global_batch(0)
    nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(RuntimeError, match=r"ZeRO-1 with overlap=True .*overlap=False"):
        nn.functional.mse_loss(model(x), y).backward()


def test_one_process_module_hooks_leave_nothing_in_flight_and_equal_adamw():
    a, b = make_mlp(), make_mlp()
    za = ZeroOptimizer(a.parameters(), torch.optim.AdamW, stage=2, module=a, bucket_cap_mb=1e-4,
                       lr=1e-2)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
    _train(a, za, 3)
    _train(b, ob, 3)
    assert za.params_in_flight == 0  # one process gathers nothing
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    za.remove_hooks()  # no hooks left: step() reduces from p.grad, as overlap=False does
    x, y = global_batch(3)
    za.zero_grad()
    ob.zero_grad()
    nn.functional.mse_loss(a(x), y).backward()
    assert za.launched_buckets == 0 and all(p.grad is not None for p in a.parameters())
    za.step()
    nn.functional.mse_loss(b(x), y).backward()
    ob.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("reduce_dtype", [torch.float32, torch.bfloat16])
def test_zero3_mixed_precision_equals_a_hand_computed_reference(reduce_dtype):
    # the reference, by hand: bf16 copies of fp32 master weights compute forward and backward
    # on a bf16 input; the bf16 gradient is cast to reduce_dtype (the "reduction" of one
    # process), then to fp32, and AdamW steps the fp32 masters
    from perfkit.parallel import MixedPrecision

    a, master = make_mlp(), make_mlp()
    sharded = ShardedModule(a, blocks=[a[0], a[2], a[4]],
                            mixed_precision=MixedPrecision(torch.bfloat16, reduce_dtype))
    za = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=1e-2, weight_decay=0.1)
    ob = torch.optim.AdamW(master.parameters(), lr=1e-2, weight_decay=0.1)
    for s in range(4):
        x, y = global_batch(s)
        za.zero_grad()
        out = sharded(x)
        assert out.dtype == torch.bfloat16  # computed in param_dtype
        nn.functional.mse_loss(out.float(), y).backward()
        za.step()
        low = copy.deepcopy(master).to(torch.bfloat16)
        nn.functional.mse_loss(low(x.to(torch.bfloat16)).float(), y).backward()
        for p, q in zip(master.parameters(), low.parameters()):
            p.grad = q.grad.to(reduce_dtype).float()
        ob.step()
        ob.zero_grad()
    for p, q in zip(sharded.full_parameters(), master.parameters()):
        assert p.dtype == torch.float32 and torch.equal(p, q)
    assert all(u.shard.dtype == torch.float32 for u in sharded.units)


def test_zero3_unsharded_parameters_are_stepped_whole_and_in_the_state_dict():
    a, b = make_mlp(), make_mlp()
    biases = [a[0].bias, a[2].bias, a[4].bias]
    sharded = ShardedModule(a, blocks=[a[0], a[2], a[4]], unsharded=biases)
    za = ZeroOptimizer(sharded, torch.optim.AdamW, stage=3, lr=1e-2, weight_decay=0.1)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1)
    assert [u.numel for u in sharded.units] == [21, 77, 143]  # weights only
    _train(sharded, za, 4)
    _train(b, ob, 4)
    assert all(p.numel() > 0 for p in biases)  # whole outside forward too
    for p, q in zip(sharded.full_parameters(), b.parameters()):
        assert torch.equal(p, q)
    sd, want = za.state_dict(), ob.state_dict()
    assert sd["state"].keys() == want["state"].keys()
    for i, st in want["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(sd["state"][i][k]), torch.as_tensor(v)), (i, k)
    c = make_mlp()
    again = ZeroOptimizer(ShardedModule(c, blocks=[c[0], c[2], c[4]], unsharded=[c[4].bias]),
                          torch.optim.AdamW, stage=3, lr=1e-2, weight_decay=0.1)
    again.load_state_dict(sd)  # another split: the state follows the parameters
    assert torch.equal(again.state_dict()["state"][5]["exp_avg"], want["state"][5]["exp_avg"])


@pytest.mark.parametrize("stage", [1, 2])
def test_loss_scaler_equals_torch_grad_scaler_and_skips_overflows(stage):
    from perfkit.parallel import ShardedLossScaler

    a, b = make_mlp(), make_mlp()
    za = ZeroOptimizer(a.parameters(), torch.optim.AdamW, stage=stage, bucket_cap_mb=1e-4, lr=1e-2)
    ob = torch.optim.AdamW(b.parameters(), lr=1e-2)
    ours = ShardedLossScaler(za, init_scale=2.0**8, growth_interval=2)
    theirs = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    stepped = []
    for s in range(6):
        x, y = global_batch(s)
        if s == 3:
            x[0, 0] = float("inf")  # an overflow: both skip the step and halve the scale
        for model, opt in ((a, za), (b, ob)):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            (ours if opt is za else theirs).scale(loss).backward()
        stepped.append(ours.step())
        theirs.step(ob)
        theirs.update()
        assert ours.scale_value == theirs.get_scale(), s
    assert stepped == [True, True, True, False, True, True]
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert {float(st["step"]) for st in za.state_dict()["state"].values()} == {5.0}
    again = ShardedLossScaler(za)
    again.load_state_dict(ours.state_dict())
    assert (again.scale_value, again.clean_steps) == (ours.scale_value, ours.clean_steps)
