"""perfkit.memory: ZeRO formulas, SavedTensorMeter, parameter and optimizer-state counting."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from perfkit import memory as M
from perfkit.models import tiny_gpt2

# --- ZeRO model states --------------------------------------------------------------------

PSI, K, N = 7.5e9, 12, 64


def test_paper_example_as_formulas():
    """ZeRO paper, Figure 1: 7.5B parameters, K = 12, N_d = 64 (decimal GB)."""
    t = M.zero_table(PSI, N, "mixed_adam")
    assert t[0].total == (2 + 2 + K) * PSI == 120e9
    assert t[1].total == 2 * PSI + 2 * PSI + K * PSI / N
    assert t[1].total_gb == pytest.approx(31.40625, abs=1e-12)  # paper prints 31.4 GB
    assert t[2].total == 2 * PSI + (2 + K) * PSI / N
    assert t[2].total_gb == pytest.approx(16.640625, abs=1e-12)  # paper prints 16.6 GB
    assert t[3].total == (2 + 2 + K) * PSI / N
    assert t[3].total_gb == pytest.approx(1.875, abs=1e-12)  # paper prints 1.9 GB
    assert [round(s.total_gb, 1) for s in t] == [120.0, 31.4, 16.6, 1.9]


def test_parts_per_stage():
    s1 = M.zero_model_states(PSI, N, 1)
    assert (s1.params, s1.grads, s1.optimizer) == (2 * PSI, 2 * PSI, K * PSI / N)
    s2 = M.zero_model_states(PSI, N, 2)
    assert (s2.params, s2.grads) == (2 * PSI, 2 * PSI / N)
    s3 = M.zero_model_states(PSI, N, 3)
    assert s3.params == 2 * PSI / N


@pytest.mark.parametrize("recipe,per_param", [("fp32_adam", 16), ("fp32_sgd_momentum", 12),
                                              ("fp32_sgd", 8), ("mixed_sgd_momentum", 12)])
def test_recipes_and_world_size_one(recipe, per_param):
    for stage in range(4):  # with one rank every stage holds everything
        assert M.zero_model_states(1000, 1, stage, recipe).total == per_param * 1000


def test_custom_recipe_and_monotone_in_stage():
    r = M.StateRecipe("bf16_adam_fp32_states", 2, 2, 12)
    totals = [M.zero_model_states(1e6, 8, s, r).total for s in range(4)]
    assert totals == sorted(totals, reverse=True)
    assert totals[3] == 16e6 / 8


@pytest.mark.parametrize("kw,match", [
    (dict(num_params=0), "num_params"), (dict(world_size=0), "world_size"),
    (dict(stage=4), "stage"), (dict(recipe="adam"), "recipe"),
])
def test_zero_model_states_errors(kw, match):
    args = dict(num_params=10, world_size=2, stage=1, recipe="mixed_adam") | kw
    with pytest.raises(ValueError, match=match):
        M.zero_model_states(**args)
    with pytest.raises(ValueError, match="grad_bytes"):
        M.StateRecipe("x", 2, -1, 0)


# --- SavedTensorMeter on hand-computable graphs -------------------------------------------


def test_meter_counts_unique_storages():
    a = torch.randn(1000, requires_grad=True)
    with M.SavedTensorMeter() as meter:
        b = a.exp()  # saves its output b: 4000 bytes
        c = b * b  # saves b twice: same storage, no new bytes
        d = c.sin()  # saves c: 4000 bytes
        e = b[:10].cos()  # saves a view of b: same storage
    r = meter.report()
    assert r.activation_bytes == 8000
    assert r.n_storages == 2
    assert r.n_packed == 5  # exp 1, mul 2, sin 1, cos 1
    assert r.activation_bytes_by_dtype == {"float32": 8000}
    (d.sum() + e.sum()).backward()  # the graph still works: the hooks returned the tensors
    assert a.grad is not None


def test_meter_counts_whole_storage_of_a_view():
    base = torch.randn(100, 10, requires_grad=True)
    with M.SavedTensorMeter() as meter:
        x = base * 1  # (100, 10), no tensor saved (multiply by a Python scalar)
        x[:2].exp()  # exp saves its output, a new (2, 10) tensor: 80 bytes
        x[:5].sin()  # sin saves its input: a view of x, whose storage is 4000 bytes
    assert meter.report().activation_bytes == 80 + 4000


def test_meter_separates_parameters_and_inputs():
    lin = nn.Linear(10, 5)
    x = torch.randn(3, 10)
    with M.SavedTensorMeter(lin, inputs=[x]) as meter:
        lin(x)  # x needs no gradient, so addmm saves only x (for the weight's gradient)
    assert (meter.report().input_bytes, meter.report().parameter_bytes) == (120, 0)
    x.requires_grad_(True)
    with M.SavedTensorMeter(lin, inputs=[x]) as meter:
        y = lin(x)  # now it saves the input (3 x 10) and the weight (5 x 10)
        z = torch.tanh(y)  # saves its output (3 x 5)
    r = meter.report()
    assert (r.input_bytes, r.parameter_bytes, r.activation_bytes) == (120, 200, 60)
    z.sum().backward()
    assert lin.weight.grad.shape == (5, 10)


def test_meter_names_autocasts_weight_copies_among_the_activations():
    # under autocast the matmul saves a bfloat16 copy of its weight (5 x 10 x 2 B = 100),
    # a storage of its own: counted with the activations, and named as a parameter copy
    lin = nn.Linear(10, 5)
    x = torch.randn(3, 10, requires_grad=True)
    with M.SavedTensorMeter(lin, inputs=[x]) as meter, torch.autocast("cpu", torch.bfloat16):
        lin(x)
    r = meter.report()
    assert r.parameter_copy_bytes == 100 and r.parameter_bytes == 0
    assert r.activation_bytes_by_dtype["bfloat16"] >= 100 + 3 * 10 * 2  # the copy and x's cast
    with M.SavedTensorMeter(lin, inputs=[x]) as meter:  # no autocast: the weight itself, no copy
        lin(x)
    assert (meter.report().parameter_copy_bytes, meter.report().parameter_bytes) == (0, 200)


def test_meter_report_inside_and_after_context_and_errors():
    a = torch.ones(4, requires_grad=True)
    with M.SavedTensorMeter() as meter:
        a.exp()
        assert meter.report().activation_bytes == 16
        a.exp()  # a second, distinct output storage
    assert meter.report().activation_bytes == 32
    with pytest.raises(TypeError, match="params"):
        M.SavedTensorMeter(params=[1, 2])
    with pytest.raises(TypeError, match="inputs"):
        M.SavedTensorMeter(inputs=["x"])


def test_meter_sees_nothing_inside_non_reentrant_checkpoint_but_its_inputs():
    w = nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    block = lambda t: torch.tanh(w(t)).exp()
    with M.SavedTensorMeter(w) as plain:
        block(x)
    with M.SavedTensorMeter(w) as ckpt:
        y = checkpoint(block, x, use_reentrant=False)
    # plain: x (128 B) for addmm, tanh's output and exp's output (128 B each)
    assert plain.report().activation_bytes == 3 * 128
    # checkpointed: only the block input x is kept, to recompute the block in backward
    assert ckpt.report().activation_bytes == 128
    y.sum().backward()


# --- parameters and optimizer state ---------------------------------------------------------


def test_count_parameters_tied_and_frozen():
    m = tiny_gpt2(vocab_size=100, block_size=16, n_embd=8, n_layer=1, n_head=2)
    c = M.count_parameters(m)
    wte = m.transformer.wte.weight.numel()
    # the LM head is tied to the token embedding: counted once
    assert m.lm_head.weight.data_ptr() == m.transformer.wte.weight.data_ptr()
    assert c.total == sum(p.numel() for p in m.parameters())
    assert c.total_bytes == 4 * c.total and c.trainable == c.total
    m.transformer.wte.weight.requires_grad_(False)
    c2 = M.count_parameters(m)
    assert c2.trainable == c.total - wte
    assert c2.trainable_fraction == pytest.approx((c.total - wte) / c.total)
    with pytest.raises(TypeError, match="module"):
        M.count_parameters("model")


def test_optimizer_state_bytes_adamw_and_sgd():
    lin = nn.Linear(10, 5)  # 55 parameters
    opt = torch.optim.AdamW(lin.parameters())
    assert M.optimizer_state_bytes(opt) == 0  # state is allocated lazily, at the first step
    lin(torch.randn(2, 10)).sum().backward()
    opt.step()
    # exp_avg and exp_avg_sq per parameter (fp32), plus one fp32 scalar "step" per tensor
    assert M.optimizer_state_bytes(opt) == 2 * 55 * 4 + 2 * 4
    sgd = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    sgd.step()
    assert M.optimizer_state_bytes(sgd) == 55 * 4
    with pytest.raises(TypeError, match="optimizer"):
        M.optimizer_state_bytes(object())


# --- the widgets of notebooks 04 and 05 -----------------------------------------------------


def test_memory_widget_sweeps_its_controls():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import memory_widget

    spec = memory_widget(measured={"parameters": 1e6, "activations": 2e6}, limit_bytes=1e9)
    totals = {}
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
        totals[tuple(sorted(kw.items()))] = labels
        plt.close(fig)
    default = tuple(sorted(spec.defaults().items()))
    assert totals[default] == ["predicted", "tensors counted here"]  # the counted point is shown
    assert len(totals) >= 7


def test_memory_widget_draws_the_measured_peak_beside_the_counted_tensors():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import memory_widget

    spec = memory_widget(measured={"parameters": 1e6, "activations": 2e6}, limit_bytes=1e9,
                         peak={"parameters": 1e6, "peak above the step's start": 5e6})
    fig = spec.fn(**spec.defaults())
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    plt.close(fig)
    assert labels == ["predicted", "tensors counted here", "step's peak measured here"]
    off = dict(spec.defaults(), batch=spec.defaults()["batch"] + 1)  # away from the measured point
    fig = spec.fn(**off)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["predicted"]
    plt.close(fig)
    name = "second (steady) step's peak measured here"
    kinds = {"parameters": 1e6, "optimizer state": 2e6, "peak above the step's start": 5e6}
    steady = memory_widget(peak=kinds, peak_label=name)
    fig = steady.fn(**steady.defaults())  # the bar says which step's peak it draws
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][-1] == name
    plt.close(fig)


def test_plot_memory_stack_errors():
    from perfkit.viz.memory import plot_loss_curves, plot_memory_stack

    with pytest.raises(ValueError, match="bars"):
        plot_memory_stack({})
    with pytest.raises(ValueError, match="negative"):
        plot_memory_stack({"x": {"parameters": -1}})
    with pytest.raises(ValueError, match="curves"):
        plot_loss_curves({})


def test_plot_memory_stack_names_the_peak_in_gray():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from perfkit.viz.memory import plot_memory_stack

    peak = "peak above the step's start"  # its legend names the peak, not "other"
    fig = plot_memory_stack({"step": {"parameters": 1.0, peak: 2.0}})
    handles, labels = fig.axes[0].get_legend_handles_labels()
    assert labels == ["parameters", peak]
    assert handles[1].patches[0].get_facecolor() == to_rgba("tab:gray")
    plt.close(fig)


def test_live_model_states_count_each_storage_once_in_its_first_category():
    from perfkit.memory import live_model_states, storage_bytes

    flat = torch.zeros(10)  # 40 bytes; two parameters are views of it
    a, b = flat[:4], flat[4:9]
    g = torch.zeros(9)
    st = live_model_states([a, b], [g, None, flat[2:3]], [torch.zeros(3), g])
    assert (st.params, st.grads, st.optimizer, st.total) == (40, 36, 12, 88)
    assert storage_bytes([]) == 0 and storage_bytes([torch.zeros(0)]) == 0


def test_ring_factors_make_zero3_move_one_and_a_half_times_dp():
    from perfkit.comm import ring_factor

    for n in (2, 3, 8):
        dp = ring_factor("all_reduce", n)
        zero3 = 2 * ring_factor("all_gather_single", n) + ring_factor("reduce_scatter", n)
        assert zero3 / dp == pytest.approx(1.5)
        assert ring_factor("reduce_scatter_tensor", n) + ring_factor("all_gather", n) == \
            pytest.approx(dp)
    assert ring_factor("all_reduce", 1) == 0.0


# --- notebook 05's measured stages: memory and traffic plots, the scaling widget -------------


def _comparison():
    """A 2-rank comparison with numbers a reader can check: Ψ = 1000, fp32 Adam."""
    from perfkit.jobs.zero_bench import Comparison, VariantResult

    def result(name, params, grads, opt, sent, times):
        return VariantResult(name, sorted(times)[1], 0, None, [1.0], 0.0, 0.0,
                             model_states={"params": params, "grads": grads, "optimizer": opt},
                             calls={}, sent_bytes=sent, step_p10_s=min(times),
                             step_p90_s=max(times), step_times_s=tuple(times))

    v = {"ddp_adamw": result("ddp_adamw", 4000, 4000, 8000, {"all_reduce": 4000}, [1.0, 1.2, 1.1]),
         "zero3": result("zero3", 2000, 2000, 4000, {"all_gather": 4000, "reduce_scatter": 2000},
                         [1.5, 1.2, 1.4])}
    return Comparison(2, 1000, 4, 8000, v)


def test_zero_memory_and_traffic_plots_draw_measured_beside_the_model():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import plot_zero_memory, plot_zero_traffic

    c = _comparison()
    fig = plot_zero_memory(c, {"ddp_adamw": 0, "zero3": 3})
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["stage 0: formula", "stage 0: ddp_adamw", "stage 3: formula", "stage 3: zero3"]
    plt.close(fig)
    fig = plot_zero_traffic(c, {"ddp_adamw": 0, "zero3": 3})
    lines = sorted(ln.get_xdata()[0] for ln in fig.axes[0].get_lines())
    assert lines == pytest.approx([0.004, 0.006])  # 1x and 1.5x DP's 4000 B, in MB
    # what gloo sent beside the ring's bars: zero3's 2000 B reduce-scatter moves an all-reduce's 4000 B
    crosses = [x for col in fig.axes[0].collections for x, _ in col.get_offsets()]
    assert crosses == pytest.approx([0.004, 0.008])
    plt.close(fig)
    fig = plot_zero_traffic(c, {"ddp_adamw": 0, "zero3": 3}, gloo=False)
    assert not fig.axes[0].collections
    plt.close(fig)
    with pytest.raises(ValueError, match="stages key"):
        plot_zero_memory(c, {"fsdp2": 3})
    with pytest.raises(ValueError, match=r"stages\['zero3'\]"):
        plot_zero_memory(c, {"zero3": 4})
    with pytest.raises(TypeError, match="stages must be a Mapping"):
        plot_zero_memory(c, ["zero3"])
    with pytest.raises(ValueError, match="baseline"):
        plot_zero_traffic(c, {"zero3": 3})


def test_step_ratio_is_the_median_ratio_of_the_paired_rounds():
    from perfkit import stats
    from perfkit.jobs.zero_bench import step_ratio

    c = _comparison()
    e = step_ratio(c.variants["zero3"], c.variants["ddp_adamw"])
    assert e == stats.median_ratio(c.variants["zero3"].step_times_s, c.variants["ddp_adamw"].step_times_s)
    assert e.value == pytest.approx(1.4 / 1.1) and e.low <= e.value <= e.high and e.level == stats.LEVEL
    with pytest.raises(TypeError, match="a must be a VariantResult"):
        step_ratio(1.4, c.variants["ddp_adamw"])
    short = dataclasses.replace(c.variants["zero3"], step_times_s=(1.0,))
    with pytest.raises(ValueError, match="same number"):
        step_ratio(short, c.variants["ddp_adamw"])


def test_ranks_merge_into_one_series_each_step_the_slower_ranks():
    from perfkit.jobs.zero_bench import _merge_ranks

    def rank(times, update_s=0.002):
        return {"step_times_s": times, "state_bytes": 8, "losses": [1.0], "max_rel_diff_vs_adamw": 0.0,
                "max_rel_diff_vs_ddp_adamw": None, "model_states": {"params": 4}, "calls": {},
                "sent_bytes": {}, "transient_peak_bytes": 0, "update_s": update_s}

    # rank 0 is slower at steps 0 and 1, rank 1 at step 2: neither rank's own series is the step's
    r = _merge_ranks("v", [rank([5.0, 4.0, 1.0]), rank([1.0, 2.0, 6.0])], [10, 30])
    assert r.step_times_s == (5.0, 4.0, 6.0)
    # the median of that series: the slower rank's own median (4.0 or 2.0) would not be
    assert r.step_s == 5.0 and r.step_p10_s <= r.step_s <= r.step_p90_s <= 6.0
    assert r.peak_rss_bytes == 30
    # the optimizer step alone (notebook 05's ZeRO edge takes 1/N of AdamW's off): the slower rank's
    assert _merge_ranks("v", [rank([1.0], 0.002), rank([1.0], 0.003)], None).update_s == 0.003


def test_zero_comparison_plot_draws_the_paired_ratios_the_verdicts_judge():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import plot_zero_comparison

    fig = plot_zero_comparison(_comparison())
    widths = [p.get_width() for p in fig.axes[0].patches]
    assert widths == pytest.approx([1.0, 1.4 / 1.1])  # medians of paired ratios, not of ms
    assert "ddp_adamw" in fig.axes[0].get_xlabel()
    assert "90 %" not in fig.axes[0].get_xlabel()  # the bars' coverage is their own label's
    plt.close(fig)


def test_recompute_flop_share_counts_the_output_layer_it_does_not_recompute():
    share = M.recompute_flop_share(64, 2, 1024, 64)  # notebook 04's model: C=64, L=2, V=1024, T=64
    assert share == pytest.approx(0.2121, abs=1e-4) and 1 - 3 * share == pytest.approx(0.364, abs=1e-3)
    assert share < M.recompute_flop_share(4096, 2, 1, 1) < 1 / 3  # 1/3 only where the blocks are all
    with pytest.raises(ValueError, match="vocab_size"):
        M.recompute_flop_share(64, 2, 0, 64)


def test_flop_rule_text_says_the_step_exceeds_its_flops_and_why():
    from perfkit.estimate import Estimate
    # notebook 04's default run: the step took 1.51 plain steps (1.47 to 1.53), the recompute
    # 0.270 alone, its FLOP share 0.2121: by FLOPs 1.21, which the whole interval lies above
    step = Estimate(value=1.51, low=1.47, high=1.53, level=0.9, method="median of 32 paired ratios", n=32)
    text = M.flop_rule_text(step, Estimate(value=0.270, low=0.262, high=0.278, level=0.9, method="m", n=32),
                            0.2121)
    assert text.startswith(" By its FLOPs the checkpointed step would take 1.21 plain steps")
    assert "its interval lies above that: time did not follow FLOPs" in text
    assert "0.270 plain steps, 1.3x its FLOP share" in text and "added +0.240 plain steps beyond it" in text
    near = Estimate(value=1.2, low=1.15, high=1.25, level=0.9, method="m", n=32)
    assert M.flop_rule_text(near, step, 0.2121).endswith("; its interval holds that.")
    with pytest.raises(ValueError):
        M.flop_rule_text(near, step, 0.0)


def test_checkpoint_cost_text_names_both_statistics_and_judges_one_forward_on_the_interval():
    from perfkit.estimate import Estimate
    # notebook 04's loaded run: 1.80 plain steps by the paired ratios, 1.07 by the medians, and the
    # step over (plain + blocks' forward) 1.12x with an interval holding 1x: not "more than one forward"
    step = Estimate(value=1.80, low=1.12, high=2.19, level=0.9, method="median of 32 paired ratios", n=32)
    floor = Estimate(value=1.12, low=0.95, high=1.66, level=0.9, method="median of 32 paired ratios", n=32)
    text = M.checkpoint_cost_text(step, floor, 1.07)
    assert text.startswith("for a step of 1.80x the plain one by the median of paired ratios (")
    assert "1.07x by the ratio of the medians" in text
    assert "cannot tell whether it took more than one extra forward" in text
    assert "; more than one extra forward" not in text
    above = Estimate(value=1.3, low=1.2, high=1.4, level=0.9, method="m", n=32)
    assert "; more than one extra forward timed alone: " in M.checkpoint_cost_text(step, above, 1.5)
    below = Estimate(value=0.8, low=0.7, high=0.9, level=0.9, method="m", n=32)
    assert "less than one extra forward timed alone" in M.checkpoint_cost_text(step, below, 1.5)
    with pytest.raises(ValueError):
        M.checkpoint_cost_text(step, floor, 0.0)


def test_steady_peak_text_sets_the_rise_against_the_state_it_names():
    def step(peak, state):
        return M.StepAnatomy(params=0, grads=0, optimizer_state=state, activations=0, peak=peak,
                             peak_source="rss")
    first = step(20_000_000, 0)
    short = M.steady_peak_text(first, step(19_460_000, 1_360_000))  # rises 0.82 MB, holds 1.36 MB
    assert "0.82 MB higher" in short and "60% of that state's 1.36 MB" in short
    # above the parameters alone, the state counted in: not "above the parameters with the state"
    assert "20.82 MB above the parameters (the state included)" in short and "with the state" not in short
    assert "the rest of the difference is pages" not in short
    assert "the rest of the difference is pages" in M.steady_peak_text(first, step(21_000_000, 1_000_000))
    assert ": not above it" in M.steady_peak_text(first, step(18_000_000, 1_000_000))
    with pytest.raises(TypeError, match="steady"):
        M.steady_peak_text(first, None)


def test_zero_scaling_widget_sweeps_and_shows_the_measured_points():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import zero_scaling_widget

    measured = {0: 16_000.0, 3: 8_000.0}
    spec = zero_scaling_widget(measured, numel=1000, world_size=2)
    fig = spec.fn(**spec.defaults())
    left, right = fig.axes
    assert left.get_xscale() == right.get_yscale() == "log"  # values span decades
    crosses = [c for c in right.collections if c.get_offsets().shape[0] == 2]
    assert crosses and sorted(crosses[0].get_offsets()[:, 1]) == [8.0, 16.0]  # bytes / Ψ
    plt.close(fig)
    for kw in spec.extremes():
        plt.close(spec.fn(**kw))
    for bad, exc, match in (({"measured": {4: 1.0}, "numel": 10}, ValueError, "measured key"),
                            ({"measured": {0: -1.0}, "numel": 10}, ValueError, r"measured\[0\]"),
                            ({"measured": {0: 1.0}}, TypeError, "numel"),
                            ({"world_size": 0}, ValueError, "world_size"),
                            ({"recipe": "adam"}, ValueError, "recipe"),
                            ({"memory_gb": float("nan")}, ValueError, "memory_gb")):
        with pytest.raises(exc, match=match):
            zero_scaling_widget(**bad)


def test_block_check_refuses_bad_arguments():
    from tools.labs.block_check import run_impl

    for args, exc, match in (((None, 0, 1), TypeError, "factory"), ((len, 0, 0), ValueError, "world"),
                             ((len, 2, 2), ValueError, "rank"), ((len, 0, 1, 0), ValueError, "steps")):
        with pytest.raises(exc, match=match):
            run_impl(*args)


def test_plot_memory_stack_keeps_totals_and_bars_clear_of_the_legend():
    import matplotlib.pyplot as plt

    from perfkit.viz.memory import plot_memory_stack

    bars = {"predicted": {"parameters": 0.7e6, "activations": 10e6, "recompute": 0.0},
            "measured peak": {"other": 20.7e6}}
    for limit in (None, 40e6, 1e12):  # no limit, a limit line, a share in the title
        fig = plot_memory_stack(bars, limit_bytes=limit)
        fig.canvas.draw()
        ax = fig.axes[0]
        frame = ax.get_window_extent()
        totals = [t for t in ax.texts if t.get_text().endswith("B")]
        assert len(totals) == 2 and all(t.get_visible() for t in totals)  # tidy() hid none
        assert all(t.get_window_extent().x1 <= frame.x1 for t in totals)  # inside the axes
        legend = ax.get_legend()
        assert legend.get_window_extent().x0 >= frame.x1  # beside the bars, not over them
        assert "recompute" not in [t.get_text() for t in legend.get_texts()]  # a zero-sized kind
        plt.close(fig)
