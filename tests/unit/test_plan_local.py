"""perfkit.plan.local's tensor-parallel predictions: what a TP rank holds, the all-reduces of a
TP step, the step and the memory of TP and DP x TP on this machine.

Counts are checked against the plain GPT itself (its parameters, split by hand as
perfkit.parallel.tp_gpt splits them) and against perfkit.parallel.tp_gpt.tp_traffic, the
count the distributed tests hold against the collectives a step makes; each check names the
wrong implementation it catches. No process group is started here.
"""

import dataclasses

import pytest

from perfkit.comm.alpha_beta import AlphaBeta, ring_allreduce_time
from perfkit.hw import MachineLimits
from perfkit.memory.model_states import zero_model_states
from perfkit.parallel.gpt import GPT, GPTConfig
from perfkit.parallel.tp_gpt import tp_traffic
from perfkit.plan import (
    TP_LAYOUTS,
    Layout,
    fit_step_efficiency,
    local_cluster,
    memory_per_gpu,
    plain_gpt_spec,
    rounds_link,
    stage_params,
    step_time,
    tiny_gpt2_spec,
    tp_allreduces,
    tp_memory,
    tp_prediction,
    tp_rank_params,
    tp_step_time,
)

SIZES = [dict(vocab_size=1024, block_size=64, n_embd=64, n_layer=2, n_head=2),
         dict(vocab_size=96, block_size=16, n_embd=32, n_layer=3, n_head=4)]
LIM = MachineLimits("cpu", "test", {"float32": 2e11}, 3e10)


def _spec(kw: dict):
    return plain_gpt_spec(**kw)


def _split_by_hand(kw: dict, t: int) -> int:
    """Parameters one rank holds, from the unsplit GPT's own parameters: column-parallel
    q, k, v, fc and the head split by rows with their biases, row-parallel projections split
    by columns with their biases whole (added after the all-reduce), the token embedding
    split by vocabulary, the position table and every LayerNorm whole."""
    held = 0
    for name, p in GPT(GPTConfig(**kw)).named_parameters():
        split = (name.endswith(("q.weight", "k.weight", "v.weight", "fc.weight", "q.bias", "k.bias",
                                "v.bias", "fc.bias", "proj.weight", "lm_head.weight", "wte.weight")))
        held += p.numel() // t if split else p.numel()
    return held


@pytest.mark.parametrize("kw", SIZES)
def test_plain_gpt_spec_counts_the_plain_gpt(kw):
    # wrong: tiny_gpt2_spec's tied head (the plain GPT's output layer is its own matrix)
    n = sum(p.numel() for p in GPT(GPTConfig(**kw)).parameters())
    assert _spec(kw).num_params == n
    assert tiny_gpt2_spec(**kw).num_params == n - kw["vocab_size"] * kw["n_embd"]


@pytest.mark.parametrize("kw", SIZES)
@pytest.mark.parametrize("t", [1, 2])
def test_a_tp_rank_holds_the_split_weights_and_the_whole_norms(kw, t):
    spec = _spec(kw)
    assert tp_rank_params(spec, t) == _split_by_hand(kw, t)
    # the planner's count is the same (it once divided the norms and positions too)
    assert tp_rank_params(spec, t) == stage_params(spec, Layout(tp=t))


def test_the_default_split_is_what_the_tp_plan_job_counted():
    # numel on each rank of perfkit.jobs.tp_plan's memory task, 2 and 4 processes
    assert tp_rank_params(plain_gpt_spec(), 2) == 120128


@pytest.mark.parametrize("zero", [0, 1])
def test_dp_x_tp_model_states_are_zeros_formula_on_a_ranks_parameters(zero):
    spec = _spec(SIZES[0])
    lay = dataclasses.replace(TP_LAYOUTS["dp_tp"], zero=zero, micro_batch=8)
    mem = tp_memory(spec, lay, 16)
    want = zero_model_states(tp_rank_params(spec, 2), 2, zero, "fp32_adam")
    assert (mem.params, mem.grads, mem.optimizer) == (want.params, want.grads, want.optimizer)
    assert mem.model_states == 16 * 120128 if zero == 0 else mem.model_states < 16 * 120128
    # the activations stay the planner's (Korthikanti et al.'s count, split by TP)
    assert mem.activations == memory_per_gpu(spec, lay, 16, "fp32_adam").activations


@pytest.mark.parametrize("kw", SIZES)
@pytest.mark.parametrize("t, batch", [(2, 8), (4, 3)])
def test_tp_allreduces_are_tp_traffics_count(kw, t, batch):
    if kw["n_head"] % t:
        pytest.skip("t must divide the heads")
    spec = _spec(kw)
    got = tp_allreduces(spec, Layout(tp=t, micro_batch=batch))
    want = tp_traffic(GPTConfig(**kw), batch, kw["block_size"], t)
    # wrong: the planner's 4 per block (no embedding, head or loss), or the loss in act_bytes
    assert sum(n for n, _ in got.values()) == want.calls["all_reduce"]
    assert sum(n * b for n, b in got.values()) == want.buffer_bytes["all_reduce"]
    assert tp_allreduces(spec, Layout(dp=2)) == {}


def test_tp_step_time_prices_every_allreduce_on_the_link():
    spec, link = _spec(SIZES[0]), AlphaBeta(2e-4, 3e9)
    c = local_cluster(LIM, link, processes=2, memory_bytes=1e9, efficiency=0.2)
    lay = Layout(tp=2, micro_batch=8)
    for gb, m in ((8, 1), (24, 3)):   # m micro-batches: m times the collectives
        t, planner = tp_step_time(spec, lay, c, gb), step_time(spec, lay, c, gb, "fp32_adam", 4.0)
        msg, small = 8 * 64 * 64 * 4, 8 * 64 * 4
        want = m * (10 * ring_allreduce_time(msg, 2, link) + 3 * ring_allreduce_time(small, 2, link))
        assert t.terms["tensor-parallel"] == pytest.approx(want)
        # the planner now counts them all too (it once counted the blocks' 8 alone)
        assert planner.terms["tensor-parallel"] == pytest.approx(want)
        assert t.terms == pytest.approx(planner.terms)
        assert t.total_s == pytest.approx(sum(t.terms.values()))
        assert t.tokens_per_s == pytest.approx(gb * 64 / t.total_s)
        assert t.mfu == pytest.approx(planner.mfu * planner.total_s / t.total_s)
        assert t.limiter in t.terms or t.limiter == "compute"
    # one process alone: no collective, the planner's step
    solo = Layout(micro_batch=8)
    assert tp_step_time(spec, solo, c, 8).total_s == pytest.approx(
        step_time(spec, solo, c, 8, "fp32_adam", 4.0).total_s)


def test_the_rounds_link_sums_the_calls_that_waited():
    # 2 of 5 calls waited a 4 ms time slice for a descheduled rank: a step pays them
    small, big = [3e-4, 3e-4, 3e-4, 4.3e-3, 4.3e-3], [8e-4, 8e-4, 8e-4, 4.8e-3, 4.8e-3]
    link = rounds_link([4096, 1 << 20], [small, big])
    for n, ts in ((4096, small), (1 << 20, big)):
        # wrong: each size's median (0.3 ms), which no sum of calls pays
        assert ring_allreduce_time(n, 2, link) == pytest.approx(sum(ts) / len(ts), rel=1e-3)
    with pytest.raises(ValueError, match="times"):
        rounds_link([4096, 1 << 20], [small])
    with pytest.raises(ValueError, match="times"):
        rounds_link([4096, 1 << 20], [small, []])


def test_tp_prediction_fits_on_ddp_and_gives_each_rank_the_global_batch():
    spec, link = _spec(SIZES[0]), AlphaBeta(3e-4, 2e9)
    c = local_cluster(LIM, AlphaBeta(1e-5, 1e10), processes=2, memory_bytes=1e9)
    p = tp_prediction(c, 0.03, link, spec, batch=8)
    here = dataclasses.replace(c, intra=link, inter=link)
    assert p.link == link and p.model == spec
    ddp = Layout(dp=2, micro_batch=8)
    assert p.efficiency == pytest.approx(fit_step_efficiency(spec, ddp, here, 16, 0.03))
    assert step_time(spec, ddp, here.with_efficiency(p.efficiency), 16, "fp32_adam",
                     4.0).total_s == pytest.approx(0.03, rel=1e-6)
    # wrong: TP on 8 sequences (DDP's per rank): the same global batch, whole on each rank
    assert p.layout == Layout(tp=2, micro_batch=16)
    assert p.time.total_s == pytest.approx(
        tp_step_time(spec, p.layout, here.with_efficiency(p.efficiency), 16).total_s)
    with pytest.raises(ValueError, match="ddp_step_s"):
        tp_prediction(c, 0.0, link)
    with pytest.raises(TypeError, match="link"):
        tp_prediction(c, 0.03, 3e-4)


@pytest.mark.parametrize("call, exc, match", [
    (lambda s: tp_rank_params(s, 0), ValueError, "tp"),
    (lambda s: tp_rank_params(s, 3), ValueError, "layout.tp"),
    (lambda s: tp_rank_params("gpt", 2), TypeError, "model"),
    (lambda s: tp_allreduces(s, Layout(tp=2, pp=2)), ValueError, "layout"),
    (lambda s: tp_allreduces(s, Layout(tp=2, sp=True)), ValueError, "layout"),
    (lambda s: tp_allreduces(s, "tp2"), TypeError, "layout"),
    (lambda s: tp_memory(s, Layout(tp=4), 8), ValueError, "layout.tp"),
    (lambda s: tp_memory(s, Layout(tp=2), 0), ValueError, "global_batch"),
    (lambda s: tp_step_time(s, Layout(tp=2), "cpu", 8), TypeError, "cluster"),
    (lambda s: plain_gpt_spec(n_embd=63), ValueError, "divisible"),
])
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call(plain_gpt_spec())


def test_local_link_caches_a_fit_only_when_the_sweep_resolves_a_bandwidth(monkeypatch, tmp_path):
    import json

    from perfkit.comm import UNRESOLVED_BANDWIDTH
    from perfkit.plan import local as local_mod

    monkeypatch.setenv("PERFKIT_CACHE", str(tmp_path))
    sizes = list(local_mod.LINK_SIZES)
    asked = []

    def calls(times):  # each size: three calls, one of them slow (times[i] is their mean)
        def launch(job, nproc, argv, **k):
            asked.append(json.loads(argv[1]))
            return [{"isolated": {"op": "all_reduce", "sizes": sizes,
                                  "times_s": [[t / 2, t / 2, 2 * t] for t in times]}}]
        return launch

    # a busy machine: every size took the same time, no bandwidth term
    monkeypatch.setattr(local_mod.dist, "launch", calls([1e-3] * len(sizes)))
    flat = local_mod.local_link(refresh=True)
    assert flat.bandwidth >= UNRESOLVED_BANDWIDTH
    assert not local_mod.link_cache_path().exists()
    # isolated all-reduces, each after compute, timed at every size the link names
    assert asked[0]["isolated"]["sizes"] == sizes and asked[0]["isolated"]["gap_s"] > 0
    # means that grow with size: 100 us + n / 1 GB/s, cached and read back; the medians
    # (half the means) would give half the start-up and twice the bandwidth
    monkeypatch.setattr(local_mod.dist, "launch", calls([1e-4 + n / 1e9 for n in sizes]))
    link = local_mod.local_link(refresh=True)
    assert link.bandwidth == pytest.approx(1e9, rel=1e-6) and link.alpha_s == pytest.approx(5e-5, rel=1e-6)
    assert local_mod.link_cache_path().exists()
    monkeypatch.setattr(local_mod.dist, "launch", calls([1e-3] * len(sizes)))
    assert local_mod.local_link() == link  # from the cache, no new sweep
    # a cache written another way (notebook 02's back-to-back sweep) is measured again
    local_mod.link_cache_path().write_text(json.dumps({"alpha_s": 1e-6, "bandwidth": 1e12}))
    monkeypatch.setattr(local_mod.dist, "launch", calls([2e-4 + n / 1e9 for n in sizes]))
    again = local_mod.local_link()
    assert again.alpha_s == pytest.approx(1e-4, rel=1e-6) and json.loads(
        local_mod.link_cache_path().read_text())["alpha_s"] == again.alpha_s


@pytest.mark.parametrize("sizes", [[0], [1024, -1], [1.5], [True]])
def test_the_zero_benchs_link_sizes_are_checked_before_the_job(sizes):
    from perfkit.jobs.zero_bench import compare

    with pytest.raises(ValueError, match=r"link_sizes\[\d\] must be an int >= 1"):
        compare(["ddp_adamw"], link_sizes=sizes)


def test_collective_cost_reads_every_figure_from_the_paired_differences():
    """The milliseconds, the multiple of the charge and the interval all come from one
    statistic, the median of the rounds' paired differences, not a median of ratios times a
    separate median step (which gave a step no round measured). Numbers checkable by hand:
    DDP 40 ms every round, ZeRO-3 50..58 ms, so the differences are 10..18 ms, median 14 ms;
    predicted 10 ms, charged 14 ms: the collectives cost 14 + 4 = 18 ms, 1.29x the charge."""
    from perfkit.plan import collective_cost

    base = [0.040] * 9
    steps = [0.040 + d / 1e3 for d in (10, 11, 12, 13, 14, 15, 16, 17, 18)]
    c = collective_cost(steps, base, 0.010, 0.014)
    assert abs(c.gap.value - 0.014) < 1e-12 and abs(c.cost_s - 0.018) < 1e-12
    text = str(c)
    assert "exceeds DDP's by 14.0 ms (median of 9 rounds' differences) against a predicted 10.0 ms" in text
    assert "4.0 ms above the prediction" in text
    assert "they cost 18.0 ms at the median, 1.29x the charge" in text
    # the median is the point, not a bound: "at most" names the top of the difference's interval
    # (14 + 17 - 10 = 21 ms, 1.50x), never the median that its own interval exceeds
    # the label names the difference's own interval (11 to 17 ms), the cost over it printed apart:
    # "the difference's 96% interval (15.0 to 21.0 ms)" once named the cost's range
    assert ("and at most 21.0 ms, 1.50x, with the difference at the top of its 96% interval (11.0 to "
            "17.0 ms; the collectives' cost over it: 15.0 to 21.0 ms, 1.07x to 1.50x)") in text
    assert "difference's 96% interval (15.0" not in text
    assert "at most 18.0 ms" not in text
    # a bound only if the base's own collectives took their charge: its fitted compute holds their excess
    assert "an upper bound if DDP's own collectives took their charge" in text
    assert "no step here is timed with its collectives skipped" in text
    assert "(its collectives, if DDP's took their charge and the compute its fitted cost" in c.headline()
    assert c.headline().endswith("1.29x their charge at the median, at most 1.50x with the difference at the "
                                 "top of its 96% interval, 17.0 ms)") and c.point()[2] == " ms"
    assert c.point()[3:] == pytest.approx((11.0, 17.0))
    assert "lies below the measured interval (11.0 to 17.0 ms)" in text
    assert c.headline().startswith("10.0 / 14.0 ms (") and "at most 1.29x" not in c.headline()
    # the uncharged flags' all-reduce: where charging it alone would put the prediction
    flags = str(collective_cost(steps, base, 0.010, 0.014, uncharged_s=0.0022))
    assert "would put the predicted 10.00 ms at 12.20 ms, inside the measured interval" in flags
    assert "the whole predicted difference" not in flags   # 2.2 ms left out of 10 ms predicted: no note
    assert "would put the predicted 10.00 ms at 10.20 ms, still below" in str(
        collective_cost(steps, base, 0.010, 0.014, uncharged_s=0.0002))
    inside = str(collective_cost(steps, base, 0.014, 0.004))
    assert "inside the measured interval" in inside and "below the measured" not in inside
    # a difference below what the model predicts without its collectives: no negative cost printed
    assert "cost nothing" in str(collective_cost(base, base, 0.01, 0.004))
    # a step faster than the base's is said so, not as a negative excess
    assert "falls short of DDP's by 1.00 ms" in str(collective_cost([0.039] * 9, base, -0.002, 0.004))
    with pytest.raises(ValueError, match="same number of rounds"):
        collective_cost(steps, base[:3], 0.010, 0.014)


def test_ring_priced_says_which_backend_a_prediction_rests_on():
    """The model prices gloo's reduce-scatter as the whole all-reduce gloo runs; NCCL's ring runs
    half one. Where the ring's price would move the predicted difference across the measured
    interval's edge, the sentence says the verdict rests on gloo's price; a step with no
    reduce-scatter (both prices agree) or no interval gets no sentence."""
    from perfkit.plan import collective_cost, ring_priced

    base = [0.040] * 9
    steps = [0.040 + d / 1e3 for d in (10, 11, 12, 13, 14, 15, 16, 17, 18)]   # interval 11.0 to 17.0 ms
    c = collective_cost(steps, base, 0.012, 0.014)
    text = ring_priced(c, 0.009)
    assert text.startswith(" On gloo, which ran here, a reduce-scatter all-reduces the buffer")
    assert "(12.0 ms predicted)" in text
    assert "would be 9.0 ms, below the measured interval (11.0 to 17.0 ms)" in text
    assert text.endswith("rests on pricing the reduce-scatter as gloo runs it.")
    both = ring_priced(collective_cost(steps, base, 0.010, 0.014), 0.008)
    assert both.endswith(": on either price it lies below it.")
    assert ring_priced(c, 0.012) == ""
    assert ring_priced(collective_cost([0.05], [0.04], 0.012, 0.014), 0.009) == ""
    with pytest.raises(ValueError):
        ring_priced(c, float("nan"))


def test_collective_cost_sentences_add_up_as_printed():
    """Each printed sum and difference is that of the printed figures: a difference of 1.14 ms
    against a predicted 0.96 ms once read "1.1 ms ... 1.0 ms ...: 0.2 ms above", and a cost of
    3.35 ms on a 3.21 ms charge "3.4 ms, 1.04x" of a printed "3.2 ms"."""
    import re

    from perfkit.plan import collective_cost

    base = [0.022] * 9
    steps = [0.022 + d / 1e5 for d in (90, 100, 105, 110, 114, 120, 125, 130, 140)]
    text = str(collective_cost(steps, base, 0.00096, 0.00321, uncharged_s=0.0017))
    num = r"(-?[0-9.]+)"

    def read(pattern: str) -> list[float]:
        return [float(x) for x in re.search(pattern.replace("N", num), text).groups()]

    g, p, off = read(r"by N ms \(median.*?predicted N ms more: N ms above")
    c, k, r = read(r"collectives N ms;.*?they cost N ms at the median, Nx the charge")
    ilo, ihi, lo, hi = read(r"interval \(N to N ms; the collectives' cost over it: N to N ms")
    # the uncharged 1.7 ms outweighs the whole predicted 0.96 ms: the sentence says by how much
    eu, big, pu, moved = read(r"uncharged N ms \(Nx the whole predicted difference\) alone would put "
                              r"the predicted N ms at N ms")
    assert big == pytest.approx(1.77)
    assert off == pytest.approx(g - p, abs=1e-9) and k == pytest.approx(c + off, abs=1e-9)
    assert r == pytest.approx(round(k / c, 2), abs=0.006)
    assert lo == pytest.approx(c + ilo - p, abs=1e-9) and hi == pytest.approx(c + ihi - p, abs=1e-9)
    assert eu == pytest.approx(1.700, abs=1e-9) and moved == pytest.approx(pu + eu, abs=1e-9)
    with pytest.raises(ValueError, match="comm_s"):
        collective_cost(steps, base, 0.010, 0.0)


def test_collective_cost_rounds_each_figure_once_so_it_reads_the_same_everywhere():
    """A predicted 7.25 ms plus an uncharged 1.35 ms once read "at 8.7 ms" (the rounded 7.3 + 1.4)
    in the sentence and "8.6 ms" in full_charge's line; a cost of 14.48 ms on a 9.32 ms charge
    read "1.56x" (the rounded 14.5 / 9.3) in the sentence and 1.55x in the headline. Each figure
    is now computed unrounded and rounded once, so both places print one value."""
    import re

    from perfkit.plan import collective_cost, full_charge

    base = [0.024] * 9
    steps = [0.024 + d / 1e3 for d in (10.6, 11.0, 11.5, 12.0, 12.48, 13.0, 14.0, 14.5, 15.1)]
    c = collective_cost(steps, base, 0.00725, 0.00932, uncharged_s=0.00135)
    text = str(c)
    assert "would put the predicted 7.25 ms at 8.60 ms, still below" in text
    assert "zero3 8.60 ms against 11.0 to 14.5 ms" in full_charge({"zero3": c})
    (said,) = re.search(r"they cost [0-9.]+ ms at the median, ([0-9.]+)x the charge", text).groups()
    assert said == f"{c.over_charge:.2f}" and f": {said}x their charge at the median" in c.headline()
    (top,) = re.search(r"and at most [0-9.]+ ms, ([0-9.]+)x, with the difference at the top", text).groups()
    assert f"at most {top}x with the difference at the top of its {c.gap.label}, " in c.headline()
    # a later sentence repeats the cost as printed: 11.5 + 26.3 - 9.0 = 28.8 ms, where the unrounded
    # 11.46 + 26.26 - 9.04 = 28.68 once read "28.7 ms" a line below "they cost 28.8 ms"
    z3 = collective_cost([0.05 + 0.02626] * 4, [0.05] * 4, 0.00904, 0.01146)
    assert "they cost 28.8 ms, 2.50x the charge (a median, no interval)" in str(z3)
    assert z3.said_cost_ms == pytest.approx(28.8) and "at most" not in z3.headline()
    assert round(z3.cost_s * 1e3, 1) == pytest.approx(28.7)


def test_full_charge_says_where_every_call_charged_in_full_puts_each_prediction():
    """A step verdict can hold on its window with the flags' all-reduce left uncharged; charged in
    full, the ZeRO-1 prediction lay above its measured interval and ZeRO-3's below its own, so
    none of the layouts agreed with the model's price per call, which the verdicts alone hid."""
    from perfkit.plan import collective_cost, full_charge

    base = [0.040] * 9
    small = [0.040 + d / 1e4 for d in (-8, -4, -2, 0, 2, 5, 9, 12, 17)]     # -0.8 .. 1.7 ms
    large = [0.040 + d / 1e3 for d in (10, 11, 12, 13, 14, 15, 16, 17, 18)]   # 10 .. 18 ms
    z1 = collective_cost(small, base, 0.00101, 0.00334, uncharged_s=0.00162)
    z3 = collective_cost(large, base, 0.0066, 0.0109, uncharged_s=0.00162)
    assert z1.uncharged_s == pytest.approx(0.00162)
    text = full_charge({"zero1": z1, "zero3": z3})
    assert "zero1 2.630 ms against" in text and "zero3 8.22 ms against 11.0 to 17.0 ms" in text
    assert "above its interval for zero1; below its interval for zero3" in text
    assert "none of the 2 agrees with the model charging every call in full" in text
    assert "too high for some layouts' calls and too low for others'" in text
    fits = full_charge({"zero1": collective_cost(small, base, 0.0001, 0.00334, uncharged_s=0.0002)})
    assert "inside its interval for zero1: this layout agrees" in fits
    one = full_charge({"zero1": z1, "ok": collective_cost(small, base, 0.0001, 0.00334)})
    assert "1 of the 2 agrees" in one and "for zero1 the step costs less than the model's price" in one
    assert "no interval" in full_charge({"a": collective_cost([0.05], [0.04], 0.01, 0.01)})
    with pytest.raises(ValueError, match="at least one"):
        full_charge({})
    with pytest.raises(TypeError):
        full_charge({"a": 1.0})


def test_with_call_charges_a_call_the_planner_does_not_count():
    """perfkit's ZeroOptimizer all-reduces one flag per parameter every step; the planner counted no
    such call, so its ZeRO predictions left out about 1.7 ms on this machine, more than the whole
    predicted ZeRO-1 difference from DDP. with_call adds it as a term of its own to the stages that
    make it, and without_collectives drops it with the other collectives."""
    from perfkit.plan import (
        COLLECTIVE_TERMS,
        FLAGS_TERM,
        course_predictions,
        local_cluster,
        with_call,
        without_collectives,
    )
    from perfkit.plan.local import tiny_gpt2_spec

    here = local_cluster(LIM, AlphaBeta(5e-4, 1e9), processes=2, memory_bytes=1e9)
    pred = course_predictions(here, 0.02, batch=4, model=tiny_gpt2_spec())
    got = with_call(pred, 0.0017)
    assert FLAGS_TERM in COLLECTIVE_TERMS and got.efficiency == pred.efficiency
    assert got.times["ddp_adamw"] == pred.times["ddp_adamw"]   # the fitted layout makes no such call
    for n in ("zero1", "zero2", "zero3"):
        t, old = got.times[n], pred.times[n]
        assert t.terms[FLAGS_TERM] == 0.0017 and t.total_s == pytest.approx(old.total_s + 0.0017)
        assert t.total_s == pytest.approx(sum(t.terms.values()))
        assert t.tokens_per_s * t.total_s == pytest.approx(old.tokens_per_s * old.total_s)
        assert FLAGS_TERM not in old.terms and t.collectives_s == pytest.approx(old.collectives_s + 0.0017)
    # dropped with the other collectives: the model without collectives is the same either way
    bounds = (0.5, 2.0)
    assert (without_collectives(got.times["zero1"].terms, got.times["ddp_adamw"].terms, bounds)
            == without_collectives(pred.times["zero1"].terms, pred.times["ddp_adamw"].terms, bounds))
    with pytest.raises(ValueError, match="layouts"):
        with_call(pred, 0.001, layouts=("ddp_adamw",))
    with pytest.raises(ValueError, match="layouts"):
        with_call(pred, 0.001, layouts=("zero4",))
    with pytest.raises(ValueError, match="seconds"):
        with_call(pred, -1.0)
    with pytest.raises(TypeError, match="pred"):
        with_call({}, 0.001)
