"""``perfkit.plan.report_text`` states the link latencies it assumed and says that a layout
failing several checks is counted under each (the counts can sum to more than the rejected)."""

from dataclasses import replace

from perfkit.comm import AlphaBeta
from perfkit.plan import ASSUMED_LATENCY_S, ModelSpec, named_cluster, plan, report_text


def _tiny():
    return ModelSpec("tiny", layers=4, hidden=256, heads=4, ffn=1024, vocab=1000, seq=512)


def test_the_header_prints_the_assumed_latencies_and_where_they_come_from():
    c = named_cluster("h100-sxm")
    text = report_text(plan(_tiny(), c, gpus=16, global_batch=64))
    line = next(ln for ln in text.splitlines() if ln.startswith("links:"))
    assert f"{ASSUMED_LATENCY_S['nvlink'] * 1e6:.3g} us inside a node" in line
    assert f"{ASSUMED_LATENCY_S['network'] * 1e6:.3g} us across nodes" in line
    assert "latencies assumed" in line
    # the figure printed is the cluster's own, not the table's: a changed alpha shows
    other = replace(c, intra=AlphaBeta(7e-6, c.intra.bandwidth))
    assert "7 us inside a node" in report_text(plan(_tiny(), other, gpus=16, global_batch=64))


def test_the_reason_counts_say_a_layout_can_be_counted_twice():
    text = report_text(plan(_tiny(), named_cluster("a100-40gb"), gpus=64, global_batch=64))
    assert "rejected; the most common reasons (a layout can fail several checks, each counted):" in text
