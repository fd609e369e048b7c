"""Stage balancing for pipeline parallelism (perfkit.parallel.pipeline): exact, with clear errors."""

from __future__ import annotations

import itertools

import pytest
import torch

from perfkit.parallel.gpt import GPT, GPTConfig
from perfkit.parallel.pipeline import balance, build_stages, layer_costs, run_schedule
from perfkit.parallel.schedules import gpipe


def _brute(costs, k):
    """The smallest largest stage sum over every way to cut ``costs`` into ``k`` groups."""
    n, best = len(costs), float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0, *cuts, n)
        best = min(best, max(sum(costs[b[i]:b[i + 1]]) for i in range(k)))
    return best


@pytest.mark.parametrize("costs,k", [([1] * 6, 3), ([5, 1, 1, 1, 1, 5], 3), ([3, 1, 4, 1, 5, 9, 2, 6], 4),
                                     ([2, 7, 1, 8, 2, 8], 2), ([1, 2, 3], 3), ([7], 1)])
def test_balance_is_optimal(costs, k):
    sizes = balance(costs, k)
    assert len(sizes) == k and sum(sizes) == len(costs) and min(sizes) >= 1
    starts = [sum(sizes[:i]) for i in range(k)]
    worst = max(sum(costs[s:s + n]) for s, n in zip(starts, sizes))
    assert worst == _brute(costs, k)


def test_balance_by_params_and_by_time():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=512, block_size=8, n_embd=16, n_layer=4, n_head=2))
    params = layer_costs(model.layers(), "params")
    assert params == [float(sum(p.numel() for p in m.parameters())) for m in model.layers()]
    sizes, stages = build_stages(model.layers(), 3, "params")
    assert sizes[0] == 1 and sum(sizes) == 6   # the 512-row embedding outweighs two blocks
    assert [len(s) for s in stages] == sizes
    times = layer_costs(model.layers(), "time", torch.randint(512, (2, 8)), repeat=1)
    assert len(times) == 6 and all(t > 0 for t in times)


def test_layer_costs_warms_every_layer_before_timing_the_first():
    """A cold process runs its first passes slower: the first layer timed must not pay that."""
    order = []

    class Logged(torch.nn.Linear):
        def forward(self, x):
            order.append(self.i)
            return super().forward(x)

    layers = [Logged(4, 4) for _ in range(3)]
    for i, m in enumerate(layers):
        m.i = i
    times = layer_costs(layers, "time", torch.randn(2, 4), repeat=2)
    assert len(times) == 3
    assert order[:3] == [0, 1, 2]   # the untimed pass through every layer, in model order, first
    assert all(m.weight.grad is None for m in layers)   # it leaves no gradient behind
    order.clear()
    layer_costs(layers, "time", torch.randn(2, 4), repeat=2, warmup_passes=0)
    assert order[:3] == [0, 0, 0]   # without it the first layer is timed before the others ran


@pytest.mark.parametrize("call,exc,match", [
    (lambda: balance([1, 2], 3), ValueError, "cannot exceed the number of layers"),
    (lambda: layer_costs([torch.nn.Linear(2, 2)], "time", torch.ones(1, 2), warmup_passes=-1), ValueError,
     "warmup_passes must be an int >= 0"),
    (lambda: balance([], 1), ValueError, "costs"),
    (lambda: balance([1, -1], 1), ValueError, "costs"),
    (lambda: balance([1, float("nan")], 1), ValueError, "costs"),
    (lambda: balance([1, 2], 0), ValueError, "n_stages"),
    (lambda: layer_costs([torch.nn.Linear(2, 2)], "flops"), ValueError, "by"),
    (lambda: layer_costs([torch.nn.Linear(2, 2)], "time"), ValueError, "sample"),
    (lambda: layer_costs([], "params"), ValueError, "layers"),
    (lambda: run_schedule("gpipe", {}, None, None, None, (1,)), TypeError, "Schedule"),
])
def test_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_run_schedule_checks_stages_before_any_message(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    with pytest.raises(ValueError, match="exactly this rank's stages"):
        run_schedule(gpipe(2, 2), {1: torch.nn.Identity()}, None, None, None, (1,))
    with pytest.raises(ValueError, match="inputs must hold the 2"):
        run_schedule(gpipe(2, 2), {0: torch.nn.Identity()}, [torch.ones(1)], None, None, (1,))
    with pytest.raises(ValueError, match="pp_ranks"):
        run_schedule(gpipe(2, 2), {0: torch.nn.Identity()}, None, None, None, (1,), pp_ranks=[1, 2])


def test_hop_latency_recovers_the_simulated_latency():
    from perfkit.jobs.pipeline_bench import hop_latency
    from perfkit.parallel.schedules import one_f_one_b as ofob
    from perfkit.parallel.simulate import simulate

    sched = ofob(3, 6)
    for lat in (0.0, 0.25):
        tl = simulate(sched, {"F": 1, "B": 2}, latency=lat)
        rows = [[(x.action.kind, x.action.stage, x.action.mb, x.start, x.end) for x in row]
                for row in tl.slots]
        assert hop_latency(rows, sched) == pytest.approx(lat)


@pytest.mark.parametrize("call,exc,match", [
    (lambda b: b.bubbles(2, [("1f1b", 1)]), ValueError, "n_micro >= n_ranks"),
    (lambda b: b.bubbles(2, ["gpipe"]), TypeError, "pair"),
    (lambda b: b.bubbles(2, [("gpipe", 2)], t_f=-1), ValueError, "t_f"),
    (lambda b: b.memory(4, [2]), ValueError, "n_micros"),
    (lambda b: b.step_times(1), ValueError, "repeat"),
])
def test_bench_arguments_checked_before_launching(call, exc, match):
    from perfkit.jobs import pipeline_bench

    with pytest.raises(exc, match=match):
        call(pipeline_bench)


def test_split_backward_equals_the_whole_one():
    """ZB's I + W (Linear weight gradients from tapped inputs and output gradients) give the
    gradients of B, on a one-process group; and GPipe's peak saved bytes are m micro-batches'."""
    import torch.distributed as dist

    from perfkit.parallel.gpt import gpt_loss, split_layers
    from perfkit.parallel.schedules import one_f_one_b, zb_h1

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        cfg = GPTConfig(vocab_size=64, block_size=8, n_embd=16, n_layer=2, n_head=2)
        stage = split_layers(GPT(cfg).layers(), [4])[0]
        xs = [torch.randint(64, (2, 8)) for _ in range(3)]
        ys = [torch.randint(64, (2, 8)) for _ in range(3)]
        grads = {}
        for sched in (one_f_one_b(1, 3), zb_h1(1, 3), gpipe(1, 3)):
            stage.zero_grad(set_to_none=True)
            rec = run_schedule(sched, {0: stage}, xs, ys, gpt_loss, (2, 8, 16))
            grads[sched.name] = [q.grad.clone() for q in stage.parameters()]
            assert [k for k, *_ in rec.slots].count("W") == (3 if sched.name == "zb_h1" else 0)
        for a, b in zip(grads["1f1b"], grads["zb_h1"]):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
        assert rec.peak_saved_bytes == 3 * rec.saved_bytes["0.0"]   # GPipe, the last one run
    finally:
        dist.destroy_process_group()


def test_typical_step_is_the_one_nearest_the_median_not_the_last():
    from perfkit.jobs.pipeline_bench import typical_step

    shares = [0.20, 0.19, 0.21, 0.20, 0.27]   # the last step an outlier above the median's interval
    assert typical_step(shares) == 0          # 0.20 = the median; the earlier of the two
    assert typical_step([0.25, 0.75]) == 0 and typical_step([0.5]) == 0
    with pytest.raises(ValueError):
        typical_step([])


def test_record_draws_and_simulates_the_typical_step():
    from perfkit.jobs.pipeline_bench import _record
    from perfkit.parallel.schedules import one_f_one_b as ofob
    from perfkit.parallel.simulate import simulate

    def rows(cost_b):
        tl = simulate(ofob(2, 4), {"F": 1, "B": cost_b})
        return [[(x.action.kind, x.action.stage, x.action.mb, x.start, x.end) for x in row]
                for row in tl.slots]

    runs = [rows(2), rows(2), rows(2), rows(8)]   # the last step's backward four times forward's
    rec = _record("1f1b", 2, 4, runs)
    assert rec["drawn"] == 0 and rec["slots"] == runs[0]
    assert rec["simulated"] == pytest.approx(simulate(ofob(2, 4), {"F": 1, "B": 2}).bubble_share)
    # every step simulated with its own costs: a sample per step, not the drawn step's alone
    assert rec["simulated_each"] == pytest.approx([simulate(ofob(2, 4), {"F": 1, "B": b}).bubble_share
                                                   for b in (2, 2, 2, 8)])
    # each step's median time of each action kind, so action times need not come from the drawn step
    assert rec["actions"] == {"B": pytest.approx([2, 2, 2, 8]), "F": pytest.approx([1, 1, 1, 1])}
    for step, busy, share in zip(rec["step_s"], rec["busy_s"], rec["shares"]):
        assert step == pytest.approx(busy / (1 - share))   # step = busy per rank / (1 - bubble)


def test_bubble_task_alternates_schedules_on_the_same_stages():
    """``"schedules"``: rounds alternate A B, B A on one cut of the model, step i of each paired."""
    import torch.distributed as dist

    from perfkit.jobs.pipeline_parallel import run

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        (rec,) = run({"tasks": [{"task": "bubble", "schedules": ["1f1b", "zb_h1"], "n_micro": 2,
                                 "steps": 3, "real": True, "balance": "time"}]})
        assert set(rec["slots"]) == {"1f1b", "zb_h1"}
        assert [len(v) for v in rec["slots"].values()] == [3, 3]
        firsts = {k: [step[0][0][3] for step in v] for k, v in rec["slots"].items()}   # rank 0's first start
        # round 0: 1F1B first; round 1: ZB-H1 first; round 2: 1F1B first
        assert [a < b for a, b in zip(firsts["1f1b"], firsts["zb_h1"])] == [True, False, True]
        assert all(k != "W" for steps in rec["slots"]["1f1b"] for k, *_ in steps[0])
        assert any(k == "W" for k, *_ in rec["slots"]["zb_h1"][0][0])
        # the cut's own layer times come back, timed before the steps: one per layer, one stage here
        assert rec["sizes"] == [len(rec["layer_costs"])] and min(rec["layer_costs"]) > 0
    finally:
        dist.destroy_process_group()
