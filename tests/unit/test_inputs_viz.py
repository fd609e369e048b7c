"""perfkit.viz's capstone plots refuse bad arguments with a message naming the argument.

Each case is (id, call, exception, regex on the message).
"""

import math

import pytest

from perfkit.viz import (
    cumulative_speedups,
    plot_time_to_target,
    plot_waterfall,
    round_context,
    seams_text,
    total_text,
    waterfall_shares,
)

CASES = [
    ("steps empty", lambda: plot_waterfall([]), ValueError, "steps"),
    ("steps str", lambda: plot_waterfall("data"), TypeError, "steps"),
    ("steps not pairs", lambda: cumulative_speedups([("data", 1.5, 2)]), TypeError, r"steps\[0\]"),
    ("name empty", lambda: cumulative_speedups([("", 1.5)]), TypeError, r"steps\[0\] name"),
    ("speedup zero", lambda: cumulative_speedups([("a", 0.0)]), ValueError, r"steps\[0\] speedup"),
    ("speedup nan", lambda: cumulative_speedups([("a", 2.0), ("b", math.nan)]), ValueError,
     r"steps\[1\] speedup"),
    ("speedup str", lambda: cumulative_speedups([("a", "2x")]), TypeError, r"steps\[0\] speedup"),
    ("title int", lambda: plot_waterfall([("a", 2.0)], title=3), TypeError, "title"),
    ("total negative", lambda: plot_waterfall([("a", 2.0)], total=-1.0), ValueError, "total"),
    ("unresolved unknown", lambda: plot_waterfall([("a", 2.0)], unresolved=["b"]), ValueError, "unresolved"),
    ("round_context not a Round", lambda: round_context("round"), TypeError, "r must be"),
    ("shares total nan", lambda: waterfall_shares([("a", 2.0)], math.nan), ValueError, "total"),
    ("shares steps empty", lambda: waterfall_shares([], 2.0), ValueError, "steps"),
    ("total_text not a Total", lambda: total_text(3.0), TypeError, "t must be"),
    ("seams_text not a Total", lambda: seams_text(3.0), TypeError, "t must be"),
    ("curves empty", lambda: plot_time_to_target({}, 5.0), ValueError, "curves"),
    ("curves unequal", lambda: plot_time_to_target({"a": ([1, 2], [3.0])}, 5.0), ValueError,
     r"curves\['a'\]"),
    ("target inf", lambda: plot_time_to_target({"a": ([1], [3.0])}, math.inf), ValueError,
     "target"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_cumulative_speedups_multiply():
    bars = cumulative_speedups([("data", 2.0), ("ddp", 0.5), ("batch", 3.0)])
    assert bars == [("data", 1.0, 2.0), ("ddp", 2.0, 1.0), ("batch", 1.0, 3.0)]


def test_waterfall_labels_each_gain_and_the_total():
    from perfkit.viz import text_overlaps

    fig = plot_waterfall([("data", 2.0), ("ddp", 0.8), ("batch", 3.0)])
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"2.00x", "0.80x", "3.00x", "4.80x"} <= texts
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()][-1] == "total"
    assert not text_overlaps(fig)
