"""Model parallelism's edge cases in one process (a gloo group of one), each against torch's
own answer: ring attention's backward on one rank, the vocabulary-parallel loss in float64
with ``ignore_index`` and ``reduction``, out-of-vocabulary and float ids, a linear's input of
the wrong width, zero-bubble's split backward with weights used outside their Linear's call,
and the pipeline's argument and activation checks. The 2-4 process versions are
tests/distributed/test_parallel_edges.py (same models: its worker is imported here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit.compute.flash import reference_attention
from perfkit.parallel import (
    ColumnParallelLinear,
    RingStats,
    RowParallelLinear,
    Schedule,
    VocabParallelEmbedding,
    gpipe,
    one_f_one_b,
    parse_actions,
    ring_attention,
    ring_bytes,
    run_schedule,
    validate,
    vocab_parallel_cross_entropy,
    zb_h1,
)

TOL = 1e-12   # float64: the same sums as the reference, in another order
_spec = importlib.util.spec_from_file_location(
    "_parallel_edges_worker", Path(__file__).parents[1] / "distributed" / "_parallel_edges_worker.py")
W = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(W)


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


# --- ring attention on one rank -----------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_ring_attention_backward_on_a_group_of_one(group, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mine = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    stats = RingStats()
    out = ring_attention(*mine, causal=causal, tile=4, timeout_s=10.0, stats=stats)
    want, _ = reference_attention(*ref, causal=causal)
    do = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(do)    # sent its dK/dV to itself: "Pair is not connected"
    want.backward(do)
    assert (out - want).abs().max() <= TOL
    for a, b in zip(mine, ref):
        assert (a.grad - b.grad).abs().max() <= TOL
    want_bytes = ring_bytes(1, 2, 8, 4, 1, torch.float64)
    assert stats.sent_forward == want_bytes.forward == 0
    assert stats.sent_backward == want_bytes.backward == 0   # nothing leaves a lone rank


# --- the vocabulary-parallel loss and embedding ----------------------------------------------

def _logits(dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 4, 7, generator=g, dtype=torch.float64) * 3).to(dtype)
    tgt = torch.randint(7, (3, 4), generator=g)
    tgt[0, 0] = tgt[2, 3] = -100
    return logits, tgt


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_vocab_parallel_loss_is_cross_entropy_in_float64(group, reduction):
    logits, tgt = _logits()
    a, b = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    got = vocab_parallel_cross_entropy(a, tgt, 0, reduction=reduction)
    want = F.cross_entropy(b.transpose(1, 2), tgt, reduction=reduction)
    assert got.dtype == torch.float64 and got.shape == want.shape   # float32 lost 1e-7
    assert (got - want).abs().max() <= TOL
    w = torch.randn(got.shape, dtype=torch.float64)
    (got * w).sum().backward()
    (want * w).sum().backward()
    assert (a.grad - b.grad).abs().max() <= TOL
    assert (a.grad[0, 0] == 0).all() and (a.grad[2, 3] == 0).all()   # ignored: no gradient
    if reduction == "none":
        assert got[0, 0] == 0 and got[2, 3] == 0


def test_vocab_parallel_loss_ignore_index_and_all_ignored(group):
    logits, tgt = _logits()
    # -100 by default, as F.cross_entropy: counting it as a token gave another mean
    assert (vocab_parallel_cross_entropy(logits, tgt, 0) - F.cross_entropy(
        logits.transpose(1, 2), tgt)).abs() <= TOL
    pad = tgt.clamp_min(0)   # a padding label inside the vocabulary
    assert (vocab_parallel_cross_entropy(logits, pad, 0, ignore_index=0) - F.cross_entropy(
        logits.transpose(1, 2), pad, ignore_index=0)).abs() <= TOL
    none = torch.full_like(tgt, -100)
    assert torch.isnan(vocab_parallel_cross_entropy(logits, none, 0))   # 0 / 0, as torch
    assert torch.isnan(F.cross_entropy(logits.transpose(1, 2), none))
    assert vocab_parallel_cross_entropy(logits, none, 0, reduction="sum") == 0


def test_vocab_parallel_loss_of_half_logits_is_float32(group):
    logits, tgt = _logits(torch.bfloat16)
    x = logits.clone().requires_grad_()
    loss = vocab_parallel_cross_entropy(x, tgt, 0)
    loss.backward()
    want = F.cross_entropy(logits.float().transpose(1, 2), tgt)
    assert loss.dtype == torch.float32 and x.grad.dtype == torch.bfloat16
    assert (loss - want).abs() <= 1e-6


@pytest.mark.parametrize("bad", [7, 100, -1, -101])
def test_vocab_parallel_loss_refuses_targets_outside_the_vocabulary(group, bad):
    logits, tgt = _logits()
    tgt[1, 1] = bad
    for kw in ({}, {"vocab_size": 7}):
        with pytest.raises(ValueError, match=r"targets must be ids in \[0, 7\) or ignore_index "
                                             r"\(-100\), got ids from"):
            vocab_parallel_cross_entropy(logits, tgt, 0, **kw)
    # a rank holding ids [7, 14) of a vocabulary of 14: 7 is its first
    assert vocab_parallel_cross_entropy(logits, tgt.clamp(0, 13), 7, vocab_size=14).isfinite()
    with pytest.raises(ValueError, match=r"vocab_size \(10\) must cover this rank's ids \[7, 14\)"):
        vocab_parallel_cross_entropy(logits, tgt.clamp(0, 9), 7, vocab_size=10)


def test_vocab_parallel_embedding_refuses_what_nn_embedding_refuses(group):
    torch.manual_seed(0)
    ref = nn.Embedding(7, 3)
    emb = VocabParallelEmbedding.from_embedding(ref)
    ids = torch.tensor([[0, 6, 3]])
    assert torch.equal(emb(ids), ref(ids)) and torch.equal(emb(ids.int()), ref(ids))
    for bad in (torch.tensor([[0, 7]]), torch.tensor([[-1, 2]])):
        with pytest.raises(IndexError):
            ref(bad)
        with pytest.raises(IndexError, match=r"idx must hold ids in \[0, 7\) \(the vocabulary\)"):
            emb(bad)
    with pytest.raises(TypeError, match="idx must hold integer ids .* got torch.float32"):
        emb(ids.float())
    assert VocabParallelEmbedding(torch.ones(4, 3), 3).vocab_size == 7   # asked of the group


def test_parallel_linears_name_a_wrong_input_width(group):
    col = ColumnParallelLinear.from_linear(nn.Linear(4, 6))
    row = RowParallelLinear.from_linear(nn.Linear(6, 4))
    assert col(torch.ones(2, 4)).shape == (2, 6) and row(torch.ones(2, 6)).shape == (2, 4)
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., 4\) \(in_features\), got shape \(2, 5\)"):
        col(torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., 6\) \(this rank's in_features / t\)"):
        row(torch.ones(2, 4))
    unsplit = RowParallelLinear.from_linear(nn.Linear(6, 4), input_is_parallel=False)
    with pytest.raises(ValueError, match=r"x must be \(\.\.\., 6\) \(in_features, replicated\)"):
        unsplit(torch.ones(2, 3))
    with pytest.raises(TypeError, match="x must be floating point"):
        col(torch.ones(2, 4, dtype=torch.int64))


# --- pipeline: zero bubble's split backward, the argument and activation checks ------------

def _grads(mod):
    return [q.grad.clone() for q in mod.parameters()]


def _rel(a, b):
    return max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(a, b, strict=True))


def test_tied_stages_really_share_their_weight():
    stage = W.tied_stages(2)[0]
    assert stage.head.weight is stage.emb.weight   # .double() kept the tie


def test_zero_bubble_keeps_a_weight_used_outside_its_linear_on_one_rank(group):
    stages = W.tied_stages(3)
    whole = nn.Sequential(*stages)
    want = [q for grads in W.unsplit_grads(stages) for q in grads]
    xs, ys = W.batches()
    for sched in (gpipe(1, W.M), one_f_one_b(1, W.M), zb_h1(1, W.M)):
        whole.zero_grad(set_to_none=True)
        run_schedule(sched, {0: whole}, xs, ys, W.mse, (W.B, W.T, W.C), torch.float64)
        assert _rel(_grads(whole), want) <= TOL, sched.name   # zb_h1 was 0.3 off
    assert all("forward" not in vars(m) for m in whole.modules())   # the Linears untapped


def _split_two_stages(m):
    """One rank, two stages, split backward: the hand-over between stages is local."""
    row = [f"F0.{j}" for j in range(m)] + [f"F1.{j}" for j in range(m)]
    row += [f"{k}{s}.{j}" for j in range(m) for k, s in (("I", 1), ("I", 0), ("W", 1), ("W", 0))]
    return Schedule("split2", 1, 2, m, (parse_actions(row),))


def test_split_backward_across_a_local_hand_over(group):
    stages = W.tied_stages(2)
    want = W.unsplit_grads(stages)
    sched = _split_two_stages(W.M)
    validate(sched)
    for s in stages:
        s.zero_grad(set_to_none=True)
    xs, ys = W.batches()
    run_schedule(sched, dict(enumerate(stages)), xs, ys, W.mse, (W.B, W.T, W.C), torch.float64)
    for s, w in zip(stages, want):
        assert _rel(_grads(s), w) <= TOL


@pytest.mark.parametrize("shape,dtype,named", [
    ((W.B, W.T, W.C), torch.float32, r"act_shape=\(2, 5, 6\) and act_dtype=torch.float32"),
    ((W.B, W.T, 4), torch.float64, r"act_shape=\(2, 5, 4\)")])
def test_an_activation_that_is_not_act_shape_or_act_dtype_is_named(group, shape, dtype, named):
    xs, ys = W.batches()
    with pytest.raises(ValueError, match=r"pipeline rank 0: F0\.0 would send stage 1 \(global "
                                         r"rank 0\) its act of shape \(2, 5, 6\) and dtype "
                                         r"torch\.float64, but " + named):
        run_schedule(_split_two_stages(W.M), dict(enumerate(W.tied_stages(2))), xs, ys, W.mse,
                     shape, dtype)


def test_a_schedule_for_more_ranks_than_the_group_is_refused_at_once(group):
    xs = [torch.ones(1, 4)] * 2
    with pytest.raises(ValueError, match=r"the schedule needs 2 pipeline ranks \[0, 1\], but the "
                                         r"group has only ranks \[0\]"):
        run_schedule(gpipe(2, 2), {0: nn.Linear(4, 4)}, xs, None, None, (1, 4), timeout_s=1.0)
    with pytest.raises(ValueError, match="pp_ranks must list 2 distinct"):
        run_schedule(gpipe(2, 2), {0: nn.Linear(4, 4)}, xs, None, None, (1, 4), pp_ranks=[0, 0])
