"""Notebook 09's forest plot: the no-effect tick drawn above the band and the interval, the dot above it."""

import matplotlib.pyplot as plt

from perfkit import viz
from perfkit.verdict import Claim, assess


def test_the_no_effect_tick_is_drawn_above_the_band_and_the_interval_and_below_the_dot():
    # as run: empty_cache's band (0.952x to 1x) hid the 1x tick on its row; then a dot on the tick hid
    # under it: the dot is drawn on top, the tick reaching past it above and below (0.8 of a row)
    claim = Claim("empty_cache", "speedup", low=0.952, high=0.999, partly=1.0, unit="x")
    fig = viz.plot_claims_forest({"empty": assess(claim, 1.0, (0.99, 1.01))})
    ax = fig.axes[0]
    tick = [line for line in ax.lines if line.get_linestyle() == "--"]
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    others = [line for line in ax.lines if line not in tick + dots] + list(ax.patches)
    assert len(tick) == 1 and all(tick[0].get_zorder() > a.get_zorder() for a in others)
    assert all(d.get_zorder() > tick[0].get_zorder() for d in dots)
    low, high = tick[0].get_ydata()
    assert high - low >= 0.8 and ax.patches[0].get_height() < high - low  # taller than the band and the dot
    plt.close(fig)
