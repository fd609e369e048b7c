"""A layout that ran faster than DDP at the median: the sentence says whether its interval
resolves the speed-up or holds 0 (then the run does not tell the two steps apart)."""

import pytest

from perfkit.estimate import Estimate
from perfkit.plan import faster_than_base


def gap(value, low, high):
    return Estimate(value, low, high, 0.9, 40, "median of 40 paired differences", coverage=0.91)


def test_an_interval_that_holds_zero_does_not_tell_the_steps_apart():
    s = faster_than_base("zero2", gap(-1.2, -2.5, 0.67), 1.6)
    assert s.startswith("zero2 ran 1.2 ms faster than DDP") and "predicts it 1.6 ms slower" in s
    assert "91% interval (-2.50 ms to 0.67 ms) holds 0" in s and "does not tell zero2's step from DDP's" in s


def test_an_interval_clear_below_zero_is_a_speed_up_the_model_does_not_give():
    s = faster_than_base("zero2", gap(-1.2, -2.0, -0.4), 1.6)
    assert "lies clear below 0" in s and "unexplained by this run" in s
    assert "unexplained" not in faster_than_base("x", gap(-1.2, -2.0, -0.4), -1.0)


def test_no_sentence_where_the_layout_ran_no_faster_and_no_interval_says_so():
    assert faster_than_base("zero1", gap(1.4, -0.1, 3.6), 1.6) == ""
    single = Estimate(-1.0, -1.0, -1.0, None, 1, "one sample")
    assert "no interval" in faster_than_base("zero2", single, 1.6)


@pytest.mark.parametrize("args, match", [(("", gap(-1, -2, 0), 1.0), "name"),
                                         (("z", (-1, -2, 0), 1.0), "gap_ms"),
                                         (("z", gap(-1, -2, 0), float("nan")), "predicted_ms")])
def test_bad_arguments_are_refused_by_name(args, match):
    with pytest.raises((TypeError, ValueError), match=match):
        faster_than_base(*args)
