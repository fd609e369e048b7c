"""The capstone's waterfall (module 08): every bar keeps a visible label after the overlap tidying."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from perfkit.viz.capstone import plot_waterfall  # noqa: E402

# as run: four kept fixes (sync not credited), a drift bar, the total
AS_RUN = [("data", 1.57), ("ddp", 2.05), ("sync", 1.09), ("batch", 2.17)]
LONG = [("data", 1.5), ("optimizer", 1.2), ("attention", 1.1), ("compile", 1.3), ("batch", 2.0)]


@pytest.mark.parametrize("steps", [AS_RUN, LONG])
def test_every_bar_of_the_waterfall_keeps_a_visible_label(steps):
    intervals = [(g * 0.7, g * 1.6) for _, g in steps]
    fig = plot_waterfall(steps, total=6.29, unresolved=[steps[2][0]], intervals=intervals,
                         total_interval=(5.23, 8.99), title="Each fix's speedup, the drift and the total")
    labels = fig.axes[0].get_xticklabels()
    assert len(labels) == len(steps) + 2  # the fixes, the drift between runs, the total
    hidden = [t.get_text() for t in labels if not t.get_visible() or not t.get_text()]
    assert not hidden, f"bars without a visible label: {hidden}"
    assert [t.get_text() for t in labels][:len(steps)] == [name for name, _ in steps]
    values = [t.get_text() for t in fig.axes[0].texts if t.get_visible()]  # each bar's speedup, above it
    assert len(values) == len(steps) + 2
    plt.close(fig)
