"""Clipping, ShardedModule's state dict and DDP's bucket sizes on one process (the
multi-process checks are in tests/distributed/test_zero_clip_state_dist.py)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

from perfkit.parallel import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    BucketedDP,
    MixedPrecision,
    ShardedLossScaler,
    ShardedModule,
    ZeroOptimizer,
    clip_grad_norm_,
)
from tools.labs.zero_check import PartialMLP, blocks_of, extra_rows, global_batch


def _with_grads(seed: int, shapes=((5,), (3, 4), (2,))) -> list[nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    ps = [nn.Parameter(torch.randn(*s, generator=g)) for s in shapes]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    return ps


@pytest.mark.parametrize("norm_type", [2.0, math.inf, 1.0, 3.5])
@pytest.mark.parametrize("max_norm", [0.1, 100.0])  # clipping and not clipping
def test_clip_grad_norm_equals_torch_on_one_process(norm_type, max_norm):
    ours, theirs = _with_grads(0), _with_grads(0)
    ours[1].grad = theirs[1].grad = None  # skipped, as torch skips it
    got = clip_grad_norm_(ours[:2], max_norm, norm_type, replicated=ours[2:])
    want = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    assert got.dtype == want.dtype and float(got) == pytest.approx(float(want), rel=1e-6)
    for p, q in zip(ours, theirs, strict=True):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-6, atol=0)


def test_clip_grad_norm_accumulates_in_float64():
    # one gradient of norm 1 and 2000 slices of norm 1e-4, as ZeRO's many small pieces: a
    # float32 running sum of squares rounds 1 + 1e-8 back to 1 every time (norm 1.0); the
    # float64 sum keeps them (norm sqrt(1 + 2e-5) = 1.00001)
    ps = [nn.Parameter(torch.zeros(1)) for _ in range(2001)]
    for i, p in enumerate(ps):
        p.grad = torch.full((1,), 1.0 if i == 0 else 1e-4)
    exact = math.sqrt(1.0 + 2000 * float(torch.tensor(1e-4)) ** 2)
    assert float(clip_grad_norm_(ps, math.inf)) == pytest.approx(exact, rel=1e-7)


def test_clip_grad_norm_refuses_a_nonfinite_norm_when_asked():
    ps = _with_grads(1)
    ps[0].grad[0] = math.nan
    with pytest.raises(RuntimeError, match="total norm .* nan"):
        clip_grad_norm_(ps, 1.0, error_if_nonfinite=True)


def _train(stage: int, clip: str, steps: int = 6, scaler: bool = False) -> list[torch.Tensor]:
    """PartialMLP (float64) on the global batch, one process: ZeroOptimizer clipped by its
    accessor, or plain SGD clipped by torch (``clip="torch_plain"``)."""
    model = PartialMLP().double()
    kw = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.1}
    if clip == "torch_plain":
        net, opt = model, torch.optim.SGD(model.parameters(), **kw)
    elif stage == 3:
        net = ShardedModule(model, blocks=blocks_of(model), unsharded=[model.mlp[4].bias])
        opt = ZeroOptimizer(net, torch.optim.SGD, stage=3, **kw)
    else:
        net, opt = model, ZeroOptimizer(model.parameters(), torch.optim.SGD, stage=stage,
                                        bucket_cap_mb=200 / 2**20, module=model, **kw)
    for s in range(steps):
        x, y = global_batch(s)
        model.mask = extra_rows(s, 1)
        opt.zero_grad()
        nn.functional.mse_loss(net(x.double()), y.double()).backward()
        if clip == "torch_plain":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        else:
            opt.clip_grad_norm_(0.25)
        opt.step()
    if isinstance(opt, ZeroOptimizer):
        opt.wait_params()
    return net.full_parameters() if stage == 3 and clip != "torch_plain" else [
        p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_optimizer_clip_equals_torch_clip_on_one_process(stage):
    want = _train(stage, "torch_plain")
    for p, q in zip(_train(stage, "ours"), want, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-12)


def _backward(model: nn.Module, step: int = 0) -> None:
    x, y = global_batch(step)
    nn.functional.mse_loss(model(x), y).backward()


def test_stage_1_raises_when_torch_clips_gradients_already_reduced():
    model = PartialMLP()
    opt = ZeroOptimizer(model.parameters(), torch.optim.SGD, stage=1, module=model, lr=0.1)
    _backward(model)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)  # clips the bucket, too late
    with pytest.raises(RuntimeError, match="ZeroOptimizer.clip_grad_norm_"):
        opt.step()
    opt.zero_grad()  # usable again: the next step, clipped the right way, goes through
    _backward(model, 1)
    assert float(opt.clip_grad_norm_(1e-3)) > 1e-3
    opt.step()


def _zero(stage: int, model: nn.Module) -> tuple[nn.Module, ZeroOptimizer]:
    if stage == 3:
        net = ShardedModule(model, blocks=blocks_of(model), unsharded=[model.mlp[4].bias])
        return net, ZeroOptimizer(net, torch.optim.SGD, stage=3, lr=0.1)
    return model, ZeroOptimizer(model.parameters(), torch.optim.SGD, stage=stage, module=model,
                                lr=0.1)


@pytest.mark.parametrize("stage", [2, 3])
def test_torch_clip_at_stages_2_and_3_raises_until_the_step_clears_the_marker(stage):
    """Between backward and the step every sharded parameter's ``.grad`` is a
    ShardedGradient: torch's clip raises naming the accessor (planted ``p.grad = None``:
    torch returned 0 and clipped nothing); ``step()`` and ``zero_grad(set_to_none=False)``
    clear it (planted: a marker left after the step makes the next backward raise)."""
    from perfkit.parallel import ShardedGradient

    model = PartialMLP()
    net, opt = _zero(stage, model)
    _backward(net)
    marked = [p for p in model.parameters() if isinstance(p.grad, ShardedGradient)]
    plain = [p for p in model.parameters() if p.grad is not None and not isinstance(p.grad, ShardedGradient)]
    assert len(marked) >= 5 and [id(p) for p in plain] == ([id(model.mlp[4].bias)] if stage == 3
                                                            else []), plain
    assert all(isinstance(p.grad, ShardedGradient) and p.grad.stage == stage for p in marked)
    assert "ZeroOptimizer's slices" in repr(marked[0].grad)
    with pytest.raises(RuntimeError, match=rf"ZeRO stage {stage} .*ZeroOptimizer\.clip_grad_norm_"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with pytest.raises(RuntimeError, match="ShardedGradient"):
        float(marked[0].grad.norm())  # a gradient-norm log cannot read zeros either
    assert float(opt.clip_grad_norm_(1e-3)) > 1e-3
    opt.step()
    assert all(p.grad is None for p in marked)  # stage 3's unsharded bias keeps its own
    for step, set_to_none in enumerate((False, True), 1):  # the next steps go through
        _backward(net, step)
        opt.zero_grad(set_to_none=set_to_none)  # the markers hold nothing to zero
        assert not any(isinstance(p.grad, ShardedGradient) for p in model.parameters())
        opt.step()


def test_the_marker_holds_no_bytes_in_the_model_state_count():
    from perfkit.memory.model_states import storage_bytes
    from perfkit.parallel import ShardedGradient

    p = nn.Parameter(torch.zeros(1000))
    assert storage_bytes([ShardedGradient(p, 2), torch.zeros(10)]) == 40


def test_stage_1_without_overlap_lets_gradients_be_scaled_before_the_step():
    model = PartialMLP()
    opt = ZeroOptimizer(model.parameters(), torch.optim.SGD, stage=1, overlap=False, lr=0.1)
    _backward(model)
    for p in model.parameters():  # reduced in step(): a change here is seen, not refused
        if p.grad is not None:
            p.grad.mul_(0.5)
    opt.step()


@pytest.mark.parametrize("stage", [1, 2])
def test_loss_scaler_unscales_once_before_clipping(stage):
    a, b = PartialMLP(), PartialMLP()
    za = ZeroOptimizer(a.parameters(), torch.optim.SGD, stage=stage, lr=0.1, momentum=0.9)
    ob = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    ours = ShardedLossScaler(za, init_scale=2.0**8, growth_interval=2)
    theirs = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)
    for s in range(4):
        x, y = global_batch(s)
        for model, opt, sc in ((a, za, ours), (b, ob, theirs)):
            opt.zero_grad()
            sc.scale(nn.functional.mse_loss(model(x), y)).backward()
        assert ours.unscale_() is False and ours.unscale_() is False  # once per step
        theirs.unscale_(ob)
        n_ours = za.clip_grad_norm_(0.1)
        n_theirs = torch.nn.utils.clip_grad_norm_(b.parameters(), 0.1)
        assert float(n_ours) == pytest.approx(float(n_theirs), rel=1e-6)
        assert ours.step()
        theirs.step(ob)
        theirs.update()
    za.wait_params()
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-7)


# --- ShardedModule's state dict ------------------------------------------------------------

def _sharded(seed: int, **kw) -> tuple[ShardedModule, PartialMLP]:
    model = PartialMLP(seed)
    return ShardedModule(model, blocks=blocks_of(model), **kw), model


def test_state_dict_holds_whole_parameters_and_loads_into_plain_and_sharded_models():
    net, model = _sharded(0)
    want = {n: p.detach().clone() for n, p in zip(
        [n for n, _ in model.named_parameters()], net.full_parameters(), strict=True)}
    sd = net.state_dict()
    assert sd.keys() == {f"module.{n}" for n in want}
    assert all(torch.equal(sd[f"module.{n}"], v) for n, v in want.items())
    inner = net.module.state_dict()  # the wrapped module's own keys, whole too
    assert all(torch.equal(inner[n], v) for n, v in want.items())
    plain = PartialMLP(1)
    plain.load_state_dict(inner)
    assert all(torch.equal(p, want[n]) for n, p in plain.named_parameters())
    other, _ = _sharded(1)
    assert str(other.load_state_dict(sd)) == "<All keys matched successfully>"
    assert all(torch.equal(p, q) for p, q in zip(other.full_parameters(), want.values()))
    again, _ = _sharded(2)
    again.module.load_state_dict(PartialMLP(0).state_dict())  # a plain model's state
    assert all(torch.equal(p, q) for p, q in zip(again.full_parameters(), want.values()))


def test_a_model_holding_a_sharded_module_saves_and_loads_it_whole():
    outer = nn.ModuleDict({"net": _sharded(0)[0], "head": nn.Linear(2, 2)})
    sd = outer.state_dict()
    assert sd["net.module.mlp.0.weight"].shape == (11, 13)
    fresh = nn.ModuleDict({"net": _sharded(1)[0], "head": nn.Linear(2, 2)})
    fresh.load_state_dict(sd)
    assert all(torch.equal(p, q) for p, q in zip(fresh["net"].full_parameters(),
                                                 outer["net"].full_parameters()))


def test_state_dict_after_training_resumes_bit_for_bit():
    def run(net, model, opt, steps):
        for s in steps:
            x, y = global_batch(s)
            model.mask = extra_rows(s, 1)
            opt.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()

    net, model = _sharded(0)
    opt = ZeroOptimizer(net, torch.optim.AdamW, stage=3, lr=1e-2)
    run(net, model, opt, range(3))
    sd, osd = net.state_dict(), opt.state_dict()
    run(net, model, opt, range(3, 6))
    fresh, fresh_model = _sharded(1)
    fresh_opt = ZeroOptimizer(fresh, torch.optim.AdamW, stage=3, lr=1e-2)
    fresh.load_state_dict(sd)
    fresh_opt.load_state_dict(osd)
    run(fresh, fresh_model, fresh_opt, range(3, 6))
    assert all(torch.equal(p, q) for p, q in zip(fresh.full_parameters(), net.full_parameters()))


def test_mixed_precision_state_is_in_the_shards_dtype():
    net, _ = _sharded(0, mixed_precision=MixedPrecision(torch.bfloat16))
    assert {v.dtype for v in net.state_dict().values()} == {torch.float32}


def test_load_refuses_empty_tensors_wrong_shapes_and_assign_and_keeps_shards_on_refusal():
    net, _ = _sharded(0)
    sd = net.state_dict()
    before = net.full_parameters()
    empty = {k: (torch.empty(0) if k != "module.frozen" else v) for k, v in sd.items()}
    with pytest.raises(ValueError, match=r"'module.mlp.0.weight'\] is an empty tensor .* \(11, 13\)"):
        net.load_state_dict(empty)
    bad = dict(sd, **{"module.mlp.2.bias": torch.zeros(8)})
    with pytest.raises(ValueError, match=r"'module.mlp.2.bias'\] has shape \(8,\), the parameter"):
        net.load_state_dict(bad)
    with pytest.raises(ValueError, match="assign=True"):
        net.load_state_dict(sd, assign=True)
    with pytest.raises(TypeError, match="must be a tensor"):
        net.load_state_dict(dict(sd, **{"module.mlp.4.bias": [0.0, 0.0, 0.0]}))
    assert all(torch.equal(p, q) for p, q in zip(net.full_parameters(), before))


def test_missing_keys_are_reported_and_keep_their_values():
    net, _ = _sharded(0)
    sd = net.state_dict()
    before = net.full_parameters()
    other, _ = _sharded(1)
    partial = {k: v for k, v in other.state_dict().items() if k != "module.mlp.0.bias"}
    keys = net.load_state_dict(partial, strict=False)
    assert keys.missing_keys == ["module.mlp.0.bias"]
    after = dict(zip(sd, net.full_parameters()))
    assert torch.equal(after["module.mlp.0.bias"], before[list(sd).index("module.mlp.0.bias")])
    assert torch.equal(after["module.mlp.0.weight"], partial["module.mlp.0.weight"])


def test_a_submodule_refuses_its_own_state_dict():
    net, model = _sharded(0)
    with pytest.raises(RuntimeError, match="submodule 'mlp.0' .* empty tensors"):
        model.mlp[0].state_dict()
    assert model.mlp[1].state_dict() == {}  # no parameters: nothing to refuse


# --- DDP's bucket sizes ----------------------------------------------------------------------

@pytest.fixture
def one_process_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model() -> nn.Module:
    torch.manual_seed(0)  # 0.5, 1.5, 10.5, 10.5, 9 and 0.4 MiB of weights
    return nn.Sequential(nn.Linear(512, 256, bias=False), nn.Linear(256, 1536, bias=False),
                         nn.Linear(1536, 1792), nn.Linear(1792, 1536), nn.Linear(1536, 1536),
                         nn.Linear(1536, 64))


def _ddp_buckets(**kw) -> list[int]:
    """Bytes of each of DDP's buckets once it rebuilt them (in its second iteration)."""
    ddp = nn.parallel.DistributedDataParallel(_model(), **kw)
    for _ in range(3):
        ddp(torch.randn(2, 512)).sum().backward()
    return [int(b) for b in ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"].split(", ")]


def _dp_buckets(**kw) -> list[int]:
    dp = BucketedDP(_model(), **kw)
    return [sum(dp.params[i].numel() * 4 for i in b) for b in dp.buckets]


def _zero_buckets(**kw) -> list[int]:
    return [b.numel * 4 for b in ZeroOptimizer(list(_model().parameters()), torch.optim.SGD,
                                              lr=0.1, **kw).buckets]


def test_default_buckets_are_ddps(one_process_group):
    assert (DDP_BUCKET_CAP_BYTES, DDP_FIRST_BUCKET_BYTES) == (25 * 2**20, 2**20)
    ddp = _ddp_buckets()
    assert ddp == [9836800, 24130560]  # the first closed past 1 MiB, the second at 25
    assert _dp_buckets() == ddp
    assert _zero_buckets(stage=1) == _zero_buckets(stage=2) == ddp
    # a cap given explicitly holds for the first bucket too, as DDP's does
    explicit = _ddp_buckets(bucket_cap_mb=12)
    assert explicit == [20852992, 12590080, 524288], explicit
    assert _dp_buckets(bucket_cap_mb=12) == _zero_buckets(stage=2, bucket_cap_mb=12) == explicit
