"""Notebook 00's sentences on the DRAM buffer size against STREAM's rule, and on an imitated bf16."""

from __future__ import annotations

from perfkit.hw import CopyPoint, MachineLimits
from perfkit.viz import machine as vm


def lim(llc):
    copies = [CopyPoint(n, 1e-3, r, r, 2) for n, r in ((2**16, 70e9), (2**20, 175e9), (2**22, 40e9),
                                                       (2**30, 28e9))]
    return MachineLimits("cpu", "t", {"float32": 1e9}, 3e10, copy_points=copies, cache_bytes_per_s=1.75e11,
                         llc_bytes=llc, dram_nbytes=2**30)


def test_dram_size_sentence_computes_the_multiple_and_says_when_the_cap_kept_it_under_4x():
    """Old: notebook 00 said the DRAM arrays were 'at least 4x the last-level cache, as STREAM
    does' while a 503 MB reported cache made them 2.1x."""
    capped = vm.dram_size_sentence(lim(503 << 20))
    assert capped.startswith("the DRAM ceiling's buffers: 1.07 GB, 2.0x the last-level cache the OS reports")
    assert "under STREAM's 4x, because the sweep caps its buffers" in capped
    assert "1024x the largest buffer whose copy kept half the cache ceiling in the sweep (1.05 MB)" in capped
    assert "at least STREAM's 4x" in vm.dram_size_sentence(lim(32 << 20))
    assert "OS" not in vm.dram_size_sentence(lim(None))


def test_bf16_sentence_names_the_imitated_cpu_as_the_owner_of_the_ceiling(monkeypatch):
    """Old: under PERFKIT_IMITATE the sentence named the imitation but read the bf16 class as the
    machine's."""
    import perfkit.viz.machine as m
    monkeypatch.setattr(m, "imitation", lambda: "no-bf16")
    two = MachineLimits("cpu", "t", {"float32": 4e11, "bfloat16": 4e9}, 3e10)
    said = vm.bf16_sentence(two)
    assert "the bf16 ceiling and its class are the imitated CPU's, not this machine's" in said
    monkeypatch.setattr(m, "imitation", lambda: None)
    assert "imitat" not in vm.bf16_sentence(two)
