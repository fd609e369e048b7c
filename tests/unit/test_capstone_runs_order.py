"""Every run of the capstone's loop (module 08), in the order run, and its figure."""

from pathlib import Path

import pytest

from perfkit.profiling.capstone import FixLoop
from perfkit.viz.capstone import plot_runs
from tests.unit.test_capstone import CALLS, FIX_FOR, LIMITS, FakeJob


def test_the_loop_records_every_run_in_the_order_run_and_the_figure_draws_them():
    CALLS.clear()
    loop = FixLoop(FakeJob(Path("t.py"), Path("/tmp/o"), 5.0, skip=1, window=2, measure=3), ("sync", "ddp"),
                   FIX_FOR, LIMITS, repeat_before=True)
    loop.start()
    loop.play()  # sync: after, then the slow job again
    loop.play()  # ddp on sync: after (slower: dropped), then sync again
    loop.finish()  # the slow job once more
    assert [n for n, _ in loop.runs] == ["none", "sync", "none", "sync+ddp", "sync", "none"]
    assert [t for _, t in loop.runs] == pytest.approx([250, 500, 250, 1000 / 3, 500, 250])
    fig = plot_runs(loop.runs)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["none (3 runs)", "sync (2 runs)", "sync+ddp (1 run)"]
    assert len(fig.axes[0].lines) == 3 and fig.axes[0].get_yscale() == "log"
    shown = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert shown == ["250", "300", "400", "500"]  # labelled within one decade too
    with pytest.raises(ValueError, match="runs\\[0\\]"):
        plot_runs([("none", 0.0)])
