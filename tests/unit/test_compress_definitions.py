"""Notebook 03's sentences about its dense all-reduce's two timings and its cast hooks' floors."""

from types import SimpleNamespace

from perfkit.compress.experiments import medians_paid_text
from perfkit.compress.narrate import cast_floor_text, timing_noise_note


def test_two_timings_of_the_dense_call_are_named_as_two_definitions_not_noise():
    # notebook 03: the sweep's slowest rank's median of back-to-back calls (54.6 ms) against the mean over
    # ranks of calls issued alone (49.4 ms): a gap of definitions, not replicate noise
    for text in (timing_noise_note(-19.4e-3, -14.2e-3, 5.17e-3),
                 timing_noise_note(-19.4e-3, -14.2e-3, 5.17e-3, short=True),
                 timing_noise_note(-2e-3, 3.17e-3, 5.17e-3), medians_paid_text({"topk": 0.5e-3}, 5.17e-3)):
        assert "two definitions of the dense all-reduce's time" in text and "not noise" in text
        assert "two timings of the same dense all-reduce" not in text
    assert timing_noise_note(-19.4e-3, -14.2e-3, 5.17e-3).endswith("so either gives it the same sign.")


def test_cast_floor_text_says_whether_the_paired_interval_supports_the_medians_excess():
    # notebook 03: fp16_hook paired 0.994x (0.980x to 1.013x), floor 0.994x, medians 0.983x: the paired
    # interval holds the floor, so the 2.9x excess is the medians' reading alone, not a tested cause
    held = cast_floor_text("fp16_hook", SimpleNamespace(value=0.994, low=0.980, high=1.013), 0.994, 0.983)
    assert "by the medians the step gained 1.7%, 2.8x the 0.6% halving" in held
    assert "the paired interval holds the floor (0.980x to 1.013x against 0.994x)" in held
    assert "the medians' reading alone" in held and "the steps' spread at this sample count" not in held
    below = cast_floor_text("h", SimpleNamespace(value=0.97, low=0.96, high=0.98), 0.994, 0.97)
    assert "the paired interval lies wholly below the floor too (0.980x against 0.994x)" in below
    assert "medians' reading alone" not in below


def test_cast_floor_text_never_calls_an_interval_above_the_floor_below_it():
    # a run's paired interval 0.997x to 1.024x lay above the 0.994x floor while the medians' ratio
    # fell below it: the old words said the interval lay "wholly below the floor too (1.024x ...)"
    above = cast_floor_text("fp16_hook", SimpleNamespace(value=1.009, low=0.997, high=1.024), 0.994, 0.990)
    assert "wholly below" not in above
    assert "the paired interval lies wholly above the floor (0.997x against 0.994x)" in above
    assert "the whole interval lies above it" in above
