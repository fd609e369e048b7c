"""Notebook 09's forest plot: the no-effect tick drawn above everything on its row."""

import matplotlib.pyplot as plt

from perfkit import viz
from perfkit.verdict import Claim, assess


def test_the_no_effect_tick_is_drawn_above_the_band_the_interval_and_the_dot():
    # as run: empty_cache's band (0.952x to 1x) and its dot hid the 1x tick on its row
    claim = Claim("empty_cache", "speedup", low=0.952, high=0.999, partly=1.0, unit="x")
    fig = viz.plot_claims_forest({"empty": assess(claim, 1.0, (0.99, 1.01))})
    ax = fig.axes[0]
    tick = [line for line in ax.lines if line.get_linestyle() == "--"]
    others = [line for line in ax.lines if line.get_linestyle() != "--"] + list(ax.patches)
    assert len(tick) == 1 and all(tick[0].get_zorder() > a.get_zorder() for a in others)
    plt.close(fig)
