"""perfkit.compress.experiments: what notebook 03 measures on one gradient."""

import math
from types import SimpleNamespace

import pytest
import torch

from perfkit.compress import (
    BYTES_PER_VALUE,
    CodecTimes,
    codec_split,
    conservation_error,
    copy_share_range,
    error_rows,
    fused_default_note,
    gaussian_error,
    residual_norms,
    time_codecs,
)
from perfkit.timing import Measurement


def grad(n=20_000, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def test_error_rows_cover_every_compressor_with_exact_bytes_and_the_model():
    g = grad()
    rows = error_rows(g, [0.01, 0.5])
    names = ["topk 0.01", "topk 0.5", "randomk 0.01", "randomk 0.5", "qsgd", "sign"]
    assert [r["name"] for r in rows] == names
    by = {r["name"]: r for r in rows}
    assert by["topk 0.01"]["wire_bytes"] == 200 * 8  # value + int32 index per kept value
    assert by["topk 0.01"]["wire_ratio"] == pytest.approx(0.02)
    assert by["topk 0.5"]["predicted"] == gaussian_error("topk", 0.5, g.numel())
    # on Gaussian data the measured errors follow the Gaussian model
    for r in rows:
        assert r["rel_error"] == pytest.approx(r["predicted"], rel=0.1), r["name"]
    # random-k keeping half drops about half the energy: error sqrt(0.5)
    assert by["randomk 0.5"]["rel_error"] == pytest.approx(math.sqrt(0.5), rel=0.05)


def test_error_rows_measure_rather_than_copy_the_model_on_heavy_tails():
    g = grad()
    g[:100] *= 100  # a few coordinates carry most of the energy
    tk = next(r for r in error_rows(g, [0.01]) if r["name"] == "topk 0.01")
    assert tk["rel_error"] < 0.5 * tk["predicted"]


def test_conservation_error_is_rounding_only():
    assert 0 <= conservation_error(grad(), steps=10) < 1e-6


def test_residual_norms_random_k_holds_more_than_top_k():
    age = residual_norms(grad(5000), steps=50)
    assert set(age) == {"top-k 1%", "random-k 1%", "sign"}
    assert age["random-k 1%"] > age["top-k 1%"] > 0


@pytest.mark.parametrize("bad, exc", [(torch.zeros(10), ValueError), (torch.ones(2, 3), ValueError),
                                      ([1.0, 2.0], TypeError), (torch.tensor([1.0, math.nan]), ValueError)])
def test_gradients_are_checked(bad, exc):
    with pytest.raises(exc, match="grad"):
        error_rows(bad, [0.1])


def test_bad_counts_and_ratios_are_named():
    with pytest.raises(ValueError, match="ratios"):
        error_rows(grad(), [0.0])
    with pytest.raises(ValueError, match="steps"):
        conservation_error(grad(), steps=0)
    with pytest.raises(ValueError, match="numel"):
        time_codecs(10)
    with pytest.raises(ValueError, match="repeat"):
        time_codecs(4096, repeat=0)


def test_time_codecs_times_every_path_in_alternation():
    k = time_codecs(4096, repeat=2)
    assert set(k.times) == {"memcpy", "fp16 cast", "qsgd eager", "qsgd fused", "sign eager", "sign fused",
                            "topk exact", "topk sampled", "qsgd fused decode", "sign fused decode",
                            "topk sampled decode"}
    assert all(len(m.times_s) == 2 for m in k.times.values())
    assert k.first_fused_s > 0 and 0.99 <= k.sampled_mass <= 1.0 + 1e-6


def test_copy_share_range_charges_write_allocate_to_the_path():
    # QSGD fused moves 9 + 5 = 14 B/value counted, writes 1 + 4, so 19 with write-allocate;
    # the copy moves 8 (non-temporal stores) or 12: the share lies between 8/19 and 12/19,
    # and 8/14, the count without write-allocate, inside. Its low end can fail: a path that
    # ran at 0.18 of the copy's speed misses it, where an upper bound alone could not fail.
    assert sum(BYTES_PER_VALUE["qsgd"]["fused"].values()) == 14
    lo, hi = copy_share_range("qsgd")
    assert (lo, hi) == (pytest.approx(8 / 19), pytest.approx(12 / 19))
    assert lo < 8 / 14 < hi and not lo <= 0.18 <= hi
    # sign fused moves 8.25 B/value and writes 4.125: 8/12.375 to 12/12.375 (= 8/8.25)
    assert copy_share_range("sign") == (pytest.approx(8 / 12.375), pytest.approx(8 / 8.25))
    with pytest.raises(ValueError, match="method"):
        copy_share_range("topk")


def _codec_times(copy, whole, decode):
    ms = {"memcpy": copy, "qsgd fused": whole, "qsgd fused decode": decode}
    return CodecTimes(1 << 24, {k: Measurement(tuple(v), 0) for k, v in ms.items()}, 1.0, 1.0)


def test_codec_split_puts_the_excess_where_the_decode_timing_says():
    # notebook 03's default run: copy 4.34 ms (8 B/value), QSGD fused round trip 17.9 ms, its
    # decode alone 11.1 ms. Each half is held against its bytes with write-allocate, as the
    # predicted range counts them: the decode's 5 B/value plus the 4 it writes read first, 9 B,
    # take 4.88 ms at the copy's speed, so 6.22 ms over; the encode (17.9 - 11.1 = 6.8 ms)
    # against 9 + 1 = 10 B/value's 5.43 ms, 1.38 ms over: the decode holds 82 % of the excess.
    s = codec_split(_codec_times([4.34e-3] * 3, [17.9e-3] * 3, [11.1e-3] * 3), "qsgd")
    assert s.decode_bytes_s == pytest.approx(4.34e-3 * 9 / 8)
    assert s.encode_s == pytest.approx(6.8e-3) and s.encode_bytes_s == pytest.approx(4.34e-3 * 10 / 8)
    assert s.shares()["decode"] == pytest.approx(6.2175 / (6.2175 + 1.375), rel=1e-3)
    assert "the decode holds 82%" in s.text() and "write-allocate counted" in s.text()
    # the two halves' bytes sum to the count the predicted range divides by (b + w)
    for m in ("qsgd", "sign"):
        ms = {"memcpy": [8e-3] * 3, f"{m} fused": [30e-3] * 3, f"{m} fused decode": [10e-3] * 3}
        t = codec_split(CodecTimes(1 << 24, {k: Measurement(tuple(v), 0) for k, v in ms.items()}, 1, 1), m)
        moved = (t.encode_bytes_s + t.decode_bytes_s) / 1e-3  # B/value: the copy's 8 B take 8 ms
        assert moved == pytest.approx(8 / copy_share_range(m)[0])
    # an imitated ISA is named beside the split; without one, nothing is said of it
    assert "imitates no-bf16" in s.text("no-bf16") and "imitates" not in s.text(None)
    # the encode is each round's round trip less that round's decode, not a difference of medians
    s = codec_split(_codec_times([4e-3] * 3, [10e-3, 20e-3, 30e-3], [1e-3, 15e-3, 20e-3]), "qsgd")
    assert s.encode_s == pytest.approx(9e-3)  # median of 9, 5, 10 ms
    # and the text says so, beside the difference of the two medians a reader can compute (20 - 15 ms)
    assert "the median of each round's round trip less its decode; the two medians printed above differ " \
           "by 5 ms)" in s.text()
    # an encode faster than its bytes: no share above 100 %, the excess named whole
    s = codec_split(_codec_times([8e-3] * 3, [12e-3] * 3, [10e-3] * 3), "qsgd")
    assert s.excess["encode"] < 0 and s.shares() is None
    assert "all of the time beyond the bytes lies in the decode" in s.text()
    with pytest.raises(ValueError, match="method"):
        codec_split(_codec_times([1e-3], [2e-3], [1e-3]), "topk")


def test_fused_default_note_says_where_the_default_was_not_shown_faster():
    # notebook 03's default run: QSGD's fused path 0.968x eager (0.905x to 1.003x), sign's faster
    est = lambda v, lo, hi: SimpleNamespace(value=v, low=lo, high=hi)  # noqa: E731
    note = fused_default_note({"qsgd": est(0.968, 0.905, 1.003), "sign": est(1.6, 1.4, 1.8)})
    assert "qsgd's was not shown faster" in note and "sign" not in note and "1,048,576 values" in note
    assert "ran slower" in fused_default_note({"qsgd": est(0.8, 0.7, 0.9)})
    assert fused_default_note({"qsgd": est(1.2, 1.1, 1.3), "sign": est(1.6, 1.4, 1.8)}) == ""
    # under an imitated CPU the fused loops were built for its capped ISA: the note says so
    capped = fused_default_note({"qsgd": est(1.01, 0.99, 1.03)}, capped="no-bf16")
    assert "qsgd's was not shown faster" in capped and "This run imitates no-bf16" in capped
    faster = fused_default_note({"qsgd": est(1.2, 1.1, 1.3)}, capped="no-bf16")
    assert faster.startswith(" This run imitates") and "the cap's rather than the codec's" in faster


def test_fused_default_note_says_what_to_do_where_the_fused_path_ran_slower():
    est = lambda v, lo, hi: SimpleNamespace(value=v, low=lo, high=hi)  # noqa: E731
    # notebook 03's default run: QSGD's fused path slower, whole interval and all; sign's faster
    slower = fused_default_note({"qsgd": est(0.864, 0.85, 0.981), "sign": est(1.08, 1.02, 1.1)})
    assert "`fused=False` on qsgd" in slower and "TORCH_LOGS=output_code" in slower and "sign" not in slower
    unshown = fused_default_note({"qsgd": est(0.968, 0.905, 1.003)})  # not shown slower: no advice
    assert "fused=False" not in unshown and "output_code" not in unshown


def test_medians_paid_text_leaves_a_margin_within_the_noise_undecided():
    from perfkit.compress.experiments import medians_paid_text
    # notebook 03's default run: top-k's margin 0.5 ms against 5.3 ms between two timings of one call
    text = medians_paid_text({"qsgd fused": -21e-3, "sign fused": 20e-3, "topk sampled": 0.5e-3}, 5.3e-3)
    assert text.startswith("sign fused removed more link time than its codec took; qsgd fused less; ")
    assert "topk sampled's margin (+500 µs) lies within the 5.3 ms" in text
    assert "cannot tell whether it paid" in text
    no_noise = medians_paid_text({"topk sampled": 0.5e-3}, 0.0)
    assert no_noise == "topk sampled removed more link time than its codec took"
    both = medians_paid_text({"a": -1e-3, "b": 1e-3}, 2e-3)
    assert both.startswith("a's margin (-1 ms) and b's margin (+1 ms) lie within the 2 ms")
    assert "whether they paid" in both
    none = medians_paid_text({"a": -3e-3, "b": -4e-3, "c": -5e-3}, 1e-3)  # none paid: said whole
    assert none == "a, b and c removed less link time than their codecs took"


def test_resolution_note_says_when_an_interval_cannot_resolve_the_bytes_gain():
    from perfkit.compress.narrate import resolution_note
    # notebook 03's default run: a cast hook's edge 0.997x (0.3 % of a step) against a paired
    # interval 0.99x to 1.05x (6 % wide): the gain is 5 % of the width, unresolvable
    wide = SimpleNamespace(low=0.99, high=1.05, level=0.9)
    text = resolution_note(wide, 0.997)
    assert text.startswith(" The gain its bytes allow, 0.3% of a step, is 5% of the interval's width")
    # an Estimate names its interval by its exact coverage: [min, max] of 7 rounds covers 98.4 %
    from perfkit.stats import median_ratio
    seven = median_ratio([0.99, 1.0, 1.01, 1.02, 1.03, 1.04, 1.05], [1.0] * 7)
    assert resolution_note(seven, 0.997).startswith(" The gain its bytes allow, 0.3% of a step, is 5% of "
                                                   "the 98% interval's width")
    assert "(6.0% of a step)" in text and "not resolve a gain of that size" in text
    assert "a floor only" in text and "made the step slower, by any amount, passes it too" in text
    narrow = resolution_note(SimpleNamespace(low=0.995, high=0.996), 0.99)  # narrower than the gain
    assert narrow.startswith(" The edge, 0.990x, is a floor only") and "interval's width" not in narrow
    assert resolution_note(wide, 1.0) == "" and resolution_note(wide, 1.2) == ""  # no gain allowed
    assert "the interval's width" in resolution_note(SimpleNamespace(low=0.9, high=1.1), 0.99)
    with pytest.raises((TypeError, ValueError), match="ratio.low"):
        resolution_note(SimpleNamespace(high=1.0), 0.99)


def test_resolution_note_says_when_the_hook_made_the_step_slower():
    from perfkit.compress.narrate import resolution_note
    slower = resolution_note(SimpleNamespace(low=1.001, high=1.07, level=0.9), 0.997)  # fp16's, default run
    assert "the whole interval lies above 1x: this hook made the step slower" in slower
    assert "made the step slower, which" not in resolution_note(SimpleNamespace(low=0.99, high=1.05), 0.997)


def test_ef_gap_text_closes_widens_or_has_nothing_to_close():
    from perfkit.compress.narrate import ef_gap_text
    assert ef_gap_text(0.1479, 0.0013) == "closed 99% of it"
    assert ef_gap_text(0.0536, 0.0579) == "widened it by 8%: error feedback made this run worse"
    assert ef_gap_text(-0.0001, 0.0001) == "no gap to close"
    with pytest.raises((TypeError, ValueError)):
        ef_gap_text(float("nan"), 0.0)


def test_slowdown_text_puts_the_slower_steps_in_small_calls():
    from perfkit.compress.narrate import slowdown_text
    r = {"powersgd_r1": SimpleNamespace(value=1.49), "powersgd_r4": SimpleNamespace(value=1.5),
         "topk_1pct": SimpleNamespace(value=1.19), "randomk_1pct": SimpleNamespace(value=1.11)}
    text = slowdown_text(r, 6.22e-3, [628e-6, 1.27e-3, 1.04e-3])  # notebook 03's default run
    assert "none's median step, 6.22 ms), the slower steps took 684 µs to 3.11 ms more than none's" in text
    assert "the time of 0.5 to 5.0 such calls" in text
    assert "chains three all-reduces per bucket" in text and "the time of 2.4 to 5.0 small calls" in text
    assert "do not account for all of it" in text and "perfkit's hook waits inside backward" in text
    fits = slowdown_text({"powersgd_r2": SimpleNamespace(value=1.3)}, 6e-3, [0.6e-3, 1.2e-3])  # 1.8 ms: 1.5-3
    assert "two more calls per bucket lie inside that range" in fits and "perfkit's hook" not in fits
    assert slowdown_text({"qsgd": SimpleNamespace(value=0.98)}, 6e-3, [1e-3]) == ""  # none slower
    with pytest.raises((TypeError, ValueError)):
        slowdown_text(r, 0.0, [1e-3])
    with pytest.raises((TypeError, ValueError)):
        slowdown_text(r, 6e-3, [])


def test_slowdown_text_names_its_statistic():
    from perfkit.compress.narrate import slowdown_text
    text = slowdown_text({"topk_1pct": SimpleNamespace(value=1.2)}, 5e-3, [1e-3])
    assert text.startswith("By the median paired ratios (less 1, times none's median step, 5 ms)")
    assert "By the medians," not in text


def test_medians_outside_counts_where_the_ratio_of_medians_leaves_the_paired_interval():
    from perfkit.compress.narrate import medians_outside, medians_outside_text
    e = SimpleNamespace
    paired = {"a": e(value=1.14, low=1.097, high=1.188), "b": e(value=1.01, low=0.98, high=1.03)}
    med = {"a": 1.396, "b": 1.01}
    assert list(medians_outside(paired, med)) == ["a"]
    assert abs(medians_outside(paired, med)["a"] - 0.208) < 1e-9
    text = medians_outside_text(paired, med)
    assert text.startswith("For 1 of 2 methods") and "furthest outside: a, 1.396x, 0.21x above" in text
    assert medians_outside_text({"b": paired["b"]}, med).startswith("Every method's")
    assert "90 %" not in text + medians_outside_text({"b": paired["b"]}, med)  # coverage: the interval's
    with pytest.raises((TypeError, ValueError)):
        medians_outside(paired, {"a": 1.0})


def test_medians_outside_text_says_when_every_one_lies_on_one_side():
    from perfkit.compress.narrate import medians_outside_text
    e = SimpleNamespace
    paired = {k: e(value=1.1, low=1.05, high=1.15) for k in "abcde"}
    up = medians_outside_text(paired, dict.fromkeys("abcde", 1.4))
    assert "all above it" in up and "Outside on one side every time" in up
    # the methods share one baseline, so no binomial chance of the pattern is printed
    assert "chance 0.0" not in up and "same baseline" in up and "no chance of the pattern applies" in up
    assert "treat consecutive rounds as independent" in up and "same figure" not in up
    mixed = medians_outside_text(paired, {**dict.fromkeys("abcd", 1.4), "e": 0.9})
    assert "4 above it, 1 below" in mixed and "one side" not in mixed
    assert "one side" not in medians_outside_text({"a": paired["a"]}, {"a": 1.4})  # too few to say


def test_cast_floor_text_sets_a_ratio_against_a_floor_as_context_with_the_gain_against_the_width():
    from perfkit.compress.narrate import cast_floor_text
    e = SimpleNamespace(value=0.999, low=0.966, high=1.024, label="98% interval")
    text = cast_floor_text("bf16_hook", e, 0.9963, 1.164)
    assert "Context, not a verdict" in text and "98% interval 0.966x to 1.024x" in text
    assert "0.4% of a step, is 6% of the interval's width of 5.8%" in text
    assert "the interval reaches across it" in text and "1.164x, lies above the paired interval" in text
    assert "whole interval lies above it" in cast_floor_text("h", SimpleNamespace(value=1.02, low=0.998,
                                                                                  high=1.06), 0.9963, 1.0)
    on_end = cast_floor_text("h", SimpleNamespace(value=1.02, low=0.9964, high=1.06), 0.9963, 1.0)
    assert "reaches across it" in on_end  # both print as 0.996x
    short = cast_floor_text("bf16_hook", e, 0.9963, 1.164, short=True)
    assert short.startswith("bf16_hook ran 0.999x against a floor of 0.996x") and "not judged" in short
    wide = cast_floor_text("h", SimpleNamespace(value=0.9, low=0.89, high=0.91), 0.7, 0.9)
    assert "cannot tell" not in wide and "lies inside the paired interval" in wide
    assert "below the floor as well" not in text and "below the floor as well" not in wide
    beat = cast_floor_text("bf16_hook", SimpleNamespace(value=1.0, low=0.955, high=1.037), 0.997, 0.948)
    assert "0.948x, lies below the paired interval" in beat
    assert "below the floor as well: by the medians the step gained 5.2%, 17x the 0.3% halving" in beat
    near = cast_floor_text("h", SimpleNamespace(value=1.0, low=0.955, high=1.037), 0.997, 0.995)
    assert "gained 0.5%, 1.7x the 0.3% halving" in near


def test_narrow_miss_note_says_whether_the_ratio_of_medians_confirms_a_miss_below_the_floor():
    from perfkit.compress.narrate import narrow_miss_note
    paired = SimpleNamespace(value=0.947, low=0.915, high=0.985)
    both = narrow_miss_note(paired, 0.884, 0.997)
    assert both.startswith(" This miss is judged on the paired interval")
    assert "likely comes out too narrow" in both
    assert "0.884x, lies below the floor (0.997x) too" in both
    alone = narrow_miss_note(paired, 1.01, 0.997)
    assert "does not lie below the floor (0.997x)" in alone and "does not establish a lead" in alone
    assert "does not lie below" in narrow_miss_note(paired, 0.9971, 0.997)  # equal as printed
    with pytest.raises((TypeError, ValueError)):
        narrow_miss_note(paired, 0.0, 0.997)


def test_fusion_text_says_what_a_floor_verdict_shows_against_the_model():
    from perfkit.compress.narrate import fusion_text
    e = SimpleNamespace
    sign = fusion_text(e(value=1.25, low=1.12, high=1.34), 4.73)  # notebook 03's default run
    assert "this ran 0.26 of it (whole interval, 1.12x to 1.34x, below it)" in sign
    assert "the mark holds a floor only" in sign
    qsgd = fusion_text(e(value=0.973, low=0.935, high=1.05), 2.14)
    assert "was not shown faster than the eager one here" in qsgd and "the default for tensors" in qsgd
    assert "ran slower" in fusion_text(e(value=0.8, low=0.7, high=0.9), 2.0)
    assert "floor only" not in fusion_text(e(value=2.5, low=2.2, high=2.8), 2.14)
    with pytest.raises((TypeError, ValueError)):
        fusion_text(e(value=1.0, low=0.9, high=1.1), 0.0)


def test_timing_noise_note_does_not_settle_a_margin_within_two_timings_of_one_call():
    from perfkit.compress.narrate import timing_noise_note
    # notebook 03's default run: margin -20.7 ms; the sweep's timing of the dense call (26.7 ms
    # longer) puts it at +5.9 ms, so its sign is not established
    text = timing_noise_note(-20.7e-3, 5.9e-3, 26.7e-3)
    assert text.startswith(" The interval covers each set of samples' own spread, not the 26.7 ms")
    assert "(-20.7 ms) lies within it" in text and "+5.9 ms, on the other side of 0" in text
    assert "cannot tell whether it paid" in text
    short = timing_noise_note(-20.7e-3, 5.9e-3, 26.7e-3, short=True)
    assert short.startswith("; but that interval covers only") and "cannot tell whether it paid" in short
    same = timing_noise_note(-20.7e-3, -1e-3, 26.7e-3)
    assert "on the same side of 0" in same and "cannot tell" not in same
    assert timing_noise_note(-30e-3, -3e-3, 26.7e-3).startswith(
        " The margin (-30 ms) lies beyond the 26.7 ms by which this run's two definitions of the dense "
        "all-reduce's time differ")
    # beyond the noise the clause says so and claims nothing the interval may not show
    beyond = timing_noise_note(30e-3, 3e-3, 1e-3, short=True)
    assert beyond.startswith("; its margin (+30 ms) lies beyond the 1 ms by which this run's two definitions")
    assert beyond.endswith("so either gives it the same sign")
