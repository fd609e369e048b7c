"""perfkit.compute.intensity: the two thread roofs share one argument contract."""

import pytest

from perfkit.compute.intensity import cache_on_threads, dram_on_threads
from perfkit.hw import MachineLimits


def limits():
    return MachineLimits("cpu", "t", {"float32": 1e9}, 1e10, threads=2, cache_bytes_per_s=5e10)


@pytest.mark.parametrize("roof", [dram_on_threads, cache_on_threads])
def test_both_thread_roofs_check_their_arguments_alike(roof):
    assert roof(limits(), None) is None  # all cores: no roof of its own
    assert roof(limits(), 1) is None  # nothing measured on 1 thread
    with pytest.raises(ValueError, match="threads"):
        roof(limits(), 0)
    with pytest.raises(TypeError, match="threads"):
        roof(limits(), "1")
    with pytest.raises(TypeError, match="limits"):
        roof(None, 1)
