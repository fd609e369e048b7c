"""Overlap of the data-parallel and ZeRO collectives as the frameworks do it
(:mod:`perfkit.plan.overlap`): chunk by chunk, one chunk always exposed, never more hidden than
the compute there is; each rule with its source, "none" an option and not the default."""

import dataclasses

import pytest

from perfkit.plan import (
    OVERLAP_RULES,
    Layout,
    ModelSpec,
    exposed_time,
    group_allreduce_time,
    named_cluster,
    stage_params,
    step_time,
)

GPT = ModelSpec("gpt", layers=4, hidden=256, heads=4, ffn=1024, vocab=1000, seq=128)
C = named_cluster("a100-80gb", efficiency=0.5)


def test_exposed_time_is_one_chunk_or_what_the_compute_cannot_cover():
    assert exposed_time(1.0, 10.0, 4) == 0.25  # plenty of compute: the last chunk
    assert exposed_time(1.0, 0.0, 4) == 1.0  # nothing to hide behind
    assert exposed_time(1.0, 0.4, 4) == pytest.approx(1.0 - 0.4 * 3 / 4)  # compute-bound
    assert exposed_time(1.0, 10.0, 1) == 1.0  # one bucket: after its compute, all of it
    assert exposed_time(0.0, 1.0, 8) == 0.0
    # by hand, 2 chunks of 0.5 s beside 2 chunks of 0.2 s of compute: the first reduction starts
    # at 0.2 and the second follows it, ending at 1.2, 0.8 after the compute's end at 0.4
    assert exposed_time(1.0, 0.4, 2) == pytest.approx(0.8)


def test_every_rule_states_its_source_and_none_hides_nothing():
    for name, rule in OVERLAP_RULES.items():
        assert rule.name == name and rule.source and name in rule.describe()
    assert "no data-parallel collective" in OVERLAP_RULES["none"].describe()
    assert "VLDB 2023" in OVERLAP_RULES["pytorch"].source
    assert "overlap_param_gather" in OVERLAP_RULES["megatron"].source
    assert "overlap_comm" in OVERLAP_RULES["deepspeed"].source
    assert "BACKWARD_POST" in OVERLAP_RULES["composer"].source
    assert C.dp_overlap == "pytorch" and C.sharded_hidden is None  # "none" is not the default
    with pytest.raises(ValueError, match="dp_overlap"):
        dataclasses.replace(C, dp_overlap="fsdp")


def test_ddp_always_pays_its_last_bucket():
    lay = Layout(dp=8, micro_batch=1)
    t = step_time(GPT, lay, C, 8)
    ar = t.detail["dp_allreduce_s"]
    psi = stage_params(GPT, lay)
    assert ar == pytest.approx(group_allreduce_time(psi * 2, 8, 1, C))  # one 25 MiB bucket here
    # one bucket: it can start only when the backward ends, so all of it is paid (it was 0)
    assert t.terms["data-parallel"] == pytest.approx(ar) and ar > 0
    none = step_time(GPT, lay, dataclasses.replace(C, dp_overlap="none"), 8)
    assert none.terms["data-parallel"] == pytest.approx(ar)


def test_ddp_buckets_hide_all_but_the_last_when_compute_allows():
    big = ModelSpec("big", layers=8, hidden=2048, heads=16, ffn=8192, vocab=32000, seq=2048)
    lay = Layout(dp=64, micro_batch=1)
    t = step_time(big, lay, C, 64)
    ar, hide = t.detail["dp_allreduce_s"], t.detail["slot_s"] * 2 / 3
    k = -(-int(stage_params(big, lay) * 2) // (25 * 2**20))  # 25 MiB buckets
    assert k > 10
    assert t.terms["data-parallel"] == pytest.approx(max(ar / k, ar - hide * (k - 1) / k))
    assert 0 < t.terms["data-parallel"] < ar


def test_zero3_prefetch_hides_gathers_behind_forward_and_backward_per_micro_batch():
    lay = Layout(dp=8, zero=3, micro_batch=1)
    t = step_time(GPT, lay, C, 16)
    off = step_time(GPT, lay, dataclasses.replace(C, dp_overlap="none"), 16)
    m, slot, units = t.detail["micro_batches"], t.detail["slot_s"], GPT.layers + 1
    psi = stage_params(GPT, lay)
    gather = units * group_allreduce_time(psi / units * 2, 8, 1, C)  # two all-gathers
    scatter = units * 0.5 * group_allreduce_time(psi / units * 2, 8, 1, C)
    assert off.terms["ZeRO-3 collectives"] == pytest.approx(m * (gather + scatter))
    fwd, bwd = slot / 3, slot * 2 / 3
    want = m * (exposed_time(gather / 2, fwd, units) + exposed_time(gather / 2 + scatter, bwd, units))
    assert t.terms["ZeRO-3 collectives"] == pytest.approx(want)
    # never all hidden (the first gather, the last scatter), never all paid when there is compute
    paid = t.terms["ZeRO-3 collectives"]
    assert m * (gather + scatter) / units <= paid < off.terms["ZeRO-3 collectives"]
    # Composer's FSDP (BACKWARD_POST): the backward gathers wait in full
    post = step_time(GPT, lay, dataclasses.replace(C, dp_overlap="composer"), 16)
    assert post.terms["ZeRO-3 collectives"] == pytest.approx(
        m * (exposed_time(gather / 2, fwd, units) + gather / 2 + exposed_time(scatter, bwd, units)))
    # equal when compute-bound
    assert paid <= post.terms["ZeRO-3 collectives"] < off.terms["ZeRO-3 collectives"]
    # a stated share still overrides the framework (ideal prefetching: notebook 13's other end)
    ideal = step_time(GPT, lay, dataclasses.replace(C, sharded_hidden=1.0), 16)
    assert ideal.terms["ZeRO-3 collectives"] == pytest.approx(m * max(0.0, gather + scatter - slot))


def test_zero1_gather_follows_the_framework():
    lay = Layout(dp=8, zero=1, micro_batch=1)
    got = {k: step_time(GPT, lay, dataclasses.replace(C, dp_overlap=k), 8) for k in OVERLAP_RULES}
    ar = got["none"].detail["dp_allreduce_s"]
    assert got["none"].terms["data-parallel"] == pytest.approx(1.0 * ar)  # 0.5 scatter + 0.5 gather
    # PyTorch's ZeroRedundancyOptimizer and DeepSpeed gather after the step; Megatron's
    # overlap_param_gather hides it behind the forward except its last chunk
    assert (got["pytorch"].terms["data-parallel"] == got["deepspeed"].terms["data-parallel"]
            == got["composer"].terms["data-parallel"])
    assert got["megatron"].terms["data-parallel"] <= got["pytorch"].terms["data-parallel"]
    slot = got["megatron"].detail["slot_s"]
    assert got["pytorch"].terms["data-parallel"] == pytest.approx(
        exposed_time(0.5 * ar, slot * 2 / 3, 1) + 0.5 * ar)


def test_nothing_hides_on_a_cpu_whatever_the_framework():
    cpu = dataclasses.replace(C, overlap=False)
    assert cpu.overlap_rule is OVERLAP_RULES["none"]
    for zero in (0, 1, 2, 3):
        lay = Layout(dp=8, zero=zero, micro_batch=1)
        assert (step_time(GPT, lay, cpu, 8).terms
                == step_time(GPT, lay, dataclasses.replace(cpu, dp_overlap="none"), 8).terms)
