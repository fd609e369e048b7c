"""Section 1's copy beside notebook 00's ceilings: a copy faster than the DRAM ceiling is said to
have been served partly by the caches, and the staging floor on it named a floor for the caches."""

from perfkit.hw import MachineLimits
from perfkit.saving.experiments import SaveCosts, copy_beside_limits
from perfkit.saving.storage import WriteBandwidth

WRITE = WriteBandwidth("d", "/", "ext4", 1, True, (1e-3,))


def _costs(rate):
    return SaveCosts(42_700_000, {"sync": [0.1]}, {"sync": [0.1]}, WRITE, rate)


def test_a_copy_above_the_dram_ceiling_is_said_to_run_in_the_caches():
    limits = MachineLimits("cpu", "x", {"float32": 1e11}, 30.2e9, llc_bytes=480 << 20)
    text = copy_beside_limits(_costs(47.6e9), limits, 2)
    assert "ran faster than the DRAM ceiling, so caches served part of it" in text
    assert "reads and writes 85.4 MB" in text and "the OS reports as 503 MB" in text
    assert "a floor for this machine's caches, not for DRAM" in text
    assert "%" not in text   # no share of the ceiling printed, let alone one above 100 %
    no_llc = MachineLimits("cpu", "x", {"float32": 1e11}, 30.2e9)
    assert "does not record" in copy_beside_limits(_costs(47.6e9), no_llc, 2)


def test_a_copy_below_the_dram_ceiling_says_nothing_of_caches():
    limits = MachineLimits("cpu", "x", {"float32": 1e11}, 30.2e9, llc_bytes=480 << 20)
    assert "caches" not in copy_beside_limits(_costs(20e9), limits, 2)
