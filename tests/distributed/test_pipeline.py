"""perfkit's pipeline schedules on 2, 3 and 4 torchrun processes against the unsplit model and
torch.distributed.pipelining.

One launch per world size runs every check (torchrun start-up dominates on 2 cores).
Tolerances: SGD with momentum, fp32, 5 steps: per parameter max |p - p_ref| / max |p_ref|
<= 1e-5, and <= 1e-9 absolute for the key biases, whose exact gradient is zero so that they
hold only rounding noise (see ``perfkit.jobs.pipeline_parallel._diffs``); what differs from
the unsplit model is only the order of the micro-batch gradient sums. AdamW: the loss curves
within 1e-5 (Adam's update magnifies rounding near zero gradients, so its parameters are not
compared element-wise).
Activation memory is counted exactly (saved-for-backward bytes), so it is compared exactly.
"""

from __future__ import annotations

import json

import pytest

from perfkit import dist
from perfkit.parallel.schedules import make_schedule
from perfkit.parallel.simulate import timeline_from

pytestmark = pytest.mark.distributed
TOL = 1e-5
SCHEDS = [("gpipe", 1), ("1f1b", 1), ("zb_h1", 1), ("interleaved", 2)]


def _eq(schedule, m, **kw):
    return {"task": "equal", "schedule": schedule, "n_micro": m, **kw}


TWO = [*(_eq(s, 4, n_virtual=v) for s, v in SCHEDS),                       # 0-3
       _eq("1f1b", 4, optimizer="adamw"), _eq("gpipe", 8, steps=1),          # 4, 5 (m = 4p)
       _eq("1f1b", 8, steps=1),                                              # 6
       {"task": "torch", "schedule": "gpipe", "n_micro": 4},                 # 7-9
       {"task": "torch", "schedule": "1f1b", "n_micro": 4},
       {"task": "torch", "schedule": "interleaved", "n_micro": 4, "n_virtual": 2, "may_fail": True},
       {"task": "bubble", "schedule": "1f1b", "n_micro": 4, "t_f": 0.01, "t_b": 0.02,
        "steps": 1},                                                          # 10
       {"task": "deadlock", "timeout_s": 2.0}]                               # 11, last
FIVE_LAYERS = {"n_layer": 5}   # 7 layers on 3 ranks: uneven stages
THREE = [_eq("gpipe", 3, model=FIVE_LAYERS), _eq("1f1b", 3, model=FIVE_LAYERS),
         _eq("zb_h1", 6, model=FIVE_LAYERS), _eq("interleaved", 3, n_virtual=2, model=FIVE_LAYERS),
         _eq("1f1b", 3, optimizer="adamw", model=FIVE_LAYERS),
         {"task": "torch", "schedule": "1f1b", "n_micro": 3, "model": FIVE_LAYERS}]
FOUR = [_eq("1f1b", 4, dp=2), _eq("gpipe", 2, dp=2, optimizer="adamw"),     # DP x PP 2 x 2
        _eq("1f1b", 4), _eq("interleaved", 4, n_virtual=2, model={"n_layer": 6})]


@pytest.fixture(scope="module")
def jobs():
    def go(n, tasks):
        return dist.launch("perfkit.jobs.pipeline_parallel", n,
                           ["--config", json.dumps({"tasks": tasks})], timeout_s=240)
    return {2: go(2, TWO), 3: go(3, THREE), 4: go(4, FOUR)}


def _check_equal(per_rank, optimizer="sgd"):
    if optimizer == "sgd":
        for r in per_rank:
            assert r["max_rel_diff"] <= TOL and r["zero_abs_diff"] <= 1e-9, r
    losses = [r for r in per_rank if r["losses"][0] is not None]
    assert losses, "no rank holds the last stage"
    for r in losses:
        assert max(abs(a - b) for a, b in zip(r["losses"], r["ref_losses"])) <= TOL, r


@pytest.mark.parametrize("world,idx,optimizer", [
    *((2, i, "sgd") for i in range(4)), (2, 4, "adamw"),
    *((3, i, "sgd") for i in range(4)), (3, 4, "adamw"),
    (4, 0, "sgd"), (4, 1, "adamw"), (4, 2, "sgd"), (4, 3, "sgd")])
def test_every_schedule_equals_the_unsplit_model(jobs, world, idx, optimizer):
    per_rank = [r[idx] for r in jobs[world]]
    _check_equal(per_rank, optimizer)
    # every parameter tensor of the model is on exactly one pipeline rank per dp replica:
    # embeddings 2, 16 per block, final norm and head 3
    task = {2: TWO, 3: THREE, 4: FOUR}[world][idx]
    n_layer = task.get("model", {}).get("n_layer", 4)
    assert sum(r["n_params"] for r in per_rank) == (5 + 16 * n_layer) * task.get("dp", 1)


def test_uneven_stages_on_three(jobs):
    sizes = jobs[3][0][0]["sizes"]
    assert sum(sizes) == 7 and len(sizes) == 3 and len(set(sizes)) > 1
    assert jobs[3][0][3]["sizes"] and len(jobs[3][0][3]["sizes"]) == 6


@pytest.mark.parametrize("world,idx", [(2, 7), (2, 8), (3, 5)])
def test_torch_pipelining_gives_the_same_numbers(jobs, world, idx):
    _check_equal([r[idx] for r in jobs[world]])


def test_torch_interleaved_on_gloo(jobs):
    per_rank = [r[9] for r in jobs[2]]
    if "error" in per_rank[0]:
        pytest.skip(f"ScheduleInterleaved1F1B refused on gloo: {per_rank[0]['error']}")
    _check_equal(per_rank)


def test_activation_memory_counted_exactly(jobs):
    p = 2
    for m, gp_idx, one_idx in ((4, 0, 1), (8, 5, 6)):
        for r in range(p):
            gp, one = jobs[2][r][gp_idx], jobs[2][r][one_idx]
            per_mb = set(gp["saved_bytes"].values())
            assert len(per_mb) == 1 and set(one["saved_bytes"].values()) == per_mb
            (b,) = per_mb
            assert gp["peak_saved_bytes"] == m * b          # AFAB holds all m micro-batches
            assert one["peak_saved_bytes"] == (p - r) * b   # 1F1B: p - r on rank r
            assert one["peak_saved_bytes"] <= p / m * gp["peak_saved_bytes"]
    zb = [jobs[2][r][2] for r in range(p)]                  # ZB-H1 frees at W: p on every rank
    assert [z["peak_saved_bytes"] for z in zb] == [p * set(z["saved_bytes"].values()).pop()
                                                   for z in zb]


def test_measured_timeline_follows_the_schedule(jobs):
    rows = jobs[2][0][10]["slots"][0]
    tl = timeline_from(make_schedule("1f1b", 2, 4), rows)   # raises if the order differs
    end = {(k, s, j): t1 for row in rows for k, s, j, _, t1 in row}
    for k, _, j, t0, _ in rows[1]:
        if k == "F":   # stage 1 computes a micro-batch only after stage 0 sent it
            assert t0 >= end[("F", 0, j)]
    for k, _, j, t0, _ in rows[0]:
        if k == "B":
            assert t0 >= end[("B", 1, j)]
    assert 0 < tl.bubble_share < 1


def test_hanging_order_times_out_with_a_message(jobs):
    for r in jobs[2]:
        d = r[11]
        assert d["error"] and "waited past timeout_s=2.0" in d["error"], d
        assert d["waited_s"] < 30
