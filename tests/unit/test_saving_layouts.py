"""perfkit.saving.layouts in one process: the boxes a flat range covers, a save and a load
through DCP without a process group for a plain model, ZeRO-2 and ZeRO-3 (one rank: every
piece whole), an optimizer's state created without moving a bit, whole tensors loaded into
a layout's template, and the errors a different model meets, naming the parameter.

The chunks themselves (a ``DTensor`` holding boxes at offsets) are built here on a one-rank
gloo group; several ranks: tests/distributed/test_saving_reshard.py.
"""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from perfkit.parallel import ShardedModule, ZeroOptimizer
from perfkit.saving import check_loadable, model_state, optim_state
from perfkit.saving._chunks import boxes, chunked, copy_into, shards_of

SHAPES = [(10,), (4, 5), (2, 3, 4), (3, 2, 2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_boxes_cover_a_flat_range_in_memory_order(shape):
    numel = math.prod(shape)
    index = torch.arange(numel).view(shape)
    for lo, hi in itertools.combinations(range(numel + 1), 2):
        bs = boxes(lo, hi, shape)
        assert len(bs) <= 2 * (len(shape) - 1) + 1
        got = torch.cat([index[tuple(slice(o, o + s) for o, s in zip(off, size, strict=True))]
                         .reshape(-1) for off, size in bs])
        assert torch.equal(got, torch.arange(lo, hi)), (lo, hi, bs)  # contiguous, in order
    assert boxes(3, 3, shape) == []


def test_boxes_of_the_documented_example():
    assert boxes(7, 18, (4, 5)) == [((1, 2), (1, 3)), ((2, 0), (1, 5)), ((3, 0), (1, 3))]


def mlp(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()


def build(kind: str, seed: int):
    m = mlp(seed)
    if kind == "plain":
        return m, torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.1)
    if kind == "zero2":
        return m, ZeroOptimizer(m.parameters(), torch.optim.AdamW, stage=2, lr=0.1,
                                weight_decay=0.1)
    s = ShardedModule(m, [m[0]])
    return s, ZeroOptimizer(s, torch.optim.AdamW, stage=3, lr=0.1, weight_decay=0.1)


X = torch.linspace(-1, 1, 15, dtype=torch.float64).view(5, 3)


def step(model, opt) -> float:
    loss = model(X).square().sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return float(loss.detach())


def save(state, path):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.save(state, checkpoint_id=path, no_dist=True)


def load(state, path):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
        dcp.load(state, checkpoint_id=path, no_dist=True)


@pytest.mark.parametrize("kind", ["plain", "zero2", "zero3"])
def test_resume_in_one_process_is_bit_exact(tmp_path, kind):
    model, opt = build(kind, 0)
    for _ in range(2):
        step(model, opt)
    save({"model": model_state(model), "optim": optim_state(opt, model)}, tmp_path)
    ref = [step(model, opt) for _ in range(3)]
    model2, opt2 = build(kind, 1)
    with torch.no_grad():
        fresh = float(model2(X).square().sum())  # other weights
    load({"model": model_state(model2), "optim": optim_state(opt2, model2)}, tmp_path)
    assert fresh != ref[0]
    assert [step(model2, opt2) for _ in range(3)] == ref


@pytest.mark.parametrize("kind", ["plain", "zero2", "zero3"])
def test_every_layout_loads_into_a_plain_model_and_back(tmp_path, kind):
    model, opt = build(kind, 0)
    step(model, opt)
    save({"model": model_state(model), "optim": optim_state(opt, model)}, tmp_path)
    ref = [step(model, opt) for _ in range(2)]
    plain, popt = build("plain", 1)
    load({"model": model_state(plain), "optim": optim_state(popt, plain)}, tmp_path)
    assert [step(plain, popt) for _ in range(2)] == ref
    # and back: the plain model's checkpoint into this layout
    save({"model": model_state(plain), "optim": optim_state(popt, plain)}, tmp_path / "back")
    ref = [step(plain, popt) for _ in range(2)]
    model2, opt2 = build(kind, 2)
    load({"model": model_state(model2), "optim": optim_state(opt2, model2)}, tmp_path / "back")
    assert [step(model2, opt2) for _ in range(2)] == ref


def test_a_fresh_optimizers_state_is_created_without_moving_a_bit():
    m = mlp(0)
    before = [p.detach().clone() for p in m.parameters()]
    opt = torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5)
    sd = optim_state(opt, m).state_dict()
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters(), strict=True))
    assert set(sd["state"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert sd["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert opt.param_groups[0]["lr"] == 0.1


def test_zero3_loads_whole_tensors_into_its_shards():
    ref, ropt = build("plain", 0)
    step(ref, ropt)
    model, opt = build("zero3", 1)
    model_state(model).load_state_dict(dict(ref.state_dict()))
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    optim_state(opt, model).load_state_dict(get_optimizer_state_dict(ref, ropt))
    assert [step(model, opt) for _ in range(2)] == [step(ref, ropt) for _ in range(2)]


def test_a_different_model_is_refused_naming_the_parameter(tmp_path):
    model, opt = build("plain", 0)
    save({"model": model_state(model), "optim": optim_state(opt, model)}, tmp_path)
    wider = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).double()
    # DCP's CheckpointException derives from BaseException, not Exception
    with pytest.raises(CheckpointException, match=r"\(\[4, 3\]\).*\(\[5, 3\]\) for model\.0\.weight"):
        load({"model": model_state(wider)}, tmp_path)
    deeper = nn.Sequential(*mlp(0), nn.Linear(2, 2)).double()
    with pytest.raises(CheckpointException, match=r"Missing key in checkpoint state_dict: model\.3\."):
        load({"model": model_state(deeper)}, tmp_path)
    with pytest.raises(ValueError, match=r"model\.0\.weight: the checkpoint holds shape \(4, 3\), "
                       r"this layout \(5, 3\)"):
        check_loadable(tmp_path, {"model": model_state(wider)})
    with pytest.raises(ValueError, match=r"model\.3\.(weight|bias): not in checkpoint"):
        check_loadable(tmp_path, {"model": model_state(deeper)})
    check_loadable(tmp_path, {"model": model_state(mlp(1)), "optim": optim_state(opt, model)})
    with pytest.raises(ValueError, match=r"0\.weight: saved shape \(5, 3\), this layout's \(4, 3\)"):
        model_state(mlp(0)).load_state_dict(dict(wider.state_dict()))
    with pytest.raises(ValueError, match=r"lacks \['3\.bias', '3\.weight'\]"):
        model_state(deeper).load_state_dict(dict(mlp(0).state_dict()))
    other = torch.optim.AdamW([{"params": [model[0].weight]}, {"params": [model[0].bias,
                                                                          model[2].weight,
                                                                          model[2].bias]}])
    with pytest.raises(ValueError, match="param groups"):
        optim_state(other, model).load_state_dict(optim_state(opt, model).state_dict())


def test_layout_description_for_the_manifest():
    model, opt = build("zero3", 0)
    assert model_state(model).layout == {"kind": "sharded", "world_size": 1, "tp": 1,
                                         "reshardable": True}
    assert optim_state(opt, model).kind == "zero3"


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    from torch.distributed.device_mesh import DeviceMesh

    yield DeviceMesh.from_group(dist.group.WORLD, "cpu")
    dist.destroy_process_group()


def test_chunked_tensor_holds_its_boxes_at_their_offsets(one_rank):
    full = torch.arange(40, dtype=torch.float64).view(4, 10)
    flat = full.reshape(-1)[7:18].clone()  # (11,): elements 7..17 of this rank's (2, 10) block
    t = chunked([(flat, 7, 18)], (4, 5), (1, 5, 10), one_rank)  # the block's columns 5..9
    assert tuple(t.shape) == (4, 10)
    got = [(tuple(v.shape), o) for v, o in shards_of(t)]
    assert got == [((1, 3), (1, 7)), ((1, 5), (2, 5)), ((1, 3), (3, 5))]
    assert all(v.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr()
               for v, _ in shards_of(t))  # views: DCP loads into the rank's own memory
    copy_into("w", t, full)  # whole tensor -> the boxes
    assert torch.equal(flat[:3], full[1, 7:10]) and torch.equal(flat[3:8], full[2, 5:10])
    with pytest.raises(ValueError, match=r"w: saved shape \(4, 9\)"):
        copy_into("w", t, full[:, :9])
