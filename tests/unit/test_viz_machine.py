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
    from dataclasses import replace
    # the cache ceiling named its buffer: that one, though another ran faster by its median
    assert vm.cache_and_dram_points(replace(lim, cache_nbytes=2**14))[0].nbytes == 2**14
    with pytest.raises(ValueError, match="last-level cache"):
        vm.cache_and_dram_points(limits())  # no cache size known
    with pytest.raises(TypeError, match="limits"):
        vm.cache_and_dram_points({"llc_bytes": 1})


def two_thread_limits(slow_at=(2**18, 2**20), factor=100):
    """Copies on 2 threads and on 1; on 2 threads the sizes in ``slow_at`` collapse (a barrier
    waiting for a descheduled thread), the 64 KiB one (16,384 elements) runs on one thread."""
    one = ((2**16, 5e10), (2**18, 7e10), (2**20, 3e10), (2**24, 1e10))
    copies = [CopyPoint(n, 1e-3, r, r, 1) for n, r in one]
    copies += [CopyPoint(n, 1e-3, r / (factor if n in slow_at else 1), r, 2) for n, r in
               ((2**16, 5e10), (2**18, 7e10), (2**20, 3e10), (2**24, 1.5e10))]
    copies += [CopyPoint(2**24, 1e-3, 1.2e10, 1.2e10, 1, "add")]
    pts = [MatmulPoint(n, "float32", 1.0, f * t, f * t, t) for n, f in ((128, 1e10), (256, 2e10))
           for t in (2, 1)]
    shapes = [MatmulPoint(256, "float32", 1.0, 3e10, 3e10, 1, 4096, 256)]
    return MachineLimits("cpu", "t", {"float32": 4e10}, 1.5e10, matmul_points=pts, copy_points=copies,
                         cache_bytes_per_s=7e10, llc_bytes=2**22, threads=2,
                         one_thread_flops={"float32": 3e10}, shape_points=shapes, dram_nbytes=2**24,
                         cache_nbytes=2**18,
                         sources={"float32": "n=256 on 2 threads",
                                  "float32, 1 thread": "4096x256 @ 256x256 on 1 thread",
                                  "dram": "copy of 16,777,216 B buffers on 2 threads"})


def test_threads_sentence_names_the_collapsed_sizes_and_why():
    text = vm.threads_sentence(two_thread_limits())
    assert text.startswith("On 2 threads the copies of 262 kB to 1.05 MB ran 100x to 100x slower than on one")
    assert "at least 32,768 elements" in text
    assert "The 65.5 kB buffer (16,384 elements) runs on one thread either way; it ran as fast" in text
    quiet = vm.threads_sentence(two_thread_limits(slow_at=()))
    assert quiet.startswith("On 2 threads no copy of at least 32,768 elements (PyTorch's grain size")
    assert ("ran below 50% of its rate on one in the sweep: the threads' barrier cost little while it "
            "ran") in quiet
    # a buffer below the grain slowed by the load alone is not blamed on the barrier, and says so
    loaded = vm.threads_sentence(two_thread_limits(slow_at=(2**16, 2**18)))
    assert loaded.startswith("On 2 threads the copy of 262 kB ran 100x slower than on one")
    assert ("it ran 100x slower on the 2-thread pass: no barrier is involved, so that much is the load "
            "alone") in loaded
    assert "ran 5,720x slower" in vm.threads_sentence(two_thread_limits((2**18,), factor=5720))
    # faster on the all-threads pass is not "as fast": it says how much, and that no barrier was involved
    faster = vm.threads_sentence(two_thread_limits(slow_at=(2**16,), factor=0.5))
    assert "it ran 2x faster on the 2-thread pass, with no barrier involved" in faster
    assert "within 5 %" not in faster
    assert vm.threads_sentence(limits()) == ""  # one thread count only: nothing to compare
    with pytest.raises(TypeError, match="limits"):
        vm.threads_sentence(None)


def test_sweep_and_source_lines():
    lim = two_thread_limits()
    assert [" ".join(ln.split()) for ln in vm.sweep_lines(lim)] == [
        "float32 n=128: 20 GFLOP/s on 2 threads, 10 GFLOP/s on 1 thread",
        "float32 n=256: 40 GFLOP/s on 2 threads, 20 GFLOP/s on 1 thread",
        "float32 4096x256 @ 256x256: 30 GFLOP/s on 1 thread"]
    assert [" ".join(ln.split()) for ln in vm.source_lines(lim)] == [
        "float32 matmul: 40 GFLOP/s from n=256 on 2 threads",
        "float32 matmul, 1 thread: 30 GFLOP/s from 4096x256 @ 256x256 on 1 thread",
        "DRAM bandwidth: 15 GB/s from copy of 16,777,216 B buffers on 2 threads",
        "cache bandwidth: 70 GB/s from the sweep"]
    for fn in (vm.sweep_lines, vm.source_lines):
        with pytest.raises(TypeError, match="limits"):
            fn({"float32": 1e9})


def test_plots_draw_each_thread_count_and_the_add():
    lim = two_thread_limits()
    assert {ln.get_label() for ln in vm.plot_matmul_sweep(lim).axes[0].get_lines()} == {
        "float32, 2 threads", "float32, 1 thread"}
    labels = {ln.get_label() for ln in vm.plot_copy_sweep(lim).axes[0].get_lines()}
    assert {"copy, 2 threads", "copy, 1 thread", "x + y, 1 thread"} <= labels


def test_a_capped_dram_size_is_the_dram_point():
    lim = two_thread_limits()  # 4 MiB cache, DRAM ceiling from 16 MiB buffers: 4x the cache
    assert vm.cache_and_dram_points(lim)[1].nbytes == 2**24
    from dataclasses import replace
    capped = replace(lim, llc_bytes=2**23, dram_nbytes=2**24)  # 4x would be 32 MiB: capped at 16
    cached, dram = vm.cache_and_dram_points(capped)
    assert dram.nbytes == 2**24 and dram.op == "copy" and cached.nbytes == 2**18  # the fastest in cache


def test_cache_lines_print_the_merged_ceiling_and_an_earlier_higher_one(tmp_path):
    from dataclasses import replace
    run = two_thread_limits()
    earlier = replace(run, matmul_flops={"float32": 5e10}, copy_bytes_per_s=2e10,
                      sources={**run.sources, "float32": "n=512 on 2 threads", "dram": "add of 2 GB"})
    hw.save_limits(earlier, tmp_path / "l.json")
    cached = MachineLimits.from_json(hw.save_limits(run, tmp_path / "l.json").read_text())
    assert [" ".join(ln.split()) for ln in vm.cache_lines(run, cached)] == [
        "float32 matmul: 50 GFLOP/s an earlier run's (n=512 on 2 threads); this run measured 40 GFLOP/s",
        "float32 matmul, 1 thread: 30 GFLOP/s this run's",
        "DRAM bandwidth: 20 GB/s an earlier run's (add of 2 GB); this run measured 15 GB/s",
        "cache bandwidth: 70 GB/s this run's"]
    # nothing higher before: every line is this run's own figure
    assert all(ln.endswith("this run's") for ln in vm.cache_lines(run, run))
    with pytest.raises(TypeError, match="run"):
        vm.cache_lines(None, run)
    with pytest.raises(TypeError, match="cached"):
        vm.cache_lines(run, {"float32": 1e9})


def test_cache_sentence_states_what_the_sweep_shows_beside_what_the_os_reports():
    copies = [CopyPoint(n, 1e-3, r, r, 2) for n, r in ((2**16, 60e9), (2**20, 100e9), (2**22, 80e9),
                                                       (2**24, 30e9), (2**28, 28e9))]
    lim = MachineLimits("cpu", "t", {"float32": 1e9}, 3e10, copy_points=copies, cache_bytes_per_s=1.35e11,
                        llc_bytes=32 << 20, dram_nbytes=2**28)
    text = vm.cache_sentence(lim)
    assert text.startswith("the cache the sweep shows: copies of buffers up to 4.19 MB (8.39 MB read and "
                           "written)")
    assert "the next size swept, 16.8 MB (33.6 MB touched), did not" in text
    assert "The OS reports a last-level cache of 33.6 MB: that is the size it reports" in text
    assert text.endswith("Operations of at most 8.39 MB counted are held against the cache's roof below")
    assert "slices" not in text  # no claim about how the OS adds its figure up
    from dataclasses import replace
    assert "OS" not in vm.cache_sentence(replace(lim, llc_bytes=None))
    assert vm.cache_sentence(replace(lim, cache_bytes_per_s=None)).startswith("no copy kept half")
