"""What real training needs from the ZeRO family, on 2 and 3 torchrun processes
(tests/distributed/_zero_clip_state_worker.py).

Clipping: ``ZeroOptimizer.clip_grad_norm_`` at stages 1-3 against DDP +
``torch.nn.utils.clip_grad_norm_`` in float64, with a frozen tensor and a layer without a
gradient on some ranks (or all) in some steps. Tolerances: the norm within 1e-6 relative
(measured: 3e-16), the parameters after each of 8 clipped steps within 1e-10 (measured:
6e-17 to 8e-17; only the order of the gradient sums differs). ``max_norm`` lies below every
step's norm, and unclipped training ends over 1 away, so a clip without effect cannot pass.
Each planted wrong version (torch's function on the ZeRO model, on one rank's slices, the
unsharded parameters counted on every rank) misses by orders of magnitude more. Tensor
parallelism (and sequence parallelism) the same way against the unsplit GPT clipped by
torch: 15 replicated tensors counted once (measured 2e-16 on the norm, 5e-17 on the
parameters); counted on every rank they miss by 23% on the norm.

State: ``ShardedModule.state_dict()`` saved after 4 steps, loaded into a fresh module with
other initial weights: its parameters, the 4 following losses and the final parameters
equal the uninterrupted run's bit for bit, on 2 ranks and on 3 (uneven shards); the 2-rank
file loads on 3 ranks exactly. The old behaviour, planted (empty tensors that load "with
all keys matched"), fails the same checks and the new ``load_state_dict`` refuses it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
WORKER = str(Path(__file__).with_name("_zero_clip_state_worker.py"))
NORM_TOL, PARAM_TOL = 1e-6, 1e-10
OURS = ["1-sgd-2.0", "1-sgd-inf", "2-sgd-2.0", "2-sgd-inf", "2-adamw-2.0", "3-sgd-2.0",
        "3-sgd-inf"]


@pytest.fixture(scope="module")
def clip():
    return {n: dist.launch(WORKER, n, ["--case", "clip"], timeout_s=300) for n in (2, 3)}


@pytest.fixture(scope="module")
def tp():
    return {n: dist.launch(WORKER, n, ["--case", "tp"], timeout_s=300) for n in (2, 3)}


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    two, three = (str(tmp_path_factory.mktemp("zero3") / f"{n}.pt") for n in (2, 3))
    return {2: dist.launch(WORKER, 2, ["--case", "state", "--save", two], timeout_s=300),
            3: dist.launch(WORKER, 3, ["--case", "state", "--save", three, "--load", two],
                           timeout_s=300)}


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("config", OURS)
def test_clip_grad_norm_equals_ddp_and_torch_clip(clip, world, config):
    for r in clip[world]:
        c = r[f"{config}-ours"]
        assert c["error"] is None and c["steps"] == 8, c
        # clipping changes every step: the norm is above max_norm each time
        assert min(c["ref_norms"]) > c["max_norm"], c
        assert c["norm_rel_diff"] <= NORM_TOL, c
        assert c["param_max_diff"] <= PARAM_TOL, c
        # the norm returned is the same on every rank
        assert c["norms"] == clip[world][0][f"{config}-ours"]["norms"]


@pytest.mark.parametrize("world", [2, 3])
def test_clipping_changes_the_training(clip, world):
    for r in clip[world]:  # DDP clipped against DDP unclipped, SGD with momentum
        assert r["unclipped_vs_clipped"] > 1e3 * PARAM_TOL, r["unclipped_vs_clipped"]


@pytest.mark.parametrize("world", [2, 3])
def test_torch_clip_on_a_zero_model_raises_on_every_rank_naming_the_accessor(clip, world):
    """Torch's own clip on ``model.parameters()`` never clips nothing silently. Planted wrong
    versions that pass no longer: ``p.grad = None`` at stage 2 (torch returned 0 and clipped
    nothing), at stage 3 (torch saw only the unsharded bias: a wrong norm)."""
    for r in clip[world]:
        one = r["1-sgd-2.0-torch"]
        # stage 1: backward had reduce-scattered the gradients torch clipped; every rank
        # raises at the step (so none hangs), naming the accessor to use instead
        assert one["steps"] == 0 and "ZeroOptimizer.clip_grad_norm_" in one["error"], one
        assert "torch.nn.utils.clip_grad_norm_" in one["error"], one
        # stages 2-3: p.grad is a ShardedGradient, and torch's norm of it raises at once
        for stage in (2, 3):
            run = r[f"{stage}-sgd-2.0-torch"]
            assert run["steps"] == 0 and run["norms"] == [], run
            assert "ShardedGradient" in run["error"] and f"ZeRO stage {stage}" in run["error"], run
            assert "ZeroOptimizer.clip_grad_norm_" in run["error"], run


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("planted", ["2-sgd-2.0-local", "3-sgd-2.0-twice"])
def test_planted_wrong_norms_are_caught(clip, world, planted):
    # local: this rank's slices only (no all-reduce); twice: the unsharded parameters
    # summed on every rank instead of once
    for r in clip[world]:
        c = r[planted]
        assert c["norm_rel_diff"] > 1e3 * NORM_TOL and c["param_max_diff"] > 1e3 * PARAM_TOL, c


def test_the_norm_types_differ(clip):
    r = clip[2][0]  # inf-norm and 2-norm are different numbers: a norm_type ignored shows
    assert all(a < b for a, b in zip(r["1-sgd-inf-ours"]["ref_norms"],
                                     r["1-sgd-2.0-ours"]["ref_norms"], strict=True))
    assert not math.isclose(r["1-sgd-inf-ours"]["norms"][0], r["1-sgd-2.0-ours"]["norms"][0])


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("layout", ["tp", "sp"])
def test_tensor_parallel_clip_counts_replicated_parameters_once(tp, world, layout):
    for r in tp[world]:
        ours, twice = r[f"{layout}-tp"], r[f"{layout}-twice"]
        # LayerNorm weights and biases (10), positions (1), row-parallel biases (4)
        assert (ours["split"], ours["replicated"]) == (22, 15), ours
        assert min(ours["ref_norms"]) > 0.5, ours  # max_norm 0.5: every step clipped
        assert ours["norm_rel_diff"] <= NORM_TOL and ours["param_max_diff"] <= PARAM_TOL, ours
        assert twice["norm_rel_diff"] > 1e3 * NORM_TOL, twice
        assert twice["param_max_diff"] > 1e3 * PARAM_TOL, twice


# --- ShardedModule's state dict ------------------------------------------------------------

SHAPES = {"module.frozen": [5], "module.mlp.0.weight": [11, 13], "module.mlp.0.bias": [11],
          "module.mlp.2.weight": [7, 11], "module.mlp.2.bias": [7], "module.mlp.4.weight": [3, 7],
          "module.mlp.4.bias": [3], "module.extra.weight": [3, 3], "module.extra.bias": [3]}


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_state_dict_resumes_bit_for_bit(state, world):
    for r in state[world]:
        res = r["resume"]
        assert res["shapes"] == SHAPES, res  # whole parameters, never (0,)
        assert res["missing"] == [] and res["unexpected"] == [], res
        assert res["loaded_equal"] and res["losses_equal"] and res["params_equal"], res


@pytest.mark.parametrize("world", [2, 3])
def test_planted_old_state_dict_is_caught(state, world):
    for r in state[world]:
        old = r["planted_old"]
        # what the old ShardedModule did: empty tensors, loaded with every key matched ...
        assert {k: v for k, v in old["shapes"].items() if k != "module.frozen"} == {
            k: [0] for k in SHAPES if k != "module.frozen"}, old
        assert old["missing"] == [] and old["unexpected"] == [], old
        # ... and a resume from the fresh weights, which the checks above catch
        assert not (old["loaded_equal"] or old["losses_equal"] or old["params_equal"]), old
        assert "empty tensor" in old["refused"] and "module.mlp.0.weight" in old["refused"], old


def test_two_rank_state_loads_on_three_ranks(state):
    for r in state[3]:
        assert r["resharded"]["loaded_equal"], r["resharded"]
    # and training goes on from it: the global loss (mean of equal chunks' losses) of the
    # next 4 steps equals the 2-rank run's, up to the order of the sums (fp32)
    two = [sum(ls) / 2 for ls in zip(*(r["resume"]["losses"] for r in state[2]))]
    three = [sum(ls) / 3 for ls in zip(*(r["resharded"]["losses"] for r in state[3]))]
    assert three == pytest.approx(two, rel=1e-5)
