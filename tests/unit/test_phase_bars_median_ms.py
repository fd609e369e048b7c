"""perfkit.viz.profiling.plot_phase_bars: the median bars in ms are each phase's own median."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from perfkit.profiling import StepMonitor  # noqa: E402
from perfkit.viz import profiling as vp  # noqa: E402


def test_median_bars_in_ms_draw_each_phases_own_median_not_share_times_step():
    """Three kinds of step, 7 each: data 2 ms of a 10 ms step, 3 of 30, 4 of 20. Data's median is
    3 ms; its median share (0.2) times the median step (20 ms) is 4 ms, a figure no step's data took.
    The bar is the 3 ms."""
    mon = StepMonitor(device="cpu")
    t = [0.0]
    mon._mark = lambda: t[0]
    for data, forward in [(0.002, 0.008), (0.003, 0.027), (0.004, 0.016)] * 7:
        for name, d in (("data", data), ("forward", forward)):
            with mon.phase(name):
                t[0] += d
        mon.step()
    s = mon.summary()
    fig = vp.plot_phase_bars({"run": s}, unit="ms", stat="median")
    widths = {c.get_label(): c.patches[0].get_width() for c in fig.axes[0].containers}
    assert widths["data"] == pytest.approx(s["data"].p50_s * 1e3)
    assert widths["forward"] == pytest.approx(s["forward"].p50_s * 1e3)
    assert abs(widths["data"] - s.median_shares()["data"] * s.step.p50_s * 1e3) > 0.5
    plt.close(fig)
