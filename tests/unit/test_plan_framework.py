"""perfkit.plan.framework: the search keeps to what a run's framework offered. Megatron-LM of
April 2021 had no ZeRO, SP or CP, needed stages that divide the layers, kept 20 bytes per
parameter and flattened its gradients for the all-reduce; a planner that offers it more lifts
the memory limit that set its published tensor-parallel sizes."""

import dataclasses

import pytest

from perfkit.memory.model_states import RECIPES, StateRecipe
from perfkit.plan import (
    MEGATRON_LM_2021,
    MEGATRON_LM_2021_FP16,
    Framework,
    Layout,
    compare,
    enumerate_layouts,
    framework_problems,
    layout_ranks,
    megatron_runs,
    memory_per_gpu,
    plan,
    stage_params,
    step_time,
)


def _row(label):
    return next(r for r in megatron_runs() if r.label == label)


def test_megatron_2021_keeps_20_bytes_per_parameter():
    r = MEGATRON_LM_2021_FP16  # fp16 weights and grads, fp32 grads kept, fp32 main weights + Adam
    assert (r.param_bytes, r.grad_bytes, r.optimizer_bytes) == (2, 6, 12)
    assert MEGATRON_LM_2021.recipe is r and MEGATRON_LM_2021.grad_copy_bytes == 2
    assert "a8d172b3" in MEGATRON_LM_2021.source and "optimizer.py" in MEGATRON_LM_2021.source


def test_the_search_offers_megatron_2021_only_what_it_had():
    run = _row("GPT 39B on 512")  # 48 layers
    got = enumerate_layouts(run.model, 512, run.global_batch, 8, framework=MEGATRON_LM_2021)
    assert got and all(framework_problems(MEGATRON_LM_2021, run.model, x) == [] for x in got)
    assert {x.zero for x in got} == {0}  # no distributed optimizer
    assert not any(x.sp for x in got) and {x.cp for x in got} == {1}
    assert {x.recompute for x in got} == {"none", "full"}
    assert all(48 % x.pp == 0 for x in got) and {x.pp for x in got} >= {1, 2, 4, 8, 16}
    # without a framework the same search offers all of them
    anyf = enumerate_layouts(run.model, 512, run.global_batch, 8)
    assert {x.zero for x in anyf} == {0, 1, 2, 3} and any(x.sp for x in anyf)
    assert any(48 % x.pp for x in anyf)  # uneven pipelines
    # a constraint the framework did not offer is refused, naming it
    with pytest.raises(ValueError, match=r"fixed zero=1 .*Megatron-LM"):
        enumerate_layouts(run.model, 512, run.global_batch, 8, {"zero": 1}, MEGATRON_LM_2021)


def test_framework_problems_name_each_missing_option():
    m = _row("GPT 39B on 512").model
    fw = MEGATRON_LM_2021
    assert framework_problems(fw, m, Layout(dp=32, tp=8, pp=2, recompute="full")) == []
    bad = Layout(dp=8, tp=4, pp=5, cp=2, zero=1, recompute="selective", sp=True)
    got = " | ".join(framework_problems(fw, m, bad))
    for word in ("ZeRO stage 1", "sequence parallelism", "context parallelism", "'selective'",
                 "divide the 48 layers"):
        assert word in got
    assert framework_problems(fw, m, Layout(pp=3, stages=(16, 16, 16))) == []
    assert framework_problems(fw, m, Layout(pp=3, stages=(15, 17, 16)))  # explicit, uneven
    everything = Framework("any", "none")
    assert framework_problems(everything, m, bad) == []


def test_every_published_megatron_layout_is_one_its_framework_ran():
    for r in megatron_runs():
        assert r.framework is MEGATRON_LM_2021 and r.recipe is MEGATRON_LM_2021_FP16
        assert framework_problems(r.framework, r.model, r.layout) == []


def test_the_gradient_copy_raises_the_peak_only_beyond_the_freed_activations():
    m = _row("GPT 7.5B on 128").model
    lay = Layout(dp=64, tp=2, recompute="full")
    plain = memory_per_gpu(m, lay, 512, MEGATRON_LM_2021_FP16)
    copy = memory_per_gpu(m, lay, 512, MEGATRON_LM_2021_FP16, grad_copy_bytes=2.0)
    psi = stage_params(m, lay)
    # after the backward: the states and the copy, no activations (not added on top of them)
    assert copy.total == pytest.approx(plain.model_states + 2.0 * psi)
    assert copy.total < plain.model_states + plain.activations + 2.0 * psi
    big = Layout(dp=64, tp=2, micro_batch=8, recompute="none")  # activations above the copy
    acts = memory_per_gpu(m, big, 512, MEGATRON_LM_2021_FP16, grad_copy_bytes=2.0)
    assert acts.buffers == 0.0 and acts.activations > 2.0 * psi
    with pytest.raises(ValueError, match="grad_copy_bytes"):
        memory_per_gpu(m, lay, 512, grad_copy_bytes=-1.0)


def test_megatron_2021_memory_rules_out_the_layouts_it_did_not_run():
    # 7.5B on 128: Megatron ran TP 4; TP 2 needs 20 bytes x 3.75B + the gradient copy
    r = _row("GPT 7.5B on 128")
    c = r.cluster.with_efficiency(0.6)
    kw = {"fixed": {"recompute": "full"}}
    fits = {(x.layout.tp, x.layout.pp) for x in plan(r.model, c, 128, 512, **kw).best}
    theirs = plan(r.model, c, 128, 512, framework=MEGATRON_LM_2021, **kw)
    held = {(x.layout.tp, x.layout.pp) for x in theirs.best}
    assert (2, 1) in fits and (2, 1) not in held and (4, 1) in held
    why = [reason for lay, reason in theirs.rejected if (lay.tp, lay.pp) == (2, 1)]
    assert why and all("GB usable" in w for w in why)
    # a 16-byte recipe with the same options would still fit it: the bytes decide
    sixteen = dataclasses.replace(MEGATRON_LM_2021, recipe=RECIPES["mixed_adam"], grad_copy_bytes=0.0)
    assert (2, 1) in {(x.layout.tp, x.layout.pp)
                      for x in plan(r.model, c, 128, 512, framework=sixteen, **kw).best}
    with pytest.raises(ValueError, match="recipe"):
        plan(r.model, c, 128, 512, recipe="fp32_adam", framework=MEGATRON_LM_2021)


def test_step_time_streams_the_frameworks_optimizer_bytes():
    r = _row("GPT 1.7B on 32")
    c = r.cluster.with_efficiency(0.6)
    lay = Layout(dp=32, recompute="full")
    mine = step_time(r.model, lay, c, 512, MEGATRON_LM_2021_FP16).terms["optimizer"]
    same = step_time(r.model, lay, c, 512, StateRecipe("x", 2, 2, 12)).terms["optimizer"]
    assert same == pytest.approx(step_time(r.model, lay, c, 512, "mixed_adam").terms["optimizer"])
    assert mine == pytest.approx(same * (2 * 12 + 4 + 6) / (2 * 12 + 4 + 2))
    with pytest.raises(ValueError, match="recipe"):
        step_time(r.model, lay, c, 512, "sixteen")


def test_layout_ranks_plan_megatron_rows_inside_megatron_2021():
    runs = megatron_runs()
    ranks = layout_ranks(compare(runs, fit_count=1))
    by = {x.label: x for x in ranks}
    # only stage counts that divide the layers: 145B has 80 layers, so no pp 12 (a 12 x 8 TP)
    assert all(80 % pp == 0 for _, pp in by["GPT 145B on 1536"].ranked)
    assert all(60 % pp == 0 for _, pp in by["GPT 76B on 1024"].ranked)
    # the memory Megatron-LM 2021 needed rules out TP 2 for 7.5B: the published TP 4 ranks
    assert (2, 1) not in by["GPT 7.5B on 128"].ranked and by["GPT 7.5B on 128"].ok
    assert (1, 1) not in by["GPT 3.6B on 64"].ranked and by["GPT 3.6B on 64"].rank == 1


def _smallest_fitting_m(run, framework):
    """Narayanan et al. 2021's heuristic (section 3, takeaways 1 and 2; section 5.1 says Table 1's
    degrees were picked by it): TP up to a server's 8 GPUs first, the smallest TP x PP that fits."""
    p = plan(run.model, run.cluster, run.layout.gpus, run.global_batch, fixed={"recompute": "full"},
             framework=framework)
    return min(c.layout.tp * c.layout.pp for c in p.best
               if c.layout.tp == min(c.layout.tp * c.layout.pp, 8))


def test_megatron_2021_memory_gives_the_model_parallel_sizes_table_1_used():
    runs = megatron_runs()[:7]  # 1.7B to 145B (310B and 530B used more stages than they needed)
    assert [_smallest_fitting_m(r, MEGATRON_LM_2021) for r in runs] == [
        r.layout.tp * r.layout.pp for r in runs] == [1, 2, 4, 8, 16, 32, 64]
    # 16 bytes per parameter and no gradient copy would have let three of them use half the TP
    sixteen = dataclasses.replace(MEGATRON_LM_2021, recipe=RECIPES["mixed_adam"], grad_copy_bytes=0.0)
    assert [_smallest_fitting_m(r, sixteen) for r in runs[1:4]] == [1, 2, 4]
