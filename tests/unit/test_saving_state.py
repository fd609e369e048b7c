"""perfkit.saving.training_state and the Checkpointer on one process: a resumed run continues
bit for bit.

An uninterrupted float64 run with dropout (the RNG matters), an LR scheduler and a resumable
sampler is compared with one saved at step 4 and loaded into fresh objects built with
other seeds: every later loss, the parameters, the optimizer's moments, the learning rate
and the next random number are equal (``torch.equal``, ``==``), in sync and thread modes.
Planted wrong versions miss: no RNG restored, no sampler position, no scheduler.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from perfkit.saving import Checkpointer, ResumableSampler, TrainState, get_rng_state, set_rng_state

N, GLOBAL_BATCH = 40, 8


def build(seed: int):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)).double()
    o = torch.optim.AdamW(m.parameters(), lr=5e-2)
    sch = torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)
    return m, o, sch, ResumableSampler(N, GLOBAL_BATCH, seed=7)


DATA = torch.linspace(-1, 1, N * 4, dtype=torch.float64).reshape(N, 4)  # (N, 4)


def run(m, o, sch, sampler, st: TrainState, steps: int) -> list[float]:
    losses = []
    it = iter(sampler)
    for _ in range(steps):
        try:
            idx = next(it)
        except StopIteration:
            it = iter(sampler)
            idx = next(it)
        loss = m(DATA[idx]).pow(2).mean() + np.random.rand() * 0 + random.random() * 0
        loss.backward()
        o.step()
        o.zero_grad()
        sch.step()
        st.step += 1
        losses.append(loss.item())
    return losses


def state_of(m, o):
    return ([p.detach().clone() for p in m.parameters()],
            [t.clone() for s in o.state.values() for t in s.values() if torch.is_tensor(t)])


def equal(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("mode", ["sync", "thread"])
@pytest.mark.parametrize("plant", [None, "no-rng", "no-sampler", "no-scheduler"])
def test_resume_is_bit_exact_and_each_part_is_needed(tmp_path, mode, plant):
    m, o, sch, smp = build(0)
    st = TrainState(m, o, scheduler=sch, sampler=smp)
    run(m, o, sch, smp, st, 4)
    with Checkpointer(tmp_path, mode=mode) as ck:
        ck.save(st.step, st)
    ref = run(m, o, sch, smp, st, 7)  # crosses the epoch end (5 batches an epoch)
    ref_state, ref_lr, ref_draw = state_of(m, o), sch.get_last_lr(), torch.rand(3)

    m2, o2, sch2, smp2 = build(1)
    torch.manual_seed(99)  # another generator state than the saved one
    st2 = TrainState(m2, o2, scheduler=None if plant == "no-scheduler" else sch2,
                     sampler=None if plant == "no-sampler" else smp2)
    assert Checkpointer(tmp_path).load_latest(st2) == 4 and st2.step == 4
    assert st2.rng_restored
    if plant == "no-rng":
        torch.manual_seed(99)
    got = run(m2, o2, sch2, smp2, st2, 7)
    same = (got == ref and equal(state_of(m2, o2)[0], ref_state[0])
            and equal(state_of(m2, o2)[1], ref_state[1]) and sch2.get_last_lr() == ref_lr
            and torch.equal(torch.rand(3), ref_draw))
    assert same == (plant is None), f"{plant}: resumed run {'differs' if plant is None else 'matches'}"


def test_sampler_splits_each_global_batch_and_resumes_on_other_world_sizes():
    whole = [b for b in ResumableSampler(N, GLOBAL_BATCH, seed=3)]
    assert len(whole) == N // GLOBAL_BATCH and sorted(sum(whole, [])) == list(range(N))
    for world in (2, 4):
        ranks = [ResumableSampler(N, GLOBAL_BATCH, rank=r, world_size=world, seed=3) for r in range(world)]
        for b, parts in enumerate(zip(*ranks)):
            assert sorted(sum(parts, [])) == sorted(whole[b])
    # 2 batches in on 2 ranks, resumed on 4: the same global batches follow
    two = ResumableSampler(N, GLOBAL_BATCH, rank=0, world_size=2, seed=3)
    it = iter(two)
    next(it), next(it)
    sd = two.state_dict()
    assert sd == {"epoch": 0, "batch": 2, "seed": 3}
    four = [ResumableSampler(N, GLOBAL_BATCH, rank=r, world_size=4, seed=3) for r in range(4)]
    for s in four:
        s.load_state_dict(sd)
    rest = [sorted(sum(parts, [])) for parts in zip(*four)]
    assert rest == [sorted(b) for b in whole[2:]]
    assert all(s.state_dict() == {"epoch": 0, "batch": 5, "seed": 3} for s in four[:1])
    epoch1 = [b for b in four[0]]  # an epoch's end continues with the next epoch
    assert four[0].state_dict() == {"epoch": 1, "batch": 5, "seed": 3}
    assert epoch1 != [b for b in ResumableSampler(N, GLOBAL_BATCH, rank=0, world_size=4, seed=3)]
    with pytest.raises(ValueError, match="seed 3, this one 4"):
        ResumableSampler(N, GLOBAL_BATCH, seed=4).load_state_dict(sd)


def test_rng_state_round_trip():
    saved = get_rng_state()
    a = (torch.rand(2), np.random.rand(), random.random())
    set_rng_state(saved)
    b = (torch.rand(2), np.random.rand(), random.random())
    assert torch.equal(a[0], b[0]) and a[1:] == b[1:]


def test_a_rank_the_checkpoint_lacks_keeps_its_generators(tmp_path):
    m, o, sch, smp = build(0)
    with Checkpointer(tmp_path) as ck:
        ck.save(1, TrainState(m, o, rank=0))
    m2, o2, _, _ = build(1)
    st = TrainState(m2, o2, rank=3)
    torch.manual_seed(5)
    expect = torch.rand(2)
    torch.manual_seed(5)
    assert Checkpointer(tmp_path).load_latest(st) == 1 and not st.rng_restored
    assert torch.equal(torch.rand(2), expect)
    assert equal(state_of(m2, o2)[0], state_of(m, o)[0])


def test_stateful_parts_are_saved_as_given(tmp_path):
    class Counter:
        def __init__(self):
            self.n = torch.zeros(3, dtype=torch.float64)

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, sd):
            self.n.copy_(sd["n"])

    a = Counter()
    a.n += 2.5
    with Checkpointer(tmp_path) as ck:
        ck.save(1, TrainState(a))
    b = Counter()
    Checkpointer(tmp_path).load_latest(TrainState(b))
    assert torch.equal(b.n, a.n)


def test_the_loss_scaler_travels_with_the_state(tmp_path):
    m, o, _, _ = build(0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    for _ in range(3):  # each finite step doubles the scale: 8192 after 3
        scaler.scale(m(DATA[:4]).pow(2).mean()).backward()
        scaler.step(o)
        scaler.update()
        o.zero_grad()
    assert scaler.get_scale() == 8192.0
    with Checkpointer(tmp_path) as ck:
        ck.save(3, TrainState(m, o, scaler=scaler))
    m2, o2, _, _ = build(1)
    fresh = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=1)
    Checkpointer(tmp_path).load_latest(TrainState(m2, o2, scaler=fresh))
    assert fresh.get_scale() == 8192.0 and fresh.state_dict() == scaler.state_dict()
    disabled = torch.amp.GradScaler("cpu", enabled=False)  # its state is {}: not saved, no error
    with Checkpointer(tmp_path / "off") as ck:
        ck.save(1, TrainState(m, o, scaler=disabled))
    assert Checkpointer(tmp_path / "off").load_latest(TrainState(m2, o2, scaler=disabled)) == 1


def test_a_plain_models_checkpoint_uses_the_layouts_keys_and_refuses_another_model(tmp_path):
    # TrainState saves a torch module and optimizer through perfkit.saving.model_state /
    # optim_state: the keys a ZeRO, FSDP2 or TP job loads (a private 'weights' key did not)
    from perfkit.saving import CheckpointError

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    state = TrainState(model=model, optim=opt, step=1)
    assert {"model", "optim"} <= set(state.state_dict())
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, state)
    other = torch.nn.Linear(4, 5)  # a different model: the weight is (5, 4), not (3, 4)
    wrong = TrainState(model=other, optim=torch.optim.AdamW(other.parameters()), step=0)
    with pytest.raises(CheckpointError, match="weight"):
        Checkpointer(tmp_path, keep=1).load_latest(wrong)
    fresh = torch.nn.Linear(4, 3)
    again = TrainState(model=fresh, optim=torch.optim.AdamW(fresh.parameters()), step=0)
    assert Checkpointer(tmp_path, keep=1).load_latest(again) == 1
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)


def test_stopping_the_process_writer_reaps_it(monkeypatch):
    # DCP's writer object sends TERMINATE in its __del__; called by hand and then again at
    # collection, the second send hit a closed pipe (BrokenPipeError on stderr) unless the
    # writer was reaped in between
    from torch.distributed.checkpoint import _async_process_executor as executor

    from perfkit.saving import checkpointer

    events = []

    class Writer:
        alive = True

        def is_alive(self):
            return self.alive

        def join(self, timeout=None):
            events.append(("join", timeout))
            self.alive = False

        def kill(self):
            events.append("kill")

    class Proc:
        _save_process = Writer()

        def __del__(self):
            events.append("del")

    monkeypatch.setattr(executor, "_CHECKPOINT_PROCESS", Proc(), raising=False)
    checkpointer._stop_writer_process()
    assert executor._CHECKPOINT_PROCESS is None
    assert events[:2] == ["del", ("join", 5)] and "kill" not in events  # ended when asked: not killed
