"""ZeRO-2 reduce-scatters every micro-batch's gradients (each rank keeps only its shard, as
DeepSpeed's stage 2 and FSDP's SHARD_GRAD_OP do under accumulation); ZeRO-1 keeps whole
gradients and reduces once a step."""

import dataclasses

import pytest

from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.plan import Layout, ModelSpec, named_cluster, step_time

GPT = ModelSpec("gpt", layers=4, hidden=64, heads=4, ffn=256, vocab=100, seq=32, dropout=True, flash=False)
# no overlap: every collective is charged in full, so the terms are sums a test can write out
BARE = dataclasses.replace(named_cluster("a100-80gb", efficiency=0.5), overlap=False,
                           intra=AlphaBeta(1e-4, 100e9))


def test_zero2_charges_a_reduce_scatter_per_micro_batch_and_one_all_gather():
    lay = Layout(dp=8, zero=2, micro_batch=1)
    for m in (1, 4):
        t = step_time(GPT, lay, BARE, 8 * m)
        ar = t.detail["dp_allreduce_s"]  # one whole all-reduce of the gradients
        assert t.detail["micro_batches"] == m
        # m reduce-scatters (half an all-reduce each on NCCL's ring) and one all-gather (the other half)
        assert t.terms["data-parallel"] == pytest.approx(m * 0.5 * ar + 0.5 * ar)


def test_zero1_reduces_once_whatever_the_micro_batches():
    lay = Layout(dp=8, zero=1, micro_batch=1)
    one, four = (step_time(GPT, lay, BARE, 8 * m).terms["data-parallel"] for m in (1, 4))
    assert four == pytest.approx(one)


def test_zero2_with_a_stated_hidden_share_hides_each_reduce_scatter_behind_its_own_backward():
    c = dataclasses.replace(named_cluster("a100-80gb", efficiency=0.5), sharded_hidden=0.0)
    lay = Layout(dp=8, zero=2, micro_batch=1)
    one, four = (step_time(GPT, lay, c, 8 * m) for m in (1, 4))
    ar = one.detail["dp_allreduce_s"]
    # nothing hidden: three more reduce-scatters than a single micro-batch pays
    assert four.terms["data-parallel"] - one.terms["data-parallel"] == pytest.approx(3 * 0.5 * ar)
