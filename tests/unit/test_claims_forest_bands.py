"""Module 09's forest plot: a narrow promise stays visible, and every figure sits above the lines."""

import matplotlib.pyplot as plt

from perfkit import viz
from perfkit.stats import Estimate
from perfkit.verdict import Claim, assess


def test_a_hairline_promise_is_drawn_at_the_minimum_width_and_points_sit_on_top():
    # as run: Adam's 1.98x-2.02x and accumulation's 0.2475-0.2525 were hairlines; points on the 1x tick hid
    adam = assess(Claim("adam", "ratio", low=1.98, high=2.02, unit="x"), 2.0)
    same = assess(Claim("gz", "size ratio", high=0.9, partly=1.0, unit="x"),
                  Estimate(1.0, 0.99, 1.01, 0.9, 16, "m"))
    fig = viz.plot_claims_forest({"adam": adam, "gz": same})
    ax = fig.axes[0]
    band = ax.patches[0]
    assert band.get_x() + band.get_width() >= 2.0 * 1.03 * 0.999 and band.get_x() <= 2.0 / 1.03 * 1.001
    assert band.get_linestyle() == ":"  # outlined: the reader is told it was widened
    assert ax.patches[1].get_edgecolor()[3] == 0  # a wide band is drawn as promised, no outline
    dots = [ln.get_zorder() for ln in ax.lines if ln.get_marker() == "o"]
    ticks = [ln.get_zorder() for ln in ax.lines if ln.get_linestyle() == "--"]
    assert ticks and min(dots) > max(ticks)
    assert "drawn that wide" in ax.get_xlabel().replace("\n", " ")
    plt.close(fig)
