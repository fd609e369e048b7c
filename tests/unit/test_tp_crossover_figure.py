"""Notebook 10's crossover figure draws what the notebook judges: the recorded prediction of the
crossing width (with its band) and the measured crossing (with its interval), and its speedup
legend stands beside the panel, off the measured points."""

import matplotlib
import matplotlib.pyplot as plt
import pytest

from perfkit.comm.alpha_beta import AlphaBeta
from perfkit.estimate import Estimate
from perfkit.verdict import Prediction
from perfkit.viz.tensor_parallel import plot_tp_crossover

matplotlib.use("Agg")
LINK = AlphaBeta(1.27e-4, 1.76e9)


def test_the_crossover_figure_draws_the_judged_prediction_and_the_measured_crossing():
    pred = Prediction("crossing width", "U / t + comm = U", value=179.0, rel_tol=0.5)
    crossing = Estimate(408.0, 278.0, 604.0, 0.97, 4, "widths' median speedups")
    fig = plot_tp_crossover(1.44e11, LINK, tokens=256, seq=64, measured={256.0: 0.8},
                            predicted=pred, crossing=crossing)
    ax2 = fig.axes[1]
    labels = [t.get_text() for t in ax2.get_legend().get_texts()]
    # the old figure drew only the figure's own model crossover, neither of the two judged widths
    assert "judged prediction C = 179 (band shaded)" in labels
    assert "measured crossing C = 408 (278 to 604, shaded)" in labels
    vlines = {round(ln.get_xdata()[0]) for ln in ax2.get_lines() if len(set(ln.get_xdata())) == 1}
    assert {179, 408} <= vlines
    spans = [p.get_x() for p in ax2.patches]   # the band's and the interval's left ends
    assert any(abs(x - 89.5) < 1e-6 for x in spans) and any(abs(x - 278.0) < 1e-6 for x in spans)
    # the legend sits right of the panel (the old one, inside, covered the C = 256 point)
    assert ax2.get_legend().get_bbox_to_anchor().x0 > ax2.get_window_extent().x1 - 1
    plt.close(fig)
    with pytest.raises(TypeError, match="predicted"):
        plot_tp_crossover(1e10, LINK, predicted=179.0)
    with pytest.raises(TypeError, match="crossing"):
        plot_tp_crossover(1e10, LINK, crossing=408.0)
