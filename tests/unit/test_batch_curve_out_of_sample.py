"""BatchCurve.out_of_sample: the phrase on the batches eta was not fitted on follows their counts."""

import pytest

from perfkit.compute.batch_curve import BatchCurve


class Placed(BatchCurve):
    """A curve whose placements are given (index -> "inside" / "outside" / "at the edge")."""

    def placement(self, i: int) -> str:
        return self.given[i]


def curve(*places: str) -> Placed:
    n = len(places) + 1
    c = Placed(tuple(range(1, n + 1)), 4, (1.0,) * n, (1.0,) * n, (0,) * n, ((1.0,) * 2,) * n,
               ((0,) * 2,) * n, (0.1, 0.1), 0.0, (0.0,), n - 1)
    object.__setattr__(c, "given", dict(enumerate(places)))
    return c


@pytest.mark.parametrize(("places", "said"), [
    # the old headline said "it held for some only" whenever one was not outside
    (("outside", "outside", "outside", "at the edge"), "0 inside, 3 outside, 1 at the edge: it held for none "
                                                       "(1 unresolved at the edge)"),
    (("inside", "inside"), "2 inside, 0 outside, 0 at the edge: it held for every one"),
    (("outside", "outside"), "0 inside, 2 outside, 0 at the edge: it failed for every one"),
    (("at the edge", "at the edge"), "none resolved: every one at the edge"),
    (("inside", "outside", "at the edge"), "it held for 1 of 3, failed for 1, 1 unresolved at the edge"),
    (("inside", "at the edge"), "it held for 1 of 2, 1 unresolved at the edge"),
])
def test_the_phrase_follows_the_counts(places, said):
    assert curve(*places).out_of_sample().endswith(said)
