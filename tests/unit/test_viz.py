"""perfkit.viz: every widget's pure function runs at every control's extremes."""

import matplotlib.pyplot as plt
import pytest

from perfkit import viz


def test_roofline_widget_sweeps_its_controls(limits):
    spec = viz.roofline_widget(limits)
    titles = {}
    for kw in spec.extremes():
        fig = spec.fn(**kw)
        titles[(kw["log2_n"], kw["dtype"])] = fig.axes[0].get_title()
        plt.close(fig)
    # it starts in float32; a 2x2 matmul (0.67 FLOP/B fp32) is left of the 5 FLOP/B ridge, 16384^2 far
    # right; the title names the roof it sits under, never an "attainable" rate
    assert "under the DRAM roof" in titles[(1, "float32")]
    assert "under the float32 ceiling" in titles[(14, "float32")]
    assert "bfloat16" in titles[(8, "bfloat16")]
    assert not any("attainable" in t for t in titles.values())


def test_extremes_move_one_control_at_a_time():
    spec = viz.WidgetSpec(lambda a, b: a + b, {"a": viz.IntControl(0, 10, 5),
                                               "b": viz.Choice(["x", "y"], "x")})
    assert list(spec.extremes()) == [{"a": 0, "b": "x"}, {"a": 10, "b": "x"},
                                     {"a": 5, "b": "x"}, {"a": 5, "b": "y"}]
    assert viz.LogControl(-2, 3, 1.0).extremes() == (0.01, 1000.0)


def test_build_widget_renders_without_a_browser():
    calls = []
    spec = viz.WidgetSpec(lambda n: calls.append(n) or f"**{n}**",
                          {"n": viz.IntControl(1, 3, 2)}, title="t")
    box = viz.build_widget(spec)
    assert box.children[0].value == "<b>t</b>"
    assert calls == [2]  # the default is rendered once when built
    slider = box.children[1].children[0]
    slider.value = 3  # a move re-renders through the pure function
    assert calls == [2, 3]


def test_a_headless_run_shows_the_default_without_an_output_area(monkeypatch, capsys):
    # nbclient waits until the cell's timeout on some cells that display into an ipywidgets
    # Output (measured: 2-3 of 40): a headless run shows the default as the cell's own output
    calls = []
    spec = viz.WidgetSpec(lambda n: calls.append(n) or f"**{n}**", {"n": viz.IntControl(1, 3, 2)}, title="t")
    monkeypatch.setenv(viz.HEADLESS_ENV, "1")
    assert viz.build_widget(spec) is None and calls == [2]  # no Output, no sliders' text form
    assert "Markdown object" in capsys.readouterr().out  # displayed directly, not into an Output
    monkeypatch.delenv(viz.HEADLESS_ENV)
    assert len(viz.build_widget(spec).children) == 3 and calls == [2, 2]


def test_a_headless_course_run_sets_the_flag_for_its_kernel_only(tmp_path):
    import os

    import nbformat

    from tools.run_course import run_notebook

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("QUICK = True", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("import os\nprint('flag', os.environ.get('PERFKIT_HEADLESS'))")]
    nbformat.write(nb, tmp_path / "99_flag.ipynb")
    run = run_notebook(tmp_path / "99_flag.ipynb", tmp_path / "out", quick=True, time_limit_s=120)
    assert not run.error
    done = nbformat.read(tmp_path / "out" / "99_flag.ipynb", as_version=4)
    assert "flag 1" in done.cells[-1].outputs[0]["text"]
    assert viz.HEADLESS_ENV not in os.environ  # the test process itself is not headless


def test_plot_roofline_rejects_bad_input():
    with pytest.raises(ValueError, match="peak_flops"):
        viz.plot_roofline({}, 1.0)
    with pytest.raises(ValueError, match="intensity_range"):
        viz.plot_roofline({"float32": 1.0}, 1.0, intensity_range=(2.0, 1.0))


def test_plot_roofline_names_every_point_even_when_close():
    # two operations of nearly the same intensity and rate: both must stay named
    pts = [("x + y", 0.083, 6.9e9), ("linear", 62.0, 2.06e11), ("matmul n=1024", 170.7, 2.15e11)]
    fig = viz.plot_roofline({"float32": 2.15e11, "bfloat16": 8.7e11}, 7.9e10, pts)
    shown = [t.get_text() for t in fig.axes[0].get_legend().get_texts() if t.get_visible()]
    plt.close(fig)
    for label, _, _ in pts:
        assert any(s.startswith(label + ":") for s in shown), (label, shown)


def test_si_prefixes():
    assert viz.si(1.72e11, "FLOP/s") == "172 GFLOP/s"
    assert viz.si(0.0025, "s") == "2.5 ms"
