"""perfkit.parallel.tensor, .sequence and .tp_gpt in one process (a gloo group of one).

With one rank every collective is the identity, so these tests check what does not need a
second process: the split model computes the unsplit model's loss and gradients under the
same parameter names, the vocabulary-parallel loss is cross-entropy (values and gradients,
huge logits included), the traffic model's counts, the RNG tracker's contract, which
parameters sequence parallelism reduces, and the errors. The 2-, 3- and 4-process checks are
in tests/distributed/test_tensor_parallel_dist.py.
"""

import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from perfkit import stats
from perfkit.comm.alpha_beta import AlphaBeta, fit_alpha_beta
from perfkit.comm.traffic import count_traffic
from perfkit.parallel.gpt import GPT, GPTConfig, gpt_loss
from perfkit.parallel.sequence import (
    SEQUENCE_PARALLEL_ATTR,
    mark_sequence_parallel,
    sync_sequence_parallel_grads,
)
from perfkit.parallel.tensor import ColumnParallelLinear, RNGTracker, RowParallelLinear
from perfkit.parallel.tp_costs import (
    block_flops,
    crossover_width,
    region_activation_bytes,
    sweep_time,
    tp_block_cost,
)
from perfkit.parallel.tp_gpt import check_tp_degree, parallelize_gpt, sp_synced_values, tp_traffic
from perfkit.parallel.tp_overlap import column_region
from perfkit.parallel.vocab import VocabParallelEmbedding, vocab_parallel_cross_entropy
from perfkit.stats import Estimate
from perfkit.viz.tensor_parallel import plot_tp_crossover, tp_widget, traffic_table

CFG = GPTConfig(vocab_size=48, block_size=8, n_embd=24, n_layer=2, n_head=6)


@pytest.fixture
def group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield None
    dist.destroy_process_group()


def _pair(cfg=CFG, sp=False, rng=None):
    torch.manual_seed(0)
    ref = GPT(cfg)
    torch.manual_seed(0)
    return ref, parallelize_gpt(GPT(cfg), None, sp, rng)


@pytest.mark.parametrize("sp", [False, True])
def test_one_rank_is_the_unsplit_model(group, sp):
    ref, tp = _pair(sp=sp)
    idx, tgt = torch.randint(0, 48, (3, 8)), torch.randint(0, 48, (3, 8))
    gpt_loss(ref(idx), tgt).backward()
    loss = tp.loss(idx, tgt)
    loss.backward()
    tp.sync_grads()
    assert loss.item() == pytest.approx(gpt_loss(ref(idx), tgt).item(), rel=1e-6)
    ref_p = dict(ref.named_parameters())
    assert set(ref_p) == {n for n, _ in tp.named_parameters()}   # the unsplit names
    for name, p in tp.named_parameters():
        assert torch.allclose(p.grad, ref_p[name].grad, atol=1e-6), name
        assert tp.shard(name) is None or tp.shard(name)[1:] == (0, ref_p[name].shape[
            tp.shard(name)[0]])


def test_vocab_parallel_loss_is_cross_entropy_even_for_huge_logits(group):
    logits = torch.randn(2, 5, 48) * 3
    logits[0, 0, 7] = 1e4   # exp() of it overflows unless the maximum is subtracted first
    logits.requires_grad_(True)
    tgt = torch.randint(0, 48, (2, 5))
    want = F.cross_entropy(logits.reshape(-1, 48), tgt.reshape(-1))
    (g_want,) = torch.autograd.grad(want, logits)
    got = vocab_parallel_cross_entropy(logits, tgt, 0)
    (g_got,) = torch.autograd.grad(got, logits)
    assert math.isfinite(got.item()) and got.item() == pytest.approx(want.item(), rel=1e-6)
    assert torch.allclose(g_got, g_want, atol=1e-7)
    with pytest.raises(ValueError, match="must agree on"):
        vocab_parallel_cross_entropy(logits, tgt[:, :4], 0)


def test_vocab_rows_outside_this_rank_are_zero_and_their_logits_ignored(group):
    # a rank holding ids [10, 20): other ids look up zeros; a target it does not own adds
    # nothing to the gradient's one-hot
    emb = VocabParallelEmbedding(torch.ones(10, 3), vocab_start=10, vocab_size=30)
    out = emb(torch.tensor([[5, 12, 25]]))
    assert out[0, 0].abs().sum() == 0 and out[0, 2].abs().sum() == 0 and out[0, 1].sum() == 3
    logits = torch.zeros(1, 2, 10, requires_grad=True)
    vocab_parallel_cross_entropy(logits, torch.tensor([[3, 15]]), 10).backward()
    assert torch.allclose(logits.grad[0, 0], torch.full((10,), 0.05))     # no -1: not owned
    assert logits.grad[0, 1, 5] == pytest.approx((0.1 - 1) / 2)


def test_traffic_model_counts(group):
    b, s, c, L = 3, 8, 24, 2
    act = b * s * c * 4
    tp = tp_traffic(CFG, b, s, 2)
    assert tp.calls == {"all_reduce": 4 * L + 2 + 3}
    assert tp.buffer_bytes == {"all_reduce": (4 * L + 2) * act + 3 * b * s * 4}
    blk = tp_traffic(CFG, b, s, 2, blocks_only=True)
    assert blk.calls == {"all_reduce": 4} and blk.sent_bytes(2) == {"all_reduce": 4 * act}
    sp = tp_traffic(CFG, b, s, 3, sequence_parallel=True, blocks_only=True)
    assert sp.calls == {"all_gather": 4, "reduce_scatter": 4}
    # an all-gather and a reduce-scatter move what one all-reduce moves
    assert sum(sp.sent_bytes(3).values()) == pytest.approx(
        tp_traffic(CFG, b, s, 3, blocks_only=True).sent_bytes(3)["all_reduce"])
    full = tp_traffic(CFG, b, s, 2, sequence_parallel=True)
    synced = (6 * L + 2 + CFG.block_size) * c   # norms, row biases, positions
    assert full.buffer_bytes["all_reduce"] == 3 * b * s * 4 + synced * 4


@pytest.mark.parametrize("sp", [False, True])
def test_traffic_model_is_what_one_rank_calls(group, sp):
    _, tp = _pair(sp=sp)
    with count_traffic() as t:
        tp.loss(torch.randint(0, 48, (2, 8)), torch.randint(0, 48, (2, 8))).backward()
        tp.sync_grads()
    want = tp_traffic(CFG, 2, 8, 1, sp)
    assert (t.calls, t.buffer_bytes) == (want.calls, want.buffer_bytes)


def test_only_replicated_parameters_are_reduced_under_sequence_parallelism(group):
    _, tp = _pair(sp=True)
    marked = {n for n, p in tp.named_parameters() if getattr(p, SEQUENCE_PARALLEL_ATTR, False)}
    assert marked == {n for n, _ in tp.named_parameters() if tp.shard(n) is None}
    assert not any(".weight" in n and ("proj" in n or ".fc" in n or ".q" in n) for n in marked)
    tp.loss(torch.randint(0, 48, (2, 8)), torch.randint(0, 48, (2, 8))).backward()
    n = sum(p.numel() for n, p in tp.named_parameters() if n in marked)
    assert sync_sequence_parallel_grads(tp) == n == sp_synced_values(CFG)
    assert sync_sequence_parallel_grads(nn.Linear(2, 2)) == 0   # nothing marked: no call


def test_sequence_parallelism_adds_only_the_synced_gradients_per_step():
    """Per block SP sends what TP sends; per step it adds one all-reduce of the gradients of the
    parameters used on sequence slices, whose size grows with the width, not the tokens."""
    for b, s in ((2, 8), (5, 4)):
        tp, sp = (sum(tp_traffic(CFG, b, s, 2, flag).sent_bytes(2).values()) for flag in (False, True))
        assert sp - tp == sp_synced_values(CFG) * 4
    assert sp_synced_values(CFG) == (6 * CFG.n_layer + 2 + CFG.block_size) * CFG.n_embd
    with pytest.raises(TypeError, match="cfg"):
        sp_synced_values({"n_embd": 24})


def test_rng_tracker_leaves_the_default_stream_and_repeats(group):
    torch.manual_seed(5)
    before = torch.get_rng_state()
    rng = RNGTracker(3)
    with rng.fork():
        a = torch.rand(8)
    with rng.fork():
        b = torch.rand(8)
    assert torch.equal(torch.get_rng_state(), before)   # default stream untouched
    assert not torch.equal(a, b)                        # the tracker's own stream advanced
    with RNGTracker(3).fork():
        assert torch.equal(torch.rand(8), a)
    with RNGTracker(4).fork():
        assert not torch.equal(torch.rand(8), a)


@pytest.mark.parametrize("sp", [False, True])
def test_split_region_dropout_draws_from_the_tracker(group, sp):
    cfg = GPTConfig(**{**CFG.__dict__, "dropout": 0.5})
    _, tp = _pair(cfg, sp, RNGTracker(1))
    block, x = tp.blocks[0].train(), torch.randn(2, 8, 24)
    state = torch.get_rng_state()
    block.attn(x)     # heads split: attention dropout on the tracker, never the default
    assert torch.equal(torch.get_rng_state(), state)
    block.drop1(x)    # residual dropout: split (tracker) only under sequence parallelism
    assert torch.equal(torch.get_rng_state(), state) == sp


def test_row_parallel_adds_its_bias_once_after_the_reduce(group):
    lin = nn.Linear(6, 4)
    calls = []

    def reduce(y, group):
        calls.append(y.clone())
        return y
    row = RowParallelLinear.from_linear(lin, reduce=reduce)
    x = torch.randn(2, 6)
    assert torch.allclose(row(x), lin(x), atol=1e-6)
    assert torch.allclose(calls[0], x @ lin.weight.T, atol=1e-6)   # reduced without the bias
    col = ColumnParallelLinear.from_linear(lin, gather_output=True)
    assert torch.allclose(col(x), lin(x), atol=1e-6)


@pytest.mark.parametrize("cfg,t,pattern", [
    (CFG, 4, r"n_head \(6\) must be divisible by the tensor-parallel degree 4"),
    (GPTConfig(vocab_size=48, n_embd=30, n_head=3), 8, r"n_head \(3\)"),
    (GPTConfig(vocab_size=50, n_embd=24, n_head=6), 3, r"vocab_size \(50\)"),
    (GPTConfig(vocab_size=48, n_embd=6, n_head=1), 1, None),
])
def test_degree_that_does_not_divide_is_refused_by_name(cfg, t, pattern):
    if pattern is None:
        check_tp_degree(cfg, t)
        return
    with pytest.raises(ValueError, match=pattern):
        check_tp_degree(cfg, t)


def test_bad_arguments(group):
    with pytest.raises(TypeError, match="model must be a GPT"):
        parallelize_gpt(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="rng must be an RNGTracker when dropout"):
        parallelize_gpt(GPT(GPTConfig(dropout=0.1)))
    with pytest.raises(TypeError, match="rng must be a RNGTracker or None"):
        parallelize_gpt(GPT(CFG), rng=3)
    with pytest.raises(TypeError, match="linear must be a Linear"):
        ColumnParallelLinear.from_linear(nn.Conv1d(2, 2, 1))
    with pytest.raises(TypeError, match="emb must be an Embedding"):
        VocabParallelEmbedding.from_embedding(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="seed must be"):
        RNGTracker(-1)
    with pytest.raises(TypeError, match="module must be"):
        mark_sequence_parallel(torch.zeros(2))
    with pytest.raises(ValueError, match="batch must be"):
        tp_traffic(CFG, 0, 8, 2)
    with pytest.raises(TypeError, match="cfg must be a GPTConfig"):
        check_tp_degree({"n_head": 4}, 2)


# --- the cost models (perfkit.parallel.tp_costs) and notebook 10's plots -------------------

LINK = AlphaBeta(alpha_s=50e-6, bandwidth=1e9)


def test_block_flops_and_costs_split_compute_and_add_four_all_reduces():
    assert block_flops(64, 100, 10) == 72 * 100 * 64**2 + 12 * 100 * 10 * 64
    c = tp_block_cost(256, 4, 1000, 100, 1e10, LINK)
    assert c.split_compute_s == pytest.approx(c.compute_s / 4)
    # 4 ring all-reduces of N C fp32: 2 (t - 1) steps of N C / t values each
    assert c.comm_s == pytest.approx(4 * 6 * (50e-6 + 1000 * 256 * 4 / 4 / 1e9))
    assert c.speedup == pytest.approx(c.compute_s / (c.compute_s / 4 + c.comm_s))
    one = tp_block_cost(256, 1, 1000, 100, 1e10, LINK)
    assert one.comm_s == 0 and one.speedup == 1.0


def test_crossover_is_where_the_speedup_crosses_one():
    w = crossover_width(2, 4096, 512, 1e11, LINK)
    assert tp_block_cost(w * 1.01, 2, 4096, 512, 1e11, LINK).speedup > 1.0
    assert tp_block_cost(w * 0.99, 2, 4096, 512, 1e11, LINK).speedup < 1.0
    # a faster network moves the crossover down; faster compute moves it up
    fast = AlphaBeta(LINK.alpha_s, LINK.bandwidth * 10)
    assert crossover_width(2, 4096, 512, 1e11, fast) < w < crossover_width(2, 4096, 512, 1e12,
                                                                           LINK)
    assert crossover_width(1, 4096, 512, 1e11, LINK) is None
    assert crossover_width(2, 4096, 512, 1e11, LINK, hi=w / 2) is None


def test_a_call_is_charged_what_the_sweep_measured_at_its_size_not_the_fits_intercept():
    # small calls slower than mid-sized ones (gloo's threads asleep): the fit's intercept
    # lands above the calls at a block's sizes
    sizes = [2**10, 2**12, 2**14, 2**16, 2**18, 2**20, 2**22]
    secs = [1.2e-3, 1.1e-3, 1.15e-3, 581e-6, 424e-6, 603e-6, 2.6e-3]
    fit = fit_alpha_beta(sizes, secs)
    # exact at a measured size; halfway in log size, halfway in time; the ends held outside
    assert sweep_time(sizes, secs, 2**18) == pytest.approx(424e-6)
    assert sweep_time(sizes, secs, 2**17) == pytest.approx((581e-6 + 424e-6) / 2)
    assert sweep_time(sizes, secs, 2**19) == pytest.approx((424e-6 + 603e-6) / 2)
    rev = sweep_time(list(reversed(sizes)), list(reversed(secs)), 2**21)   # any order
    assert rev == pytest.approx((603e-6 + 2.6e-3) / 2)
    assert sweep_time(sizes, secs, 10) == pytest.approx(1.2e-3)
    assert sweep_time(sizes, secs, 2**30) == pytest.approx(2.6e-3)
    # where the measured calls beat the fit's line, the charge is theirs: the bound stays a bound
    for size in (2**17, 2**18, 2**19):
        assert sweep_time(sizes, secs, size) < fit.predict(size)


def test_region_bytes_are_divided_by_t_under_sequence_parallelism():
    tp = region_activation_bytes(4, 16, 32, 2)
    # 2 LayerNorms (input + fp32 mean and rstd per token) + 2 dropout masks (CPU: fp32)
    assert tp == 2 * (4 * 16 * 32 * 4 + 2 * 4 * 16 * 4) + 2 * 4 * 16 * 32 * 4
    assert region_activation_bytes(4, 16, 32, 2, sequence_parallel=True) * 2 == tp
    assert region_activation_bytes(4, 16, 32, 4, sequence_parallel=True) * 4 == tp
    assert region_activation_bytes(4, 16, 32, dropout=False, mask_bytes=1) < tp
    with pytest.raises(ValueError, match="seq \\(15\\) must be divisible by t"):
        region_activation_bytes(4, 15, 32, 2, sequence_parallel=True)
    with pytest.raises(ValueError, match="width must be"):
        block_flops(0, 1, 1)
    with pytest.raises(TypeError, match="link must be an AlphaBeta"):
        tp_block_cost(8, 2, 8, 8, 1e9, (1e-5, 1e9))


def test_widget_draws_at_every_extreme_and_the_table_reads_both_counts():
    import matplotlib.pyplot as plt

    spec = tp_widget(1e10, LINK, seq=64)
    for kw in spec.extremes():
        plt.close(spec.fn(**kw))
    plt.close(plot_tp_crossover(1e10, LINK, measured={256.0: 1.2}))
    # every measured width drawn, with its interval, beside the bound at that width
    fig = plot_tp_crossover(1e10, LINK, measured={128.0: 0.6, 1024.0: Estimate(2.5, 2.2, 2.7, 0.9, 7, "m")},
                            bounds={128.0: 0.9, 1024.0: 2.6})
    ax2 = fig.axes[1]
    drawn = [tuple(line.get_xdata()) for line in ax2.lines]
    assert drawn.count((128.0, 1024.0)) >= 2 and ax2.get_ylim()[1] >= 2.7 * 1.1 - 1e-9
    plt.close(fig)
    # the sweep's calls and the measured blocks drawn on the time axis, beside the model's lines
    fig = plot_tp_crossover(1e10, LINK, comm={128.0: 2e-3, 512.0: 2.1e-3},
                            blocks={128.0: (6e-3, 9e-3), 512.0: (6.4e-2, 4.5e-2)})
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.lines]
    drawn = {"4 all-reduces at the sweep's measured times", "unsplit, measured", "split, measured"}
    assert drawn <= set(labels)
    split = next(line for line in ax.lines if line.get_label() == "split, measured")
    assert tuple(split.get_ydata()) == (9e-3, 4.5e-2)
    plt.close(fig)
    with pytest.raises(ValueError, match="blocks times must be"):
        plot_tp_crossover(1e10, LINK, blocks={128.0: (1e-3,)})
    with pytest.raises(ValueError, match="comm seconds"):
        plot_tp_crossover(1e10, LINK, comm={128.0: 0.0})
    with pytest.raises(ValueError, match="measured width"):
        plot_tp_crossover(1e10, LINK, measured={0.0: 1.0})
    with pytest.raises(TypeError, match="measured speedup"):
        plot_tp_crossover(1e10, LINK, measured={128.0: "fast"})
    with pytest.raises(ValueError, match="bounds speedup"):
        plot_tp_crossover(1e10, LINK, bounds={128.0: float("nan")})
    with pytest.raises(ValueError, match="bandwidth_scale"):
        plot_tp_crossover(1e10, LINK, bandwidth_scale=0)
    with pytest.raises(ValueError, match="compute_scale"):
        plot_tp_crossover(1e10, LINK, compute_scale=0)
    with pytest.raises(ValueError, match="flops_per_s"):
        tp_widget(0, LINK)
    model = tp_traffic(CFG, 2, 8, 2)
    text = traffic_table(model, model, 2)
    assert "| all_reduce | 13 / 13 |" in text
    with pytest.raises(TypeError, match="measured must be a Traffic"):
        traffic_table({}, model, 2)


def test_crossover_figure_names_the_fits_throughput_and_the_sweeps_calls():
    import matplotlib.pyplot as plt

    # the fit's slope is a throughput over Python, gloo and loopback, not a link's bandwidth; the bound's
    # calls are the stand-alone sweep's at each size (the blocks' own calls are not timed apart)
    fig = plot_tp_crossover(1e10, LINK, bounds={128.0: 0.9}, comm={128.0: 2e-3})
    title = fig._suptitle.get_text()
    assert "fitted throughput 1 / beta, not a link bandwidth" in title
    labels = [line.get_label() for line in fig.axes[1].lines]
    assert "bound: each width's measured U, the sweep's calls" in labels
    assert "4 all-reduces at the sweep's measured times" in [line.get_label() for line in fig.axes[0].lines]
    plt.close(fig)
    assert tp_widget(1e10, LINK, seq=64).controls["bandwidth_scale"].description == "throughput x fit's"


# --- fused column regions (perfkit.parallel.tp_overlap) -------------------------------------

@pytest.mark.parametrize("kw", [{"overlap": True},
                                {"sequence_parallel": True, "overlap": True},
                                {"sequence_parallel": True, "keep_gathered": False}])
def test_fused_regions_are_the_unsplit_model_and_counted(group, kw):
    torch.manual_seed(0)
    ref = GPT(CFG)
    torch.manual_seed(0)
    tp = parallelize_gpt(GPT(CFG), **kw)
    idx, tgt = torch.randint(0, 48, (2, 8)), torch.randint(0, 48, (2, 8))
    gpt_loss(ref(idx), tgt).backward()
    with count_traffic() as t:
        tp.loss(idx, tgt).backward()
        tp.sync_grads()
    want = tp_traffic(CFG, 2, 8, 1, kw.get("sequence_parallel", False),
                      keep_gathered=kw.get("keep_gathered", True))
    assert (t.calls, t.buffer_bytes) == (want.calls, want.buffer_bytes)
    ref_p = dict(ref.named_parameters())
    for name, p in tp.named_parameters():
        assert torch.allclose(p.grad, ref_p[name].grad, atol=1e-6), name


def test_recomputing_the_gathered_input_costs_two_all_gathers_per_block(group):
    kept = tp_traffic(CFG, 2, 8, 2, True, blocks_only=True)
    again = tp_traffic(CFG, 2, 8, 2, True, blocks_only=True, keep_gathered=False)
    assert again.calls["all_gather"] - kept.calls["all_gather"] == 2
    assert again.buffer_bytes["all_gather"] - kept.buffer_bytes["all_gather"] == 2 * 2 * 8 * 24 * 4
    step = tp_traffic(CFG, 2, 8, 2, True, keep_gathered=False)
    assert step.calls["all_gather"] == 4 * CFG.n_layer + 2 + 2 * CFG.n_layer
    assert tp_traffic(CFG, 2, 8, 2, False, keep_gathered=False) == tp_traffic(CFG, 2, 8, 2)
    with pytest.raises(ValueError, match="keep_gathered=False needs sequence_parallel"):
        parallelize_gpt(GPT(CFG), keep_gathered=False)


def test_column_region_refuses_bad_arguments(group):
    lin = ColumnParallelLinear.from_linear(nn.Linear(4, 4))
    with pytest.raises(TypeError, match="linears\\[0\\] must be a ColumnParallelLinear"):
        column_region(torch.zeros(1, 2, 4), [nn.Linear(4, 4)])
    with pytest.raises(ValueError, match="linears must hold at least one"):
        column_region(torch.zeros(1, 2, 4), [])
    with pytest.raises(ValueError, match="x must be \\(B, T, C\\)"):
        column_region(torch.zeros(2, 4), [lin])
    (y,) = column_region(torch.ones(1, 2, 4), [lin])
    assert torch.allclose(y, lin(torch.ones(1, 2, 4)))


def test_speedup_crossing_reads_where_measured_speedups_pass_1x():
    from perfkit.parallel import speedup_crossing

    rounds = 21
    flat = lambda x: [x * (1 + 0.01 * (i - rounds // 2)) for i in range(rounds)]   # noqa: E731
    est = speedup_crossing([128, 256, 512], [flat(0.6), flat(0.8), flat(1.4)])
    # between 256 (0.8) and 512 (1.4), a third of the way in log width: 256 * 2 ** (1 / 3)
    assert est.value == pytest.approx(256 * 2 ** (1 / 3))
    assert est.low < est.value < est.high and 256 < est.low and est.high < 512
    assert est.has_interval and "cross 1x" in est.method
    # every width can set an end (an end is read where its curve first crosses 1x, and the high
    # end of 3 widths can lie past the two the medians straddle), so each width's interval is
    # taken at level ** (1 / k) and the coverage is all k together, never below the level
    assert est.method.endswith("each of the 3 widths' intervals at least 96.5%, all together at the "
                               "coverage printed (any width can set an end)")
    three = [stats.median_interval(flat(x), 0.9 ** (1 / 3)).coverage for x in (0.6, 0.8, 1.4)]
    assert est.coverage == pytest.approx(math.prod(three)) and est.coverage >= 0.9
    # with five widths a product of two-width intervals at 94.9 % would fall below 90 % over all
    # five; taken at 0.9 ** (1 / 5) each, all five together still reach it
    five = speedup_crossing([64, 128, 256, 512, 1024], [flat(x) for x in (0.4, 0.6, 0.8, 1.4, 2.0)])
    each = [stats.median_interval(flat(x), 0.9 ** 0.2).coverage for x in (0.4, 0.6, 0.8, 1.4, 2.0)]
    assert five.coverage == pytest.approx(math.prod(each)) and five.coverage >= 0.9
    # every width already pays, or none does: the crossing lies outside the widths timed
    assert speedup_crossing([128, 256], [flat(1.2), flat(1.5)]) is None
    assert speedup_crossing([128, 256], [flat(0.5), flat(0.7)]) is None
    # too few rounds for an interval: the point alone, which a verdict calls inconclusive
    few = speedup_crossing([128, 256], [[0.8, 0.9], [1.1, 1.2]])
    assert not few.has_interval and few.low == few.value == few.high
    # an interval end that would reach far beyond the widths stops at 16x them
    wide = speedup_crossing([128, 256], [flat(0.9), [x * (1 + 0.5 * (i - 10) / 10) for i, x in
                                                      enumerate(flat(1.05))]])
    assert wide.high <= 256 * 16


def test_charges_name_which_way_the_sweep_moves_each_bound():
    from perfkit.parallel import charge_choice, sweep_charge_note
    # the sweep took more than the fit's line at the small widths: its bounds are the stricter ones there
    got = charge_choice([128, 256, 1024], [2.2e-3, 2.88e-3, 1e-3], [1.39e-3, 1.46e-3, 2.08e-3])
    assert "more than the fit's line at C = 128, 256 (1.58x to 1.97x: the bound there lower" in got
    assert "less than the fit's line at C = 1024 (0.48x: the bound there higher" in got
    sizes, secs = [65536, 131072, 262144, 1048576], [1.8e-3, 2.2e-3, 2.88e-3, 0.912e-3]
    note = sweep_charge_note(sizes, secs, 262144, 1.46e-3, 18.5e-3, 2, measured=0.923)
    assert "charged 2.88 ms, the sweep's median at that size, above both sizes timed beside it" in note
    assert "(131 kB: 2.2 ms; 1.05 MB: 912 µs), 1.97x the fit's line" in note
    assert "the bound would be 1.23x, which the measured 0.923x lies under: the sweep's charge" in note
    note = sweep_charge_note(sizes, secs, 200000, 1.46e-3, 18.5e-3, 2, measured=1.3)
    assert "read off the sweep between the sizes timed around it" in note and "crosses too" in note
    with pytest.raises(ValueError):
        charge_choice([128], [1e-3, 2e-3], [1e-3])


def test_charge_dips_names_a_width_charged_less_than_a_smaller_payload():
    from perfkit.parallel import charge_dips
    # notebook 10's sweep: 4 x 262 kB charged less than 4 x 131 kB; the larger widths rise again
    got = charge_dips([128, 256, 512, 1024], [131072, 262144, 524288, 1048576],
                      [1.4725e-3, 0.6925e-3, 1.6e-3, 2.5e-3], repeat=5)
    assert "C = 256's, 2.77 ms for 4 x 262 kB, is below C = 128's, 5.89 ms for 4 x 131 kB" in got
    assert "C = 512" not in got and "median of 5 repetitions" in got and got.startswith(" ")
    # a width below an earlier, not only the adjacent, smaller payload is named against the largest
    got = charge_dips([1, 2, 3], [10, 20, 30], [3e-3, 1e-3, 2e-3], calls=1)
    assert "C = 3's, 2 ms for 1 x 30 B, is below C = 1's, 3 ms" in got and "C = 2's" in got
    assert charge_dips([128, 256], [131072, 262144], [1e-3, 2e-3]) == ""   # monotone: nothing to say
    with pytest.raises(ValueError, match="differ in length"):
        charge_dips([128], [1.0, 2.0], [1e-3])


def test_intercept_note_names_the_sweeps_calls_that_beat_the_fit():
    from perfkit.parallel import intercept_note
    sizes, secs = [1024, 65536, 131072, 262144], [1.1e-3, 0.95e-3, 0.79e-3, 0.701e-3]
    got = intercept_note(sizes, secs, 1.02e-3)
    assert "below the fit's intercept, 1.02 ms: 65.5 kB, 131 kB, 262 kB" in got
    assert "the fastest, 262 kB in 701 µs, puts a call's fixed cost on this run at most that, 0.69x" in got
    assert "not a latency" in got
    assert "does not contradict it" in intercept_note(sizes, secs, 0.5e-3)



def test_offset_note_names_the_biases_a_held_crossover_rests_on():
    from perfkit.parallel import offset_note

    got = offset_note(105e9, 76.7e9, [1.51e-3, 1.58e-3, 1.72e-3, 1.99e-3], [1.06e-3, 542e-6, 679e-6, 815e-6],
                      [5.88e-3, 10.6e-3, 15.3e-3, 24.3e-3])
    assert got.startswith(" Its compute rate (1.37x the measured rate) and the fit's line (1.42x to 2.92x "
                          "what the sweep's calls took at the blocks' sizes) put the model's crossover")
    assert "5.88 ms to 24.3 ms above their floor" in got and "errors that offset" in got
    assert len(got.split()) <= 75   # a verdict's explanation, not a paragraph (the old one ran to 90 words)
    fair = offset_note(76.7e9, 76.7e9, [1e-3], [1e-3], [0.0])
    assert fair == ""
    low = offset_note(50e9, 76.7e9, [1e-3], [2e-3], [1e-3])
    assert "put the model's crossover lower" in low and "errors that offset" not in low


def test_offset_note_short_carries_the_inputs_errors_into_a_headline():
    from perfkit.parallel import offset_note

    got = offset_note(105e9, 75.5e9, [1.2e-3, 1.5e-3], [1.9e-3, 1.7e-3], [1.27e-3, 6.32e-3], short=True)
    assert got == ("; the model's inputs were off, its compute rate (1.39x the measured rate), the fit's "
                   "line (0.63x to 0.88x what the sweep's calls took at the blocks' sizes), the split blocks "
                   "1.27 ms to 6.32 ms above their floor: errors that can offset, so a match does not "
                   "confirm them")
    assert offset_note(76.7e9, 76.7e9, [1e-3], [1e-3], [0.0], short=True) == ""


def test_bound_text_prints_the_bound_at_its_precision_not_digits_its_inputs_lack():
    from perfkit.parallel import bound_text

    # the old cell grew digits until the ends parted: "1.9586x (1.9579x to 1.9591x)"
    assert bound_text(1.95862, 1.95791, 1.95913) == "1.96x"
    assert bound_text(1.342, 1.331, 1.352) == "1.34x (1.33x to 1.35x)"
    with pytest.raises(ValueError):
        bound_text(1.0, 1.2, 1.1)
