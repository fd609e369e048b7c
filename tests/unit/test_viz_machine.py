"""perfkit.viz.machine: notebook 00's plots and sentences, on hand-made limits."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from perfkit import hw  # noqa: E402
from perfkit.hw import CopyPoint, MachineLimits, MatmulPoint  # noqa: E402
from perfkit.viz import machine as vm  # noqa: E402


def limits(bf16=4e9, cache=None, llc=None):
    pts = [MatmulPoint(n, dt, 1.0, f, f) for dt, f in (("float32", 1e9), ("bfloat16", bf16))
           for n in (128, 256)]
    pts = [p for p in pts if not (p.dtype == "bfloat16" and p.n == 256)]  # bf16 stopped early
    copies = [CopyPoint(2**k, 1e-3, 1e9 * k, 1e9 * k) for k in (16, 18, 20)]
    return MachineLimits("cpu", "test cpu", {"float32": 1e9, "bfloat16": bf16}, 1e10, matmul_points=pts,
                         copy_points=copies, cache_bytes_per_s=cache, llc_bytes=llc)


def test_skipped_sizes_name_each_dtype_that_stopped_early():
    assert vm.skipped_sizes(limits(), [128, 256]) == [
        " bfloat16 n=256: skipped, one call would take over 1 s at this rate"]
    assert vm.skipped_sizes(limits(), [128]) == []
    with pytest.raises(ValueError, match="sizes"):
        vm.skipped_sizes(limits(), [])


@pytest.mark.parametrize("bf16, word", [(4e9, "native"), (5e8, "converted to fp32"), (1e7, "emulated")])
def test_bf16_sentence_follows_the_ratio(bf16, word, monkeypatch):
    monkeypatch.setattr(hw, "_IMITATE", None)
    text = vm.bf16_sentence(limits(bf16))
    assert word in text and f"({bf16 / 1e9:.3g}x fp32)" in text and "imitates" not in text
    assert text.startswith("fp32 ceiling: 1 GFLOP/s") or text.startswith("fp32 ceiling: 1.00 GFLOP/s")


def test_bf16_sentence_names_an_imitation(monkeypatch):
    monkeypatch.setattr(hw, "_IMITATE", "no-bf16")  # read once, when perfkit was imported
    assert "PERFKIT_IMITATE=no-bf16" in vm.bf16_sentence(limits(1e7))


def test_plots_draw_one_line_per_dtype_and_each_ceiling():
    fig = vm.plot_matmul_sweep(limits())
    assert len(fig.axes[0].get_lines()) == 2 and "test cpu" in fig.axes[0].get_title()
    bare = vm.plot_copy_sweep(limits()).axes[0]
    full = vm.plot_copy_sweep(limits(cache=5e10, llc=2**19)).axes[0]
    assert len(bare.get_lines()) == 2 and len(full.get_lines()) == 4  # + cache ceiling + LLC line
    with pytest.raises(TypeError, match="limits"):
        vm.plot_copy_sweep({"float32": 1e9})


def test_cache_and_dram_points_follow_the_last_level_cache():
    copies = [CopyPoint(n, 1e-3, r, r) for n, r in ((2**14, 5e9), (2**16, 9e9), (2**17, 20e9), (2**20, 2e9),
                                                     (2**22, 1e9))]
    lim = MachineLimits("cpu", "t", {"float32": 1e9}, 1e9, copy_points=copies, cache_bytes_per_s=9e9,
                        llc_bytes=2**18)
    cached, dram = vm.cache_and_dram_points(lim)
    # the fastest whose source and destination fit in half the cache (2**17 is faster, but the two
    # buffers would fill half of it); the smallest >= 4x the cache
    assert (cached.nbytes, dram.nbytes) == (2**16, 2**20)
    with pytest.raises(ValueError, match="last-level cache"):
        vm.cache_and_dram_points(limits())  # no cache size known
    with pytest.raises(TypeError, match="limits"):
        vm.cache_and_dram_points({"llc_bytes": 1})
