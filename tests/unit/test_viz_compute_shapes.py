"""The shape sweep's figure: which widths get which marker, and the axis the spread needs."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from perfkit.compute.kernels import ShapePoint  # noqa: E402
from perfkit.viz.compute import plot_shape_sweep  # noqa: E402


def pts(dtype, rates):
    return [ShapePoint(1024, n, 256, dtype, 1e-3, r) for n, r in rates.items()]


def test_shape_sweep_marks_multiples_odd_and_off_grid_even_widths_apart():
    rates = {1024: 1.4e11, 1016: 1.6e11, 1017: 1.5e11, 1019: 1.5e11, 1022: 1.45e11}
    fig = plot_shape_sweep(pts("float32", rates))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and "GFLOP/s" in ax.get_ylabel()  # one dtype: readable ticks
    labels = [int(t.get_text()) for t in ax.get_xticklabels()]  # each width named at its place
    groups = [[labels[round(x)] for x in c.get_offsets()[:, 0]] for c in ax.collections]  # by marker kind
    # odd widths are their own group, and so are the even ones no vector width divides (n % 4 == 2)
    assert groups[:4] == [[1024], [1017, 1019], [1022], [1016]]
    # the widths sit side by side in order, evenly spaced: a sweep dense around 1024 no longer piles up
    assert labels == sorted(rates) and list(ax.get_xticks()) == list(range(len(rates)))
    assert ax.get_legend().get_title().get_text() == ""  # one panel: no "every panel" over it
    assert np.allclose(ax.collections[0].get_offsets()[:, 1], [140])  # in GFLOP/s
    names = [t.get_text() for t in ax.get_legend().get_texts()]  # every marker kind is named
    assert names == ["n % 64 == 0", "odd n", "n % 4 == 2 (no vector width divides it)", "other even n"]
    # no line through the widths in size order (it zigzagged between kinds), and the axis starts at zero
    assert not ax.lines and ax.get_ylim()[0] == 0
    plt.close(fig)
    two = plot_shape_sweep(pts("float32", {1024: 1.4e11, 1017: 1.5e11})
                           + pts("bfloat16", {1024: 2e9, 1017: 2e9}))
    # ceilings a hundredfold apart: a panel each, both linear (one log axis flattened each spread)
    assert [a.get_title() for a in two.axes] == ["float32", "bfloat16"]
    assert all(a.get_yscale() == "linear" for a in two.axes)
    assert np.allclose(two.axes[1].collections[0].get_offsets()[:, 1], [2.0])
    assert two.axes[1].get_ylim()[0] == 0  # 2.99 to 3.36 GFLOP/s once filled the whole height
    plt.close(two)
    with pytest.raises(ValueError, match="points"):
        plot_shape_sweep([])


def test_alignment_line_groups_widths_by_the_grid_they_share():
    from perfkit.viz.compute import alignment_line

    rates = {1024: 1.0e11, 960: 1.0e11, 1016: 0.99e11, 1032: 1.01e11, 1020: 0.8e11, 1022: 0.77e11,
             1017: 0.75e11, 1019: 0.76e11}
    line = alignment_line(pts("float32", rates))
    assert "n % 16 == 8: 100% (2)" in line and "n % 8 == 4: 80% (1)" in line
    assert "n % 4 == 2: 77% (1)" in line and "odd: 76% (2)" in line
    assert line.index("n % 16 == 8") < line.index("odd")  # coarsest grid first
    with pytest.raises(ValueError, match="multiple of 64"):
        alignment_line(pts("float32", {1017: 1e11}))


def test_break_even_names_the_unit_its_title_does():
    from perfkit.compute import CompileRecord
    from perfkit.timing import Measurement
    from perfkit.viz.compute import plot_break_even

    rec = CompileRecord(1.0, Measurement((0.02,) * 3, 0), Measurement((0.01,) * 3, 0))
    fig = plot_break_even(rec, unit="steps")  # the GPT-2 step's title said steps, its axis said calls
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_xlabel() == "steps" and "per step" in labels[0]
    assert "break-even at the medians' difference: 100 steps" in labels
    plt.close(fig)
    with pytest.raises(TypeError, match="unit"):
        plot_break_even(rec, unit="")


def test_break_even_shades_the_paired_range_and_says_where_the_medians_point_lies():
    # the GPT-2 step's title gave the paired range while its dashed line, from the medians, lay outside it
    from perfkit.compute import CompileRecord
    from perfkit.timing import Measurement
    from perfkit.viz.compute import plot_break_even

    eager = (0.0791, 0.080, 0.081, 0.082, 0.083, 0.0791, 0.0792)
    compiled = (0.0752, 0.072, 0.073, 0.074, 0.075, 0.0752, 0.0752)
    rec = CompileRecord(14.0, Measurement(eager, 0), Measurement(compiled, 0))
    soon, late = rec.break_even_between()
    fig = plot_break_even(rec, title="step", unit="steps", between=True)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(rec.break_even_span("steps") in t and rec.paired_ratio().label in t for t in labels)
    assert any(f"{rec.break_even_calls:,.0f} steps" in t and "medians" in t for t in labels)
    where = "inside" if soon <= rec.break_even_calls <= late else "outside"
    assert ax.get_title().startswith("step\n") and f"lies {where} the paired range" in ax.get_title()
    plt.close(fig)
    few = CompileRecord(14.0, Measurement(eager[:2], 0), Measurement(compiled[:2], 0))
    fig = plot_break_even(few, title="step", unit="steps", between=True)  # too few rounds: no range
    assert fig.axes[0].get_title() == "step"
    plt.close(fig)


def test_throughput_panels_share_one_title_size():
    from perfkit.compute.throughput import ThroughputPoint
    from perfkit.timing import Measurement
    from perfkit.viz.compute import plot_throughput

    pts = [ThroughputPoint("fp32", False, b, Measurement(times_s=(0.01 * b,) * 2, warmup=0), 0.02, 64 * b,
                           10**9 * b, 2e11) for b in (1, 2)]
    fig = plot_throughput(pts, pts[1])
    assert len({ax.title.get_fontsize() for ax in fig.axes}) == 1  # the right panel's was the larger
    # a share of a measured ceiling, not labelled an MFU (the field's divides by a vendor peak)
    assert all(not ax.get_ylabel().startswith("MFU") for ax in fig.axes)
    assert "MFU" not in fig.axes[0].get_title()
    plt.close(fig)
    # an emulated bf16 held against fp32's ceiling: said on the share panel only, not beside tokens/s
    bf16 = [ThroughputPoint("bf16", False, 1, Measurement(times_s=(0.05,) * 2, warmup=0), 0.1, 64, 10**9,
                            2e11)]
    fig = plot_throughput(pts + bf16)
    left, right = ([t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes)
    assert not any("ceiling" in t for t in left) and any("float32's ceiling" in t for t in right)
    plt.close(fig)


def test_thread_roofline_draws_the_memory_roof_of_the_threads_the_points_ran_on():
    from perfkit import hw
    from perfkit.viz import compute as vc
    big = 268_435_456
    pts = [hw.CopyPoint(big, 0.02, 40e9, 43.9e9, threads=2), hw.CopyPoint(big, 0.02, 22e9, 24.4e9, threads=1),
           hw.CopyPoint(big, 0.02, 23e9, 30e9, threads=1, op="add")]  # the add credited 9/8 of the copy
    lim = hw.MachineLimits("cpu", "native", {"float32": 2e11}, 48.4e9, copy_points=pts, threads=2,
                           one_thread_flops={"float32": 1.05e11}, dram_nbytes=big)
    assert vc.dram_on_threads(lim, 1) == pytest.approx(24.4e9 * 9 / 8)
    assert vc.dram_on_threads(lim, 4) is None and vc.dram_on_threads(lim, None) is None
    # the old figure drew DRAM's all-core 48.4 GB/s under points timed on 1 thread
    fig = vc.plot_thread_roofline(lim, 1, [("x", 0.125, 4.5e8)], title="t")
    title = fig.axes[0].get_title()
    assert "(compute roof on 1 thread; memory roof: DRAM's best copy or x + y, same threads)" in title
    assert "memory: 27.4 GB/s" in title
    assert "float32 on 1 thread: 105 GFLOP/s" in fig.axes[0].get_legend_handles_labels()[1][0]
    bare = hw.MachineLimits("cpu", "native", {"float32": 2e11}, 48.4e9, threads=2,
                            one_thread_flops={"float32": 1.05e11})
    title = vc.plot_thread_roofline(bare, 1, []).axes[0].get_title()
    assert "memory roof: DRAM's on all cores" in title and "memory: 48.4 GB/s" in title
    plt.close("all")
