"""perfkit.viz.compress: simulated training over seeds, drawn so that coinciding curves stay
visible, and the compression widget's label for one compression under error feedback."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from perfkit.viz import compress as vcompress  # noqa: E402


def test_identical_curves_get_distinct_line_styles_and_markers():
    same = [[2.0, 1.0, 0.5, 0.4, 0.3]]  # two methods on exactly one curve: the baseline must not hide
    fig = vcompress.plot_seed_curves({"no compression": same, "sign + EF": same, "top-k": same})
    lines = fig.axes[0].get_lines()
    assert len(lines) == 3
    styles = {(ln.get_linestyle(), ln.get_marker()) for ln in lines}
    assert len(styles) == 3, "each method needs its own line style and marker"
    assert not fig.axes[0].collections  # one seed each: no band
    plt.close(fig)


def test_several_seeds_draw_the_median_and_a_band():
    runs = {"a": [[3.0, 2.0, 1.0], [1.0, 1.0, 1.0], [2.0, 1.5, 0.5]]}  # (seeds, steps)
    fig = vcompress.plot_seed_curves(runs, smooth=1)
    ax = fig.axes[0]
    assert list(ax.get_lines()[0].get_ydata()) == [2.0, 1.5, 1.0]  # the median over seeds, per step
    assert len(ax.collections) == 1  # the lowest-to-highest band
    assert "median of 3 seeds" in ax.get_legend().get_texts()[0].get_text()
    plt.close(fig)
    fig = vcompress.plot_seed_curves({"a": [[2.0, 4.0, 6.0]]}, smooth=2)
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [2.0, 3.0, 5.0]  # running mean of 2
    assert "running mean of 2" in fig.axes[0].get_xlabel()
    plt.close(fig)


def test_plot_seed_curves_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        vcompress.plot_seed_curves({})
    with pytest.raises(ValueError, match="smooth"):
        vcompress.plot_seed_curves({"a": [[1.0]]}, smooth=0)
    with pytest.raises(ValueError, match="one non-zero length"):
        vcompress.plot_seed_curves({"a": [[1.0, 2.0], [1.0]]})
    with pytest.raises(ValueError, match="one non-zero length"):
        vcompress.plot_seed_curves({"a": []})
    with pytest.raises(ValueError, match="at most"):
        vcompress.plot_seed_curves({str(i): [[1.0]] for i in range(len(vcompress.STYLES) + 1)})


def test_widget_names_the_inner_compressor_for_one_compression_under_error_feedback():
    spec = vcompress.compression_widget(torch.randn(5000), steps=10)
    fig = spec.fn(method="topk", ratio=0.01, error_feedback=True)
    title = fig.axes[0].get_title()
    # one call of ErrorFeedback(TopK) sends what TopK sends: the error is top-k's, not "topk_1pct_ef"'s
    assert title.startswith("topk_1pct (") and "_ef" not in title.split("\n")[0]
    assert "topk_1pct_ef" in {t.get_text() for t in fig.axes[1].get_legend().get_texts()}
    plain = spec.fn(method="topk", ratio=0.01, error_feedback=False)
    assert plain.axes[0].patches[0].get_height() == pytest.approx(fig.axes[0].patches[0].get_height())
    plt.close("all")
    for kw in spec.extremes():
        plt.close(spec.fn(**kw))
    with pytest.raises(TypeError, match="grad"):
        vcompress.compression_widget([1.0, 2.0])  # type: ignore[arg-type]
