"""The model-against-measured grids read at the notebook's width: stacked panels, legible labels."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from perfkit.parallel import one_f_one_b, simulate  # noqa: E402
from perfkit.viz.pipeline import plot_grids  # noqa: E402


def test_two_grids_of_two_ranks_stack_and_keep_their_labels_legible():
    tl = simulate(one_f_one_b(2, 4), {"F": 0.036, "B": 0.072})
    fig = plot_grids(tl, tl, label="prediction", unit="s", share_time=True)
    w, h = fig.get_size_inches()
    # the old figure put the panels side by side, 12 x 1.8 inches (1190 x 179 px): under 1/6 as tall as wide
    assert w / h <= 2.5
    top, bottom = fig.axes[0].get_position(), fig.axes[1].get_position()
    assert bottom.y1 <= top.y0   # one above the other, each the figure's width
    inside = [t for t in fig.axes[0].texts if t.get_text().isdigit()]
    assert inside and min(t.get_fontsize() for t in inside) >= 9   # the old micro-batch numbers: 7 pt
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    plt.close(fig)
