"""Tensor and sequence parallelism on 2, 3 and 4 torchrun processes, against the unsplit GPT
and against PyTorch's DTensor plans.

One launch per world size runs every check (torchrun start-up dominates on 2 cores).
Tolerances: fp32, 5 SGD (momentum) steps, per parameter max |p - p_ref| / max |p_ref| <= 1e-5
(what differs is the order of sums: partial matmuls all-reduced instead of one matmul);
AdamW loss curves within 1e-5 (Adam's update is ill-conditioned near zero gradients, so its
parameters are not compared). The key biases are compared in absolute terms (<= 1e-8): their
gradient is zero in exact arithmetic, so their values are rounding noise. Collective counts
and bytes are exact.
"""

from __future__ import annotations

import json

import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
TOL = 1e-5
# divisible by 3 (heads, vocabulary, sequence) for the 3-process job
THREE = {"vocab_size": 48, "block_size": 12, "n_embd": 24, "n_layer": 2, "n_head": 6}


@pytest.fixture(scope="module")
def jobs():
    two = dist.launch("perfkit.jobs.tensor_parallel", 2, ["--config", json.dumps(
        {"equality": {}, "dropout": {}, "traffic": {}, "dtensor": {}, "memory": {}})],
        timeout_s=240)
    three = dist.launch("perfkit.jobs.tensor_parallel", 3, ["--config", json.dumps(
        {"model": THREE, "equality": {}, "traffic": {}, "errors": {"model": {"n_head": 4}}})],
        timeout_s=240)
    four = dist.launch("perfkit.jobs.tensor_parallel", 4, ["--config", json.dumps(
        {"dp_tp": {"dp": 2}, "errors": {}, "equality": {"variants": ["tp", "sp"]}})],
        timeout_s=240)
    return {2: two, 3: three, 4: four}


@pytest.mark.parametrize("world,key", [(w, k) for w in (2, 3) for k in ("tp", "sp", "tp_overlap",
                                                                       "sp_recompute")]
                         + [(4, "tp"), (4, "sp")])   # 4 heads on 4 ranks: one head each
def test_equal_to_the_unsplit_model(jobs, world, key):
    for r in jobs[world]:
        e = r["equality"][key]
        assert e["rel"] <= TOL, e
        assert e["key_bias_abs"] <= 1e-8, e
        assert e["loss_diff"] <= TOL, e
        assert max(abs(a - b) for a, b in zip(e["losses"], e["ref_losses"])) <= TOL


@pytest.mark.parametrize("world", [2, 3])
def test_traffic_is_the_models_count_exactly(jobs, world):
    for r in jobs[world]:
        for key, names in (("tp", {"all_reduce"}), ("sp", {"all_gather", "reduce_scatter"}),
                           ("tp_overlap", {"all_reduce"})):
            t = r["traffic"][key]
            assert t["step"] == t["model"], (key, t)
            assert t["block"] == t["block_model"], (key, t)
            calls, nbytes, sent = t["block"]
            assert set(calls) == names and sum(calls.values()) == 4 * len(names)
            # per block: 4 payloads of B*T*C fp32 (B=4, T=block_size), each sent 2(t-1)/t
            payload = 4 * 16 * 32 * 4 if world == 2 else 4 * 12 * 24 * 4
            assert sum(nbytes.values()) == 4 * payload * len(names)
            assert sum(sent.values()) == pytest.approx(4 * payload * 2 * (world - 1) / world)
        # SP without the gathered inputs kept: one more all-gather per region in backward
        t = r["traffic"]["sp_recompute"]
        assert t["step"] == t["model"] and t["block"] == t["block_model"], t
        assert t["block"][0] == {"all_gather": 6, "reduce_scatter": 4}


def test_sequence_parallel_saves_its_regions_and_recomputing_saves_the_gathered_input(jobs):
    from perfkit.parallel import region_activation_bytes

    b, s, c = 4, 16, 32
    for r in jobs[2]:
        m = r["memory"]
        assert m["tp"]["regions"] == region_activation_bytes(b, s, c, 2)
        assert m["sp"]["regions"] == region_activation_bytes(b, s, c, 2, sequence_parallel=True)
        assert m["tp"]["block"] - m["sp"]["block"] == m["tp"]["regions"] // 2
        assert m["tp_overlap"] == m["tp"]
        # the q/k/v and fc inputs kept as (B, T / 2, C) slices instead of (B, T, C)
        assert m["sp"]["block"] - m["sp_recompute"]["block"] == 2 * b * s * c * 4 // 2


def test_dropout_random_number_contract(jobs):
    for r in jobs[2]:
        d = r["dropout"]
        # replicated regions: the unsplit model's masks, so training is equal with dropout on
        assert d["replicated_rel"] <= TOL and d["dropout_changes_loss"], d
        assert d["fork_keeps_default_stream"] and d["fork_reproducible"], d
        assert d["split_masks_differ"] and d["replicated_masks_equal"], d
        for key in ("tp", "sp"):
            assert d[key]["replicated_drift"] == 0.0 and d[key]["finite"], d
        # the residual dropout is replicated under TP, split along the sequence under SP
        assert not d["tp"]["residual_masks_differ"] and d["sp"]["residual_masks_differ"], d


def test_against_dtensor_same_numbers_same_collectives(jobs):
    for r in jobs[2]:
        tp, sp = r["dtensor"]["tp"], r["dtensor"]["sp"]
        assert tp["rel"] <= TOL and sp["rel"] <= TOL
        assert tp["losses"] == pytest.approx(r["equality"]["tp"]["losses"], abs=TOL)
        # CommDebugMode counts both: DTensor's functional collectives, perfkit's c10d ones
        assert tp["counts"]["dtensor"] == {"all_reduce": 13}
        assert tp["counts"]["perfkit"] == {"allreduce_": 13}
        # SP: the same 4 all-gathers and 4 reduce-scatters per block and at the head; DTensor
        # all-reduces the embedding then slices it (perfkit reduce-scatters it), and leaves
        # the LayerNorm gradients Partial until the counted SGD step reads them: one all-reduce
        # per LayerNorm weight and bias, 2 * (2 blocks * 2 + 1) = 10 (perfkit sums them in one
        # all-reduce after backward)
        assert sp["counts"]["dtensor"] == {"all_reduce": 1 + 10 + 3, "all_gather_into_tensor": 10,
                                           "reduce_scatter_tensor": 9}
        assert sp["counts"]["perfkit"] == {"allreduce_": 4, "allgather_": 10,
                                           "reduce_scatter_": 10}
        # the SGD step counted apart (the old job counted it with backward, so where DTensor's 10
        # LayerNorm all-reduces ran did not show): all 10 in DTensor's step, none in perfkit's
        assert sp["in_step"] == {"dtensor": {"all_reduce": 10}, "perfkit": {}}
        assert tp["in_step"] == {"dtensor": {}, "perfkit": {}}


def test_dp_x_tp_on_a_two_by_two_mesh(jobs):
    ranks = jobs[4]
    assert [r["dp_tp"]["tp_group"] for r in ranks] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["dp_tp"]["dp_group"] for r in ranks] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    for r in ranks:
        assert r["dp_tp"]["tp"]["rel"] <= TOL and r["dp_tp"]["sp"]["rel"] <= TOL, r


def test_degree_that_does_not_divide_the_heads_is_a_clear_error(jobs):
    for r in jobs[3]:
        assert r["errors"]["error"] == ("n_head (4) must be divisible by the tensor-parallel "
                                        "degree 3")
    assert all(r["errors"]["error"] is None for r in jobs[4])   # 4 heads on 4 ranks
