"""Module 09's timed verdicts weighed again by the largest reading of identical work."""

import pytest

from perfkit import viz
from perfkit.data.claims import PinTiming
from perfkit.stats import Estimate
from perfkit.timing import Measurement
from perfkit.verdict import Claim, assess

FASTER = dict(low=1.05, partly=1.0, unit="x")


def test_the_largest_reading_of_identical_work_can_change_a_timed_status_and_is_named():
    aa = PinTiming(Measurement((1.0,) * 10, 0), Measurement((1.0,) * 10, 0), "cpu")  # reach 0
    model = Estimate(1.0, 0.96, 1.043, 0.9, 16, "m")
    reach = viz.claims.identical_work_reach(aa, {"buckets": 1.049, "model": model})
    assert reach == pytest.approx(0.049)
    # 2.4 % above the promise's 1.05x: holds by the control's 1.1 %, only partly by 4.9 %
    slow = (Claim("gelu", "speedup", **FASTER), Estimate(1.10, 1.075, 1.12, 0.9, 16, "m"), {})
    far = (Claim("topk", "speedup", **FASTER), Estimate(0.77, 0.72, 0.84, 0.9, 16, "m"), {})
    count = (Claim("calls", "count", low=0, high=0, timed=False), 3, {})
    judged = {"gelu": slow, "topk": far, "calls": count}
    verdicts = {n: assess(c, m, error=0.011, **kw) for n, (c, m, kw) in judged.items()}
    got = viz.claims.reweighed_statuses(judged, verdicts, reach)
    assert got == {"gelu": ("holds", "holds partly"),
                   "topk": ("does not hold here", "does not hold here")}  # the count is not timed
    said = viz.claims.reweighed_text(got, reach, 0.011)
    assert said == ("Weighed by 4.9%, the largest reading of identical work, instead of the A/A control's "
                    "1.1%, of the 2 timed verdict(s) so far: 1 would change: gelu: holds -> holds "
                    "partly.")
    assert viz.claims.reweighed_text({"topk": got["topk"]}, reach, 0.011).endswith("none changes status.")
    with pytest.raises(ValueError, match="no verdict"):
        viz.claims.reweighed_statuses({"x": slow}, verdicts, reach)
    with pytest.raises(ValueError, match="by naming"):
        viz.claims.show_claims_table(verdicts, {"gelu": "inconclusive"})


def test_a_headline_states_the_status_the_larger_error_estimate_gives():
    # as run: DataLoader workers 0.986x (0.943x to 1.038x) does not hold by the A/A control's 0.9 %, and is
    # inconclusive weighed by 2.4 %, the largest reading of identical work: the headline follows the latter
    workers = (Claim("workers", "speedup", **FASTER), Estimate(0.986, 0.943, 1.038, 0.97, 10, "m"), {})
    verdicts = {"workers": assess(workers[0], workers[1], error=0.009)}
    got = viz.claims.reweighed_statuses({"workers": workers}, verdicts, 0.024)
    assert got == {"workers": ("does not hold here", "inconclusive")}
    head = viz.claims.claims_headlines(verdicts, got, 0.024)["workers"]
    assert head.startswith("inconclusive weighed by 2.4%, the largest reading of identical work "
                           "(does not hold here by the A/A control's reach alone)")
    assert "whatever its side" not in head
    assert viz.claims.claims_headlines(verdicts)["workers"].startswith("does not hold here")


def test_a_timed_row_the_weighing_leaves_out_is_not_called_untimed():
    # pin_memory without CUDA: its figure is the A/A control's timing, not judged: "not judged", not
    # "not timed"
    pin = assess(Claim("pin", "speedup", **FASTER), 1.0, (0.99, 1.01), gpu_only=True, not_judged="A/A")
    count = assess(Claim("calls", "count", low=0, high=0, timed=False), 0)
    import IPython.display as d

    shown = []
    d_display, d.display = d.display, lambda obj, raw=False: shown.append(obj)
    try:
        viz.claims.show_claims_table({"pin": pin, "calls": count}, {}, "status weighed by 2.4%")
    finally:
        d.display = d_display
    rows = shown[0]["text/plain"].splitlines()
    assert rows[0].endswith("| not judged") and rows[1].endswith("| not timed")
